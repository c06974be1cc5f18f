"""`signatures.Verifier` against deliveries signed by each provider's own signer or its published vector.

Standard Webhooks deliveries are signed by `standardwebhooks` (the specification's reference library), Stripe's by
`stripe`, Slack's by `slack_sdk`; GitHub's by its documented vector (and Python's hmac for the rest), GitLab and the
generic `hmac` scheme by Python's hmac here. Every refusal is checked for its own `check`, and every verdict's detail
for what it must never hold: a secret or a signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import slack_sdk.signature
import standardwebhooks
import stripe

from mcpg_gateway import signatures
from mcpg_gateway.contract import signing

NOW = 1_700_000_000
BODY = b'{"type": "resource.updated", "uri": "drive://folder/reports", "note": "caf\xc3\xa9"}'
MSG_ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
Headers = dict[bytes, bytes]
Signer = Callable[[str, bytes, int], Headers]


def _whsec(seed: bytes) -> str:
    return "whsec_" + base64.b64encode(hashlib.sha256(seed).digest()).decode()


def sign_standard(secret: str, body: bytes, signed_at: int) -> Headers:
    when = datetime.fromtimestamp(signed_at, tz=UTC)
    signature = standardwebhooks.Webhook(secret).sign(MSG_ID, when, body)
    return {
        b"webhook-id": MSG_ID.encode(),
        b"webhook-timestamp": b"%d" % signed_at,
        b"webhook-signature": signature.encode(),
    }


def sign_github(secret: str, body: bytes, signed_at: int) -> Headers:
    # No GitHub signer on the package index; `test_githubs_documented_vector_verifies` anchors this one.
    return {b"x-hub-signature-256": b"sha256=" + hmac.new(secret.encode(), body, "sha256").hexdigest().encode()}


def sign_stripe(secret: str, body: bytes, signed_at: int) -> Headers:
    header: str = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=signed_at)
    return {b"stripe-signature": header.encode()}


def sign_slack(secret: str, body: bytes, signed_at: int) -> Headers:
    signature = slack_sdk.signature.SignatureVerifier(secret).generate_signature(timestamp=str(signed_at), body=body)
    assert signature is not None
    return {b"x-slack-signature": signature.encode(), b"x-slack-request-timestamp": str(signed_at).encode()}


def sign_gitlab(secret: str, body: bytes, signed_at: int) -> Headers:
    return {b"x-gitlab-token": secret.encode()}


def hmac_signer(header: str, algorithm: str, encoding: str, prefix: str) -> Signer:
    def sign(secret: str, body: bytes, signed_at: int) -> Headers:
        mac = hmac.new(secret.encode(), body, algorithm).digest()
        text = mac.hex() if encoding == "hex" else base64.b64encode(mac).decode()
        return {header.lower().encode(): (prefix + text).encode()}

    return sign


@dataclass(frozen=True)
class Case:
    """One scheme's configuration, its two secrets (retiring, current) and the signer of its deliveries."""

    block: dict[str, Any]
    old: str
    new: str
    sign: Signer
    required: tuple[bytes, ...]
    timestamp: bytes | None = None
    """The header holding the signed timestamp (Stripe's is inside its signature header)."""

    def verifier(self, *secrets: str, **fields: Any) -> signatures.Verifier:
        block = {**self.block, "secrets": list(secrets or (self.old, self.new)), **fields}
        return signatures.Verifier(signing.WebhookSignature.model_validate(block))

    def signed(self, secret: str | None = None, body: bytes = BODY, signed_at: int = NOW) -> Headers:
        return self.sign(secret or self.new, body, signed_at)


