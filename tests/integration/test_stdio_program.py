"""`mcpg-gateway --config FILE --stdio` from `.venv-gateway`, launched by the SDK's stdio client as a desktop client
launches it, in both protocol eras: list, read, subscribe (resources/subscribe, or subscriptions/listen), and
`notifications/resources/updated` when a real loopback upstream changes under a poll watch.

stdio serves no HTTP port, so the change comes from a poll (webhooks need the port); the wait is bounded by the
poll floor plus the usual bound. The gateway's log goes to stderr, never into the protocol on stdout. Stopped with
SIGTERM while its client keeps stdin open, it answers the client's listen stream and exits within the bound; a line
that is not JSON-RPC is answered with the JSON-RPC error, and the session carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import yaml
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.message import SessionMessage

from mcpg_gateway.contract.config import POLL_FLOOR_MS
from mcpg_testing import BOUND_S, upstream
from mcpg_testing.configs import gateway_config, principal, resource, watched
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


# --- stopping, and lines that are not JSON-RPC ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def stdio_process(image: ImageEnv, tmp_path: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """`mcpg-gateway --stdio` as a process this test holds the pipes of (the SDK's client hides its process)."""
    config = tmp_path / "gw.yaml"
    raw = gateway_config(
        watched("hook", URI, {"type": "webhook", "token": "tok"}), auth={"principals": [principal("t", "desk")]}
    )
    config.write_text(yaml.safe_dump(raw))
    with (tmp_path / "gateway.stderr").open("w") as errlog:
        proc = await asyncio.create_subprocess_exec(
            *image.command("mcpg-gateway", "--config", str(config), "--stdio", "--principal", "desk"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
            env=image.environ(),
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def piped(proc: asyncio.subprocess.Process) -> AsyncIterator[tuple[Any, Any]]:
    """An SDK client transport over `proc`'s stdin and stdout, framed as the SDK's stdio client frames."""
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None
    assert stdout is not None
    incoming_sender, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    outgoing, outgoing_receiver = anyio.create_memory_object_stream[SessionMessage](16)

    async def pump_in() -> None:
        async with incoming_sender:
            while line := await stdout.readline():
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                await incoming_sender.send(SessionMessage(message))

    async def pump_out() -> None:
        async with outgoing_receiver:
            async for message in outgoing_receiver:
                stdin.write(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                with contextlib.suppress(ConnectionError):  # the process may be gone already
                    await stdin.drain()

    pumps = [asyncio.create_task(pump_in()), asyncio.create_task(pump_out())]
    try:
        yield incoming, outgoing
    finally:
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


async def test_sigterm_with_stdin_still_open_answers_the_listen_stream_and_ends_the_process(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    async with (
        stdio_process(gateway_env, tmp_path) as proc,
        Client(piped(proc)) as client,
        client.listen(resource_subscriptions=[URI]) as stream,
    ):
        proc.send_signal(signal.SIGTERM)  # stdin stays open: this test never closes it
        async with asyncio.timeout(BOUND_S):
            events = [event async for event in stream]  # ends cleanly only if the gateway answered the listen
        assert events == []
        async with asyncio.timeout(BOUND_S):
            assert await proc.wait() == 0
    assert "gateway stopped" in (tmp_path / "gateway.stderr").read_text()


async def exchange(proc: asyncio.subprocess.Process, line: bytes) -> dict[str, Any]:
    """Write one line to the gateway; its next line of answer, decoded."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(line + b"\n")
    await proc.stdin.drain()
    async with asyncio.timeout(BOUND_S):
        answer: dict[str, Any] = json.loads(await proc.stdout.readline())
    return answer


INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "by-hand", "version": "1"}}


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}).encode()


async def test_a_line_that_is_not_json_rpc_is_answered_with_its_error_and_the_session_carries_on(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    async with stdio_process(gateway_env, tmp_path) as proc:
        assert await exchange(proc, b'{"jsonrpc": "2.0", "id": 1, "method": "initi') == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error: the line is not JSON"},
        }
        assert (await exchange(proc, request(1, "initialize", INITIALIZE)))["result"]["protocolVersion"] == "2025-11-25"
        assert proc.stdin is not None
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        invalid = await exchange(proc, b'{"jsonrpc": "2.0", "id": 2}')
        assert (invalid["id"], invalid["error"]["code"]) == (2, -32600)
        listed = await exchange(proc, request(3, "resources/list"))
        assert (listed["id"], [r["uri"] for r in listed["result"]["resources"]]) == (3, [URI])
