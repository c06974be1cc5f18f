"""One Origin rule for the webhook route and `/mcp`, over real HTTP: each case sent to both routes.

No Origin passes; exactly one Origin listed exactly in `allowed_origins` passes; anything else is 403 (an empty
value, `null` unless listed, two Origin headers even if equal). The routes used to read a repeated header
differently (the webhook route the last, `/mcp` the first) and an empty one differently (the webhook passed it).
"""

from __future__ import annotations

import httpx2
import pytest

from mcpg_gateway import origins
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway

HOOK, TOKEN = "drive://folder/reports", "tok"
APP, EVIL = "https://app.example", "https://evil.example"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
Headers = list[tuple[str, str]]
CASES: dict[str, tuple[Headers, bool]] = {
    "no origin": ([], True),
    "a listed origin": ([("origin", APP)], True),
    "an unlisted origin": ([("origin", EVIL)], False),
    "an empty origin": ([("origin", "")], False),
    "null, unlisted": ([("origin", "null")], False),
    "a listed origin twice": ([("origin", APP), ("origin", APP)], False),
    "listed then unlisted": ([("origin", APP), ("origin", EVIL)], False),
    "unlisted then listed": ([("origin", EVIL), ("origin", APP)], False),
    "a listed origin in another case": ([("origin", APP.upper())], False),
}


async def answers(gw: RunningGateway, headers: Headers) -> tuple[int, int]:
    """The webhook route's status and /mcp's (an initialize), for the same Origin headers."""
    async with httpx2.AsyncClient(base_url=gw.base, timeout=BOUND_S) as http:
        hook = await http.post(f"/webhooks/resource-updated/{TOKEN}", headers=headers)
        mcp_headers = [*headers, ("accept", "application/json, text/event-stream")]
        mcp = await http.post("/mcp", json=INITIALIZE, headers=mcp_headers)
    for refused in (r for r in (hook, mcp) if r.status_code == 403):
        assert refused.json() == origins.REFUSAL
    return hook.status_code, mcp.status_code


@pytest.fixture
async def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    raw = gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN}), allowed_origins=[APP])
    return await gateway_factory(raw)


@pytest.mark.parametrize("case", list(CASES))
async def test_the_webhook_route_and_mcp_give_every_origin_case_the_same_answer(gw: RunningGateway, case: str) -> None:
    headers, passes = CASES[case]
    assert await answers(gw, headers) == ((200, 200) if passes else (403, 403))


async def test_null_passes_on_both_routes_only_when_listed(gateway_factory: GatewayFactory) -> None:
    raw = gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN}), allowed_origins=["null"])
    gw = await gateway_factory(raw)
    assert await answers(gw, [("origin", "null")]) == (200, 200)
    assert await answers(gw, [("origin", "null"), ("origin", "null")]) == (403, 403)


@pytest.mark.parametrize("case", list(CASES))
def test_the_rule_itself_over_raw_asgi_headers(case: str) -> None:
    headers, passes = CASES[case]
    raw = [(name.encode(), value.encode()) for name, value in [("host", "gw"), *headers]]
    assert origins.allowed(raw, [APP]) is passes
