"""The installed `mcpg-gateway` and `mcpg-subscribe` (from `.venv-gateway`) fail as a newcomer should meet them:
each class of failure (a bad value, a port in use, an address that cannot be bound, a URL without its scheme, a
gateway that is not there) is one line on stderr naming the flag, the port or the URL, with the status of its
class (`command_line.Exit`) and no traceback. And a client started before its gateway waits for it.

The gateway runs at --log-level WARNING with a principal configured, so nothing else is on its stderr.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml

from mcpg_gateway.contract.command_line import Exit
from mcpg_testing import BOUND_S, processes, programs
from mcpg_testing.configs import gateway_config, principal, watched
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv
from mcpg_testing.processes import free_ports

__all__ = ["gateway_env"]  # a fixture, used by name

TOKEN, HOOK, URI = "cli-program-token-5e2b", "cli-program-hook", "report://daily"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = gateway_config(
        watched("daily", URI, {"type": "webhook", "token": HOOK}), auth={"principals": [principal(TOKEN, "me")]}
    )
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on for the test's length."""
    with processes.taken_port() as port:
        yield port


def run(image: ImageEnv, *argv: str) -> subprocess.CompletedProcess[str]:
    environ = image.environ()
    environ.pop("MCPG_TOKEN", None)
    return subprocess.run(image.command(*argv), capture_output=True, text=True, timeout=60, env=environ, check=False)


def gateway(image: ImageEnv, config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`mcpg-gateway` on loopback, ports chosen by the kernel unless `flags` say otherwise (argparse: last wins)."""
    base = ["--config", str(config), "--host", "127.0.0.1", "--port", "0", "--admin-port", "0"]
    return run(image, "mcpg-gateway", *base, "--log-level", "WARNING", *flags)


def assert_one_line(done: subprocess.CompletedProcess[str], status: Exit, line: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert (done.returncode, done.stderr) == (status, f"{line}\n")


@pytest.mark.parametrize("flag", ["--port", "--admin-port"])
def test_a_port_in_use_exits_3_naming_the_flag_and_the_port(
    gateway_env: ImageEnv, config: Path, taken_port: int, flag: str
) -> None:
    done = gateway(gateway_env, config, flag, str(taken_port))

    assert_one_line(
        done,
        Exit.UNBINDABLE,
        f"mcpg-gateway: {flag} {taken_port} is in use: stop what listens there, or choose another port",
    )


def test_an_address_of_another_machine_exits_3_naming_the_host(gateway_env: ImageEnv, config: Path) -> None:
    done = gateway(gateway_env, config, "--host", "192.0.2.1")  # TEST-NET-1: never this machine's

    assert_one_line(
        done,
        Exit.UNBINDABLE,
        "mcpg-gateway: --host 192.0.2.1 is not an address of this machine: choose one it has (0.0.0.0 for every "
        "interface)",
    )


def test_a_host_that_does_not_resolve_exits_3_naming_it(gateway_env: ImageEnv, config: Path) -> None:
    done = gateway(gateway_env, config, "--host", "no-such-host.invalid")

    assert done.returncode == Exit.UNBINDABLE
    assert done.stderr.startswith(
        "mcpg-gateway: --host no-such-host.invalid is not an address of this machine: the name does not resolve ("
    )
    assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--log-level", "LOUD"], "--log-level: 'LOUD' is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL)"),
        (["--port", "http"], "--port: 'http' is not a port (a whole number from 0 to 65535)"),
        (["--admin-port", "65536"], "--admin-port: '65536' is not a port (a whole number from 0 to 65535)"),
        (["--log-format", "xml"], "--log-format: invalid choice: 'xml' (choose from 'text', 'json')"),
        (["--stdio-please"], "unrecognized arguments: --stdio-please"),
    ],
    ids=["log-level", "port-not-a-number", "port-out-of-range", "log-format", "unknown-flag"],
)
def test_a_bad_value_exits_2_in_one_line_naming_the_flag(
    gateway_env: ImageEnv, config: Path, flags: list[str], said: str
) -> None:
    done = gateway(gateway_env, config, *flags)

    assert_one_line(done, Exit.USAGE, f"mcpg-gateway: {said}; see mcpg-gateway --help")


@pytest.mark.parametrize("program", ["mcpg-gateway", "mcpg-subscribe"])
def test_version_prints_the_distributions_version(gateway_env: ImageEnv, program: str) -> None:
    done = run(gateway_env, program, "--version")

    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"{program} {gateway_env.installed()['mcpg-watch']}\n",
        "",
    )


def test_a_url_without_its_scheme_exits_2_suggesting_it(gateway_env: ImageEnv) -> None:
    done = run(gateway_env, "mcpg-subscribe", "127.0.0.1:8080/mcp", URI)

    assert_one_line(
        done,
        Exit.USAGE,
        "mcpg-subscribe: url: '127.0.0.1:8080/mcp' has no scheme: try http://127.0.0.1:8080/mcp; "
        "see mcpg-subscribe --help",
    )


def test_a_refused_url_is_waited_for_then_exits_4_naming_it(gateway_env: ImageEnv) -> None:
    [port] = free_ports(1)
    url = f"http://127.0.0.1:{port}/mcp"

    done = run(gateway_env, "mcpg-subscribe", url, URI, "--connect-timeout", "0.5")

    assert "Traceback" not in done.stderr, done.stderr
    assert (done.returncode, done.stderr.splitlines()) == (
        Exit.UNREACHABLE,
        [
            f"mcpg-subscribe: waiting for {url}: connection refused; retrying for up to 0.5 s",
            f"mcpg-subscribe: cannot connect to {url}: connection refused; is the gateway up on that port?",
        ],
    )


def test_a_client_started_before_its_gateway_waits_for_it_then_subscribes_once(
    gateway_env: ImageEnv, config: Path, tmp_path: Path
) -> None:
    [port] = free_ports(1)
    url = f"http://127.0.0.1:{port}/mcp"
    client_argv = gateway_env.command("mcpg-subscribe", url, URI, "--count", "1", "--connect-timeout", "120")
    with programs.Program(client_argv, gateway_env.environ(MCPG_TOKEN=TOKEN)) as client:
        client.wait_for(f"mcpg-subscribe: waiting for {url}: connection refused; retrying for up to 120 s")

        server_argv = gateway_env.command("mcpg-gateway", "--config", str(config), "--host", "127.0.0.1")
        with programs.Program([*server_argv, "--port", str(port), "--admin-port", "0"], gateway_env.environ()):
            client.wait_for("listening (subscriptions/listen) on report://daily")
            posted = httpx2.post(f"http://127.0.0.1:{port}/webhooks/resource-updated/{HOOK}", timeout=BOUND_S)
            assert posted.status_code == 200
            client.wait_for(f"notifications/resources/updated {URI}")
            assert client.proc.wait(timeout=BOUND_S) == Exit.OK
        said = client.output()
    assert sum("waiting for" in line for line in said) == 1, said
    assert sum(line.startswith("listening") for line in said) == 1, said
