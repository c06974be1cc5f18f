"""/mcp requests as the gateway reads them before the SDK does: one classification by the SDK's reading of the
headers, a bounded body, and bounds on what a client chooses that a stream or session keeps (ids, `_meta`,
initialize's parameters).

A probe found each of these open: a second protocol-version header opened sessions the session limit never
counted; a listen with 3.5 MB ids kept them in every notification; a 2.4 MB listen body was read and parsed whole;
`Last-Event-ID` on a GET stream answered 500 with an ERROR line. Requests go over real HTTP on loopback, except
where the point is a caller no HTTP server would let through (names in upper case, repeated fields): those are
ASGI calls into the public app itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from starlette.types import ASGIApp, Message

from mcpg_gateway import mcp_handlers, mcp_requests, public_app
from mcpg_gateway.contract import check, config, uris
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.sdk import manager as managers
from mcpg_gateway.sdk import requests
from mcpg_testing import BOUND_S
from mcpg_testing.asgi import mcp_scope
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.watching import until

HOOK, TOKEN = "drive://folder/reports", "tok"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
MODERN = "2026-07-28"


def raw_config(**limits: int) -> dict[str, Any]:
    raw = gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN}))
    raw["gateway"]["limits"] = limits
    return raw


@pytest.fixture
async def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    return await gateway_factory(raw_config())


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def modern_request(method: str, request_id: Any = 1, meta: dict[str, Any] | None = None, **params: Any) -> bytes:
    envelope = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {}, **(meta or {})}
    return compact({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"_meta": envelope, **params}})


def initialize(**client_info: Any) -> dict[str, Any]:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1", **client_info},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


async def post_modern(gw: RunningGateway, method: str, body: bytes | Any) -> httpx2.Response:
    headers = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": method}
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        return await http.post(gw.mcp_url, content=body, headers=headers)


def refused(resp: httpx2.Response, status: int, code: int, message: str) -> None:
    assert resp.status_code == status
    assert resp.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


# --- the body bound ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("watches_per_principal", [1, 10, 58, 59, 512, 1000])
def test_a_listen_naming_as_many_of_the_longest_uris_as_a_principal_may_hold_always_fits_the_body_bounds(
    watches_per_principal: int,
) -> None:
    limits = config.LimitsConfig(watches_per_principal=watches_per_principal, watches_total=5000)
    longest = [f"drive://{n:06d}/" + "a" * (uris.MAX_URI_CHARS - 15) for n in range(watches_per_principal)]
    assert {len(u) for u in longest} == {uris.MAX_URI_CHARS}
    meta = {"pad": "p" * 16_000}  # near the bound of `_meta`, with an id at its own bound
    body = modern_request("subscriptions/listen", "x" * 254, meta, notifications={"resourceSubscriptions": longest})
    escaped = body.replace(b"/", b"\\/")  # an encoder that escapes every slash doubles them
    assert len(escaped) <= mcp_requests.listen_body_limit(limits) <= mcp_requests.body_limit(limits)
    assert mcp_requests.body_limit(limits) >= mcp_requests.BODY_FLOOR_BYTES == 256 * 1024


@pytest.mark.parametrize("watches_per_principal", [1000, 5000, 1_000_000])
def test_no_body_bound_derived_from_the_configuration_passes_the_ceiling(watches_per_principal: int) -> None:
    limits = config.LimitsConfig(watches_per_principal=watches_per_principal, watches_total=1_000_000)
    assert mcp_requests.listen_body_limit(limits) <= mcp_requests.body_limit(limits)
    assert mcp_requests.body_limit(limits) <= mcp_requests.BODY_CEILING_BYTES == 4 * 1024 * 1024


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_an_mcp_body_over_the_bound_is_refused_with_413_and_a_json_rpc_error(
    gw: RunningGateway, framing: str
) -> None:
    limit = mcp_requests.body_limit(gw.gw.config.gateway.limits)
    head = modern_request("resources/list")
    fits = head + b" " * (limit - len(head))

    async def chunked(body: bytes) -> AsyncIterator[bytes]:
        for at in range(0, len(body), 64 * 1024):
            yield body[at : at + 64 * 1024]

    def content(body: bytes) -> Any:
        return body if framing == "content-length" else chunked(body)

    served = await post_modern(gw, "resources/list", content(fits))
    assert served.status_code == 200
    assert [r["uri"] for r in served.json()["result"]["resources"]] == [HOOK]
    over = await post_modern(gw, "resources/list", content(fits + b" "))
    refused(over, 413, -32600, f"the request body is more than {limit} bytes, the gateway's bound for /mcp")
    assert limit == 262_144  # the floor, with the default limits


async def test_a_listen_body_over_what_its_uris_need_is_refused_with_413(gw: RunningGateway) -> None:
    # The SDK keeps a listen's body, and what it parsed of it, for as long as the stream is open.
    limit = mcp_requests.listen_body_limit(gw.gw.config.gateway.limits)
    head = modern_request("subscriptions/listen", notifications={"resourceSubscriptions": ["drive://nowhere/1"]})
    fits = head + b" " * (limit - len(head))
    served = await post_modern(gw, "subscriptions/listen", fits)
    assert served.json()["error"]["message"] == "unknown resource: drive://nowhere/1"  # the handler had it
    refused(
        await post_modern(gw, "subscriptions/listen", fits + b" "),
        413,
        -32600,
        f"a subscriptions/listen body is more than {limit} bytes, the gateway's bound for one (as many of the "
        "longest URIs as a principal may hold)",
    )
    assert limit == 61_856  # 10 URIs of 2,048 characters, with the defaults


# --- what a client chooses -------------------------------------------------------------------------------------


async def test_a_request_id_over_256_bytes_of_json_is_refused_naming_the_field(gw: RunningGateway) -> None:
    longest = "i" * (mcp_requests.ID_MAX_BYTES - 2)  # and its quotes
    served = await post_modern(gw, "resources/list", modern_request("resources/list", longest))
    assert (served.status_code, served.json()["id"]) == (200, longest)
    methods: list[tuple[str, dict[str, Any]]] = [
        ("resources/list", {}),
        ("subscriptions/listen", {"notifications": {}}),
    ]
    for method, params in methods:
        resp = await post_modern(gw, method, modern_request(method, longest + "i", **params))
        refused(resp, 400, -32600, "the request's id is more than 256 bytes of JSON, the gateway's bound")
    assert gw.gw.fanout.listening == 0


async def test_a_listen_id_that_is_not_unicode_is_refused_and_holds_no_stream(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    # json reads "\ud800" as a lone surrogate: no notification carrying it could be encoded, and the listen
    # used to fail after taking its stream's slot, for good, with a traceback at ERROR.
    body = modern_request("subscriptions/listen", "ID", notifications={"resourceSubscriptions": [HOOK]})
    resp = await post_modern(gw, "subscriptions/listen", body.replace(b'"ID"', b'"\\ud800"'))
    refused(resp, 400, -32600, "the request's id is not valid Unicode text (it holds a lone surrogate)")
    assert gw.gw.fanout.listening == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_meta_over_16_kib_of_json_is_refused_naming_the_field(gw: RunningGateway) -> None:
    meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {}, "pad": ""}
    meta["pad"] = "x" * (mcp_requests.META_MAX_BYTES - len(compact(meta)))
    largest = modern_request("resources/list", meta=meta)
    assert (await post_modern(gw, "resources/list", largest)).status_code == 200
    resp = await post_modern(gw, "resources/list", largest.replace(b'"pad":"', b'"pad":"x'))
    refused(resp, 400, -32602, "params._meta is more than 16384 bytes of JSON, the gateway's bound")


async def test_initialize_params_over_64_kib_of_json_are_refused_naming_the_field(gw: RunningGateway) -> None:
    largest = initialize(title="")
    largest["params"]["clientInfo"]["title"] = "x" * (
        mcp_requests.INITIALIZE_PARAMS_MAX_BYTES - len(compact(largest["params"]))
    )
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        served = await http.post(gw.mcp_url, content=compact(largest), headers=ACCEPT)
        assert served.status_code == 200
        assert "mcp-session-id" in served.headers
        largest["params"]["clientInfo"]["title"] += "x"
        resp = await http.post(gw.mcp_url, content=compact(largest), headers=ACCEPT)
    refused(resp, 400, -32602, "initialize's params are more than 65536 bytes of JSON, the gateway's bound")
    assert "mcp-session-id" not in resp.headers


# --- Last-Event-ID ---------------------------------------------------------------------------------------------


async def test_last_event_id_on_a_get_stream_is_ignored_and_the_stream_served_without_an_error_line(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    # The gateway keeps no event store; the SDK, asked to resume without one, answered nothing (500, ERROR).
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        opened = await http.post(gw.mcp_url, json=initialize(), headers=ACCEPT)
        session = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(gw.mcp_url, json=initialized, headers=session)).status_code == 202
        subscribe = {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": HOOK}}
        assert (await http.post(gw.mcp_url, json=subscribe, headers=session)).status_code == 200
        resume = {**session, "accept": "text/event-stream", "last-event-id": "stream-1:7"}
        async with http.stream("GET", gw.mcp_url, headers=resume) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            await until(lambda: bool(gw.gw.fanout._streams._by_session))  # a fire before it would have nowhere to go
            assert (await http.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}")).status_code == 200
            async with asyncio.timeout(BOUND_S):
                async for line in stream.aiter_lines():
                    if line.startswith("data:"):
                        assert json.loads(line[5:])["params"]["uri"] == HOOK
                        break
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- one classification, read the SDK's way --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def in_process(raw: dict[str, Any]) -> AsyncIterator[tuple[ASGIApp, managers.SessionManager]]:
    """The public app and its running session manager, for ASGI calls no HTTP server would make."""
    gateway = Gateway(check.load(raw, environ={}))
    manager = managers.session_manager(
        mcp_handlers.build_server(gateway), idle_timeout_s=60, max_sessions=100, max_body_bytes=1 << 20
    )
    try:
        async with manager.run():
            yield public_app.build(gateway, manager), manager
    finally:
        await gateway.aclose()


async def call(app: ASGIApp, headers: list[tuple[bytes, bytes]], body: bytes) -> int:
    """One POST /mcp as an ASGI server would hand it over; the status answered. The connection stays open until
    the response is complete, as a client's would."""
    scope = mcp_scope("POST", headers)
    incoming: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    done = asyncio.Event()
    statuses: list[int] = []

    async def receive() -> Message:
        if incoming:
            return incoming.pop(0)
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])
        elif not message.get("more_body", False):
            done.set()

    async with asyncio.timeout(BOUND_S):
        await app(scope, receive, send)
    return statuses[0]


