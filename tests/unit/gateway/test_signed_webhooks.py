"""Signed webhooks on the route: a delivery fires only when its sender's signature verifies, once per delivery id.

The deliveries are signed with the Standard Webhooks reference library (the schemes themselves, each against its
provider's signer, are test_signatures.py's); these tests are about the HTTP side: statuses and their JSON, what
fires, replays, bounds, a rotation applied in place, and what never reaches a log or a metric.
"""

from __future__ import annotations

import base64
import datetime
import logging
import secrets
import uuid
from typing import Any

import httpx2
import pytest
from standardwebhooks.webhooks import Webhook

from mcpg_gateway import replays, webhook_route
from mcpg_gateway.contract import check
from mcpg_gateway.errors import BusUnavailableError
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import webhook as webhooks
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway, fired, metrics_text
from mcpg_testing.upstream import Upstream

URI = "drive://folder/reports"
TOKEN = "routing-token"


def whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


OLD, NEW = whsec(), whsec()


def signed_config(upstream_url: str, *secret_list: str, **signature: Any) -> dict[str, Any]:
    block = {"scheme": "standard-webhooks", "secrets": list(secret_list), **signature}
    strategy = {"type": "webhook", "token": TOKEN, "signature": block}
    return gateway_config(resource("reports", URI, f"{upstream_url}/r", strategy))


def delivery(secret: str, body: bytes = b'{"type":"report.updated"}', **at: Any) -> tuple[bytes, dict[str, str]]:
    """A body and the headers the Standard Webhooks library signs it with (now, or `at=datetime`)."""
    msg_id = f"msg_{uuid.uuid4().hex}"
    when = at.get("at") or datetime.datetime.now(tz=datetime.UTC)
    signature = Webhook(secret).sign(msg_id, when, body.decode())
    return body, {"webhook-id": msg_id, "webhook-timestamp": str(int(when.timestamp())), "webhook-signature": signature}


async def post(gw: RunningGateway, body: bytes, headers: dict[str, str], token: str = TOKEN) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=gw.base) as http:
        return await http.post(f"/webhooks/resource-updated/{token}", content=body, headers=headers)


def checked(gw: RunningGateway, check_name: str) -> float:
    labels = {"scheme": "standard-webhooks", "check": check_name}
    return gw.gw.metrics.registry.get_sample_value("mcpg_webhook_signatures_total", labels) or 0.0


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: Upstream) -> RunningGateway:
    return await gateway_factory(signed_config(upstream.url, NEW, OLD, max_body_bytes=4096))


async def test_a_delivery_signed_by_the_reference_library_fires(gw: RunningGateway) -> None:
    resp = await post(gw, *delivery(NEW))
    assert (resp.status_code, resp.json()) == (200, {"ok": True, "uri": URI})
    assert fired(gw, "webhook") == 1
    assert checked(gw, "ok") == 1


async def test_either_listed_secret_verifies(gw: RunningGateway) -> None:
    assert (await post(gw, *delivery(OLD))).status_code == 200
    assert (await post(gw, *delivery(NEW))).status_code == 200


@pytest.mark.parametrize(
    ("tamper", "check_name", "says"),
    [
        (lambda b, h: (b + b" ", h), "bad_signature", "matches no"),
        (lambda b, h: (b, {k: v for k, v in h.items() if k != "webhook-signature"}), "missing_header", "webhook-"),
        (lambda b, h: (b, {**h, "webhook-timestamp": "soon"}), "malformed_header", "webhook-timestamp"),
        (lambda b, h: (b, {**h, "webhook-timestamp": str(int(h["webhook-timestamp"]) - 3600)}), "stale_timestamp", "s"),
    ],
)
async def test_a_delivery_that_fails_a_check_is_401_naming_the_check_and_fires_nothing(
    gw: RunningGateway, tamper: Any, check_name: str, says: str
) -> None:
    body, headers = tamper(*delivery(NEW))
    resp = await post(gw, body, headers)
    assert resp.status_code == 401
    assert resp.json()["check"] == check_name
    assert resp.json()["error"].startswith("signature check failed: ")
    assert says in resp.json()["error"]
    assert fired(gw, "webhook") == 0
    assert checked(gw, check_name) == 1


async def test_a_wrong_secret_is_a_bad_signature_and_the_answer_names_no_secret(gw: RunningGateway) -> None:
    stranger = whsec()
    body, headers = delivery(stranger)
    resp = await post(gw, body, headers)
    assert (resp.status_code, resp.json()["check"]) == (401, "bad_signature")
    for text in (NEW, OLD, stranger, headers["webhook-signature"]):
        assert text not in resp.text


async def test_a_replayed_delivery_fires_once(gw: RunningGateway) -> None:
    body, headers = delivery(NEW)
    assert (await post(gw, body, headers)).status_code == 200
    again = await post(gw, body, headers)
    assert (again.status_code, again.json()["check"]) == (401, "replay")
    assert fired(gw, "webhook") == 1
    assert checked(gw, "replay") == 1


