"""A served request leaves nothing for the cyclic collector to find (issue 36).

Opening and subscribing a handshake-era session takes twelve requests. While each answer was an SSE stream
(sse_starlette: five tasks, their cancellations) and each request's scope held its `Stream`, which holds uvicorn's
`send`, whose request cycle holds the scope, every request left its objects in reference cycles: garbage that
lives until a collection finds it, spreading what stays over more of the allocator's pools (a fifth of a
session's RSS). With the collector off, no request's uvicorn cycle may outlive its answer but the connection's
last one.

Real gateway, real HTTP on loopback.
"""

from __future__ import annotations

import gc

import aiohttp
from uvicorn.protocols.http.h11_impl import RequestResponseCycle

from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory

HOOK = "drive://folder/reports"
REQUESTS = 20
ACCEPT = {"accept": "application/json, text/event-stream"}
VERSION = "2025-11-25"


def _request(request_id: int, method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def test_requests_on_a_session_are_answered_as_json_and_leave_no_cycle_behind(
    gateway_factory: GatewayFactory,
) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "tok"})))
    client = {"name": "t", "version": "0"}
    init: dict[str, object] = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": client}
    timeout = aiohttp.ClientTimeout(total=BOUND_S)
    async with aiohttp.ClientSession(gw.base, headers=ACCEPT, timeout=timeout) as http:
        async with http.post("/mcp", json=_request(1, "initialize", init)) as opened:
            assert opened.status == 200
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": VERSION}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post("/mcp", headers=session, json=initialized) as answer:
            assert answer.status == 202
        gc.collect()
        gc.disable()
        try:
            for n in range(REQUESTS):
                subscribe = _request(2 + n, "resources/subscribe", {"uri": HOOK})
                async with http.post("/mcp", headers=session, json=subscribe) as answer:
                    assert (answer.status, answer.content_type) == (200, "application/json")
                    assert await answer.json() == {"jsonrpc": "2.0", "id": 2 + n, "result": {}}
            left = sum(isinstance(o, RequestResponseCycle) for o in gc.get_objects())
        finally:
            gc.enable()
    assert left <= 1  # the connection's last request, which its protocol holds until the next one
