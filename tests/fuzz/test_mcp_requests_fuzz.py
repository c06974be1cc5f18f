"""The /mcp envelope check under any body: it never raises, refuses exactly what is over a bound, and hands the SDK
the very bytes it read, in one message, whatever chunks they came in.

Bodies are any bytes, and JSON-RPC envelopes built here with ids, `_meta` and initialize parameters drawn around
their bounds, written in several ways (spacing, escapes), sometimes cut or spliced. `Envelope` runs in-process on
ASGI messages. The expected answer is worked out here apart from the code: the body read by the SDK's own parser
for the request's era (pydantic_core for the handshake era, json for 2026-07-28; what neither reads is the SDK's to
answer), and each size measured by `json.dumps`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pydantic_core
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from starlette.types import Message

from mcpg_gateway import mcp_requests
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.sdk import requests
from mcpg_testing import BOUND_S

Era = requests.Era
ID, META, INIT = mcp_requests.ID_MAX_BYTES, mcp_requests.META_MAX_BYTES, mcp_requests.INITIALIZE_PARAMS_MAX_BYTES
VERSION = {
    Era.HANDSHAKE: [(b"mcp-protocol-version", b"2025-11-25")],
    Era.MODERN: [(b"mcp-protocol-version", b"2026-07-28")],
}
DISCONNECT: Message = {"type": "http.disconnect"}


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    yield running
    running.close()


# --- what is expected, apart from the code ---------------------------------------------------------------------

_UNREAD = object()


def sdk_read(body: bytes, era: Era) -> Any:
    try:
        return pydantic_core.from_json(body) if era is Era.HANDSHAKE else json.loads(body)
    except (ValueError, RecursionError):
        return _UNREAD


def size(value: Any) -> int:
    try:
        return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except RecursionError:  # only ids are nested this deep here: hundreds of brackets, far over their bound
        return ID + 1


def expected(body: bytes, era: Era, limits: tuple[int, int], declared: bytes | None) -> tuple[int, str] | None:
    """(status, a word the refusal must hold), or None: the SDK gets the body."""
    limit, listen_limit = limits
    digits = declared.lstrip(b"0") if declared is not None and declared.isdigit() else b""
    if len(digits) > 7 or int(digits or b"0") > limit or len(body) > limit:  # every limit here has 6 digits
        return 413, f"more than {limit} bytes"
    decoded = sdk_read(body, era)
    if not isinstance(decoded, dict):
        return None
    if decoded.get("method") == "subscriptions/listen" and len(body) > listen_limit:
        return 413, f"a subscriptions/listen body is more than {listen_limit} bytes"
    if "id" in decoded:
        if size(decoded["id"]) > ID:
            return 400, f"id is more than {ID} bytes"
        if isinstance(decoded["id"], str) and any(0xD800 <= ord(c) <= 0xDFFF for c in decoded["id"]):
            return 400, "id is not valid Unicode"
    params = decoded.get("params")
    if not isinstance(params, dict):
        return None
    if "_meta" in params and size(params["_meta"]) > META:
        return 400, f"params._meta is more than {META} bytes"
    if decoded.get("method") == "initialize" and size(params) > INIT:
        return 400, f"initialize's params are more than {INIT} bytes"
    return None


# --- running it ---------------------------------------------------------------------------------------------------


async def run(
    body: bytes, chunks: list[int], era: Era, limits: tuple[int, int], declared: bytes | None
) -> tuple[list[Message], list[Message]]:
    """`body` in chunks through `Envelope`: what it answered, and what the SDK's app behind it received."""
    cuts = sorted({min(c, len(body)) for c in chunks})
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    incoming: list[Message] = [
        {"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)
    ]
    headers = [*VERSION[era], *([(b"content-length", declared)] if declared is not None else [])]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    answered: list[Message] = []
    received: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else DISCONNECT

    async def send(message: Message) -> None:
        answered.append(message)

    async def sdk(scope: Any, receive: Any, send: Any) -> None:
        received.extend([await receive(), await receive()])  # the body, then what the server says next
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"sdk"})

    async with asyncio.timeout(BOUND_S):
        await mcp_requests.Envelope(sdk, lambda: limits, Metrics())(scope, receive, send)
    return answered, received


# --- strategies ---------------------------------------------------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def near(bound: int) -> st.SearchStrategy[int]:
    """Sizes around a bound, on both sides of it."""
    return st.integers(bound - 4, bound + 4)


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
small = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
ids = st.one_of(
    scalars,
    small,
    near(ID).map(lambda n: "i" * max(n - 2, 0)),  # a string's JSON is its text and two quotes
    near(ID).map(lambda n: "é" * max((n - 2) // 2, 0)),  # two bytes of UTF-8 each
    near(ID).map(lambda n: int("9" * max(n, 1))),
    st.integers(1, 400).map(nested),
)


def meta(n: int) -> dict[str, Any]:
    """A `_meta` of about `n` bytes of compact JSON."""
    base = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "pad": ""}
    base["pad"] = "m" * max(n - size(base), 0)
    return base


envelopes = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "method": st.sampled_from(["initialize", "subscriptions/listen", "resources/list", "x"]),
        "params": st.one_of(
            small,
            st.fixed_dictionaries({"_meta": small}),
            st.fixed_dictionaries({"_meta": near(META).map(meta)}),
            near(INIT).map(lambda n: {"clientInfo": {"name": "c" * max(n - 26, 0)}, "capabilities": {}}),
        ),
    },
    optional={"id": ids},
)


