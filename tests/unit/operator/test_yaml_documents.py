"""The YAML the operator reads from Secrets is bounded before it is validated or rendered: an alias bomb in the
namespace's auth Secret, or in a configuration Secret read back, costs no more than the document bound."""

from __future__ import annotations

from mcpg_gateway.contract import documents
from mcpg_operator import conditions as c
from mcpg_operator import observed, render
from mcpg_operator.rotation import TokenState
from mcpg_operator.settings import GatewayDefaults

SHARED_GROUPS = "[" + ", ".join(f"g{i}" for i in range(1000)) + "]"


def auth_bomb(principals: int) -> str:
    """Valid principals that all share one list of 1,000 groups: `principals * 1000` groups once expanded."""
    lines = [f"  - {{principal_id: p0, token_sha256: {'0' * 64}, groups: &groups {SHARED_GROUPS}}}"]
    lines += [f"  - {{principal_id: p{i}, token_sha256: {i:064x}, groups: *groups}}" for i in range(1, principals)]
    return "principals:\n" + "\n".join(lines) + "\n"


def hook(name: str) -> observed.Watch:
    spec = {
        "uri": f"x://{name}",
        "backend": {"http": {"url": "http://u/"}},
        "watch": {"webhook": {"tokenRef": {"name": "t"}}},
    }
    return observed.Watch(
        observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", name, "uid", 1, "2026-01-01T00:00:00Z"), spec, {}
    )


def test_an_auth_secret_that_expands_past_the_bound_is_refused_on_every_watch_and_never_rendered() -> None:
    secrets = {render.AUTH_SECRET: {render.AUTH_KEY: auth_bomb(300)}}  # 300,000 groups from 75 KB
    plan = render.plan([hook("a")], {"t": TokenState(current="x")}, secrets, GatewayDefaults())
    verdict = plan.verdicts["a"]
    assert (verdict.served, verdict.reason) == (False, c.INVALID_AUTH)
    said = f"Secret {render.AUTH_SECRET} key {render.AUTH_KEY} holds more than {documents.MAX_VALUES} values once"
    assert verdict.message.startswith(said)
    assert verdict.message.endswith("; every MCP client gets 401 until it is fixed")
    assert "auth" not in plan.config["gateway"]


def test_an_auth_secret_that_is_not_yaml_is_refused_without_echoing_its_text() -> None:
    secrets = {render.AUTH_SECRET: {render.AUTH_KEY: "principals: [{principal_id: hunter2-secret"}}
    plan = render.plan([hook("a")], {"t": TokenState(current="x")}, secrets, GatewayDefaults())
    assert plan.verdicts["a"].message == (
        f"Secret {render.AUTH_SECRET} key {render.AUTH_KEY} is not valid YAML; every MCP client gets 401 until it is "
        "fixed"
    )


def shared_tools(count: int) -> str:
    """A configuration whose `count` tools share one list of 1,000 groups: `count * 1000` values once expanded."""
    tools = [f"      - {{name: t0, x: &groups {SHARED_GROUPS}}}"]
    tools += [f"      - {{name: t{i}, x: *groups}}" for i in range(1, count)]
    return "mcp:\n  capabilities:\n    tools:\n" + "\n".join(tools) + "\n"


def test_a_configuration_read_back_that_expands_past_the_bound_is_not_taken_as_the_operators() -> None:
    assert render.parse_config(shared_tools(200)) is not None
    assert render.parse_config(shared_tools(300)) is None