async def test_an_unknown_token_is_still_404_whatever_it_carries(gw: RunningGateway) -> None:
    resp = await post(gw, *delivery(NEW), token="not-the-token")
    assert (resp.status_code, resp.json()) == (404, {"error": "unknown webhook token"})


async def test_a_body_over_the_signature_bound_is_413_before_it_is_verified(gw: RunningGateway) -> None:
    resp = await post(gw, *delivery(NEW, body=b"x" * 5000))
    assert resp.status_code == 413
    assert sum(checked(gw, c) for c in ("ok", "bad_signature")) == 0


async def test_a_rotation_applied_in_place_keeps_the_old_secret_until_it_is_dropped(
    gw: RunningGateway, upstream: Upstream
) -> None:
    newer = whsec()
    await gw.reconfigure(signed_config(upstream.url, newer, NEW))
    assert (await post(gw, *delivery(NEW))).status_code == 200
    assert (await post(gw, *delivery(newer))).status_code == 200
    await gw.reconfigure(signed_config(upstream.url, newer))
    refused = await post(gw, *delivery(NEW))
    assert (refused.status_code, refused.json()["check"]) == (401, "bad_signature")
    assert (await post(gw, *delivery(newer))).status_code == 200


async def test_no_secret_signature_or_body_reaches_the_logs_or_metrics(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    body, headers = delivery(whsec(), body=b'{"card":"4242-4242"}')
    with caplog.at_level(logging.DEBUG):
        await post(gw, body, headers)
        await post(gw, *delivery(NEW))
    text = await metrics_text(gw)
    # The test's own HTTP client logs the URL it posts to; everything else logged is the gateway's.
    logged = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith(("httpx2", "httpcore2")))
    for secret_text in (NEW, OLD, headers["webhook-signature"], "4242-4242", TOKEN):
        assert secret_text not in logged
        assert secret_text not in text


# --- the route alone: what happens to a delivery id when the fire cannot go out ----------------------------------


class Flaky:
    """A fire that fails the first time (the bus is down), then works."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, uri: str) -> None:
        self.calls.append(uri)
        if len(self.calls) == 1:
            raise BusUnavailableError("the gateway cannot reach its bus")


async def test_a_delivery_whose_fire_failed_is_let_through_on_the_senders_retry() -> None:
    cfg = check.load(signed_config("http://u", NEW), environ={})
    index = webhooks.build_index(cfg.mcp.capabilities.resources)
    metrics = Metrics()
    fire = Flaky()
    route = webhook_route.WebhookRoute(
        index,
        fire,
        lambda: cfg.gateway.server,
        webhook_route.Counters(metrics.webhook_requests, metrics.webhook_signatures),
        _never,
        replays.Deliveries(None),
    )
    body, headers = delivery(NEW)
    transport = httpx2.ASGITransport(app=route)
    async with httpx2.AsyncClient(transport=transport, base_url="http://gw") as http:
        first = await http.post(f"/webhooks/resource-updated/{TOKEN}", content=body, headers=headers)
        retry = await http.post(f"/webhooks/resource-updated/{TOKEN}", content=body, headers=headers)
        replay = await http.post(f"/webhooks/resource-updated/{TOKEN}", content=body, headers=headers)
    assert [first.status_code, retry.status_code, replay.status_code] == [503, 200, 401]
    assert fire.calls == [URI, URI]


async def _never(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("only the webhook route is asked")


async def test_the_replay_record_forgets_an_id_after_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    seen = replays.Deliveries(None, clock=lambda: now[0])
    assert await seen.first(URI, "a", 600.0) is True
    assert await seen.first(URI, "a", 600.0) is False
    assert await seen.first("drive://other", "a", 600.0) is True  # an id is the sender's: unique per resource only
    now[0] = 601.0
    assert await seen.first(URI, "a", 600.0) is True
    assert len(seen) == 1


async def test_the_replay_record_is_bounded_and_counts_what_it_forgot_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replays, "MAX_REMEMBERED", 3)
    seen = replays.Deliveries(None, clock=lambda: 0.0)
    for n in range(5):
        assert await seen.first(URI, str(n), 600.0) is True
    assert (len(seen), seen.evicted) == (3, 2)
    assert await seen.first(URI, "4", 600.0) is False


async def test_headers_that_fail_are_refused_before_the_body_is_read(gw: RunningGateway) -> None:
    # Over the 4,096-byte bound: were the body read first, this would be a 413.
    body, headers = delivery(NEW, body=b"x" * 5000)
    resp = await post(gw, body, {**headers, "webhook-timestamp": "0"})
    assert (resp.status_code, resp.json()["check"]) == (401, "stale_timestamp")
    resp = await post(gw, body, {k: v for k, v in headers.items() if k != "webhook-id"})
    assert (resp.status_code, resp.json()["check"]) == (401, "missing_header")
