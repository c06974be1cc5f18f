"""`signatures.Verifier` under mutated and arbitrary deliveries: nothing verifies unless what was signed survives.

Each example signs a delivery with the provider's own signer (Python's hmac for GitHub, GitLab and `hmac`), then
flips, inserts or deletes bytes in the body or a header value, swaps the case of a value's tail, replaces a value
with arbitrary bytes, or drops a header. The mutated delivery may verify only if the body and every signed header
are byte-identical to what was signed and the header still presents the right signature (a second, wrong signature
beside it is allowed: a sender rolling its secret sends one for each). The oracle is computed here from the original
delivery, not by the code. Arbitrary headers, body and clock never make `verify` raise, and its detail never holds
a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args

import slack_sdk.signature
import standardwebhooks
import stripe
from hypothesis import given
from hypothesis import strategies as st

from mcpg_gateway import signatures
from mcpg_gateway.contract import signing

NOW = 1_700_000_000
MSG_ID = b"msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
Headers = dict[bytes, bytes]


def _whsec(seed: bytes) -> str:
    return "whsec_" + base64.b64encode(hashlib.sha256(seed).digest()).decode()


def _standard(secret: str, body: bytes) -> Headers:
    signature = standardwebhooks.Webhook(secret).sign(MSG_ID.decode(), datetime.fromtimestamp(NOW, tz=UTC), body)
    return {b"webhook-id": MSG_ID, b"webhook-timestamp": b"%d" % NOW, b"webhook-signature": signature.encode()}


def _github(secret: str, body: bytes) -> Headers:
    return {b"x-hub-signature-256": b"sha256=" + hmac.new(secret.encode(), body, "sha256").hexdigest().encode()}


def _stripe(secret: str, body: bytes) -> Headers:
    header: str = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=NOW)
    return {b"stripe-signature": header.encode()}


def _slack(secret: str, body: bytes) -> Headers:
    signature = slack_sdk.signature.SignatureVerifier(secret).generate_signature(timestamp=str(NOW), body=body)
    assert signature is not None
    return {b"x-slack-signature": signature.encode(), b"x-slack-request-timestamp": b"%d" % NOW}


def _gitlab(secret: str, body: bytes) -> Headers:
    return {b"x-gitlab-token": secret.encode()}


def _hmac(header: bytes, algorithm: str, encoding: str, prefix: bytes) -> Callable[[str, bytes], Headers]:
    def sign(secret: str, body: bytes) -> Headers:
        mac = hmac.new(secret.encode(), body, algorithm).digest()
        return {header: prefix + (mac.hex().encode() if encoding == "hex" else base64.b64encode(mac))}

    return sign


def _same(original: bytes, mutated: bytes) -> bool:
    return mutated == original


def _entry_of(separator: bytes) -> Callable[[bytes, bytes], bool]:
    """Still presented: the original (single) signature is one of the mutated header's entries."""
    return lambda original, mutated: original in mutated.split(separator)


def _stripe_still_signed(original: bytes, mutated: bytes) -> bool:
    stamp, signature = original.split(b",")
    items = mutated.split(b",")
    return signature in items and [item for item in items if item.startswith(b"t=")] == [stamp]


def _hex_ignoring_case(prefix: bytes) -> Callable[[bytes, bytes], bool]:
    return lambda original, mutated: mutated.startswith(prefix) and mutated.lower() == original.lower()


@dataclass(frozen=True)
class Scheme:
    block: dict[str, Any]
    secrets: tuple[str, str]
    sign: Callable[[str, bytes], Headers]
    signature: bytes
    """The header presenting the signature."""
    still_signed: Callable[[bytes, bytes], bool]
    """Whether the mutated signature header still presents the original signature."""
    signed: tuple[bytes, ...] = ()
    """Headers whose bytes are signed content: any change must refuse."""


SCHEMES = [
    Scheme(
        {"scheme": "standard-webhooks"},
        (_whsec(b"a"), _whsec(b"b")),
        _standard,
        b"webhook-signature",
        _entry_of(b" "),
        (b"webhook-id", b"webhook-timestamp"),
    ),
    Scheme({"scheme": "github"}, ("github a", "github b"), _github, b"x-hub-signature-256", _same),
    Scheme({"scheme": "stripe"}, (_whsec(b"c"), _whsec(b"d")), _stripe, b"stripe-signature", _stripe_still_signed),
    Scheme(
        {"scheme": "slack"},
        ("slack a", "slack b"),
        _slack,
        b"x-slack-signature",
        _same,
        (b"x-slack-request-timestamp",),
    ),
    # The token is the signature and the signed content at once: it must survive byte for byte.
    Scheme({"scheme": "gitlab"}, ("gitlab-a", "gitlab-b"), _gitlab, b"x-gitlab-token", _same),
    Scheme(
        {"scheme": "hmac", "header": "X-Signature"},
        ("hmac a", "hmac b"),
        _hmac(b"x-signature", "sha256", "hex", b""),
        b"x-signature",
        _hex_ignoring_case(b""),
    ),
    Scheme(
        {"scheme": "hmac", "header": "X-Sig", "algorithm": "sha512", "prefix": "sha512="},
        ("hmac a", "hmac b"),
        _hmac(b"x-sig", "sha512", "hex", b"sha512="),
        b"x-sig",
        _hex_ignoring_case(b"sha512="),
    ),
    Scheme(
        {"scheme": "hmac", "header": "X-Sig", "algorithm": "sha512", "encoding": "base64", "prefix": "v1="},
        ("hmac a", "hmac b"),
        _hmac(b"x-sig", "sha512", "base64", b"v1="),
        b"x-sig",
        _same,
    ),
]


