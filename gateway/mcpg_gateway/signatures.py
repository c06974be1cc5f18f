"""Verifying a webhook delivery's sender signature, each scheme exactly as its provider publishes it.

Pure: headers, body and the time in, a `Verdict` out; the webhook route does the I/O, the 413 and replay memory.
Every secret is tried against every presented signature, with no early exit, because rotation has senders sign
with a new secret while we still list the old (and Stripe and Standard Webhooks senders sign with both at once);
the work done and the verdict therefore say nothing about which secret matched. GitLab's token is compared as
SHA-256 digests, so the comparison's time reveals neither length. Work is bounded before it is done (header sizes,
signature counts, timestamp digits), and `verify` answers every input with a verdict, never raises.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from mcpg_gateway.contract import signing

Check = Literal["ok", "missing_header", "malformed_header", "stale_timestamp", "bad_signature", "replay"]
"""What decided a delivery. `replay` is the route's (`replays.py`): a verifier holds no state."""
Headers = Mapping[bytes, bytes]

MAX_HEADER_BYTES = 8192
"""A signature header's value is read only up to this size: larger is malformed, before any parsing."""
MAX_SIGNATURES = 8
"""Signatures one header may carry (each costs a comparison per secret); more is malformed."""
MAX_TIMESTAMP_DIGITS = 12
"""Unix seconds until the year 33658: a longer timestamp is malformed rather than converted."""
MAX_DELIVERY_ID_CHARS = 256
"""The caller remembers `webhook-id`s to refuse replays, so one is bounded."""

_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What `Verifier.verify` found: `check` for the 401's code, `detail` for its one-sentence message."""

    check: Check
    detail: str
    """Safe to answer with: never a secret, a signature or the body, and never which secret."""
    delivery_id: str | None = None
    """standard-webhooks, when ok: the signed `webhook-id`, which the caller remembers to refuse replays."""

    @property
    def ok(self) -> bool:
        return self.check == "ok"


class _Refused(Exception):
    """Carries a refusing verdict out of the parsing helpers; `verify` turns it back into its answer."""

    def __init__(self, check: Check, detail: str) -> None:
        super().__init__(detail)
        self.verdict = Verdict(check, detail)


def _present(headers: Headers, shown: str) -> bytes:
    value = headers.get(shown.lower().encode("ascii"))
    if value is None:
        raise _Refused("missing_header", f"the {shown} header is missing")
    return value


def _text(raw: bytes, shown: str) -> str:
    """`raw` as printable ASCII, its size checked before anything else looks at it."""
    if len(raw) > MAX_HEADER_BYTES:
        raise _Refused("malformed_header", f"{shown} has {len(raw)} bytes; at most {MAX_HEADER_BYTES} are read")
    if not raw:
        raise _Refused("malformed_header", f"{shown} is empty")
    # Printable ASCII is 0x20 to 0x7E, which is what `str.isprintable` says of ASCII text, at C speed.
    text = raw.decode("ascii") if raw.isascii() else ""
    if not text.isprintable() or not text:
        raise _Refused("malformed_header", f"{shown} holds a byte that is not printable ASCII")
    return text


def _timestamp(text: str, shown: str) -> int:
    # Digits only, so `int` never meets a sign, a float, an underscore or a huge string. No leading zero either: we
    # sign the header's text, Stripe's and Standard Webhooks' libraries sign `int(t)` written again; then they agree.
    canonical = text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))
    if not (canonical and len(text) <= MAX_TIMESTAMP_DIGITS):
        raise _Refused(
            "malformed_header", f"{shown} is not Unix seconds: up to {MAX_TIMESTAMP_DIGITS} digits, no leading zero"
        )
    return int(text)


def _is_hex(text: str, digest_size: int) -> bool:
    return len(text) == 2 * digest_size and set(text) <= _HEX


def _is_base64(text: str, digest_size: int) -> bool:
    try:
        return len(base64.b64decode(text, validate=True)) == digest_size
    except (binascii.Error, ValueError):
        return False


