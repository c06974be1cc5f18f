"""Identity over real HTTP: bearer tokens to principals, anonymous only when configured, sessions bound to a caller."""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import pytest

from mcpg_gateway import identity
from mcpg_gateway.contract import check
from mcpg_gateway.contract.errors import ConfigError
from mcpg_testing.clients import ERAS, subscribed
from mcpg_testing.configs import bearer, gateway_config, principal, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream

HOOK = "report://daily"
TOKENS = {"alice": "alice-s3cret-token", "bob": "bob-s3cret-token", "carol": "carol-s3cret-token"}
PRINCIPALS = [
    principal(TOKENS["alice"], "alice", trust_level="verified", groups=["finance"], attributes={"team": "payments"}),
    principal(TOKENS["bob"], "bob", roles=["admin"]),
    principal(TOKENS["carol"], "carol", scopes=["mcp:read"]),
]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODERN = {"MCP-Protocol-Version": "2026-07-28"}


def auth(**overrides: Any) -> dict[str, Any]:
    return {"principals": PRINCIPALS, **overrides}


async def start(gateway_factory: GatewayFactory, upstream: Upstream, auth_section: dict[str, Any]) -> RunningGateway:
    upstream.set("/r", "{}")
    raw = gateway_config(
        resource("r", HOOK, f"{upstream.url}/r", {"type": "webhook", "token": "hook"}), auth=auth_section
    )
    return await gateway_factory(raw)


async def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(url, json=body, headers={**ACCEPT, **(headers or {})})


@pytest.mark.parametrize("era", [{}, MODERN], ids=["handshake", "modern"])
@pytest.mark.parametrize(
    "presented", [None, "not-a-known-token", "alice-s3cret-tokeN"], ids=["none", "unknown", "near"]
)
async def test_a_missing_or_unknown_token_gets_401_with_www_authenticate(
    gateway_factory: GatewayFactory, upstream: Upstream, era: dict[str, str], presented: str | None
) -> None:
    gw = await start(gateway_factory, upstream, auth())
    resp = await post(gw.mcp_url, INITIALIZE, {**era, **(bearer(presented) if presented else {})})
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"].startswith('Bearer error="invalid_token"')


