"""poll: re-read through the binding every interval and fire when the SHA-256 of the response moves.

An unchanged resource produces no traffic to clients. A failed read is skipped: no baseline update, no
notification, one count in `mcpg_watch_poll_failures_total`; so a flapping upstream goes quiet, not noisy.
A pull strategy (`base.PullStrategy`): its state is the digest, as hex.

With `ignore` set, the digest is of the body's canonical JSON with the pointed fields left out (`digest`), so a
field the upstream recomputes on every read (a running CI job's `duration`) does not look like a change. Such a
body must be JSON: one that is not is a failed read that says why, since its fields cannot be left out.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence

from mcpg_gateway import tracing
from mcpg_gateway.contract import config, pointers
from mcpg_gateway.errors import ReadError, StrategyError, WatchGone
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)


def digest(body: bytes, ignored: Sequence[pointers.Pointer]) -> bytes:
    """The SHA-256 a poll compares: of `body` as is, or with `ignored` of the canonical JSON of it left out.

    `ValueError` saying why if `ignored` is set and `body` is not JSON. Canonical: keys sorted, no spaces, not
    ASCII-escaped, so two bodies differing only in layout or in an ignored field hash alike.
    """
    if not ignored:
        return hashlib.sha256(body).digest()
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise ValueError(f"the body is not JSON: {_NEEDS_JSON}") from None
    try:
        text = json.dumps(
            pointers.without(document, ignored), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except RecursionError:
        raise ValueError(f"the body's JSON is nested too deeply to compare: {_NEEDS_JSON}") from None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


_NEEDS_JSON = "watch.strategy.ignore needs a JSON body to leave its fields out of the hash"
READ_SPAN = "mcpg.poll.read"


class PollWatch:
    def __init__(self, spec: config.PollStrategy, ctx: base.WatchContext) -> None:
        self._interval_s = spec.effective_interval_ms / 1000
        self._ctx = ctx
        self._ignored = [pointers.parse_ignored(text) for text in spec.ignore]
        self._digest = b""

    @property
    def interval_s(self) -> float:
        return self._interval_s

    async def start(self) -> None:
        try:
            self._digest = await self._read_digest()
        except ReadError as e:
            self._ctx.stats.failed()
            raise StrategyError(f"baseline read failed: {e}", read=e) from e
        self._ctx.stats.succeeded()

    async def run(self, fire: base.Fire) -> None:
        await base.run_pull(self, self._ctx.clock, fire)

    async def check(self) -> bool:
        try:
            new = await self._read_digest()
        except ReadError as e:
            self._ctx.stats.failed()
            if e.gone:  # 401/403/404 the resource does not expect: it cannot be read any more
                raise WatchGone(str(e), e.status) from e
            logger.warning("poll of %s skipped: %s", self._ctx.binding.uri, e)
            return False
        self._ctx.stats.succeeded()
        changed, self._digest = new != self._digest, new
        return changed

    async def _read_digest(self) -> bytes:
        """Read once and hash, in a span; `ReadError` if the read failed or the body cannot be hashed as configured."""
        with tracing.span(READ_SPAN, {tracing.STRATEGY: "poll", tracing.URI: self._ctx.binding.uri}):
            return await self._hash_read()

    async def _hash_read(self) -> bytes:
        if not self._ignored and self._ctx.digest is not None:
            return await self._ctx.digest()  # hashed as it arrives: a large body is never held whole
        body = await self._ctx.read()
        try:
            return digest(body, self._ignored)
        except ValueError as e:
            raise ReadError(f"{self._ctx.binding.uri}: {e}") from None

    def snapshot(self) -> str:
        return self._digest.hex()

    def resume(self, state: str) -> None:
        previous = bytes.fromhex(state)  # ValueError if it is not hex
        if len(previous) != hashlib.sha256().digest_size:
            raise ValueError("not a SHA-256 digest")
        self._digest = previous

    async def close(self) -> None:
        return None


STRATEGY = base.StrategyType("poll", PollWatch)
