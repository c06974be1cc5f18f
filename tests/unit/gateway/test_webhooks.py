"""The webhook route: token routing, origin posture, bounded bodies, collisions, generated tokens."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import httpx2
import pytest

from mcpg_gateway.contract import check
from mcpg_gateway.strategies import webhook as webhooks
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway, fired
from mcpg_testing.upstream import Upstream

URI = "drive://folder/reports"


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: Upstream) -> RunningGateway:
    raw = gateway_config(
        resource("reports", URI, f"{upstream.url}/r", {"type": "webhook", "token": "good"}),
        allowed_origins=["https://app.example"],
        max_webhook_body_bytes=1024,
    )
    return await gateway_factory(raw, admin_token="adm")


async def post(base: str, token: str, **kw: object) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=base) as http:
        return await http.post(f"/webhooks/resource-updated/{token}", **kw)  # type: ignore[arg-type]


async def test_an_unknown_token_gets_404_with_the_documented_body(gw: RunningGateway) -> None:
    resp = await post(gw.base, "bad")
    assert resp.status_code == 404
    assert resp.json() == {"error": "unknown webhook token"}


async def test_a_matching_token_answers_ok_with_the_uri_even_with_no_subscribers(gw: RunningGateway) -> None:
    resp = await post(gw.base, "good", content=b"not json at all")
    assert (resp.status_code, resp.json()) == (200, {"ok": True, "uri": URI})


async def test_a_request_with_no_origin_passes_and_a_listed_origin_passes(gw: RunningGateway) -> None:
    assert (await post(gw.base, "good")).status_code == 200
    assert (await post(gw.base, "good", headers={"origin": "https://app.example"})).status_code == 200


async def test_a_browser_from_another_origin_is_refused_on_the_webhook_route_and_on_mcp(gw: RunningGateway) -> None:
    evil = {"origin": "https://evil.example"}
    resp = await post(gw.base, "good", headers=evil)
    assert (resp.status_code, resp.json()) == (403, {"error": "origin not allowed"})
    async with httpx2.AsyncClient(base_url=gw.base) as http:
        mcp = await http.post("/mcp", json={}, headers={**evil, "accept": "application/json, text/event-stream"})
    assert mcp.status_code == 403


async def test_an_oversized_body_is_refused(gw: RunningGateway) -> None:
    resp = await post(gw.base, "good", content=b"x" * 4096)
    assert resp.status_code == 413
    assert gw.gw.metrics.webhook_requests.labels("too_large")._value.get() == 1


async def test_an_oversized_streamed_body_without_a_declared_length_is_refused(gw: RunningGateway) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"y" * 512

    resp = await post(gw.base, "good", content=chunks())
    assert resp.status_code == 413


async def test_webhook_results_are_counted_by_result_without_the_token(gw: RunningGateway) -> None:
    await post(gw.base, "good")
    await post(gw.base, "nope-secret")
    async with httpx2.AsyncClient() as http:
        text = (await http.get(f"{gw.admin}/metrics")).text
    assert 'mcpg_webhook_requests_total{result="ok"} 1.0' in text
    assert 'mcpg_webhook_requests_total{result="unknown_token"} 1.0' in text
    assert "nope-secret" not in text
    assert "good" not in text


def test_two_resources_sharing_a_token_log_the_collision_naming_both_and_the_later_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = gateway_config(
        resource("first", "x://1", "http://u/", {"type": "webhook", "token": "shared-secret"}),
        resource("second", "x://2", "http://u/", {"type": "webhook", "token": "shared-secret"}),
    )
    cfg = check.load(raw, environ={})
    with caplog.at_level(logging.ERROR, logger="mcpg_gateway.strategies.webhook"):
        index = webhooks.build_index(cfg.mcp.capabilities.resources)
    route = index.lookup("shared-secret")
    assert route is not None
    assert route.uri == "x://2"
    assert "'second' reuses the token of resource 'first'" in caplog.text
    assert "shared-secret" not in caplog.text


def test_an_empty_token_gets_a_uuid4_generated_at_startup_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    cfg = check.load(gateway_config(resource("r", "x://r", "http://u/", {"type": "webhook"})), environ={})
    with caplog.at_level(logging.WARNING, logger="mcpg_gateway.webhooks"):
        index = webhooks.build_index(cfg.mcp.capabilities.resources)
    [route] = index.routes()
    assert route.generated_token is not None
    assert uuid.UUID(route.generated_token).version == 4
    assert index.lookup(route.generated_token) == route
    assert caplog.text.count(route.generated_token) == 1


def test_token_lookup_compares_digests_so_its_time_does_not_depend_on_the_guess() -> None:
    index = webhooks.TokenIndex()
    index.add("s3cret", webhooks.Route("x://r", "r"))
    # The index holds only SHA-256 digests: a guess sharing a prefix with the token is no closer to it.
    assert all(len(key) == 32 for key in index._routes)
    assert b"s3cret" not in b"".join(index._routes)
    assert index.lookup("s3cre") is None


async def test_the_webhook_route_only_takes_post(gw: RunningGateway) -> None:
    async with httpx2.AsyncClient(base_url=gw.base) as http:
        resp = await http.get("/webhooks/resource-updated/good")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "POST"
    assert fired(gw, "webhook") == 0


async def test_a_token_with_a_slash_is_simply_unknown(gw: RunningGateway) -> None:
    resp = await post(gw.base, "good/extra")
    assert (resp.status_code, resp.json()) == (404, {"error": "unknown webhook token"})
