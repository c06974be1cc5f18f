"""The installed `mcpg-subscribe` (from `.venv-gateway`) against the installed `mcpg-gateway` on loopback, as a
newcomer meets them: each expected failure is one line on stderr with its own exit status and no traceback, and
the token (given or from MCPG_TOKEN) is never printed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml

from mcpg_gateway.contract.command_line import Exit
from mcpg_gateway.subscribe_client import PING_S
from mcpg_testing import BOUND_S, programs
from mcpg_testing.configs import gateway_config, principal, watched
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv
from mcpg_testing.processes import free_ports

__all__ = ["gateway_env"]  # a fixture, used by name

TOKEN, OTHER, HOOK = "sub-program-token-8c1d", "not-the-token", "sub-program-hook"
URI = "report://daily"


@pytest.fixture
def gateway(gateway_env: ImageEnv, tmp_path: Path) -> Iterator[programs.GatewayProcess]:
    cfg = gateway_config(
        watched("daily", URI, {"type": "webhook", "token": HOOK}), auth={"principals": [principal(TOKEN, "me")]}
    )
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with programs.gateway(gateway_env, path, cwd=tmp_path) as running:
        yield running


def subscribe_to_end(image: ImageEnv, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = image.environ(**env)
    if "MCPG_TOKEN" not in env:
        environ.pop("MCPG_TOKEN", None)  # the developer's own must not change what the test sees
    return subprocess.run(
        image.command("mcpg-subscribe", *argv), capture_output=True, text=True, timeout=60, env=environ, check=False
    )


def assert_one_line(done: subprocess.CompletedProcess[str], status: Exit, line: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert (done.returncode, done.stderr) == (status, f"mcpg-subscribe: {line}\n")


def test_no_token_exits_5_saying_how_to_pass_one(gateway_env: ImageEnv, gateway: programs.GatewayProcess) -> None:
    done = subscribe_to_end(gateway_env, gateway.mcp_url, URI)

    assert_one_line(done, Exit.UNAUTHORIZED, "the gateway requires a token (401): pass --token or set MCPG_TOKEN")


def test_a_wrong_token_exits_5_without_printing_it(gateway_env: ImageEnv, gateway: programs.GatewayProcess) -> None:
    done = subscribe_to_end(gateway_env, gateway.mcp_url, URI, "--token", OTHER)

    assert_one_line(done, Exit.UNAUTHORIZED, "the gateway refused the token (401): pass --token or set MCPG_TOKEN")
    assert OTHER not in done.stdout + done.stderr


def test_a_token_from_the_environment_subscribes_and_prints_the_change(
    gateway_env: ImageEnv, gateway: programs.GatewayProcess
) -> None:
    argv = gateway_env.command("mcpg-subscribe", gateway.mcp_url, URI, "--count", "1")
    with programs.Program(argv, gateway_env.environ(MCPG_TOKEN=TOKEN)) as client:
        client.wait_for("listening (subscriptions/listen) on report://daily")

        posted = httpx2.post(f"{gateway.base}/webhooks/resource-updated/{HOOK}", timeout=BOUND_S)

        assert posted.status_code == 200
        client.wait_for(f"notifications/resources/updated {URI}")
        assert client.proc.wait(timeout=BOUND_S) == Exit.OK
        assert TOKEN not in "\n".join(client.output())


def test_a_wrong_port_exits_4_naming_the_url(gateway_env: ImageEnv) -> None:
    [port] = free_ports(1)
    url = f"http://127.0.0.1:{port}/mcp"

    done = subscribe_to_end(gateway_env, url, URI, "--token", TOKEN, "--connect-timeout", "0")

    assert_one_line(
        done, Exit.UNREACHABLE, f"cannot connect to {url}: connection refused; is the gateway up on that port?"
    )


@pytest.mark.parametrize("legacy", [[], ["--legacy"]], ids=["listen", "legacy"])
def test_an_unknown_uri_exits_10_with_the_json_rpc_error(
    gateway_env: ImageEnv, gateway: programs.GatewayProcess, legacy: list[str]
) -> None:
    done = subscribe_to_end(gateway_env, gateway.mcp_url, "report://nope", *legacy, MCPG_TOKEN=TOKEN)

    assert_one_line(
        done, Exit.REFUSED, "the gateway refused the request: unknown resource: report://nope (JSON-RPC error -32602)"
    )


@pytest.mark.parametrize(
    ("legacy", "subscribed"),
    [([], "listening (subscriptions/listen)"), (["--legacy"], "subscribed (resources/subscribe)")],
    ids=["listen", "legacy"],
)
def test_a_session_the_gateway_ends_exits_9(
    gateway_env: ImageEnv, gateway: programs.GatewayProcess, legacy: list[str], subscribed: str
) -> None:
    argv = gateway_env.command("mcpg-subscribe", gateway.mcp_url, URI, *legacy)
    with programs.Program(argv, gateway_env.environ(MCPG_TOKEN=TOKEN)) as client:  # stdout and stderr, merged
        client.wait_for(subscribed)

        gateway.program.stop()  # SIGTERM: listen streams are answered; a legacy session's next ping fails

        line = client.wait_for("mcpg-subscribe:", timeout=PING_S + BOUND_S)
        assert client.proc.wait(timeout=BOUND_S) == Exit.ENDED
        output = client.output()
    assert (
        line
        == f"mcpg-subscribe: the gateway at {gateway.mcp_url} ended the session; run mcpg-subscribe again to resume"
    )
    assert not any("Traceback" in said for said in output), output