CASES = {
    "standard-webhooks": Case(
        {"scheme": "standard-webhooks"},
        _whsec(b"old"),
        _whsec(b"new"),
        sign_standard,
        (b"webhook-id", b"webhook-timestamp", b"webhook-signature"),
        b"webhook-timestamp",
    ),
    "github": Case({"scheme": "github"}, "old github secret", "It's a Secret", sign_github, (b"x-hub-signature-256",)),
    # Stripe's secrets look like Standard Webhooks' but are used undecoded: these verify only if that holds.
    "stripe": Case(
        {"scheme": "stripe"},
        _whsec(b"s-old"),
        _whsec(b"s-new"),
        sign_stripe,
        (b"stripe-signature",),
        b"stripe-signature",
    ),
    "slack": Case(
        {"scheme": "slack"},
        "8f742231b10e8888abcd99yyyzzz85a5",
        "e5a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4",
        sign_slack,
        (b"x-slack-signature", b"x-slack-request-timestamp"),
        b"x-slack-request-timestamp",
    ),
    "gitlab": Case({"scheme": "gitlab"}, "old-gitlab-token", "glpat-new_Token.42", sign_gitlab, (b"x-gitlab-token",)),
    "hmac-sha256-hex": Case(
        {"scheme": "hmac", "header": "X-Signature"},
        "old hmac",
        "new hmac",
        hmac_signer("X-Signature", "sha256", "hex", ""),
        (b"x-signature",),
    ),
    "hmac-sha512-base64-prefixed": Case(
        {
            "scheme": "hmac",
            "header": "X-Hook-Signature",
            "algorithm": "sha512",
            "encoding": "base64",
            "prefix": "sha512=",
        },
        "old hmac",
        "new hmac",
        hmac_signer("X-Hook-Signature", "sha512", "base64", "sha512="),
        (b"x-hook-signature",),
    ),
    "hmac-sha512-hex-prefixed": Case(
        {"scheme": "hmac", "header": "x-sig", "algorithm": "sha512", "prefix": "sig:"},
        "old hmac",
        "new hmac",
        hmac_signer("x-sig", "sha512", "hex", "sig:"),
        (b"x-sig",),
    ),
    "hmac-sha256-base64": Case(
        {"scheme": "hmac", "header": "X-Signature", "encoding": "base64"},
        "old hmac",
        "new hmac",
        hmac_signer("X-Signature", "sha256", "base64", ""),
        (b"x-signature",),
    ),
}
TIMESTAMPED = [name for name, case in CASES.items() if case.timestamp is not None]
WRONG_SECRETS = {"standard-webhooks": _whsec(b"wrong"), "stripe": _whsec(b"wrong"), "gitlab": "glpat-new_Token.43"}
SECRET_LIKE = re.compile(r"[A-Za-z0-9+/=_]{20,}")


def verdict(
    case: Case, verifier: signatures.Verifier, headers: Headers, body: bytes = BODY, now: float = NOW
) -> signatures.Verdict:
    """`verifier`'s verdict, its detail checked to hold no secret, no header value and nothing that looks like one."""
    result = verifier.verify(headers, body, now)
    for secret in (case.old, case.new, WRONG_SECRETS.get(case.block["scheme"], "wrong secret")):
        assert secret not in result.detail
    for value in headers.values():
        assert len(value) < 8 or value.decode("latin-1") not in result.detail
    assert not SECRET_LIKE.search(result.detail), result.detail
    assert BODY.decode() not in result.detail
    return result


def with_timestamp(case: Case, headers: Headers, stamp: bytes) -> Headers:
    """`headers` with the signed timestamp's text replaced by `stamp` (the signature left as it was)."""
    assert case.timestamp is not None
    if case.timestamp == b"stripe-signature":
        return {**headers, case.timestamp: headers[case.timestamp].replace(b"t=%d" % NOW, b"t=" + stamp)}
    return {**headers, case.timestamp: stamp}


cases = pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
timestamped = pytest.mark.parametrize("case", [CASES[name] for name in TIMESTAMPED], ids=TIMESTAMPED)
BODY_SIGNED = [name for name in CASES if name != "gitlab"]
"""A GitLab token signs nothing: its body is not covered."""
body_signed = pytest.mark.parametrize("case", [CASES[name] for name in BODY_SIGNED], ids=BODY_SIGNED)


@cases
@pytest.mark.parametrize("rotation", ["old-then-new", "new-then-old"])
@pytest.mark.parametrize("signer", ["old", "new"])
def test_a_delivery_signed_with_either_listed_secret_verifies(case: Case, rotation: str, signer: str) -> None:
    listed = (case.old, case.new) if rotation == "old-then-new" else (case.new, case.old)
    result = verdict(case, case.verifier(*listed), case.signed(getattr(case, signer)))
    assert result == signatures.Verdict(
        "ok", result.detail, MSG_ID if case.block["scheme"] == "standard-webhooks" else None
    )
    assert result.ok


