"""MCP subscriptions over real HTTP on loopback, with the SDK's client in both protocol eras."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcpg_gateway import errors
from mcpg_testing.clients import ERAS, legacy_client, listen_client, refusal, subscribe, subscribed, unsubscribe
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream

HOOK = "drive://folder/reports"
POLLED = "drive://file/notes"
PLAIN = "drive://file/unwatched"


@pytest.fixture
async def running(gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock) -> RunningGateway:
    upstream.set("/reports", '{"files": []}')
    upstream.set("/notes", '{"v": 1}')
    raw = gateway_config(
        resource(
            "reports",
            HOOK,
            f"{upstream.url}/reports",
            {"type": "webhook", "token": "tok-new", "previous_tokens": ["tok-old"]},
        ),
        resource("notes", POLLED, f"{upstream.url}/notes", {"type": "poll", "interval_ms": 10000}),
        resource("plain", PLAIN, f"{upstream.url}/reports", watch=False),
        templates=[
            {
                "name": "doc",
                "uri_template": "drive://doc/{doc_id}",
                "backend": {"kind": "http", "url": f"{upstream.url}/docs/{{doc_id}}"},
                "watch": {"strategy": {"type": "poll"}},
            }
        ],
    )
    return await gateway_factory(raw, clock=clock, admin_token="adm")


async def post_webhook(base: str, token: str, **kw: object) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(f"{base}/webhooks/resource-updated/{token}", **kw)  # type: ignore[arg-type]


async def test_capabilities_advertise_subscribe_and_list_changed_in_both_eras(running: RunningGateway) -> None:
    async with legacy_client(running.mcp_url) as legacy:
        caps = legacy.client.server_capabilities.resources
        assert caps is not None
        assert caps.subscribe
        assert caps.list_changed
    async with (
        httpx2.AsyncClient() as http,
        Client(streamable_http_client(running.mcp_url, http_client=http)) as modern,
    ):
        assert modern.protocol_version == "2026-07-28"
        caps = modern.server_capabilities.resources
        assert caps is not None
        assert caps.subscribe
        assert caps.list_changed


@ERAS
async def test_webhook_with_a_matching_token_notifies_the_subscriber_with_the_uri_only(
    running: RunningGateway, mode: str
) -> None:
    async with subscribed(running.mcp_url, mode, HOOK) as sub:
        resp = await post_webhook(running.base, "tok-new", json={"content": "ignored"})
        assert resp.status_code == 200
        assert resp.json() == {"ok": True, "uri": HOOK}
        assert await sub.next_update() == HOOK


@ERAS
async def test_a_previous_token_still_routes_during_rotation(running: RunningGateway, mode: str) -> None:
    async with subscribed(running.mcp_url, mode, HOOK) as sub:
        assert (await post_webhook(running.base, "tok-old")).status_code == 200
        assert await sub.next_update() == HOOK


@ERAS
async def test_a_poll_change_notifies_and_an_unchanged_poll_does_not(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    async with subscribed(running.mcp_url, mode, POLLED) as sub:
        await clock.tick()
        upstream.set("/notes", '{"v": 2}')
        await clock.tick()
        assert await sub.next_update() == POLLED
        # Flush: a webhook fire on another URI proves the stream is live and nothing else was queued.
        await clock.tick()
        assert sub.drained() == []


@ERAS
async def test_subscribing_to_a_template_uri_watches_that_concrete_uri(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    upstream.set("/docs/a b", "first")  # the upstream sees the decoded path
    async with subscribed(running.mcp_url, mode, "drive://doc/a%20b") as sub:
        assert [w.uri for w in running.gw.fanout.running_watches()] == ["drive://doc/a%20b"]
        upstream.set("/docs/a b", "second")
        await clock.tick()
        assert await sub.next_update() == "drive://doc/a%20b"


async def test_every_subscriber_of_a_uri_is_told_once_across_both_eras(running: RunningGateway) -> None:
    async with subscribed(running.mcp_url, "legacy", HOOK) as a, subscribed(running.mcp_url, "listen", HOOK) as b:
        assert (await post_webhook(running.base, "tok-new")).status_code == 200
        assert await a.next_update() == HOOK
        assert await b.next_update() == HOOK
        watcher = running.gw.fanout.watcher(HOOK)
        assert watcher is not None
        assert len(watcher.subscribers) == 2


async def test_unsubscribe_stops_notifications_and_the_watcher(running: RunningGateway) -> None:
    async with legacy_client(running.mcp_url) as sub:
        await subscribe(sub, HOOK)
        await unsubscribe(sub, HOOK)
        assert running.gw.fanout.running_watches() == []


async def test_closing_a_legacy_session_is_an_implicit_unsubscribe(running: RunningGateway) -> None:
    async with legacy_client(running.mcp_url) as sub:
        await subscribe(sub, HOOK)
        await subscribe(sub, POLLED)
        assert len(running.gw.fanout.running_watches()) == 2
    # Leaving the client sends DELETE; the SDK unwinds the session and our cleanup runs with it.
    async with asyncio.timeout(5):
        while running.gw.fanout.running_watches():
            await asyncio.sleep(0)
    assert running.gw.metrics.subscribers.labels("session")._value.get() == 0


async def test_dropping_a_listen_stream_is_an_implicit_unsubscribe(running: RunningGateway) -> None:
    async with listen_client(running.mcp_url, [HOOK, POLLED]):
        assert {w.uri for w in running.gw.fanout.running_watches()} == {HOOK, POLLED}
    async with asyncio.timeout(5):
        while running.gw.fanout.running_watches() or running.gw.fanout.listening:
            await asyncio.sleep(0)


async def test_legacy_subscribe_to_an_unknown_uri_is_refused_with_invalid_params(running: RunningGateway) -> None:
    e = await refusal(running.mcp_url, "legacy", ["drive://nope"])
    assert e.code == -32602
    assert e.message == "unknown resource: drive://nope"


@ERAS
async def test_a_resource_without_a_watch_cannot_be_subscribed(running: RunningGateway, mode: str) -> None:
    e = await refusal(running.mcp_url, mode, [PLAIN])
    assert e.code == errors.INVALID_PARAMS == -32602
    assert e.message == f"{PLAIN} has no watch, so it cannot be subscribed; read it instead"
    assert running.gw.fanout.running_watches() == []


@ERAS
async def test_a_uri_the_backend_refuses_is_refused_before_any_acknowledgement(
    running: RunningGateway, mode: str
) -> None:
    e = await refusal(running.mcp_url, mode, ["drive://doc/missing"])
    assert e.code == errors.INVALID_PARAMS  # unreadable on the first read: do not retry as is
    assert e.message == (
        "the watch could not start: baseline read failed: drive://doc/missing: upstream answered HTTP 404, "
        "expected one of 200"
    )
    assert running.gw.fanout.running_watches() == []


async def test_a_listen_with_one_bad_uri_is_refused_whole_and_starts_nothing(running: RunningGateway) -> None:
    e = await refusal(running.mcp_url, "listen", [HOOK, "drive://nope"])
    assert e.code == -32602
    assert running.gw.fanout.running_watches() == []


async def test_read_goes_through_the_backend_binding(running: RunningGateway, upstream: Upstream) -> None:
    async with legacy_client(running.mcp_url) as sub:
        result = await sub.client.read_resource(POLLED)
    assert result.contents[0].text == '{"v": 1}'  # type: ignore[union-attr]


async def test_a_read_outside_expected_status_codes_is_a_clear_error_without_header_values(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    upstream.set("/x", "nope", status=503)
    raw = gateway_config(resource("x", "x://x", f"{upstream.url}/x", headers={"Authorization": "Bearer s3cr3t"}))
    gw = await gateway_factory(raw)
    async with legacy_client(gw.mcp_url) as sub:
        with pytest.raises(MCPError) as e:
            await sub.client.read_resource("x://x")
    assert e.value.code == errors.INTERNAL_ERROR  # transient: retry
    assert e.value.message == "x://x: upstream answered HTTP 503, expected one of 200"
    assert upstream.headers_seen[-1]["Authorization"] == "Bearer s3cr3t"


async def test_a_non_json_body_is_a_read_error_when_json_is_required(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    upstream.set("/x", "<html>", content_type="text/html")
    gw = await gateway_factory(gateway_config(resource("x", "x://x", f"{upstream.url}/x", require_json_response=True)))
    async with legacy_client(gw.mcp_url) as sub:
        with pytest.raises(MCPError, match="not JSON"):
            await sub.client.read_resource("x://x")


async def test_a_slow_upstream_is_a_timeout_read_error(gateway_factory: GatewayFactory, upstream: Upstream) -> None:
    upstream.set("/x", "{}")
    upstream.docs["/x"].delay = asyncio.Event()  # never set: the upstream hangs
    gw = await gateway_factory(gateway_config(resource("x", "x://x", f"{upstream.url}/x", timeout_ms=200)))
    async with legacy_client(gw.mcp_url) as sub:
        with pytest.raises(MCPError, match="did not answer within 200 ms"):
            await sub.client.read_resource("x://x")
    upstream.docs["/x"].delay.set()


async def test_list_resources_and_templates(running: RunningGateway) -> None:
    async with legacy_client(running.mcp_url) as sub:
        resources = await sub.client.list_resources()
        templates = await sub.client.list_resource_templates()
    assert [r.uri for r in resources.resources] == [HOOK, POLLED, PLAIN]
    assert [t.uri_template for t in templates.resource_templates] == ["drive://doc/{doc_id}"]


async def test_a_subscriber_that_stops_reading_does_not_delay_the_others(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    """A raw legacy session that never reads its GET stream, beside a healthy SDK client."""
    upstream.set("/r", "{}")
    gw = await gateway_factory(
        gateway_config(resource("r", HOOK, f"{upstream.url}/r", {"type": "webhook", "token": "t"})), send_timeout_s=0.5
    )
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "stuck", "version": "0"},
        },
    }
    async with httpx2.AsyncClient(base_url=gw.base, timeout=10) as http:
        r = await http.post("/mcp", json=init, headers=headers)
        sid = r.headers["mcp-session-id"]
        h = {**headers, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
        async with http.stream("GET", "/mcp", headers={**h, "accept": "text/event-stream"}):  # opened, never read
            r = await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": HOOK}},
                headers=h,
            )
            assert r.status_code == 200
            async with subscribed(gw.mcp_url, "legacy", HOOK) as healthy:
                for _ in range(40):  # enough to fill the stuck stream's buffers many times over
                    assert (await post_webhook(gw.base, "t")).status_code == 200
                    assert await healthy.next_update(timeout=5) == HOOK
