"""What the three programs share on their command line (`contract.command_line`): a usage error in one line, ports
as flags take them, the line for a socket that cannot be bound (from real sockets' errors), `--version`."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from importlib import metadata

import pytest

from mcpg_gateway.contract import command_line
from mcpg_gateway.contract.command_line import Exit


def parser() -> command_line.Parser:
    p = command_line.Parser(prog="mcpg-x", epilog=command_line.epilog([(Exit.OK, "done"), (Exit.USAGE, "a\nb")]))
    p.add_argument("--port", type=command_line.port, default=8080)
    return p


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken


def _bind_error(host: str, port: int) -> OSError:
    """What binding host:port raised (the test fails if it was bound)."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as e:
            return e
    pytest.fail(f"{host}:{port} was bound")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--port", "x"], "mcpg-x: --port: 'x' is not a port (a whole number from 0 to 65535); see mcpg-x --help\n"),
        (["--port", "-1"], "mcpg-x: --port: '-1' is not a port (a whole number from 0 to 65535); see mcpg-x --help\n"),
        (["--loud"], "mcpg-x: unrecognized arguments: --loud; see mcpg-x --help\n"),
    ],
)
def test_a_usage_error_is_one_line_cause_first_and_exits_2(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(argv)
    assert (exited.value.code, capsys.readouterr().err) == (Exit.USAGE, line)


@pytest.mark.parametrize(("text", "port"), [("0", 0), ("8080", 8080), ("65535", 65535)])
def test_a_port_is_a_whole_number_from_0_to_65535(text: str, port: int) -> None:
    assert parser().parse_args(["--port", text]).port == port


def test_version_prints_the_installed_distributions_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--version"])
    assert (exited.value.code, capsys.readouterr().out) == (0, f"mcpg-x {metadata.version('mcpg-watch')}\n")


def test_the_epilog_lists_each_status_and_indents_a_continued_meaning() -> None:
    assert parser().epilog == "exit status:\n  0   done\n  2   a\n      b"


def test_a_port_in_use_is_said_with_its_flag(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    error = _bind_error("127.0.0.1", port)

    said = command_line.unbindable(error, port=f"--port {port}", address="--host 127.0.0.1")

    assert said == f"--port {port} is in use: stop what listens there, or choose another port"


def test_an_address_of_another_machine_is_said_with_its_flag() -> None:
    error = _bind_error("192.0.2.1", 0)  # TEST-NET-1: never this machine's

    said = command_line.unbindable(error, port="--port 0", address="--host 192.0.2.1")

    assert said == "--host 192.0.2.1 is not an address of this machine: choose one it has (0.0.0.0 for every interface)"


def test_a_host_that_does_not_resolve_is_said_with_its_flag() -> None:
    error = _bind_error("no-such-host.invalid", 0)

    said = command_line.unbindable(error, port="--port 0", address="--host no-such-host.invalid")

    assert said.startswith("--host no-such-host.invalid is not an address of this machine: the name does not resolve")
