"""The webhook route under hostile paths and headers: a fixed set of answers, always JSON, fired only by a token.

The public app is driven in-process with ASGI scopes built here: Hypothesis runs many examples, and an HTTP client
would refuse or tidy hostile headers before they reached the route. What h11 refuses before any app (framing, head
sizes) is tests/unit/gateway/test_request_heads.py's, so framing headers here are what h11 lets through: at most
one Content-Length. Each answer is checked against the documented rules, computed here apart from the code: the
route owns `/webhooks/` (404 elsewhere under it), POST only (405), the Origin rule (403), the body bound (413),
then the token (200, or 404).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import ASGIApp, Message

from mcpg_gateway import mcp_handlers, public_app
from mcpg_gateway import webhook_route as webhooks
from mcpg_gateway.contract import check
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.sdk import manager as managers
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, watched

URI = "drive://folder/reports"
TOKEN, OLD_TOKEN = "t0k-Current_1", "t0k.previous~2"
LISTED = "https://app.example"
LIMIT = 1024
STATUSES = {200, 403, 404, 405, 413}
Headers = list[tuple[bytes, bytes]]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Served:
    loop: asyncio.AbstractEventLoop
    gw: Gateway
    app: ASGIApp
    log: Records = field(default_factory=Records)

    def fired(self) -> float:
        ok = self.gw.metrics.registry.get_sample_value("mcpg_webhook_requests_total", {"result": "ok"})
        return ok or 0.0


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """The public app once for all examples, on a loop of its own (Hypothesis calls the test synchronously)."""
    strategy = {"type": "webhook", "token": TOKEN, "previous_tokens": [OLD_TOKEN]}
    raw = gateway_config(watched("reports", URI, strategy), allowed_origins=[LISTED], max_webhook_body_bytes=LIMIT)
    loop = asyncio.new_event_loop()
    gw = Gateway(check.load(raw, environ={}))
    manager = managers.session_manager(
        mcp_handlers.build_server(gw), idle_timeout_s=60, max_sessions=100, max_body_bytes=1 << 20
    )
    out = Served(loop, gw, public_app.build(gw, manager))
    root = logging.getLogger()
    root.addHandler(out.log)
    try:
        yield out
    finally:
        root.removeHandler(out.log)
        loop.run_until_complete(gw.aclose())
        loop.close()


async def call(app: ASGIApp, method: str, path: str, headers: Headers, chunks: list[bytes]) -> list[Message]:
    """One request as an ASGI server would hand it over; every message the app sent back."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": quote(path).encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }
    body = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    incoming = body or [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    async with asyncio.timeout(BOUND_S):
        await app(scope, receive, send)
    return sent


def expected(method: str, path: str, headers: Headers, chunks: list[bytes]) -> int:
    """The answer the documented rules give, worked out apart from the route's code."""
    if not path.startswith(webhooks.PREFIX):
        return 404
    if method != "POST":
        return 405
    found = [value for name, value in headers if name == b"origin"]
    if found and found != [LISTED.encode()]:
        return 403
    declared = [value.lstrip(b"0") for name, value in headers if name == b"content-length" and value.isdigit()]
    if (declared and (len(declared[0]) > 5 or int(declared[0] or b"0") > LIMIT)) or sum(map(len, chunks)) > LIMIT:
        return 413
    return 200 if path.removeprefix(webhooks.PREFIX) in (TOKEN, OLD_TOKEN) else 404


# --- strategies ------------------------------------------------------------------------------------------------

tokens = st.sampled_from([TOKEN, OLD_TOKEN])
paths = st.one_of(
    tokens.map(lambda t: webhooks.PREFIX + t),
    st.text().map(lambda t: webhooks.PREFIX + t),
    st.tuples(tokens, st.text(min_size=1)).map(lambda p: webhooks.PREFIX + p[0] + p[1]),  # near misses
    st.tuples(st.text(), tokens).map(lambda p: webhooks.PREFIX + p[0] + p[1]),
    st.text().map(lambda t: webhooks.NAMESPACE + t),
)
methods = st.one_of(st.just("POST"), st.sampled_from(["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "post", "M-SEARCH"]))
hostile_text = st.text().map(lambda t: t.encode("utf-8", "surrogatepass"))
huge = st.tuples(st.binary(min_size=1, max_size=3), st.integers(1_000, 8_000)).map(lambda p: p[0] * p[1])
values = st.one_of(st.binary(max_size=64), hostile_text, huge)
origins = st.one_of(
    st.sampled_from([LISTED, "", "null", "https://evil.example", LISTED.upper(), LISTED + "/", f" {LISTED}"]).map(
        str.encode
    ),
    values,
)
names = st.one_of(
    st.sampled_from([b"origin", b"authorization", b"content-type", b"host", b"cookie", b"x-forwarded-for"]),
    st.from_regex(rb"\A[a-z0-9!#$%&'*+.^_`|~-]{1,40}\Z"),
).filter(lambda name: name != b"content-length")
header = st.one_of(st.tuples(st.just(b"origin"), origins), st.tuples(names, values))
lengths = st.one_of(
    st.integers(0, 4 * LIMIT).map(lambda n: str(n).encode()),
    st.sampled_from([b"", b"-1", b"1e3", b" 12", b"0x10", b"9" * 19, b"9" * 5000]),
)
requests = st.fixed_dictionaries(
    {
        "method": methods,
        "path": paths,
        "headers": st.lists(header, max_size=8),
        "length": st.none() | lengths,
        "chunks": st.lists(st.binary(max_size=700), max_size=3),
    }
)


@given(request=requests)
def test_any_request_under_webhooks_gets_a_listed_status_in_json_and_fires_only_for_a_token(
    served: Served, request: dict[str, Any]
) -> None:
    headers: Headers = list(request["headers"])
    if request["length"] is not None:
        headers.append((b"content-length", request["length"]))
    method, path, chunks = request["method"], request["path"], request["chunks"]
    served.log.records.clear()
    fired_before = served.fired()

    sent = served.loop.run_until_complete(call(served.app, method, path, headers, chunks))

    start, *rest = sent
    status = start["status"]
    assert status in STATUSES
    assert status == expected(method, path, headers, chunks)
    assert dict(start["headers"])[b"content-type"] == b"application/json"
    answer = json.loads(b"".join(m.get("body", b"") for m in rest))
    assert answer == {"ok": True, "uri": URI} if status == 200 else set(answer) == {"error"}
    assert served.fired() - fired_before == (1 if status == 200 else 0)
    assert not [r for r in served.log.records if r.exc_info or r.levelno >= logging.ERROR]