HANDSHAKE_BY_THE_SDK = [
    [(b"mcp-protocol-version", b"2025-11-25"), (b"mcp-protocol-version", MODERN.encode())],
    [(b"MCP-Protocol-Version", MODERN.encode())],  # the SDK matches lower-case names only
    [(b"mcp-protocol-version", b"2025-06-18"), (b"MCP-Session-Id", b"0" * 32)],
]


@pytest.mark.parametrize("versions", HANDSHAKE_BY_THE_SDK, ids=["two versions", "upper-case name", "upper-case id"])
async def test_the_session_limit_counts_every_session_opened_however_the_headers_are_written(
    versions: list[tuple[bytes, bytes]],
) -> None:
    headers = [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]
    async with in_process(raw_config(sessions_per_principal=2)) as (app, manager):
        statuses = [await call(app, [*headers, *versions], compact(initialize())) for _ in range(5)]
        assert statuses == [200, 200, 429, 429, 429]
        assert len(manager.sessions) == 2  # the sessions opened


def test_a_request_is_classified_as_the_sdk_reads_its_headers_first_field_and_exact_name() -> None:
    def classified(*headers: tuple[bytes, bytes]) -> requests.McpRequest:
        return requests.classify({"type": "http", "method": "POST", "headers": list(headers)})

    handshake, modern = requests.Era.HANDSHAKE, requests.Era.MODERN
    assert classified() == requests.McpRequest(handshake, None, opens_session=True)
    two = classified((b"mcp-protocol-version", MODERN.encode()), (b"mcp-protocol-version", b"2025-11-25"))
    assert two == requests.McpRequest(modern, None, opens_session=False)
    named = classified((b"mcp-session-id", b"a"), (b"mcp-session-id", b"b"), (b"mcp-protocol-version", b""))
    assert named == requests.McpRequest(modern, "a", opens_session=False)  # an empty version is not a known one
    assert classified((b"mcp-session-id", b"")) == requests.McpRequest(handshake, "", opens_session=False)
