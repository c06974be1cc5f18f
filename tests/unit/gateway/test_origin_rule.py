"""One Origin rule for the webhook route and `/mcp`, over real HTTP: each case sent to both routes.

No Origin passes; exactly one Origin listed exactly in `allowed_origins` passes; anything else is 403 (an empty
value, `null` unless listed, two Origin headers even if equal). The routes used to read a repeated header
differently (the webhook route the last, `/mcp` the first) and an empty one differently (the webhook passed it).

Loopback means local: bound to a loopback address, the gateway also lets local origins through (localhost,
127.0.0.1, [::1], any port, http or https), in addition to the listed ones; bound anywhere else, it does not.
The test gateways are bound to 127.0.0.1, so the real-HTTP cases run under the loopback rule.
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


def raw(headers: Headers) -> list[tuple[bytes, bytes]]:
    return [(name.encode(), value.encode()) for name, value in [("host", "gw"), *headers]]


@pytest.mark.parametrize("bind_host", [None, "0.0.0.0", "127.0.0.1"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_rule_itself_over_raw_asgi_headers(case: str, bind_host: str | None) -> None:
    headers, passes = CASES[case]
    assert origins.allowed(raw(headers), [APP], bind_host) is passes


# --- loopback means local -----------------------------------------------------------------------------------

LOOPBACK_HOSTS = ["127.0.0.1", "::1", "localhost", "LocalHost", "127.0.0.2", "[::1]"]
OTHER_HOSTS = [None, "0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "fe80::1", "gw.example", "localhost.example", ""]
LOCAL_ORIGINS = [
    "http://localhost",
    "http://localhost:3000",
    "https://localhost:8443",
    "http://127.0.0.1",
    "http://127.0.0.1:65535",
    "https://127.0.0.1:1",
    "http://[::1]",
    "http://[::1]:8080",
]
NOT_LOCAL_ORIGINS = [
    "http://evil.example.com",
    "http://localhost.evil.example",
    "http://127.0.0.1.nip.io",
    "http://evil-localhost",
    "http://localhost:65536",
    "http://localhost:99999",
    "http://localhost:",
    "http://localhost/",
    "http://localhost:3000/path",
    "http://LOCALHOST",
    "HTTP://localhost",
    "ftp://localhost",
    "ws://localhost",
    "http://user@localhost",
    "http://127.0.0.2",
    "http://0.0.0.0",
    "http://[::ffff:127.0.0.1]",
    "http://::1",
    "localhost",
    "http://localhost\n",
    "null",
]


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
def test_loopback_addresses_and_localhost_are_loopback(host: str) -> None:
    assert origins.loopback(host) is True


@pytest.mark.parametrize("host", OTHER_HOSTS)
def test_any_other_bind_address_is_not(host: str | None) -> None:
    assert origins.loopback(host) is False


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
@pytest.mark.parametrize("origin", LOCAL_ORIGINS)
def test_bound_to_loopback_a_local_origin_passes_beside_the_listed_ones(host: str, origin: str) -> None:
    assert origins.allowed(raw([("origin", origin)]), [APP], host) is True
    assert origins.allowed(raw([("origin", APP)]), [APP], host) is True  # the list is added to, not replaced
    assert origins.allowed(raw([("origin", origin)]), [], host) is True


@pytest.mark.parametrize("host", OTHER_HOSTS)
@pytest.mark.parametrize("origin", LOCAL_ORIGINS)
def test_bound_anywhere_else_a_local_origin_passes_only_when_listed(host: str | None, origin: str) -> None:
    assert origins.allowed(raw([("origin", origin)]), [APP], host) is False
    assert origins.allowed(raw([("origin", origin)]), [origin], host) is True


@pytest.mark.parametrize("origin", NOT_LOCAL_ORIGINS)
def test_bound_to_loopback_anything_not_exactly_a_local_origin_is_refused(origin: str) -> None:
    assert origins.local(origin) is False
    assert origins.allowed(raw([("origin", origin)]), [APP], "127.0.0.1") is False


@pytest.mark.parametrize(
    "headers",
    [
        [("origin", "http://localhost"), ("origin", "http://localhost")],
        [("origin", "http://localhost"), ("origin", EVIL)],
        [("origin", "")],
    ],
)
def test_bound_to_loopback_two_origins_or_an_empty_one_are_still_refused(headers: Headers) -> None:
    assert origins.allowed(raw(headers), [APP], "127.0.0.1") is False


async def test_a_gateway_bound_to_127_0_0_1_answers_local_origins_and_refuses_a_rebound_name(
    gw: RunningGateway,
) -> None:
    for origin in (f"http://localhost:{gw.port}", f"http://127.0.0.1:{gw.port}", "https://[::1]:5173"):
        assert await answers(gw, [("origin", origin)]) == (200, 200), origin
    # DNS rebinding: a page on evil.example.com whose name now resolves to 127.0.0.1 calls the gateway.
    rebound = [("host", f"evil.example.com:{gw.port}"), ("origin", f"http://evil.example.com:{gw.port}")]
    assert await answers(gw, rebound) == (403, 403)
    assert await answers(gw, [("origin", APP)]) == (200, 200)
