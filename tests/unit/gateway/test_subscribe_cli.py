"""`mcpg-subscribe`'s expected failures, its `main()` run in-process against a real gateway on loopback: one line
on stderr naming the cause and the fix, an exit status per class, no traceback, and never the token.

The CLI runs its own event loop (`asyncio.run`), so it runs in a thread while the gateway serves on the test's.
The same failures, from the installed program, are in tests/integration/test_subscribe_program.py.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx2
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from mcpg_gateway import subscribe_cli, subscribe_client
from mcpg_gateway.contract.command_line import Exit
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, principal, watched
from mcpg_testing.gateways import RunningGateway, running

TOKEN, OTHER = "sub-cli-token-1f3a", "not-the-token"
URI = "report://daily"


@pytest.fixture
async def gateway() -> AsyncIterator[RunningGateway]:
    cfg = gateway_config(
        watched("daily", URI, {"type": "webhook", "token": "hook-token"}), auth={"principals": [principal(TOKEN, "me")]}
    )
    async with running() as start:
        yield await start(cfg)


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`main(argv)`'s exit status and its stderr; the test fails on a traceback, which pytest shows whole."""
    async with asyncio.timeout(BOUND_S):
        status = await asyncio.to_thread(subscribe_cli.main, list(argv))
    return status, capsys.readouterr().err


async def test_no_token_is_one_line_saying_the_gateway_requires_one_and_how_to_pass_it(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(subscribe_cli.TOKEN_ENV, raising=False)

    status, err = await run_cli(capsys, gateway.mcp_url, URI)

    assert (status, err) == (
        Exit.UNAUTHORIZED,
        "mcpg-subscribe: the gateway requires a token (401): pass --token or set MCPG_TOKEN\n",
    )


@pytest.mark.parametrize("legacy", [[], ["--legacy"]], ids=["listen", "legacy"])
async def test_a_wrong_token_is_refused_in_one_line_that_never_prints_it(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str], legacy: list[str]
) -> None:
    status, err = await run_cli(capsys, gateway.mcp_url, URI, "--token", OTHER, *legacy)

    assert (status, err) == (
        Exit.UNAUTHORIZED,
        "mcpg-subscribe: the gateway refused the token (401): pass --token or set MCPG_TOKEN\n",
    )
    assert OTHER not in capsys.readouterr().out


