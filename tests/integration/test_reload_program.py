"""`mcpg-gateway --config FILE` from `.venv-gateway` applies a new configuration in place, as a user runs it: when the
file changes, and on SIGHUP. A subscriber of each era connected before the change keeps its session or stream and is
told afterwards; a file the gateway refuses leaves what it serves in place and is logged with its problem; the
acknowledgement on the admin port says which configuration the process serves.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx2
import yaml

from mcpg_gateway.contract import acknowledgement, digests
from mcpg_testing import BOUND_S
from mcpg_testing.clients import ERAS, subscribed
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv
from mcpg_testing.programs import GatewayProcess, gateway

__all__ = ["gateway_env"]  # a fixture, used by name

HOOK, ADDED = "drive://folder/reports", "drive://folder/added"


def config(token: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return gateway_config(watched("reports", HOOK, {"type": "webhook", "token": token}), *extra)


async def served(gw: GatewayProcess, raw: dict[str, Any]) -> acknowledgement.Acknowledgement:
    """The acknowledgement once the process serves `raw` (polled on the admin port, bounded)."""
    wanted = digests.document(raw)
    async with asyncio.timeout(BOUND_S), httpx2.AsyncClient() as http:
        while True:
            ack = acknowledgement.Acknowledgement.model_validate(
                (await http.get(f"{gw.admin}{acknowledgement.PATH}")).json()
            )
            if ack.serving is not None and ack.serving.digest == wanted:
                return ack
            await asyncio.sleep(0.05)  # the next look at the admin port; bounded above


async def post(gw: GatewayProcess, token: str) -> int:
    async with httpx2.AsyncClient() as http:
        return (await http.post(f"{gw.base}/webhooks/resource-updated/{token}")).status_code


@ERAS
async def test_an_edited_file_is_applied_in_place_and_its_subscriber_is_told_on_the_same_stream(
    gateway_env: ImageEnv, tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config("tok-1")))
    with gateway(gateway_env, path) as gw:
        async with subscribed(gw.mcp_url, mode, HOOK) as sub:
            later = config("tok-2", watched("added", ADDED, {"type": "webhook", "token": "tok-added"}))
            path.write_text(yaml.safe_dump(later))
            ack = await served(gw, later)
            assert ack.serving is not None
            assert ack.serving.source == "file"
            assert (await post(gw, "tok-1"), await post(gw, "tok-2")) == (404, 200)
            assert await sub.next_update() == HOOK
        gw.program.wait_for("configuration " + digests.document(later)[:12] + " applied")


async def test_sighup_reads_the_file_again_and_a_refused_one_leaves_the_served_one_in_place(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    path = tmp_path / "gateway.yaml"
    first = config("tok-1")
    path.write_text(yaml.safe_dump(first))
    with gateway(gateway_env, path) as gw:
        bad = config("tok-2")
        bad["mcp"]["capabilities"]["resources"][0]["watch"]["strategy"]["type"] = "no-such-strategy"
        path.write_text(yaml.safe_dump(bad))
        gw.program.wait_for("refused; still serving " + digests.document(first)[:12])
        assert await post(gw, "tok-1") == 200
        # The same size and time as the file before: only the hang-up can make the process read it.
        good = config("tok-3")
        stamp = os.stat(path)
        path.write_text(yaml.safe_dump(good).ljust(stamp.st_size))
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        os.kill(gw.program.proc.pid, signal.SIGHUP)
        gw.program.wait_for("after SIGHUP")
        assert (await served(gw, yaml.safe_load(path.read_text()))).refused is None
        assert await post(gw, "tok-3") == 200
