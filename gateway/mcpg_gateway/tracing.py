"""OpenTelemetry traces: the provider, installed at start-up only when an OTLP endpoint is configured, and the spans.

One change can be followed end to end: the webhook request, the fire it causes (its child), and each
notification sent for that fire (children of the fire, though a subscriber's own task sends them later: the
outbox carries the fire's context). A poll is a span too: its read, whether it changed, and the fire when it did.
The MCP SDK's own spans (one per request it serves) go to the same provider.

Attributes are a strategy, a resource URI, a watch name, a count or a result word: never a token, a header value
or a webhook path (the path holds the token). No attribute value of any span, the SDK's included (which carry the
client's request id and method), is longer than `MAX_ATTRIBUTE_CHARS`. Unset, nothing is installed: the spans below
go to the API's no-op tracer and nothing is exported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from mcpg_gateway.contract import uris

if TYPE_CHECKING:  # the SDK and its exporter are imported only where traces are exported (`provider`)
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

DEFAULT_SERVICE_NAME = "mcpg-gateway"
"""`service.name` unless OTEL_SERVICE_NAME (or `service.name` in OTEL_RESOURCE_ATTRIBUTES) says otherwise."""
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
MAX_ATTRIBUTE_CHARS = uris.MAX_URI_CHARS
"""The longest attribute value a span keeps (longer ones are cut): a served URI stays whole."""

STRATEGY = "mcpg.strategy"
URI = "mcpg.resource.uri"
WATCH = "mcpg.watch.name"
SUBSCRIBERS = "mcpg.subscribers"
"""How many subscribers the fired URI had."""
NOTIFIED = "mcpg.subscribers.notified"
"""How many were offered the notification (the notification filter admitted them and they were open)."""
CHANGED = "mcpg.poll.changed"
RESULT = "mcpg.result"
"""Set on a notification that was not sent: `dropped` (its subscriber's stream did not accept it in time)."""
SUBSCRIBER_KIND = "mcpg.subscriber.kind"

Parent = otel_context.Context
"""Where a span started later (a notification's, in its subscriber's task) belongs: the context of its fire."""

_recording = False
"""Set by `record_with`: a provider is installed."""
_tracer = trace.get_tracer("mcpg_gateway")
"""A proxy: it follows the provider `install` sets, and is a no-op until then (and for good when none is)."""


def exporting(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint, and the SDK and traces exporter not turned off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def provider(environ: Mapping[str, str]) -> TracerProvider | None:
    """A provider batching spans to the OTLP/HTTP endpoint the environment names, or None when it names none.

    `environ` decides whether; the SDK and the exporter read the standard variables themselves, from the
    process's environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_*, OTEL_TRACES_SAMPLER,
    OTEL_BSP_*), so the gateway's behaviour is the SDK's documented one.
    """
    if not exporting(environ):
        return None
    # Imported here: the SDK and the OTLP exporter (protobuf, an HTTP client) are about 4 MB of every gateway's
    # memory, and most gateways export no traces.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    built = TracerProvider(resource=resource, span_limits=span_limits())
    built.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return built


def span_limits() -> SpanLimits:
    """The SDK's span limits from the standard variables (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT and the others), with
    attribute values held to `MAX_ATTRIBUTE_CHARS`: a variable may lower that bound, never lift it."""
    from opentelemetry.sdk.trace import SpanLimits

    configured = SpanLimits()
    return SpanLimits(
        max_attribute_length=_at_most(configured.max_attribute_length),
        max_span_attribute_length=_at_most(configured.max_span_attribute_length),
    )


def _at_most(length: int | None) -> int:
    return MAX_ATTRIBUTE_CHARS if length is None else min(length, MAX_ATTRIBUTE_CHARS)


def install(environ: Mapping[str, str] = os.environ) -> bool:
    """Called once at start-up: set the global provider if the environment asks for traces. True if it did."""
    built = provider(environ)
    if built is not None:
        record_with(built)  # flushed and shut down at exit by the SDK's own atexit hook
    return built is not None


def record_with(installed: trace.TracerProvider) -> None:
    """Make `installed` the global provider (once per process, as the API allows): spans are recorded from now on."""
    global _recording
    trace.set_tracer_provider(installed)
    _recording = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def span(
    name: str,
    attributes: Mapping[str, AttributeValue],
    kind: SpanKind = SpanKind.INTERNAL,
    parent: Parent | None = None,
) -> AbstractContextManager[Span]:
    """A span made current for the block: a child of `parent`, or else of the current span.

    With no provider installed this is a shared null context: the API's own no-op path costs about 10 us a span
    (context attach and detach), three or more on every webhook. An error leaving the block marks the span
    failed by the error's type alone, never its message (which can carry upstream text): the SDK's own
    recording, message and traceback included, is turned off."""
    if not enabled():
        return _OFF
    return _recorded(name, attributes, kind, parent)


def enabled() -> bool:
    """Whether spans are recorded: a provider is installed (`record_with`). The fan-out asks before it builds a
    span's attributes, and every poll asks twice: a flag, since the API's own answer reads the environment."""
    return _recording


_OFF = nullcontext(trace.INVALID_SPAN)


@contextmanager
def _recorded(
    name: str, attributes: Mapping[str, AttributeValue], kind: SpanKind, parent: Parent | None
) -> Iterator[Span]:
    with _tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except Exception as e:
            current.set_status(Status(StatusCode.ERROR, type(e).__name__))
            raise


def current() -> Parent:
    """The context now: handed to work that will run later in another task (the fan-out's outbox)."""
    return otel_context.get_current()


def remote_parent(headers: Mapping[bytes, bytes]) -> Parent | None:
    """A sender's W3C trace context (`traceparent`), so a webhook joins the sender's trace; None without one."""
    traceparent = headers.get(b"traceparent")
    if traceparent is None:
        return None
    carrier = {"traceparent": traceparent.decode("latin-1")}
    if (tracestate := headers.get(b"tracestate")) is not None:
        carrier["tracestate"] = tracestate.decode("latin-1")
    return propagate.extract(carrier)
