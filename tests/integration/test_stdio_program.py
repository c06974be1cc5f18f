"""`mcpg-gateway --config FILE --stdio` from `.venv-gateway`, launched by the SDK's stdio client as a desktop client
launches it, in both protocol eras: list, read, subscribe (resources/subscribe, or subscriptions/listen), and
`notifications/resources/updated` when a real loopback upstream changes under a poll watch.

stdio serves no HTTP port, so the change comes from a poll (webhooks need the port); the wait is bounded by the
poll floor plus the usual bound. The gateway's log goes to stderr, never into the protocol on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
import yaml
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpg_gateway.contract.config import POLL_FLOOR_MS
from mcpg_testing import BOUND_S, upstream
from mcpg_testing.configs import gateway_config, principal, resource
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv

__all__ = ["gateway_env"]  # a fixture, used by name

URI, PATH = "status://service", "/status.json"
CHANGE_BOUND_S = POLL_FLOOR_MS / 1000 + BOUND_S
"""The first poll after the change may be a whole floor away."""


@contextlib.asynccontextmanager
async def stdio_gateway(
    image: ImageEnv, tmp_path: Path, raw: dict[str, Any], mode: str, updates: asyncio.Queue[str]
) -> AsyncIterator[Client]:
    """The SDK's client on `mcpg-gateway --stdio --principal desk` (a process it starts and stops)."""
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump(raw))
    argv = ["--config", str(config), "--stdio", "--principal", "desk"]
    params = StdioServerParameters(command=str(image.bin_dir / "mcpg-gateway"), args=argv, env=image.environ())

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            await updates.put(str(message.params.uri))

    with (tmp_path / "gateway.stderr").open("w") as errlog:
        transport = stdio_client(params, errlog=errlog)
        client_mode = "legacy" if mode == "legacy" else "auto"
        handler = on_message if mode == "legacy" else None  # a listen stream's events come through `listen`
        async with Client(transport, mode=client_mode, message_handler=handler) as client:
            yield client


async def listen(client: Client, updates: asyncio.Queue[str], ready: asyncio.Event) -> None:
    async with client.listen(resource_subscriptions=[URI]) as stream:
        ready.set()
        async for event in stream:
            if (uri := getattr(event, "uri", None)) is not None:
                await updates.put(str(uri))


@pytest.mark.parametrize(("mode", "protocol"), [("legacy", "2025-11-25"), ("listen", "2026-07-28")])
async def test_a_stdio_client_lists_reads_subscribes_and_is_told_of_a_change(
    gateway_env: ImageEnv, tmp_path: Path, mode: str, protocol: str
) -> None:
    updates: asyncio.Queue[str] = asyncio.Queue()
    async with upstream.serve() as up:
        up.set(PATH, '{"status": "green"}')
        watched = resource("status", URI, f"{up.url}{PATH}", {"type": "poll", "interval_ms": POLL_FLOOR_MS})
        raw = gateway_config(watched, auth={"principals": [principal("a-token-stdio-never-needs", "desk")]})
        async with stdio_gateway(gateway_env, tmp_path, raw, mode, updates) as client:
            assert client.protocol_version == protocol
            listed = await client.list_resources()
            assert [str(r.uri) for r in listed.resources] == [URI]
            read = await client.read_resource(URI)
            assert [getattr(c, "text", None) for c in read.contents] == ['{"status": "green"}']

            pump: asyncio.Task[None] | None = None
            if mode == "legacy":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.session.subscribe_resource(URI)
            else:
                acknowledged = asyncio.Event()
                pump = asyncio.create_task(listen(client, updates, acknowledged))
                async with asyncio.timeout(BOUND_S):
                    await acknowledged.wait()
            try:
                up.set(PATH, '{"status": "amber"}')

                async with asyncio.timeout(CHANGE_BOUND_S):
                    assert await updates.get() == URI
            finally:
                if pump is not None:
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump
            reread = await client.read_resource(URI)
            assert [getattr(c, "text", None) for c in reread.contents] == ['{"status": "amber"}']

    log = (tmp_path / "gateway.stderr").read_text()
    assert "gateway serving MCP on stdio as principal 'desk'" in log


def test_stdio_without_a_principal_or_anonymous_access_is_one_line_naming_the_choices(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    config = tmp_path / "gw.yaml"
    raw = gateway_config(
        resource("status", URI, "http://127.0.0.1:9/unused"), auth={"principals": [principal("t", "desk")]}
    )
    config.write_text(yaml.safe_dump(raw))

    done = subprocess.run(
        gateway_env.command("mcpg-gateway", "--config", str(config), "--stdio"),
        capture_output=True,
        text=True,
        timeout=60,
        env=gateway_env.environ(),
        stdin=subprocess.DEVNULL,
        check=False,
    )

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1] == (
        "mcpg-gateway: --stdio acts as one principal: pass --principal NAME (desk), or enable gateway.auth.anonymous"
    )
