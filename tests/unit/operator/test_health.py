"""The operator's own endpoints, over a real loopback socket: probes a standby answers, and Prometheus text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from mcpg_operator import health, metrics


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics.Metrics(registry)
    return registry


@pytest.fixture
def ready() -> list[bool]:
    return [True]


@pytest.fixture
async def port(registry: CollectorRegistry, ready: list[bool]) -> AsyncIterator[int]:
    server = await health.serve("127.0.0.1", 0, health.routes(registry, lambda: ready[0]))
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


async def ask(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        raw = await reader.read()  # the server closes the connection after its answer
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    assert int(headers["Content-Length"]) == len(body)
    return int(status_line.split()[1]), headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: operator\r\nUser-Agent: kube-probe/1.35\r\n\r\n".encode()


async def test_healthz_answers_while_the_loop_runs(port: int) -> None:
    assert (await ask(port, get("/healthz")))[0] == 200


async def test_readyz_turns_unready_once_the_process_is_stopping(port: int, ready: list[bool]) -> None:
    assert (await ask(port, get("/readyz")))[0] == 200
    ready[0] = False
    assert (await ask(port, get("/readyz?verbose")))[0] == 503


async def test_metrics_is_prometheus_text_with_the_controller_runtime_families(port: int) -> None:
    status, headers, body = await ask(port, get("/metrics"))
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=")
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {"controller_runtime_reconcile", "controller_runtime_reconcile_time_seconds"} <= names


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        pytest.param(get("/nowhere"), 404, id="unknown path"),
        pytest.param(b"POST /metrics HTTP/1.1\r\n\r\n", 405, id="not a GET"),
        pytest.param(b"GET metrics HTTP/1.1\r\n\r\n", 400, id="not a path"),
    ],
)
async def test_anything_else_is_refused_with_its_status(port: int, request_: bytes, status: int) -> None:
    assert (await ask(port, request_))[0] == status


async def test_a_client_that_hangs_up_early_does_not_stop_the_server(port: int) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /hea")
    writer.close()
    assert (await ask(port, get("/healthz")))[0] == 200
