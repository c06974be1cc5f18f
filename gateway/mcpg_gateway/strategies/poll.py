"""poll: re-read through the binding every interval and fire when the SHA-256 of the response moves.

An unchanged resource produces no traffic to clients. A failed read is skipped: no baseline update, no
notification, one count in `mcpg_watch_poll_failures_total`; so a flapping upstream goes quiet, not noisy.
A pull strategy (`base.PullStrategy`): its state is the digest, as hex.
"""

from __future__ import annotations

import hashlib
import logging

from mcpg_gateway.contract import config
from mcpg_gateway.errors import ReadError, StrategyError
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)


class PollWatch:
    def __init__(self, spec: config.PollStrategy, ctx: base.WatchContext) -> None:
        self._interval_s = spec.effective_interval_ms / 1000
        self._ctx = ctx
        self._digest = b""

    @property
    def interval_s(self) -> float:
        return self._interval_s

    async def start(self) -> None:
        try:
            self._digest = hashlib.sha256(await self._ctx.read()).digest()
        except ReadError as e:
            self._ctx.stats.failed()
            raise StrategyError(f"baseline read failed: {e}") from e
        self._ctx.stats.succeeded()

    async def run(self, fire: base.Fire) -> None:
        await base.run_pull(self, self._ctx.clock, fire)

    async def check(self) -> bool:
        try:
            body = await self._ctx.read()
        except ReadError as e:
            self._ctx.stats.failed()
            logger.warning("poll of %s skipped: %s", self._ctx.binding.uri, e)
            return False
        self._ctx.stats.succeeded()
        digest = hashlib.sha256(body).digest()
        changed, self._digest = digest != self._digest, digest
        return changed

    def snapshot(self) -> str:
        return self._digest.hex()

    def resume(self, state: str) -> None:
        digest = bytes.fromhex(state)  # ValueError if it is not hex
        if len(digest) != hashlib.sha256().digest_size:
            raise ValueError("not a SHA-256 digest")
        self._digest = digest

    async def close(self) -> None:
        return None


STRATEGY = base.StrategyType("poll", PollWatch)