def _matches(expected: list[bytes], presented: list[bytes]) -> bool:
    """Whether any expected MAC equals any presented one; all pairs compared, so timing names no secret."""
    found = False
    for mine in expected:
        for theirs in presented:
            found |= hmac.compare_digest(mine, theirs)
    return found


def _sha256_hexes(keys: list[bytes], content: bytes) -> list[bytes]:
    # Lower-case, compared exactly: as GitHub's, Stripe's and Slack's own verifiers do (only `hmac` ignores case).
    return [hmac.new(key, content, hashlib.sha256).hexdigest().encode() for key in keys]


def _stale(shown: str, signed_at: int, now: float, tolerance_s: int) -> None:
    skew = now - signed_at
    if abs(skew) <= tolerance_s:  # NaN compares false: an unusable clock refuses rather than accepts
        return
    if not math.isfinite(skew):
        raise _Refused("stale_timestamp", f"{shown} cannot be compared with the current time")
    when = "in the past" if skew > 0 else "in the future"
    raise _Refused("stale_timestamp", f"{shown} is {math.ceil(abs(skew))} s {when}; the tolerance is {tolerance_s} s")


class Verifier:
    """Verifies deliveries for one `signature` block; its keys are derived once, here, not per delivery."""

    def __init__(self, spec: signing.WebhookSignature) -> None:
        self.scheme: str = spec.scheme
        self.tolerance_s: int = spec.tolerance_s
        self.max_body_bytes: int = spec.max_body_bytes
        secrets = spec.usable_secrets()
        if spec.scheme == "standard-webhooks":
            self._keys = [key for key in map(signing.whsec_key, secrets) if key is not None]
        elif spec.scheme == "gitlab":
            # Digests, not the secrets: compare_digest's time then depends on neither token's length.
            self._keys = [hashlib.sha256(secret.encode()).digest() for secret in secrets]
        else:
            self._keys = [secret.encode() for secret in secrets]
        self._header = spec.header or ""
        self._prefix = spec.prefix or ""
        self._algorithm = spec.algorithm or "sha256"
        self._digest_size = hashlib.new(self._algorithm).digest_size
        self._encoding = spec.encoding or "hex"
        schemes: dict[str, Callable[[Headers, bytes, float], Verdict]] = {
            "standard-webhooks": self._standard_webhooks,
            "github": self._github,
            "stripe": self._stripe,
            "slack": self._slack,
            "gitlab": self._gitlab,
            "hmac": self._hmac,
        }
        self._verify = schemes[spec.scheme]

    def verify(self, headers: Headers, body: bytes, now: float) -> Verdict:
        """The delivery's verdict: headers present, then well-formed, then timely, then signed by a listed secret."""
        try:
            return self._verify(headers, body, now)
        except _Refused as refused:
            return refused.verdict

    def _signed(self, matched: bool, shown: str, delivery_id: str | None = None) -> Verdict:
        if matched:
            return Verdict("ok", "the signature verifies", delivery_id)
        return Verdict("bad_signature", f"{shown} matches no configured secret")

    def _standard_webhooks(self, headers: Headers, body: bytes, now: float) -> Verdict:
        names = ("webhook-id", "webhook-timestamp", "webhook-signature")
        raws = [_present(headers, name) for name in names]
        msg_id, stamp, value = (_text(raw, name) for raw, name in zip(raws, names, strict=True))
        if len(msg_id) > MAX_DELIVERY_ID_CHARS:
            raise _Refused("malformed_header", f"webhook-id has more than {MAX_DELIVERY_ID_CHARS} characters")
        signed_at = _timestamp(stamp, "webhook-timestamp")
        presented = _versioned(value.split(" "), "webhook-signature", ",", lambda sig: _is_base64(sig, 32))
        _stale("webhook-timestamp", signed_at, now, self.tolerance_s)
        content = f"{msg_id}.{stamp}.".encode() + body
        expected = [base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()) for key in self._keys]
        return self._signed(_matches(expected, presented), "webhook-signature", msg_id)

    def _github(self, headers: Headers, body: bytes, now: float) -> Verdict:
        shown = "X-Hub-Signature-256"
        value = _text(_present(headers, shown), shown)
        signature = value.removeprefix("sha256=")
        if signature == value or not _is_hex(signature, 32):
            raise _Refused("malformed_header", f"{shown} is not `sha256=` followed by 64 hex digits")
        expected = _sha256_hexes(self._keys, body)
        return self._signed(_matches(expected, [signature.encode()]), shown)

    def _stripe(self, headers: Headers, body: bytes, now: float) -> Verdict:
        shown = "Stripe-Signature"
        items = _text(_present(headers, shown), shown).split(",")
        stamps = [item[2:] for item in items if item.startswith("t=")]
        if len(stamps) != 1:
            raise _Refused("malformed_header", f"{shown} does not hold exactly one `t=` timestamp")
        signed_at = _timestamp(stamps[0], f"{shown}'s t")
        rest = [item for item in items if not item.startswith("t=")]
        presented = _versioned(rest, shown, "=", lambda sig: _is_hex(sig, 32))
        _stale(f"{shown}'s t", signed_at, now, self.tolerance_s)
        expected = _sha256_hexes(self._keys, f"{stamps[0]}.".encode() + body)
        return self._signed(_matches(expected, presented), shown)

    def _slack(self, headers: Headers, body: bytes, now: float) -> Verdict:
        shown, stamp_shown = "X-Slack-Signature", "X-Slack-Request-Timestamp"
        raw, raw_stamp = _present(headers, shown), _present(headers, stamp_shown)
        value, stamp = _text(raw, shown), _text(raw_stamp, stamp_shown)
        signature = value.removeprefix("v0=")
        if signature == value or not _is_hex(signature, 32):
            raise _Refused("malformed_header", f"{shown} is not `v0=` followed by 64 hex digits")
        signed_at = _timestamp(stamp, stamp_shown)
        _stale(stamp_shown, signed_at, now, self.tolerance_s)
        expected = _sha256_hexes(self._keys, f"v0:{stamp}:".encode() + body)
        return self._signed(_matches(expected, [signature.encode()]), shown)

    def _gitlab(self, headers: Headers, body: bytes, now: float) -> Verdict:
        shown = "X-Gitlab-Token"
        token = _text(_present(headers, shown), shown)
        return self._signed(_matches(self._keys, [hashlib.sha256(token.encode()).digest()]), shown)

    def _hmac(self, headers: Headers, body: bytes, now: float) -> Verdict:
        shown = self._header
        value = _text(_present(headers, shown), shown)
        signature, size = value.removeprefix(self._prefix), self._digest_size
        well_formed = _is_hex(signature, size) if self._encoding == "hex" else _is_base64(signature, size)
        if not value.startswith(self._prefix) or not well_formed:
            raise _Refused(
                "malformed_header", f"{shown} is not the configured prefix followed by a {self._encoding} signature"
            )
        macs = [hmac.new(key, body, self._algorithm).digest() for key in self._keys]
        if self._encoding == "hex":
            return self._signed(_matches([mac.hex().encode() for mac in macs], [signature.lower().encode()]), shown)
        return self._signed(_matches([base64.b64encode(mac) for mac in macs], [signature.encode()]), shown)


def _versioned(entries: list[str], shown: str, separator: str, well_formed: Callable[[str], bool]) -> list[bytes]:
    """The `v1` signatures among `entries` (`v1,<sig>` or `v1=<sig>`); other versions are skipped, unchecked."""
    entries = [entry for entry in entries if entry]
    if len(entries) > MAX_SIGNATURES:
        raise _Refused("malformed_header", f"{shown} holds more than {MAX_SIGNATURES} signatures")
    signatures = []
    for entry in entries:
        version, found, signature = entry.partition(separator)
        if not found:
            raise _Refused("malformed_header", f"{shown} holds an entry that is not `<version>{separator}<signature>`")
        if version == "v1":
            if not well_formed(signature):
                raise _Refused("malformed_header", f"{shown} holds a v1 signature of the wrong form or length")
            signatures.append(signature.encode())
    if not signatures:
        raise _Refused("malformed_header", f"{shown} holds no v1 signature")
    return signatures
