"""OpenTelemetry traces: one change followed end to end, and export switched on by the standard variables only.

In-process tests record the gateway's spans with an SDK provider set once for this process (the global provider
can be set only once); the export test runs the real entrypoint with OTEL_EXPORTER_OTLP_ENDPOINT pointing at an
OTLP/HTTP receiver on loopback, so the variable, the start-up call and the exporter are all the real ones.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping

import httpx2
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind

from mcpg_gateway import tracing
from mcpg_gateway import webhook_route as webhooks
from mcpg_gateway.fanout import delivery, running, watchers
from mcpg_gateway.strategies import poll
from mcpg_testing import BOUND_S
from mcpg_testing.clients import subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource, watched
from mcpg_testing.gateways import GatewayFactory
from mcpg_testing.upstream import Upstream

HOOK = "drive://folder/reports"
TOKEN = "tr4ce-me-n0t-8f2c1e"  # distinctive, so that any copy of it is found


class Recorder(SpanProcessor):
    """Every span that ends while it is open, and a way to wait (bounded) for the ones a test expects."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self.open = True
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()

    def on_end(self, span: ReadableSpan) -> None:
        if self.open:
            self.spans.append(span)
            self._loop.call_soon_threadsafe(self._changed.set)

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    async def wait_for(self, name: str, count: int = 1) -> list[ReadableSpan]:
        async with asyncio.timeout(BOUND_S):
            while len(self.named(name)) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.named(name)


@pytest.fixture(scope="module")
def provider() -> TracerProvider:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    installed = TracerProvider()
    tracing.record_with(installed)
    return installed


@pytest.fixture
async def spans(provider: TracerProvider) -> AsyncIterator[Recorder]:
    recorder = Recorder()
    provider.add_span_processor(recorder)  # a provider cannot drop a processor: this one is closed after
    yield recorder
    recorder.open = False


def parent_of(span: ReadableSpan) -> int | None:
    return int(span.parent.span_id) if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def assert_no_secret(recorded: list[ReadableSpan], secret: str) -> None:
    for span in recorded:
        assert secret not in span.name
        for key, value in (span.attributes or {}).items():
            assert secret not in str(value), (span.name, key)


async def test_a_webhook_fire_and_each_notification_form_one_trace(
    gateway_factory: GatewayFactory, spans: Recorder
) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN})))
    async with subscribed(gw.mcp_url, "legacy", HOOK) as legacy, subscribed(gw.mcp_url, "listen", HOOK) as listen:
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            resp = await http.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}", headers={"x-t": TOKEN})
        assert resp.status_code == 200
        assert await legacy.next_update() == HOOK
        assert await listen.next_update() == HOOK
        notifies = await spans.wait_for(delivery.NOTIFY_SPAN, 2)
    [hook] = spans.named(webhooks.SPAN)
    [fire] = spans.named(watchers.FIRE_SPAN)
    assert hook.kind == SpanKind.SERVER
    assert dict(hook.attributes or {}) == {
        "http.request.method": "POST",
        "http.route": "/webhooks/resource-updated/{token}",
        "http.response.status_code": 200,
        tracing.STRATEGY: "webhook",
        tracing.URI: HOOK,
        tracing.WATCH: "reports",
    }
    assert (parent_of(fire), trace_id(fire)) == (span_id(hook), trace_id(hook))
    assert dict(fire.attributes or {}) == {
        tracing.STRATEGY: "webhook",
        tracing.URI: HOOK,
        tracing.WATCH: "reports",
        tracing.SUBSCRIBERS: 2,
        tracing.NOTIFIED: 2,
    }
    assert {(parent_of(n), trace_id(n)) for n in notifies} == {(span_id(fire), trace_id(hook))}
    assert {(n.attributes or {}).get(tracing.SUBSCRIBER_KIND) for n in notifies} == {"session", "listen"}
    assert_no_secret(spans.spans, TOKEN)  # every span recorded, the MCP SDK's too


async def test_an_unknown_token_is_a_404_span_without_the_path(
    gateway_factory: GatewayFactory, spans: Recorder
) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "real"})))
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        assert (await http.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}")).status_code == 404
    [hook] = await spans.wait_for(webhooks.SPAN)
    assert (hook.attributes or {})["http.response.status_code"] == 404
    assert tracing.URI not in (hook.attributes or {})
    assert spans.named(watchers.FIRE_SPAN) == []
    assert_no_secret(spans.spans, TOKEN)