@cases
def test_an_empty_listed_secret_is_skipped(case: Case) -> None:
    assert verdict(case, case.verifier("", case.new), case.signed()).ok


@body_signed
def test_a_tampered_body_is_a_bad_signature(case: Case) -> None:
    result = verdict(case, case.verifier(), case.signed(), body=BODY.replace(b"reports", b"reportz"))
    assert result.check == "bad_signature"
    assert not result.ok
    assert result.delivery_id is None


@cases
def test_a_secret_that_is_not_listed_is_a_bad_signature(case: Case) -> None:
    wrong = WRONG_SECRETS.get(case.block["scheme"], "wrong secret")
    assert verdict(case, case.verifier(), case.signed(wrong)).check == "bad_signature"
    assert verdict(case, case.verifier(wrong), case.signed()).check == "bad_signature"


@timestamped
@pytest.mark.parametrize(("skew", "when"), [(301, "in the past"), (-301, "in the future"), (3600, "in the past")])
def test_a_timestamp_beyond_the_tolerance_either_way_is_stale(case: Case, skew: int, when: str) -> None:
    result = verdict(case, case.verifier(), case.signed(), now=NOW + skew)
    assert result.check == "stale_timestamp"
    assert result.detail.endswith(f" is {abs(skew)} s {when}; the tolerance is 300 s")


@timestamped
@pytest.mark.parametrize("skew", [300, -300, 0.5, -299.9])
def test_a_timestamp_within_the_tolerance_verifies(case: Case, skew: float) -> None:
    assert verdict(case, case.verifier(), case.signed(), now=NOW + skew).ok


@timestamped
def test_the_tolerance_is_the_configured_one(case: Case) -> None:
    verifier = case.verifier(case.old, case.new, tolerance_s=30)
    assert verifier.tolerance_s == 30
    assert verdict(case, verifier, case.signed(), now=NOW + 30).ok
    result = verdict(case, verifier, case.signed(), now=NOW - 30.25)
    assert result.check == "stale_timestamp"
    assert result.detail.endswith(" is 31 s in the future; the tolerance is 30 s")


@timestamped
def test_a_stale_timestamp_is_found_before_the_signature(case: Case) -> None:
    result = verdict(case, case.verifier(), case.signed(), body=b"tampered", now=NOW + 1000)
    assert result.check == "stale_timestamp"


@timestamped
@pytest.mark.parametrize("now", [float("nan"), float("inf"), float("-inf")])
def test_an_unusable_clock_refuses_as_stale(case: Case, now: float) -> None:
    assert verdict(case, case.verifier(), case.signed(), now=now).check == "stale_timestamp"


@cases
def test_a_missing_header_is_named(case: Case) -> None:
    for name in case.required:
        headers = {key: value for key, value in case.signed().items() if key != name}
        result = verdict(case, case.verifier(), headers)
        assert result.check == "missing_header"
        assert name.decode() in result.detail.lower()


@cases
def test_missing_headers_are_found_before_malformed_ones(case: Case) -> None:
    *others, last = case.required
    headers = dict.fromkeys(others, b"\xff")
    assert verdict(case, case.verifier(), headers).check == "missing_header"
    assert last.decode() in verdict(case, case.verifier(), headers).detail.lower()


@cases
@pytest.mark.parametrize(
    "value",
    [b"", b"not a signature", b"\xff\xfe\x00", "sha256=é".encode(), b"x" * 9000, b"sha256=" + b"0" * 63, b"v1,v1=a"],
    ids=["empty", "text", "binary", "non-ascii", "9000-bytes", "short-hex", "mixed"],
)
def test_a_malformed_signature_header_is_malformed(case: Case, value: bytes) -> None:
    headers = case.signed()
    headers[case.required[-1] if case.block["scheme"] != "slack" else b"x-slack-signature"] = value
    if case.block["scheme"] == "gitlab" and value in (b"not a signature", b"sha256=" + b"0" * 63, b"v1,v1=a"):
        expected = "bad_signature"  # any printable ASCII is a well-formed token
    else:
        expected = "malformed_header"
    assert verdict(case, case.verifier(), headers).check == expected


