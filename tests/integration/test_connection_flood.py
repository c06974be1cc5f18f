"""The probe that found issue 15, replayed against the shipped program: 1,050 idle connections, no credentials.

Under a soft RLIMIT_NOFILE of 1024 the gateway ran out of descriptors: every accept failed, asyncio logged each
failure with a traceback (60 MB in 10 s), and the webhook route, /healthz and the admin API timed out. Here the
same flood meets `mcpg-gateway` from its image env, with the open-files limit set for the child alone: once
with the hard limit at 1024 too (the connection cap must fit under it), once with room to raise the soft limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcpg_testing import BOUND_S, configs, programs
from mcpg_testing.images import ImageEnv

pytest_plugins = ["mcpg_testing.fixtures"]  # gateway_env: the gateway image's install

FLOOD = 1050
TOKEN, URI, ADMIN = "flood-hook", "drive://folder/reports", "flood-admin"
LIMITS = {"soft-and-hard-1024": "1024:1024", "soft-1024-hard-4096": "1024:4096"}
QUIET_LINES = 10
"""Lines the program may say from the flood's start to its stop: a stop's own lines and a rate-limited warning."""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    raw = configs.gateway_config(configs.watched("reports", URI, {"type": "webhook", "token": TOKEN}))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _room_for(needed: int) -> None:
    """This test process holds the flood's client ends: its own soft limit must cover them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


@contextlib.asynccontextmanager
async def idle_connections(port: int, count: int) -> AsyncIterator[None]:
    """`count` TCP connections that send nothing, held open until the block ends (the kernel accepts them)."""
    _room_for(count + 256)
    writers = []
    try:
        async with asyncio.timeout(BOUND_S):
            for _ in range(count):
                writers.append((await asyncio.open_connection("127.0.0.1", port))[1])
        yield
    finally:
        for writer in writers:
            writer.close()


def samples(text: str, name: str) -> dict[str, float]:
    """The samples of metric `name` in a /metrics text, by their `port` label."""
    return {
        s.labels.get("port", ""): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


@pytest.mark.parametrize("nofile", LIMITS.values(), ids=LIMITS.keys())
async def test_1050_idle_connections_leave_the_webhook_health_and_admin_api_answering_and_the_log_quiet(
    gateway_env: ImageEnv, config: Path, tmp_path: Path, nofile: str
) -> None:
    env = {"MCPG_ADMIN_TOKEN": ADMIN}
    with programs.gateway(gateway_env, config, env, cwd=tmp_path, nofile=nofile) as gw:
        before = len(gw.program.output())
        async with idle_connections(gw.port, FLOOD), httpx2.AsyncClient(timeout=BOUND_S) as http:
            hook = await http.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}")
            health = await http.get(f"{gw.base}/healthz")
            watches = await http.get(f"{gw.admin}/admin/v1/watches", headers=configs.bearer(ADMIN))
            metrics = (await http.get(f"{gw.admin}/metrics")).text
        gw.program.proc.terminate()
        gw.program.wait_for("gateway stopped", timeout=programs.STOP_S)
        said = gw.program.seen[before:]

    assert (hook.status_code, health.status_code, watches.status_code) == (200, 200, 200)
    assert watches.json()["watches"] == []  # nobody subscribed: the admin API answered, with its real view
    caps, open_now = samples(metrics, "mcpg_connections_cap"), samples(metrics, "mcpg_connections_open")
    assert open_now["public"] <= caps["public"]
    assert caps["public"] + caps["admin"] < 1024 if nofile == "1024:1024" else caps["public"] >= FLOOD
    assert len(said) <= QUIET_LINES, "\n".join(said[:40])
