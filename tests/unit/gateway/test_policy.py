"""Read policies over real HTTP: one CEL policy gates read, subscribe and listen, and a refusal looks like absence."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from mcpg_gateway import __main__ as gateway_main
from mcpg_gateway import errors
from mcpg_gateway.contract import cel, check
from mcpg_gateway.contract.errors import ConfigError
from mcpg_testing.clients import ERAS, connected, refusal, subscribed
from mcpg_testing.configs import EXAMPLE_ENV, bearer, gateway_config, principal, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream

EXAMPLES = Path(__file__).parents[3] / "examples" / "gateway"
LEDGER = "ledger://finance/current"
ARCHIVE = "ledger://finance/archive"  # no watch: a refused caller must not learn even that
NOTICE = "notice://all"
CLEARED = "vault://cleared"
NOWHERE = "ledger://finance/nowhere"
FINANCE = '"finance" in subscriber.groups'
ALICE, BOB, CAROL = (bearer(t) for t in ("alice-token", "bob-token", "carol-token"))
PRINCIPALS = [
    principal("alice-token", "alice", groups=["finance"], attributes={"clearance": "high"}),
    principal("bob-token", "bob", groups=["staff"], attributes={"clearance": "low"}),
    principal("carol-token", "carol", groups=["staff"]),
]


def guarded(entry: dict[str, Any], read_policy: str) -> dict[str, Any]:
    return {**entry, "read_policy": read_policy}


@pytest.fixture
async def running(gateway_factory: GatewayFactory, upstream: Upstream) -> RunningGateway:
    for path in ("/ledger", "/archive", "/notice", "/cleared", "/inbox/alice", "/inbox/bob"):
        upstream.set(path, f'{{"at": "{path}"}}')
    raw = gateway_config(
        guarded(resource("ledger", LEDGER, f"{upstream.url}/ledger", {"type": "webhook", "token": "l"}), FINANCE),
        guarded(resource("archive", ARCHIVE, f"{upstream.url}/archive", watch=False), FINANCE),
        resource("notice", NOTICE, f"{upstream.url}/notice", {"type": "webhook", "token": "n"}),
        guarded(
            resource("cleared", CLEARED, f"{upstream.url}/cleared", {"type": "webhook", "token": "c"}),
            'subscriber.attributes.clearance == "high"',
        ),
        templates=[
            {
                "name": "inbox",
                "uri_template": "mail://inbox/{subject_id}",
                "backend": {"kind": "http", "url": f"{upstream.url}/inbox/{{subject_id}}"},
                "read_policy": "resource.subject_id == subscriber.principal_id",
                "watch": {},
            }
        ],
        auth={"principals": PRINCIPALS},
    )
    return await gateway_factory(raw)


async def read_refusal(url: str, mode: str, uri: str, headers: dict[str, str]) -> MCPError:
    async with connected(url, mode, headers) as client:
        with pytest.raises(MCPError) as e:
            await client.read_resource(uri)
    return e.value


def shape(e: MCPError, uri: str) -> tuple[int, str]:
    """The error with its URI blanked: a refusal and an unknown URI must have the same shape."""
    return e.code, e.message.replace(uri, "<uri>")


@ERAS
async def test_a_refused_read_is_indistinguishable_from_an_unknown_resource(running: RunningGateway, mode: str) -> None:
    refused = await read_refusal(running.mcp_url, mode, LEDGER, BOB)
    unknown = await read_refusal(running.mcp_url, mode, NOWHERE, BOB)
    assert shape(refused, LEDGER) == shape(unknown, NOWHERE) == (-32602, "unknown resource: <uri>")
    async with connected(running.mcp_url, mode, ALICE) as client:
        result = await client.read_resource(LEDGER)
    assert result.contents[0].text == '{"at": "/ledger"}'  # type: ignore[union-attr]


@ERAS
async def test_a_refused_subscribe_or_listen_is_indistinguishable_from_an_unknown_resource(
    running: RunningGateway, mode: str
) -> None:
    refused = await refusal(running.mcp_url, mode, [LEDGER], BOB)
    unknown = await refusal(running.mcp_url, mode, [NOWHERE], BOB)
    assert shape(refused, LEDGER) == shape(unknown, NOWHERE) == (-32602, "unknown resource: <uri>")
    assert running.gw.fanout.running_watches() == []


@ERAS
async def test_the_policy_is_checked_before_anything_else_about_the_uri_is_said(
    running: RunningGateway, mode: str
) -> None:
    refused = await refusal(running.mcp_url, mode, [ARCHIVE], CAROL)
    assert shape(refused, ARCHIVE) == (-32602, "unknown resource: <uri>")
    allowed_but_unwatched = await refusal(running.mcp_url, mode, [ARCHIVE], ALICE)
    assert allowed_but_unwatched.code == errors.INVALID_PARAMS


@ERAS
async def test_a_permitted_principal_subscribes_and_is_told(running: RunningGateway, mode: str) -> None:
    async with subscribed(running.mcp_url, mode, LEDGER, ALICE) as sub:
        async with httpx2.AsyncClient() as http:
            assert (await http.post(f"{running.base}/webhooks/resource-updated/l")).status_code == 200
        assert await sub.next_update() == LEDGER


async def test_a_listen_naming_one_refused_uri_is_refused_whole(running: RunningGateway) -> None:
    e = await refusal(running.mcp_url, "listen", [NOTICE, LEDGER], BOB)
    assert shape(e, LEDGER) == (-32602, "unknown resource: <uri>")
    assert running.gw.fanout.running_watches() == []


@ERAS
async def test_template_variables_reach_the_policy(running: RunningGateway, mode: str) -> None:
    async with connected(running.mcp_url, mode, ALICE) as client:
        assert (await client.read_resource("mail://inbox/alice")).contents
        with pytest.raises(MCPError) as e:
            await client.read_resource("mail://inbox/bob")
    assert shape(e.value, "mail://inbox/bob") == (-32602, "unknown resource: <uri>")


async def test_without_a_policy_any_authenticated_principal_may_read(running: RunningGateway) -> None:
    for who in (ALICE, BOB, CAROL):
        async with connected(running.mcp_url, "listen", who) as client:
            assert (await client.read_resource(NOTICE)).contents


async def test_resources_list_shows_only_what_the_caller_may_read(running: RunningGateway) -> None:
    async with connected(running.mcp_url, "listen", BOB) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
    assert listed == {NOTICE}


async def test_an_evaluation_error_refuses_that_caller_only_and_is_counted(
    running: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcpg_gateway.policy")
    for _ in range(2):  # carol has no clearance attribute: the lookup fails, twice
        e = await read_refusal(running.mcp_url, "listen", CLEARED, CAROL)
        assert shape(e, CLEARED) == (-32602, "unknown resource: <uri>")
    async with connected(running.mcp_url, "listen", ALICE) as client:
        assert (await client.read_resource(CLEARED)).contents
    errors_counted = running.gw.metrics.policy_errors.labels("read_policy", "not_found")._value.get()
    assert errors_counted == 2
    [logged] = [r for r in caplog.records if "read_policy" in r.getMessage()]
    assert "mcp.capabilities.resources[3].read_policy of resource 'cleared'" in logged.getMessage()


# --- compiled at load ----------------------------------------------------------------------------------------------


def load_problems(**fields: Any) -> list[str]:
    entry = {"name": "ledger", "uri": LEDGER, "backend": {"kind": "http", "url": "http://u/"}, **fields}
    with pytest.raises(ConfigError) as e:
        check.load(gateway_config(entry), environ={})
    return [str(p) for p in e.value.problems]


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        (
            "subscriber.trust_level == ",
            "line 1, column 27: Syntax error: mismatched input '<EOF>' expecting",
        ),
        (
            "subscriber.trust_level == 1",
            "line 1, column 24: found no matching overload for '_==_' applied to '(string, int)'",
        ),
        ("subscriber.groups", "line 1, column 1: must evaluate to a bool, not list<string>"),
        ('subscriber.trust_levl == "verified"', "line 1, column 11: undeclared reference to 'subscriber.trust_levl'"),
        # A concrete resource without a subject_id field has no resource.subject_id to compare.
        ("resource.subject_id == subscriber.principal_id", "line 1, column 9: undeclared reference"),
    ],
)
def test_a_broken_read_policy_stops_the_gateway_naming_the_resource_and_position(expression: str, problem: str) -> None:
    [message] = load_problems(read_policy=expression)
    assert message.startswith(f"mcp.capabilities.resources[0].read_policy: resource 'ledger', {problem}")


def test_a_broken_filter_expression_stops_the_gateway_naming_the_resource_and_position() -> None:
    watch = {"notification_filter": {"scope": "expression", "expression": '"finance" in subscriber.group'}}
    [message] = load_problems(watch=watch)
    assert message.startswith(
        "mcp.capabilities.resources[0].watch.notification_filter.expression: resource 'ledger', line 1, column 24: "
        "undeclared reference to 'subscriber.group' (this expression can use: event.uri, subscriber.attributes,"
    )


def test_the_cli_refuses_to_start_on_a_broken_expression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "gw.yaml"
    bad.write_text(
        "mcp:\n  capabilities:\n    resources:\n"
        "      - {name: ledger, uri: 'x://l', backend: {kind: http, url: 'http://u'},\n"
        "         read_policy: 'subscriber.roles &&'}\n"
    )
    assert gateway_main.main(["--check", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "mcp.capabilities.resources[0].read_policy: resource 'ledger', line 1, column 20: Syntax error" in err


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_expression_compiles(path: Path) -> None:
    cfg = check.load_file(path, environ=EXAMPLE_ENV)
    expressions = cel.compile_all(cfg.mcp.capabilities)
    sources = [e.read_policy for e in [*cfg.mcp.capabilities.resources, *cfg.mcp.capabilities.resource_templates]]
    assert len(expressions.read_policies) == sum(source is not None for source in sources)
