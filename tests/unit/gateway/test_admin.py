"""The admin port: the live watcher list behind a bearer token, Prometheus metrics, and audit events."""

from __future__ import annotations

import json
import logging

import httpx2
import pytest

from mcpg_testing.clients import listen_client, subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream

HOOK, POLLED = "drive://folder/reports", "drive://file/notes"


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock) -> RunningGateway:
    upstream.set("/r", "{}")
    raw = gateway_config(
        resource("reports", HOOK, f"{upstream.url}/r", {"type": "webhook", "token": "tok"}),
        resource("notes", POLLED, f"{upstream.url}/r", {"type": "poll", "interval_ms": 30000}),
    )
    return await gateway_factory(raw, clock=clock, admin_token="adm-token")


async def admin_get(gw: RunningGateway, path: str, token: str | None = "adm-token") -> httpx2.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient() as http:
        return await http.get(f"{gw.admin}{path}", headers=headers)


async def test_an_empty_watch_list_means_nothing_is_subscribed(gw: RunningGateway) -> None:
    resp = await admin_get(gw, "/admin/v1/watches")
    assert resp.json() == {"watches": [], "stopping": []}


async def test_the_watch_list_shows_each_running_watcher(gw: RunningGateway) -> None:
    async with listen_client(gw.mcp_url, [HOOK, POLLED]), subscribed(gw.mcp_url, "legacy", POLLED):
        watches = {w["uri"]: w for w in (await admin_get(gw, "/admin/v1/watches")).json()["watches"]}
    assert set(watches) == {HOOK, POLLED}
    polled = watches[POLLED]
    assert polled["strategy"] == "poll"
    assert polled["subscribers"] == 2
    assert polled["interval_ms"] == 30000
    assert polled["cadence_ms"] == 30000  # both subscribers' leases hold
    assert watches[HOOK]["cadence_ms"] is None  # a push watch has no cadence
    assert polled["last_successful_read"] is not None
    assert polled["failed_reads"] == 0
    assert watches[HOOK]["strategy"] == "webhook"
    assert watches[HOOK]["last_fired"] is None


async def test_the_admin_api_refuses_a_missing_or_wrong_token(gw: RunningGateway) -> None:
    for token in (None, "wrong"):
        resp = await admin_get(gw, "/admin/v1/watches", token)
        assert resp.status_code == 401
        assert resp.headers["www-authenticate"].startswith("Bearer")


async def test_the_admin_api_is_disabled_with_a_clear_403_when_no_token_is_configured(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    gw = await gateway_factory(gateway_config(resource("r", "x://r", f"{upstream.url}/r")))
    resp = await admin_get(gw, "/admin/v1/watches", None)
    assert resp.status_code == 403
    assert "MCPG_ADMIN_TOKEN" in resp.json()["error"]


async def test_metrics_count_fires_and_sends_by_strategy_and_gauge_active_watchers(gw: RunningGateway) -> None:
    async with subscribed(gw.mcp_url, "legacy", HOOK) as a, subscribed(gw.mcp_url, "listen", HOOK) as b:
        async with httpx2.AsyncClient() as http:
            await http.post(f"{gw.base}/webhooks/resource-updated/tok")
        await a.next_update()
        await b.next_update()
        text = (await admin_get(gw, "/metrics", None)).text
    assert "mcpg_watch_active_watchers 1.0" in text
    assert 'mcpg_watch_fired_total{strategy="webhook"} 1.0' in text
    assert 'mcpg_watch_notifications_sent_total{strategy="webhook"} 2.0' in text
    assert HOOK not in text  # never a URI as a label


async def test_every_fire_writes_one_json_audit_event(gw: RunningGateway, caplog: pytest.LogCaptureFixture) -> None:
    async with subscribed(gw.mcp_url, "listen", HOOK) as sub:
        with caplog.at_level(logging.INFO, logger="mcpg.audit"):
            async with httpx2.AsyncClient() as http:
                await http.post(f"{gw.base}/webhooks/resource-updated/tok")
            await sub.next_update()
    [record] = [r for r in caplog.records if r.name == "mcpg.audit"]
    event = json.loads(record.getMessage())
    assert {k: event[k] for k in ("event", "uri", "strategy", "subscribers")} == {
        "event": "mcpg.watch.fired",
        "uri": HOOK,
        "strategy": "webhook",
        "subscribers": 1,
    }


async def test_webhooks_admin_view_shows_only_generated_tokens_and_which_scheme_signs(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    raw = gateway_config(
        resource("set", "x://set", f"{upstream.url}/r", {"type": "webhook", "token": "configured-secret"}),
        resource("gen", "x://gen", f"{upstream.url}/r", {"type": "webhook"}),
        resource("signed", "x://signed", f"{upstream.url}/r", {"type": "webhook", "token": "t", "signature": SIGNED}),
    )
    gw = await gateway_factory(raw, admin_token="adm-token")
    resp = await admin_get(gw, "/admin/v1/webhooks")
    hooks = {h["resource"]: h for h in resp.json()["webhooks"]}
    assert hooks["set"]["generated_token"] is None
    assert hooks["gen"]["generated_token"]
    assert [hooks[name]["signature"] for name in ("set", "gen", "signed")] == [None, None, "github"]
    assert "configured-secret" not in resp.text
    assert "signing-secret" not in resp.text


SIGNED = {"scheme": "github", "secrets": ["signing-secret"]}


async def test_health_and_readiness_answer_on_the_public_port(gw: RunningGateway) -> None:
    async with httpx2.AsyncClient(base_url=gw.base) as http:
        assert (await http.get("/healthz")).json() == {"ok": True}
        assert (await http.get("/readyz")).status_code == 200


async def test_the_watch_list_shows_a_watch_slowed_by_its_idle_session(gw: RunningGateway, clock: ManualClock) -> None:
    async with subscribed(gw.mcp_url, "legacy", POLLED):
        clock.advance(1800)
        watches = {w["uri"]: w for w in (await admin_get(gw, "/admin/v1/watches")).json()["watches"]}
    assert watches[POLLED]["interval_ms"] == 30000
    assert watches[POLLED]["cadence_ms"] == 600_000