async def test_without_any_auth_section_every_client_is_refused(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    gw = await start(gateway_factory, upstream, {})
    assert (await post(gw.mcp_url, INITIALIZE)).status_code == 401
    assert gw.gw.metrics.auth_failures.labels("missing")._value.get() == 1


async def test_anonymous_access_serves_a_client_without_a_token_only_when_enabled(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    gw = await start(gateway_factory, upstream, auth(anonymous={"enabled": True, "principal_id": "guest"}))
    assert (await post(gw.mcp_url, INITIALIZE)).status_code == 200
    # Presenting a wrong token is not anonymity: it is refused even with anonymous access on.
    assert (await post(gw.mcp_url, INITIALIZE, bearer("wrong"))).status_code == 401
    async with subscribed(gw.mcp_url, "listen", HOOK):
        [watcher] = gw.gw.fanout.running_watches()
        assert [s.principal.principal_id for s in watcher.subscribers if s.principal] == ["guest"]


@ERAS
async def test_each_subscriber_holds_the_principal_its_token_names(
    gateway_factory: GatewayFactory, upstream: Upstream, mode: str
) -> None:
    gw = await start(gateway_factory, upstream, auth())
    async with (
        subscribed(gw.mcp_url, mode, HOOK, bearer(TOKENS["alice"])),
        subscribed(gw.mcp_url, mode, HOOK, bearer(TOKENS["bob"])),
        subscribed(gw.mcp_url, mode, HOOK, bearer(TOKENS["carol"])),
    ):
        [watcher] = gw.gw.fanout.running_watches()
        principals = {s.principal.principal_id: s.principal for s in watcher.subscribers if s.principal}
    assert set(principals) == {"alice", "bob", "carol"}
    alice = principals["alice"]
    assert (alice.trust_level, alice.groups, dict(alice.attributes)) == ("verified", ("finance",), {"team": "payments"})
    assert principals["bob"].roles == ("admin",)
    assert principals["carol"].scopes == ("mcp:read",)


async def test_a_session_opened_by_one_principal_cannot_be_used_by_another(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    gw = await start(gateway_factory, upstream, auth())
    opened = await post(gw.mcp_url, INITIALIZE, bearer(TOKENS["alice"]))
    session = {"mcp-session-id": opened.headers["mcp-session-id"]}
    as_bob = await post(gw.mcp_url, PING, {**session, **bearer(TOKENS["bob"])})
    assert as_bob.status_code == 404  # exactly as if the session did not exist
    as_alice = await post(gw.mcp_url, PING, {**session, **bearer(TOKENS["alice"])})
    assert as_alice.status_code == 200


async def test_tokens_never_reach_logs_or_metrics(
    gateway_factory: GatewayFactory, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await start(gateway_factory, upstream, auth())
    assert (await post(gw.mcp_url, INITIALIZE, bearer("wrong-s3cret"))).status_code == 401
    async with subscribed(gw.mcp_url, "legacy", HOOK, bearer(TOKENS["alice"])):
        pass
    async with httpx2.AsyncClient() as http:
        metrics = (await http.get(f"{gw.admin}/metrics")).text
    for secret in ("wrong-s3cret", *TOKENS.values()):
        assert secret not in caplog.text
        assert secret not in metrics
    assert 'mcpg_auth_failures_total{reason="invalid_token"} 1.0' in metrics


async def test_the_verifier_returns_the_principal_and_keeps_no_token() -> None:
    ident = identity.Identity(check.load(gateway_config(auth=auth())).gateway.auth)
    token = await ident.verify_token(TOKENS["bob"])
    assert token is not None
    assert (token.client_id, token.subject) == ("bob", "bob")
    assert TOKENS["bob"] not in repr(token)
    found = ident.principal_of(token)
    assert found is not None
    assert found.roles == ("admin",)
    assert await ident.verify_token("unknown") is None


def problems(auth_section: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        check.load(gateway_config(auth=auth_section), environ={})
    return [str(p) for p in e.value.problems]


def test_a_principal_id_or_token_digest_used_twice_is_rejected() -> None:
    twice = [principal("t1", "alice"), principal("t2", "alice")]
    assert problems({"principals": twice}) == [
        "gateway.auth: principals[1].principal_id: 'alice' is already used by principals[0]"
    ]
    same_token = [principal("t1", "alice"), principal("t1", "bob")]
    assert problems({"principals": same_token}) == [
        "gateway.auth: principals[1].token_sha256: the same token digest as principals[0]"
    ]
    clash = {"anonymous": {"enabled": True, "principal_id": "alice"}, "principals": [principal("t1", "alice")]}
    assert problems(clash) == ["gateway.auth: principals[0].principal_id: 'alice' is already used by anonymous"]


def test_a_token_instead_of_its_digest_is_rejected() -> None:
    [message] = problems({"principals": [{"token_sha256": "alice-s3cret-token", "principal_id": "alice"}]})
    assert message.startswith("gateway.auth.principals[0].token_sha256: String should match pattern")
    assert "alice-s3cret-token" not in message
    assert identity.token_digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


async def test_a_principal_s_requests_share_one_token_and_a_new_configuration_gives_new_ones() -> None:
    # An open stream keeps its request's token: one per principal, not one per request (2.8 KB each).
    cfg = check.load(gateway_config(auth={"principals": [principal("alice-token", "alice")]}), environ={})
    ids = identity.Identity(cfg.gateway.auth)
    first, again = await ids.verify_token("alice-token"), await ids.verify_token("alice-token")
    assert first is not None
    assert first is again
    assert (first.client_id, first.token) == ("alice", "principal:alice")  # a marker, never the bearer token
    assert await ids.verify_token("wrong") is None
    ids.replace(cfg.gateway.auth)
    assert await ids.verify_token("alice-token") is not first  # the scopes as configured now