@st.composite
def written(draw: st.DrawFn) -> bytes:
    """An envelope as some client might write it: spaced or not, escaped or not, sometimes with a lone surrogate
    id or cut short or spliced with junk."""
    value = draw(envelopes)
    text = json.dumps(value, indent=draw(st.sampled_from([None, 1])), ensure_ascii=draw(st.booleans()))
    if draw(st.integers(0, 7)) == 0 and "id" in value:
        text = json.dumps({**value, "id": "ID"}).replace('"ID"', '"\\ud800"')
    out = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(out)))
        out = out[:at] + draw(st.binary(max_size=4)) + out[at + draw(st.integers(0, 3)) :]
    return out


deep = st.integers(1, 5000).map(lambda d: b'{"jsonrpc":"2.0","id":' + b"[" * d + b"]" * d + b',"method":"x"}')
bodies = st.one_of(st.binary(max_size=300), written(), written(), written(), deep)
declared = st.one_of(st.none(), st.sampled_from([b"", b"-1", b"1e3", b"9" * 5000, b"0" * 30 + b"1"]))


@given(
    body=bodies,
    era=st.sampled_from(Era),
    limits=st.sampled_from([(256, 256), (70 * 1024, 300), (300 * 1024, 70 * 1024), (300 * 1024, 300 * 1024)]),
    chunks=st.lists(st.integers(0, 80 * 1024), max_size=3),
    length=st.one_of(st.none(), st.just("true"), declared),
)
def test_any_body_is_refused_exactly_when_over_a_bound_and_otherwise_reaches_the_sdk_unchanged(
    loop: asyncio.AbstractEventLoop, body: bytes, era: Era, limits: tuple[int, int], chunks: list[int], length: Any
) -> None:
    declared_length = str(len(body)).encode() if length == "true" else length
    answered, received = loop.run_until_complete(run(body, chunks, era, limits, declared_length))
    verdict = expected(body, era, limits, declared_length)
    event("handed to the SDK" if verdict is None else f"refused: {verdict[1].split(' is')[0].split(' are')[0]}")
    if verdict is None:
        assert received == [{"type": "http.request", "body": body, "more_body": False}, DISCONNECT]
        assert answered[0]["status"] == 200
        return
    status, words = verdict
    assert received == []
    assert answered[0]["status"] == status
    answer = json.loads(answered[1]["body"])
    code = -32602 if words.startswith(("params", "initialize")) else -32600
    assert (answer["jsonrpc"], answer["id"], answer["error"]["code"]) == ("2.0", None, code)
    assert words in answer["error"]["message"]


@given(body=written(), era=st.sampled_from(Era), chunks=st.lists(st.integers(0, 80 * 1024), max_size=3))
def test_an_envelope_reaches_the_sdk_unless_its_id_meta_or_initialize_params_is_over_its_bound(
    loop: asyncio.AbstractEventLoop, body: bytes, era: Era, chunks: list[int]
) -> None:
    limits = (300 * 1024, 300 * 1024)  # no envelope drawn here comes near them: every answer is the check's
    answered, received = loop.run_until_complete(run(body, chunks, era, limits, None))
    verdict = expected(body, era, limits, None)
    event("handed to the SDK" if verdict is None else f"refused: {verdict[1].split(' is')[0].split(' are')[0]}")
    assert (received != []) is (verdict is None)
    assert answered[0]["status"] == (200 if verdict is None else verdict[0])


json_values = st.recursive(
    st.one_of(scalars, st.text(st.characters(codec=None), max_size=8)),  # lone surrogates too
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
)


@given(value=json_values, slack=st.integers(-2, 2))
def test_the_walk_measures_a_value_as_json_s_encoder_does(value: Any, slack: int) -> None:
    # The walk is what `_over` falls back on for a value json reads but cannot write back (too deep to recurse).
    limit = size(value) + slack
    assert mcp_requests._over_walked(value, limit) is mcp_requests._over(value, limit) is (slack < 0)


@given(depth=st.integers(0, 5000), slack=st.integers(-2, 2))
def test_a_value_too_deep_for_json_s_encoder_is_still_measured(depth: int, slack: int) -> None:
    limit = 2 * (depth + 1) + slack  # `[` and `]` at each level
    assert mcp_requests._over(nested(depth), limit) is (slack < 0)