@timestamped
@pytest.mark.parametrize(
    "stamp",
    [
        b"-1700000000",
        b"+1700000000",
        b"1700000000.5",
        b"1.7e9",
        b"01700000000",
        b"9" * 13,
        b"1_700_000_000",
        b" 1700000000",
        b"",
        "\uff11\uff17\uff10\uff10".encode(),  # full-width digits, which int() would read
        b"0x6553f100",
    ],
)
def test_a_timestamp_that_is_not_plain_unix_seconds_is_malformed(case: Case, stamp: bytes) -> None:
    headers = with_timestamp(case, case.signed(), stamp)
    assert verdict(case, case.verifier(), headers).check == "malformed_header"


def test_githubs_documented_vector_verifies() -> None:
    case = CASES["github"]
    verifier = case.verifier("It's a Secret to Everybody")
    vector = b"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign_github("It's a Secret to Everybody", b"Hello, World!", NOW)[b"x-hub-signature-256"] == vector
    assert verdict(case, verifier, {b"x-hub-signature-256": vector}, b"Hello, World!").ok
    assert verdict(case, verifier, {b"x-hub-signature-256": vector}, b"Hello, World?").check == "bad_signature"


@pytest.mark.parametrize("scheme", ["github", "stripe", "slack"])
def test_provider_hex_is_compared_exactly_as_the_provider_does(scheme: str) -> None:
    case = CASES[scheme]
    name = case.required[0]
    headers = case.signed()
    upper = re.sub(rb"[0-9a-f]{64}", lambda hexes: hexes.group().upper(), headers[name])
    assert verdict(case, case.verifier(), {**headers, name: upper}).check == "bad_signature"


def test_hmac_hex_ignores_case() -> None:
    case = CASES["hmac-sha256-hex"]
    headers = case.signed()
    assert verdict(case, case.verifier(), {b"x-signature": headers[b"x-signature"].upper()}).ok


def test_an_hmac_signature_without_its_prefix_is_malformed() -> None:
    case = CASES["hmac-sha512-base64-prefixed"]
    value = case.signed()[b"x-hook-signature"].removeprefix(b"sha512=")
    assert verdict(case, case.verifier(), {b"x-hook-signature": value}).check == "malformed_header"
    assert verdict(case, case.verifier(), {b"x-hook-signature": b"SHA512=" + value}).check == "malformed_header"


def test_a_gitlab_token_of_any_other_length_is_a_bad_signature() -> None:
    case = CASES["gitlab"]
    for token in (case.new[:-1], case.new + "x", case.new * 8, "g"):
        assert verdict(case, case.verifier(), {b"x-gitlab-token": token.encode()}).check == "bad_signature"


def test_standard_webhooks_verifies_a_header_signed_by_the_old_and_the_new_secret() -> None:
    case = CASES["standard-webhooks"]
    both = case.signed(case.old)[b"webhook-signature"] + b" " + case.signed(case.new)[b"webhook-signature"]
    headers = {**case.signed(), b"webhook-signature": both}
    assert verdict(case, case.verifier(case.old), headers).ok
    assert verdict(case, case.verifier(case.new), headers).ok
    assert verdict(case, case.verifier(WRONG_SECRETS["standard-webhooks"]), headers).check == "bad_signature"


def test_standard_webhooks_ignores_other_versions_and_needs_a_v1() -> None:
    case = CASES["standard-webhooks"]
    headers = case.signed()
    v2 = b"v2,bm90IGEgdjEgc2lnbmF0dXJl"
    assert verdict(
        case, case.verifier(), {**headers, b"webhook-signature": v2 + b" " + headers[b"webhook-signature"]}
    ).ok
    assert verdict(
        case, case.verifier(), {**headers, b"webhook-signature": headers[b"webhook-signature"] + b" " + v2}
    ).ok
    result = verdict(case, case.verifier(), {**headers, b"webhook-signature": v2})
    assert (result.check, result.detail) == ("malformed_header", "webhook-signature holds no v1 signature")


def test_standard_webhooks_reads_at_most_eight_signatures() -> None:
    case = CASES["standard-webhooks"]
    headers = case.signed()
    others = [case.signed(_whsec(b"%d" % i))[b"webhook-signature"] for i in range(7)]
    eight = b" ".join([*others, headers[b"webhook-signature"]])
    assert verdict(case, case.verifier(), {**headers, b"webhook-signature": eight}).ok
    nine = b" ".join([*others, b"v2,x", headers[b"webhook-signature"]])
    assert verdict(case, case.verifier(), {**headers, b"webhook-signature": nine}).check == "malformed_header"