async def test_a_webhook_joins_the_senders_trace(gateway_factory: GatewayFactory, spans: Recorder) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN})))
    sender_trace, sender_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        headers = {"traceparent": f"00-{sender_trace}-{sender_span}-01"}
        assert (await http.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}", headers=headers)).status_code == 200
    [hook] = await spans.wait_for(webhooks.SPAN)
    assert (trace_id(hook), parent_of(hook)) == (int(sender_trace, 16), int(sender_span, 16))


async def test_a_poll_that_changes_is_a_read_a_fire_and_a_notification_in_one_trace(
    gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock, spans: Recorder
) -> None:
    upstream.set("/doc", '{"v": 1}')
    raw = gateway_config(resource("reports", HOOK, f"{upstream.url}/doc", {"type": "poll", "interval_ms": 10_000}))
    gw = await gateway_factory(raw, clock=clock)
    async with subscribed(gw.mcp_url, "legacy", HOOK) as sub:
        await clock.tick()  # a poll that finds no change
        upstream.set("/doc", '{"v": 2}')
        await clock.tick()
        assert await sub.next_update() == HOOK
        [notify] = await spans.wait_for(delivery.NOTIFY_SPAN)
    unchanged, changed = spans.named(running.POLL_SPAN)
    assert [(p.attributes or {})[tracing.CHANGED] for p in (unchanged, changed)] == [False, True]
    # Each poll is a trace of its own, not a child of the request that happened to start the watch.
    assert (parent_of(unchanged), parent_of(changed)) == (None, None)
    assert trace_id(unchanged) != trace_id(changed)
    assert (changed.attributes or {})[tracing.WATCH] == "reports"
    reads = {parent_of(r): r for r in spans.named(poll.READ_SPAN)}
    assert set(reads) >= {span_id(unchanged), span_id(changed)}  # the baseline read is a span of its own too
    [fire] = spans.named(watchers.FIRE_SPAN)
    assert (parent_of(fire), (fire.attributes or {})[tracing.NOTIFIED]) == (span_id(changed), 1)
    assert (parent_of(notify), trace_id(notify)) == (span_id(fire), trace_id(changed))


# --- export: on only when the standard variables say so --------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "exporting"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "gw"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_export_is_on_only_with_an_otlp_endpoint(environ: Mapping[str, str], exporting: bool) -> None:
    assert tracing.exporting(environ) is exporting
    if not exporting:
        assert tracing.provider(environ) is None


@pytest.mark.parametrize(("service", "named"), [(None, tracing.DEFAULT_SERVICE_NAME), ("gw-shop", "gw-shop")])
def test_the_service_is_named_by_otel_service_name_else_mcpg_gateway(
    monkeypatch: pytest.MonkeyPatch, service: str | None, named: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached: nothing is exported
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    if service is None:
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    else:
        monkeypatch.setenv("OTEL_SERVICE_NAME", service)
    built = tracing.provider(os.environ)
    assert built is not None
    try:
        assert built.resource.attributes["service.name"] == named
    finally:
        built.shutdown()


@pytest.mark.parametrize(
    ("variables", "kept"),
    [
        ({}, tracing.MAX_ATTRIBUTE_CHARS),
        ({"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "100"}, 100),  # a variable may lower the bound...
        ({"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "100"}, 100),
        ({"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "100000"}, tracing.MAX_ATTRIBUTE_CHARS),  # ...never lift it
        ({"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": ""}, tracing.MAX_ATTRIBUTE_CHARS),  # "" means no limit
    ],
)
def test_no_span_attribute_is_longer_than_a_served_uri_whatever_the_variables_say(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], kept: int
) -> None:
    # The MCP SDK's own spans carried the client's request id whole (`jsonrpc.request.id`), megabytes of it.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached: nothing is exported
    for name in ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    built = tracing.provider(os.environ)
    assert built is not None
    try:
        long_id, uri = "i" * 100_000, "drive://doc/" + "a" * (tracing.MAX_ATTRIBUTE_CHARS - 12)
        span = built.get_tracer("t").start_span("request", attributes={"jsonrpc.request.id": long_id, "uri": uri})
        assert isinstance(span, ReadableSpan)  # the SDK's span (the API's type has no attributes to read)
        # Never ended, so never exported: its attributes are what any processor would get.
        assert dict(span.attributes or {}) == {"jsonrpc.request.id": long_id[:kept], "uri": uri[:kept]}
    finally:
        built.shutdown()