def _verifier(scheme: Scheme) -> signatures.Verifier:
    return signatures.Verifier(signing.WebhookSignature.model_validate({**scheme.block, "secrets": scheme.secrets}))


VERIFIERS = [_verifier(scheme) for scheme in SCHEMES]
"""Built once: keys are derived when a Verifier is made, and each example reuses its scheme's."""


@dataclass(frozen=True)
class Mutation:
    target: int
    """Which value: 0 is the body, i > 0 the i-th header (modulo the number of targets)."""
    op: str
    position: int
    byte: int
    replacement: bytes

    def apply(self, value: bytes) -> bytes | None:
        """`value` mutated, or None for a dropped header."""
        at = self.position % (len(value) + 1)
        if self.op == "flip" and value:
            at %= len(value)
            return value[:at] + bytes([value[at] ^ (1 << self.byte % 8)]) + value[at + 1 :]
        if self.op == "insert":
            return value[:at] + bytes([self.byte]) + value[at:]
        if self.op == "delete":
            return value[:at] + value[at + 1 :]
        if self.op == "replace":
            return self.replacement
        if self.op == "swapcase":  # hex is case-insensitive only where a scheme says so (`hmac`)
            return value[:at] + value[at:].swapcase()
        return None if self.op == "drop" else value


mutations = st.builds(
    Mutation,
    target=st.integers(min_value=0, max_value=3),
    op=st.sampled_from(["flip", "insert", "delete", "replace", "swapcase", "drop"]),
    position=st.integers(min_value=0, max_value=200),
    byte=st.integers(min_value=0, max_value=255),
    replacement=st.binary(max_size=120),
)


def mutated(body: bytes, headers: Headers, changes: list[Mutation]) -> tuple[bytes, Headers]:
    names = sorted(headers)
    for change in changes:
        target = change.target % (len(names) + 1)
        if target == 0:
            body = change.apply(body) or b""  # a body cannot be dropped: "drop" empties it
            continue
        name = names[target - 1]
        if name in headers:
            value = change.apply(headers[name])
            headers = {key: val for key, val in headers.items() if key != name}
            if value is not None:
                headers[name] = value
    return body, headers


@given(
    index=st.integers(min_value=0, max_value=len(SCHEMES) - 1),
    signer=st.sampled_from([0, 1]),
    body=st.text(max_size=80).map(str.encode),
    changes=st.lists(mutations, min_size=1, max_size=3),
    skew=st.integers(min_value=-300, max_value=300),
)
def test_a_mutated_delivery_verifies_only_if_what_was_signed_survived(
    index: int, signer: int, body: bytes, changes: list[Mutation], skew: int
) -> None:
    scheme, verifier = SCHEMES[index], VERIFIERS[index]
    headers = scheme.sign(scheme.secrets[signer], body)
    new_body, new_headers = mutated(body, headers, changes)
    verdict = verifier.verify(new_headers, new_body, NOW + skew)
    if (new_body, new_headers) == (body, headers):
        assert verdict.ok, verdict
        return
    if new_headers == headers and scheme.block["scheme"] != "gitlab":
        assert verdict.check == "bad_signature", verdict  # only the body changed
    if verdict.ok:
        assert new_body == body or scheme.block["scheme"] == "gitlab"
        assert all(new_headers.get(name) == headers[name] for name in scheme.signed)
        assert scheme.signature in new_headers
        assert scheme.still_signed(headers[scheme.signature], new_headers[scheme.signature])


NAMES = sorted({name for scheme in SCHEMES for name in scheme.sign(scheme.secrets[0], b"")} | {b"x-other"})
near_valid = st.text(alphabet="v0123456789abcdefABCDEF=,.:t +/_-", max_size=120).map(str.encode)
header_values = st.one_of(st.binary(max_size=200), near_valid, st.just(b"9" * 9000))
clocks = st.one_of(st.floats(), st.integers(min_value=NOW - 4000, max_value=NOW + 4000).map(float))


@given(
    index=st.integers(min_value=0, max_value=len(SCHEMES) - 1),
    headers=st.dictionaries(st.sampled_from(NAMES), header_values, max_size=5),
    body=st.binary(max_size=200),
    now=clocks,
)
def test_verify_answers_any_headers_body_and_clock_with_a_safe_verdict(
    index: int, headers: Headers, body: bytes, now: float
) -> None:
    scheme = SCHEMES[index]
    verdict = VERIFIERS[index].verify(headers, body, now)
    assert verdict.check in get_args(signatures.Check)
    assert verdict.detail
    assert not any(secret in verdict.detail for secret in scheme.secrets)
    assert verdict.delivery_id is None or (verdict.ok and scheme.block["scheme"] == "standard-webhooks")