def test_standard_webhooks_gives_the_signed_delivery_id_only_when_it_verifies() -> None:
    case = CASES["standard-webhooks"]
    assert verdict(case, case.verifier(), case.signed()).delivery_id == MSG_ID
    assert verdict(case, case.verifier(), case.signed(), body=b"{}").delivery_id is None
    long_id = {**case.signed(), b"webhook-id": b"m" * 257}
    assert verdict(case, case.verifier(), long_id).check == "malformed_header"


def test_stripe_verifies_a_rolled_secrets_header_and_ignores_v0() -> None:
    case = CASES["stripe"]
    old = case.signed(case.old)[b"stripe-signature"]
    new = case.signed(case.new)[b"stripe-signature"]
    rolled = old + b"," + new.split(b",")[1] + b",v0=" + b"0" * 64
    assert verdict(case, case.verifier(case.old), {b"stripe-signature": rolled}).ok
    assert verdict(case, case.verifier(case.new), {b"stripe-signature": rolled}).ok
    two_stamps = {b"stripe-signature": new + b",t=%d" % NOW}
    assert verdict(case, case.verifier(), two_stamps).check == "malformed_header"
    no_v1 = {b"stripe-signature": b"t=%d,v0=%s" % (NOW, b"0" * 64)}
    assert verdict(case, case.verifier(), no_v1).check == "malformed_header"


def _stripe_accepts(header: bytes, body: bytes, secret: str) -> bool:
    try:
        return bool(stripe.WebhookSignature.verify_header(body, header.decode(), secret, tolerance=300))
    except stripe.SignatureVerificationError:
        return False


def test_stripes_own_verifier_accepts_exactly_what_we_accept() -> None:
    # Stripe's verifier reads the real clock (and refuses only the past): so do these deliveries.
    case = CASES["stripe"]
    now = time.time()
    signed_at = int(now) - 5
    good = case.signed(signed_at=signed_at)[b"stripe-signature"]
    old = case.signed(case.old, signed_at=signed_at)[b"stripe-signature"]
    deliveries = [
        (good, BODY),
        (good, BODY + b" "),
        (old + b"," + good.split(b",")[1], BODY),
        (old, BODY),
        (good + b",v0=" + b"1" * 64, BODY),
        (good.upper().replace(b"T=", b"t=").replace(b"V1=", b"v1="), BODY),
        (case.signed(signed_at=signed_at - 400)[b"stripe-signature"], BODY),
    ]
    verifier = case.verifier(case.new)
    for header, body in deliveries:
        ours = verdict(case, verifier, {b"stripe-signature": header}, body, now).ok
        assert ours == _stripe_accepts(header, body, case.new), header
    # The one difference: Stripe's verifier takes any timestamp from the future; the tolerance holds both ways here.
    future = case.signed(signed_at=int(now) + 400)[b"stripe-signature"]
    assert _stripe_accepts(future, BODY, case.new)
    assert verdict(case, verifier, {b"stripe-signature": future}, BODY, now).check == "stale_timestamp"


def test_slacks_own_verifier_accepts_exactly_what_we_accept() -> None:
    case = CASES["slack"]

    class Clock(slack_sdk.signature.Clock):
        def now(self) -> float:
            return NOW + 10

    theirs = slack_sdk.signature.SignatureVerifier(case.new, clock=Clock())
    for secret, body, signed_at in [
        (case.new, BODY, NOW),
        (case.old, BODY, NOW),
        (case.new, b"x", NOW),
        (case.new, BODY, NOW - 400),
    ]:
        headers = case.signed(secret, signed_at=signed_at)
        ours = verdict(case, case.verifier(case.new), headers, body, NOW + 10).ok
        as_text = {key.decode(): value.decode() for key, value in headers.items()}
        assert ours == theirs.is_valid_request(body, as_text)


def test_the_verifier_tells_its_scheme_and_bounds() -> None:
    verifier = CASES["github"].verifier("s", tolerance_s=60, max_body_bytes=4096)
    assert (verifier.scheme, verifier.tolerance_s, verifier.max_body_bytes) == ("github", 60, 4096)