async def test_the_token_may_come_from_the_environment(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(subscribe_cli.TOKEN_ENV, TOKEN)

    # Accepted: the refusal is now about the URI, not the token.
    status, err = await run_cli(capsys, gateway.mcp_url, "report://nope")

    assert (status, err) == (
        Exit.REFUSED,
        "mcpg-subscribe: the gateway refused the request: unknown resource: report://nope (JSON-RPC error -32602)\n",
    )


async def test_token_on_the_command_line_wins_over_the_environment(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(subscribe_cli.TOKEN_ENV, TOKEN)

    status, err = await run_cli(capsys, gateway.mcp_url, URI, "--token", OTHER)

    assert status == Exit.UNAUTHORIZED
    assert "refused the token (401)" in err


@pytest.mark.parametrize("legacy", [[], ["--legacy"]], ids=["listen", "legacy"])
async def test_an_unknown_uri_is_the_gateways_json_rpc_error_in_one_line(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str], legacy: list[str]
) -> None:
    status, err = await run_cli(capsys, gateway.mcp_url, "report://nope", "--token", TOKEN, *legacy)

    assert (status, err) == (
        Exit.REFUSED,
        "mcpg-subscribe: the gateway refused the request: unknown resource: report://nope (JSON-RPC error -32602)\n",
    )


async def test_a_path_that_serves_no_mcp_says_404_and_names_the_url(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{gateway.base}/nope"

    status, err = await run_cli(capsys, url, URI, "--token", TOKEN)

    assert (status, err) == (
        Exit.NOT_FOUND,
        f"mcpg-subscribe: nothing at {url} (404): check the path (the gateway serves MCP on /mcp)\n",
    )


async def test_a_port_nobody_listens_on_is_one_line_naming_the_url(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{gateway.admin_port}/mcp"
    await gateway.shutdown()  # both its ports are free again, and nothing else took them in between on loopback

    status, err = await run_cli(capsys, url, URI, "--token", TOKEN, "--connect-timeout", "0")

    assert (status, err) == (
        Exit.UNREACHABLE,
        f"mcpg-subscribe: cannot connect to {url}: connection refused; is the gateway up on that port?\n",
    )


async def test_a_refused_connect_is_retried_for_the_connect_timeout_saying_so_once(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{gateway.admin_port}/mcp"
    await gateway.shutdown()

    status, err = await run_cli(capsys, url, URI, "--connect-timeout", "0.5")

    assert (status, err.splitlines()) == (
        Exit.UNREACHABLE,
        [
            f"mcpg-subscribe: waiting for {url}: connection refused; retrying for up to 0.5 s",
            f"mcpg-subscribe: cannot connect to {url}: connection refused; is the gateway up on that port?",
        ],
    )


async def test_https_to_a_plain_http_port_is_a_tls_failure(
    gateway: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"https://127.0.0.1:{gateway.port}/mcp"

    status, err = await run_cli(capsys, url, URI, "--token", TOKEN)

    assert status == Exit.TLS
    assert err.startswith(f"mcpg-subscribe: TLS failed with {url} (")
    assert err.count("\n") == 1


def test_debug_keeps_the_traceback_for_an_expected_failure() -> None:
    with pytest.raises(BaseExceptionGroup):
        subscribe_cli.main(["http://127.0.0.1:9/mcp", URI, "--debug", "--connect-timeout", "0"])


def test_help_lists_every_exit_status_it_can_end_with() -> None:
    for status in Exit:
        if status not in (Exit.FAILED, Exit.UNBINDABLE):  # a bug's, and binding's: a client binds no port
            assert f"\n  {status.value:<3} " in subscribe_cli.EPILOG, status


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("127.0.0.1:8080/mcp", "url: '127.0.0.1:8080/mcp' has no scheme: try http://127.0.0.1:8080/mcp"),
        ("ftp://gw/mcp", "url: 'ftp://gw/mcp': only http:// and https:// URLs are served"),
        ("http:///mcp", "url: 'http:///mcp' has no host: e.g. http://127.0.0.1:8080/mcp"),
        ("localhost:8080", "url: 'localhost:8080' has no scheme: try http://localhost:8080"),
    ],
)
def test_a_url_it_cannot_use_is_a_usage_error_in_one_line(
    url: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        subscribe_cli.main([url, URI])
    assert (exited.value.code, capsys.readouterr().err) == (
        Exit.USAGE,
        f"mcpg-subscribe: {said}; see mcpg-subscribe --help\n",
    )


def test_a_url_with_credentials_is_refused_without_showing_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        subscribe_cli.main(["ftp://me:s3cret@gw/mcp", URI])
    err = capsys.readouterr().err
    assert "s3cret" not in err
    assert "'ftp://gw/mcp'" in err


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_connect_timeout_that_is_not_a_duration_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        subscribe_cli.main(["http://127.0.0.1:9/mcp", URI, "--connect-timeout", value])
    assert exited.value.code == Exit.USAGE
    assert capsys.readouterr().err.startswith(
        f"mcpg-subscribe: --connect-timeout: {value!r} is not a number of seconds"
    )


def _largest_draw() -> float:
    return 0.999999


def test_waits_grow_at_random_up_to_2_s_and_never_pass_the_deadline() -> None:
    waits = [subscribe_client.next_wait_s(n, 60.0, _largest_draw) for n in range(7)]
    assert [round(w, 2) if w is not None else None for w in waits] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert subscribe_client.next_wait_s(3, 60.0, lambda: 0.0) == 0.0
    assert subscribe_client.next_wait_s(6, 0.25, _largest_draw) == 0.25
    assert subscribe_client.next_wait_s(0, 0.0, _largest_draw) is None


def test_only_a_refused_connect_or_a_proxys_502_to_504_is_a_gateway_still_starting() -> None:
    refused = httpx2.ConnectError("refused")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    unknown_host = httpx2.ConnectError("no such host")
    unknown_host.__cause__ = socket.gaierror(-2, "Name or service not known")
    stand_in = MCPError(types.INTERNAL_ERROR, "Server returned an error response")

    assert subscribe_client.starting(ExceptionGroup("", [refused]), None) == "connection refused"
    assert subscribe_client.starting(stand_in, 503) == "HTTP 503"
    assert subscribe_client.starting(unknown_host, None) is None
    assert subscribe_client.starting(stand_in, 500) is None
    assert subscribe_client.starting(MCPError(types.INVALID_PARAMS, "unknown resource"), 503) is None
