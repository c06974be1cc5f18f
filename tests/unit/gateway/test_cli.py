"""The `mcpg-gateway` process as a user runs it: exit 2 on bad config, serve the webhook example, stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import yaml
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcpg_gateway import __main__, process
from mcpg_gateway.gateway import Options
from mcpg_gateway.strategies import plugin
from mcpg_testing import BOUND_S
from mcpg_testing.clients import subscribed
from mcpg_testing.configs import ANONYMOUS_AUTH, gateway_config, resource, watched
from mcpg_testing.gateways import GatewayFactory
from mcpg_testing.upstream import Upstream

ROOT = Path(__file__).parents[3]
GATEWAY = [sys.executable, "-m", "mcpg_gateway"]
SERVING = re.compile(rb"serving MCP on [^:]+:(\d+), admin on [^:]+:(\d+)")


async def run_to_end(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *GATEWAY,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    async with asyncio.timeout(BOUND_S):
        out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def test_invalid_configuration_exits_2_with_one_line_per_problem_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "gw.yaml"
    bad.write_text(
        "mcp:\n  capabilities:\n    resources:\n"
        "      - {name: a, uri: 'x://a', backend: {kind: http, url: 'http://u'},\n"
        "         watch: {strategy: {type: poll, interval_ms: 0}}}\n"
        "    tools:\n      - {name: t, watch: {}}\n"
    )
    code, out = asyncio.run(run_to_end("--config", str(bad)))
    assert code == 2
    lines = out.strip().splitlines()
    assert lines[0] == f"mcpg-gateway: invalid configuration in {bad}:"
    assert lines[1] == "  mcp.capabilities.resources[0].watch.strategy.interval_ms: Input should be greater than 0"
    assert lines[2].startswith("  mcp.capabilities.tools[0]: tools do not take a watch block")
    assert len(lines) == 3


@pytest.mark.parametrize(
    ("document", "line"),
    [
        (
            "mcp:\n  capabilities:\n    resource_templates:\n"
            "      - {name: t, uri_template: 'x://{a}/{a}', backend: {kind: http, url: 'http://u/{a}'}}\n",
            "  mcp.capabilities.resource_templates[0].uri_template: repeats {a}: ",
        ),
        (
            "mcp:\n  capabilities:\n    resource_templates:\n"
            "      - {name: t, uri_template: 'x://{a}', backend: {kind: http, url: 'http://u/{b}'}}\n",
            "  mcp.capabilities.resource_templates[0].backend.url: names {b}, which uri_template does not define ",
        ),
        ("mcp: [capabilities]\n", "  mcp: Input should be a valid dictionary"),
        # Accepted once, then every webhook answered 500 (`renewBy` of an infinite lease), or the start crashed.
        (
            "gateway:\n  subscriptions: {idle_after_s: .inf}\n",
            "  gateway.subscriptions.idle_after_s: Input should be a finite number",
        ),
        (
            "gateway:\n  server: {session_idle_timeout_s: .inf}\n",
            "  gateway.server.session_idle_timeout_s: Input should be a finite number",
        ),
        # 9**7 strings from 300 bytes of anchors, which the start used to expand (775 MB for a larger one).
        (
            "mcp:\n  capabilities:\n    tools:\n      - {name: t, x: ["
            + ", ".join(
                [f"&a0 [{', '.join(['lol'] * 9)}]"] + [f"&a{i + 1} [{', '.join([f'*a{i}'] * 9)}]" for i in range(6)]
            )
            + "]}\n",
            "  {file}: holds more than 250000 values once its YAML aliases are expanded",
        ),
    ],
    ids=[
        "repeated-variable",
        "undefined-backend-variable",
        "mcp-not-a-mapping",
        "infinite-lease",
        "infinite-session-timeout",
        "alias-bomb",
    ],
)
def test_a_configuration_the_gateway_cannot_serve_exits_2_naming_the_field_without_a_traceback(
    tmp_path: Path, document: str, line: str
) -> None:
    bad = tmp_path / "gw.yaml"
    bad.write_text(document)
    # Loopback and free ports: were the configuration ever accepted, the gateway must not take 0.0.0.0:8080.
    code, out = asyncio.run(run_to_end("--config", str(bad), "--host", "127.0.0.1", "--port", "0", "--admin-port", "0"))
    assert "Traceback" not in out, out  # `out` holds stderr too (run_to_end merges them)
    assert code == 2
    lines = out.strip().splitlines()
    assert lines[0] == f"mcpg-gateway: invalid configuration in {bad}:"
    assert len(lines) == 2, out
    assert lines[1].startswith(line.replace("{file}", str(bad)))


def test_a_missing_environment_variable_stops_the_gateway_before_it_serves() -> None:
    code, out = asyncio.run(run_to_end("--config", str(ROOT / "examples/gateway/webhook.yaml")))
    assert code == 2
    assert "needs environment variable REPORTS_WEBHOOK_TOKEN, which is not set" in out


def test_following_a_configuration_secret_outside_a_cluster_exits_2_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump(gateway_config()))
    env = {"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""}
    code, out = asyncio.run(run_to_end("--config", str(config), "--config-secret", "mcpg-gateway-config", env=env))
    assert code == 2
    assert out.strip().splitlines() == [
        "mcpg-gateway: not in a Kubernetes pod with a service account: missing KUBERNETES_SERVICE_HOST, "
        "KUBERNETES_SERVICE_PORT, /var/run/secrets/kubernetes.io/serviceaccount/token, "
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt, /var/run/secrets/kubernetes.io/serviceaccount/namespace"
    ]


def test_a_plugin_kind_this_image_lacks_in_the_secret_it_follows_leaves_it_running_unready_saying_why(
    tmp_path: Path,
) -> None:
    """In a cluster a refused start serves nothing and waits for a configuration it accepts: a problem only the
    whole check finds (a plugin kind no installed plugin provides) must not stop the process once it is built."""
    config = tmp_path / "gw.yaml"
    document = gateway_config(watched("ghostly", "x://ghostly", {"type": "plugin", "kind": "ghost"}))
    config.write_text(yaml.safe_dump(document))
    args = __main__.parse_args(["--config", str(config), "--config-secret", "mcpg-gateway-config"])
    plugins = plugin.PluginRegistry({}, [])
    start = process._starting(args, plugins)
    gw = process._gateway(start, Options(config_file=config, config_secret=args.config_secret, plugins=plugins))
    said = gw.served.acknowledgement()
    assert said.serving is None
    assert said.refused is not None
    [problem] = said.refused.problems
    assert problem.path == "mcp.capabilities.resources[0].watch.strategy.kind"
    assert "ghost" in problem.message
    assert gw.unready_reason() is not None


def test_check_mode_validates_the_example_and_exits_0() -> None:
    code, out = asyncio.run(
        run_to_end(
            "--check", "--config", str(ROOT / "examples/gateway/webhook.yaml"), env={"REPORTS_WEBHOOK_TOKEN": "t"}
        )
    )
    assert (code, out.strip().splitlines()[-1]) == (
        0,
        f"{ROOT / 'examples/gateway/webhook.yaml'}: configuration is valid",
    )


@dataclass
class Proc:
    proc: asyncio.subprocess.Process
    port: int
    admin_port: int
    log: bytearray

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def webhook_example_gateway(tmp_path: Path) -> AsyncIterator[Proc]:
    """The webhook example, served by the real entrypoint on free loopback ports.

    The example configures no principals, so anonymous access is added explicitly: the gateway never assumes it.
    """
    raw = yaml.safe_load((ROOT / "examples/gateway/webhook.yaml").read_text())
    raw["gateway"]["auth"] = ANONYMOUS_AUTH
    config_file = tmp_path / "webhook.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "REPORTS_WEBHOOK_TOKEN": "t0k3n-from-env", "MCPG_ADMIN_TOKEN": "adm"}
    proc = await asyncio.create_subprocess_exec(
        *GATEWAY,
        "--config",
        str(config_file),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--admin-port",
        "0",
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None
    log = bytearray()
    async with asyncio.timeout(BOUND_S):
        while (m := SERVING.search(log)) is None:
            line = await proc.stderr.readline()
            assert line, f"gateway exited before serving: {log.decode()}"
            log += line
    reader = asyncio.create_task(_collect(proc, log))
    yield Proc(proc, int(m.group(1)), int(m.group(2)), log)
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
    reader.cancel()


async def _collect(proc: asyncio.subprocess.Process, log: bytearray) -> None:
    assert proc.stderr is not None
    while line := await proc.stderr.readline():
        log += line


@pytest.mark.parametrize("mode", ["legacy", "listen"])
async def test_the_webhook_example_notifies_a_subscribed_client(webhook_example_gateway: Proc, mode: str) -> None:
    gw = webhook_example_gateway
    async with subscribed(f"{gw.base}/mcp", mode, "drive://folder/reports") as sub:
        async with httpx2.AsyncClient() as http:
            resp = await http.post(f"{gw.base}/webhooks/resource-updated/t0k3n-from-env", content=b"")
        assert resp.json() == {"ok": True, "uri": "drive://folder/reports"}
        assert await sub.next_update() == "drive://folder/reports"
    assert b"t0k3n-from-env" not in gw.log


async def test_sigterm_answers_open_listen_streams_and_exits_0(webhook_example_gateway: Proc) -> None:
    gw = webhook_example_gateway
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{gw.base}/mcp", http_client=http)) as client,
        client.listen(resource_subscriptions=["drive://folder/reports"]) as stream,
    ):
        gw.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(BOUND_S):
            events = [event async for event in stream]  # ends cleanly only if the server answered the listen
    assert events == []
    async with asyncio.timeout(5):
        assert await gw.proc.wait() == 0
    assert b"gateway stopped" in gw.log


@pytest.mark.parametrize("flag", [[], ["--legacy"]], ids=["listen", "legacy"])
async def test_mcpg_subscribe_prints_each_notification_once(
    gateway_factory: GatewayFactory, upstream: Upstream, flag: list[str]
) -> None:
    upstream.set("/r", '{"n": 1}')
    raw = gateway_config(
        resource("a", "report://a", f"{upstream.url}/r", {"type": "webhook", "token": "ta"}),
        resource("b", "report://b", f"{upstream.url}/r", {"type": "webhook", "token": "tb"}),
    )
    gw = await gateway_factory(raw)
    cli = [sys.executable, "-m", "mcpg_gateway.subscribe_cli", gw.mcp_url, "report://a", "report://b", "--count", "2"]
    proc = await asyncio.create_subprocess_exec(*cli, *flag, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    async with asyncio.timeout(BOUND_S):
        while not (await proc.stdout.readline()).startswith((b"listening", b"subscribed")):
            pass
        async with httpx2.AsyncClient() as http:
            await http.post(f"{gw.base}/webhooks/resource-updated/ta")
            first = await proc.stdout.readline()
            await http.post(f"{gw.base}/webhooks/resource-updated/tb")
            second = await proc.stdout.readline()
        assert await proc.wait() == 0
    # A notification printed twice would show up as report://a in the second line.
    assert (first, second) == (
        b"notifications/resources/updated report://a\n",
        b"notifications/resources/updated report://b\n",
    )


async def test_accepted_connections_get_tcp_nodelay_so_small_writes_are_not_held_back(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    """Nagle plus delayed ACKs held every response and SSE event ~40 ms when the listening socket lacked proto."""
    import socket

    gw = await gateway_factory(gateway_config(resource("r", "x://r", f"{upstream.url}/r", {"type": "webhook"})))
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.addrs.port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(BOUND_S):
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        local = writer.get_extra_info("sockname")
        server_side = [
            t.get_extra_info("socket") for t in _server_transports() if t.get_extra_info("peername") == local
        ]
        assert server_side, "the server's side of the connection was not found"
        assert server_side[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        writer.close()
        await writer.wait_closed()


def _server_transports() -> list[asyncio.Transport]:
    """Every socket transport alive in this process (server and client sides both live on this loop)."""
    import gc

    return [o for o in gc.get_objects() if isinstance(o, asyncio.Transport) and o.get_extra_info("socket") is not None]


def test_the_log_level_is_taken_in_any_case_and_a_bad_one_from_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert __main__.parse_args(["--config", "gw.yaml", "--log-level", "debug"]).log_level == "DEBUG"
    monkeypatch.setenv("MCPG_LOG_LEVEL", "LOUD")
    with pytest.raises(SystemExit) as exited:
        __main__.parse_args(["--config", "gw.yaml"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "mcpg-gateway: --log-level: 'LOUD' is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL); "
        "see mcpg-gateway --help\n"
    )
