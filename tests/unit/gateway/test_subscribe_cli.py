"""`mcpg-subscribe`'s expected failures, its `main()` run in-process against a real gateway on loopback: one line
on stderr naming the cause and the fix, an exit status per class, no traceback, and never the token.

The CLI runs its own event loop (`asyncio.run`), so it runs in a thread while the gateway serves on the test's.
The same failures, from the installed program, are in tests/integration/test_subscribe_program.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mcpg_gateway import subscribe_cli
from mcpg_gateway.subscribe_cli import Exit
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

    status, err = await run_cli(capsys, url, URI, "--token", TOKEN)

    assert (status, err) == (
        Exit.UNREACHABLE,
        f"mcpg-subscribe: cannot connect to {url}: connection refused; is the gateway up on that port?\n",
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
        subscribe_cli.main(["http://127.0.0.1:9/mcp", URI, "--debug"])


def test_help_lists_every_exit_status() -> None:
    for status in Exit:
        if status not in (Exit.OK, Exit.USAGE):
            assert f"\n  {status.value:<3} " in subscribe_cli.EPILOG, status
