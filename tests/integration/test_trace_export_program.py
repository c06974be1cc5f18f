"""Trace export as the gateway image ships it: `mcpg-gateway` from `.venv-gateway`, its OTLP exporter turned on by
the standard `OTEL_EXPORTER_OTLP_ENDPOINT`, posting to a real OTLP/HTTP receiver on loopback.

The spans themselves (their parents, their attributes) are the unit tier's (tests/unit/gateway/test_tracing.py);
this proves the shipped install exports them, and that no export body holds the webhook token.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import yaml
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from mcpg_gateway import tracing
from mcpg_gateway import webhook_route as webhooks
from mcpg_gateway.fanout import watchers
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv

__all__ = ["gateway_env"]  # a fixture, used by name

HOOK = "drive://folder/reports"
TOKEN = "tr4ce-me-n0t-8f2c1e"  # distinctive, so that any copy of it is found
SERVING = re.compile(rb"serving MCP on [^:]+:(\d+), admin on [^:]+:(\d+)")


class Receiver:
    """An OTLP/HTTP traces endpoint on loopback: `POST /v1/traces` with an ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: dict[str, dict[str, object]] = {}
        self.services: set[str] = set()
        self.arrived = asyncio.Event()

    async def traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append(body)
        export = ExportTraceServiceRequest.FromString(body)
        for batch in export.resource_spans:
            attributes = {a.key: a.value.string_value for a in batch.resource.attributes}
            self.services.add(attributes.get("service.name", ""))
            for scope in batch.scope_spans:
                for span in scope.spans:
                    self.spans[span.name] = {a.key: a.value for a in span.attributes}
        if {webhooks.SPAN, watchers.FIRE_SPAN} <= set(self.spans):
            self.arrived.set()
        return web.Response(content_type="application/x-protobuf", body=b"")


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    got = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", got.traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield got, f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
def webhook_config(tmp_path: Path) -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN}))))
    return path


async def test_the_otlp_endpoint_variable_turns_export_on_and_the_spans_arrive(
    gateway_env: ImageEnv, receiver: tuple[Receiver, str], webhook_config: Path
) -> None:
    got, endpoint = receiver
    env = {k: v for k, v in gateway_env.environ().items() if not k.startswith("OTEL_")}
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}  # standard: batch each 50 ms
    argv = ["--config", str(webhook_config), "--host", "127.0.0.1", "--port", "0", "--admin-port", "0"]
    proc = await asyncio.create_subprocess_exec(
        *gateway_env.command("mcpg-gateway", *argv), stderr=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stderr is not None
    try:
        log = b""
        async with asyncio.timeout(BOUND_S):
            while (serving := SERVING.search(log)) is None:
                line = await proc.stderr.readline()
                assert line, f"gateway exited before serving: {log.decode()}"
                log += line
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            url = f"http://127.0.0.1:{int(serving.group(1))}/webhooks/resource-updated/{TOKEN}"
            assert (await http.post(url)).status_code == 200
        async with asyncio.timeout(BOUND_S):
            await got.arrived.wait()
    finally:
        proc.kill()
        await proc.wait()
    assert got.services == {tracing.DEFAULT_SERVICE_NAME}
    assert got.spans[watchers.FIRE_SPAN][tracing.URI].string_value == HOOK  # type: ignore[attr-defined]
    assert not any(TOKEN.encode() in body for body in got.bodies)
