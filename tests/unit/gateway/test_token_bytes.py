"""Tokens as the bytes a client sends: the admin scheme in any case, and only tokens a client can present.

The admin API refused `bearer` where `/mcp` took it (RFC 7235: the scheme is case-insensitive). A non-ASCII admin
or webhook token could never match a UTF-8 client (headers are read as latin-1; a path is percent-encoded by some
senders and not others), so such tokens are refused at load, naming the field and never the value.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from mcpg_gateway import admin_app
from mcpg_gateway.contract import check
from mcpg_gateway.contract.errors import ConfigError
from mcpg_gateway.gateway import Gateway, Options
from mcpg_operator.reconcile import run as reconcile
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, principal, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway

ADMIN, CLIENT = "adm-token", "client-token"
HOOK = "drive://folder/reports"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def webhook_config(strategy: dict[str, Any]) -> dict[str, Any]:
    return gateway_config(watched("reports", HOOK, {"type": "webhook", **strategy}))


@pytest.fixture
async def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    raw = gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "tok"}))
    raw["gateway"]["auth"] = {"principals": [principal(CLIENT, "alice")]}
    return await gateway_factory(raw, admin_token=ADMIN)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_the_admin_api_and_mcp_both_take_the_bearer_scheme_in_any_case(gw: RunningGateway, scheme: str) -> None:
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        admin = await http.get(f"{gw.admin}/admin/v1/watches", headers={"authorization": f"{scheme} {ADMIN}"})
        mcp_headers = {"authorization": f"{scheme} {CLIENT}", "accept": "application/json, text/event-stream"}
        mcp = await http.post(gw.mcp_url, json=INITIALIZE, headers=mcp_headers)
    assert (admin.status_code, mcp.status_code) == (200, 200)


@pytest.mark.parametrize("authorization", [f"bearer {ADMIN}x", f"Basic {ADMIN}", ADMIN, f"Bearer{ADMIN}", "bearer"])
async def test_the_admin_api_still_refuses_a_wrong_token_or_scheme(gw: RunningGateway, authorization: str) -> None:
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        resp = await http.get(f"{gw.admin}/admin/v1/watches", headers={"authorization": authorization})
    assert resp.status_code == 401


# --- the admin token ------------------------------------------------------------------------------------------


def admin_refusal(token: str) -> ConfigError:
    gw = Gateway(check.load(webhook_config({"token": "tok"}), environ={}), Options(admin_token=token))
    with pytest.raises(ConfigError) as caught:
        admin_app.build(gw)
    return caught.value


@pytest.mark.parametrize("token", ["s3cr-tök", "s3cr token", "s3cr\ttoken", "s3cr\x7f", "s3cr\u2028"])
def test_an_admin_token_outside_visible_ascii_is_refused_naming_the_variable_not_the_value(token: str) -> None:
    [problem] = admin_refusal(token).problems
    assert problem.path == "MCPG_ADMIN_TOKEN"
    assert "visible ASCII" in problem.message
    assert "s3cr" not in str(problem)


def test_a_visible_ascii_admin_token_builds() -> None:
    visible = "".join(chr(c) for c in range(0x21, 0x7F))
    gw = Gateway(check.load(webhook_config({"token": "tok"}), environ={}), Options(admin_token=visible))
    assert admin_app.build(gw) is not None


async def test_the_gateway_process_exits_2_on_a_non_ascii_admin_token_saying_which_variable(tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump(webhook_config({"token": "tok"})))
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "mcpg_gateway", "--config", str(config), "--host", "127.0.0.1"],
        *["--port", "0", "--admin-port", "0"],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "MCPG_ADMIN_TOKEN": "s3cret-tök"},
    )
    try:
        async with asyncio.timeout(BOUND_S):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:  # it served instead of refusing: stop it before failing
            proc.kill()
            await proc.wait()
    assert proc.returncode == 2
    assert "  MCPG_ADMIN_TOKEN: the admin token must consist only of visible ASCII" in out.decode()
    assert "s3cret" not in out.decode()


# --- webhook tokens -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["s3crét", "s3cr space", "s3cr/b", "s3cr%2Fb", "s3cr?b", "s3cr\n", "s3cr😀"])
@pytest.mark.parametrize("field", ["token", "previous_tokens"])
def test_a_webhook_token_a_path_segment_cannot_hold_as_is_is_refused_at_load_naming_the_field(
    token: str, field: str
) -> None:
    strategy = {"token": token} if field == "token" else {"token": "tok", "previous_tokens": ["old", token]}
    with pytest.raises(ConfigError) as caught:
        check.load(webhook_config(strategy), environ={})
    [problem] = caught.value.problems
    assert problem.path == f"mcp.capabilities.resources[0].watch.strategy.{field}"
    assert "ASCII characters a URL path segment holds" in problem.message
    assert field == "token" or problem.message.startswith("entry 1: ")
    assert "s3cr" not in str(problem)


def test_tokens_the_operator_or_the_gateway_generate_and_empty_ones_load() -> None:
    generated = [reconcile.new_token() for _ in range(50)]
    pchar = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@"
    strategy = {"token": "", "previous_tokens": [*generated, str(uuid.uuid4()), "", pchar, "bAse64+with=="]}
    cfg = check.load(webhook_config(strategy), environ={})
    assert len(cfg.mcp.capabilities.resources) == 1
