"""The configuration contract: the examples load as written; every problem names its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcpg_gateway.contract import check, config
from mcpg_gateway.contract.errors import ConfigError

EXAMPLES = Path(__file__).parents[3] / "examples" / "gateway"
EXAMPLE_ENV = {
    "GOOGLE_TOKEN": "g-secret",
    "REPORTS_WEBHOOK_TOKEN": "new-token",
    "REPORTS_WEBHOOK_TOKEN_OLD": "old-token",
    "QUICKSTART_WEBHOOK_TOKEN": "quick-token",
}


def problems(raw: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        check.load(raw, environ=env or {})
    return [str(p) for p in e.value.problems]


def one_resource(**overrides: Any) -> dict[str, Any]:
    res: dict[str, Any] = {"name": "r", "uri": "x://r", "backend": {"kind": "http", "url": "http://u/"}}
    res.update(overrides)
    return {"mcp": {"capabilities": {"resources": [res]}}}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_loads_as_written(path: Path) -> None:
    cfg = check.load_file(path, environ=EXAMPLE_ENV)
    assert cfg.mcp.capabilities.resources or cfg.mcp.capabilities.resource_templates


def test_omitted_strategy_means_poll_at_60000_ms() -> None:
    cfg = check.load(one_resource(watch={}), environ={})
    strategy = cfg.mcp.capabilities.resources[0].watch.strategy  # type: ignore[union-attr]
    assert isinstance(strategy, config.PollStrategy)
    assert strategy.effective_interval_ms == 60_000


def test_poll_interval_has_a_ten_second_floor() -> None:
    cfg = check.load(one_resource(watch={"strategy": {"type": "poll", "interval_ms": 500}}), environ={})
    strategy = cfg.mcp.capabilities.resources[0].watch.strategy  # type: ignore[union-attr]
    assert isinstance(strategy, config.PollStrategy)
    assert strategy.interval_ms == 500
    assert strategy.effective_interval_ms == 10_000


def test_env_references_resolve_inside_backend_and_strategy_values() -> None:
    cfg = check.load_file(EXAMPLES / "poll-drive-folder.yaml", environ=EXAMPLE_ENV)
    backend = cfg.mcp.capabilities.resources[0].backend
    assert backend.headers["Authorization"].get_secret_value() == "Bearer g-secret"
    assert "g-secret" not in repr(cfg)


def test_missing_env_variable_names_the_resource_and_the_variable() -> None:
    raw = one_resource(watch={"strategy": {"type": "webhook", "token": "${env.MISSING_TOKEN}"}})
    assert problems(raw) == [
        "mcp.capabilities.resources[0].watch.strategy.token: resource 'r' needs environment variable "
        "MISSING_TOKEN, which is not set"
    ]


def test_bad_field_is_reported_with_its_full_path() -> None:
    resources = [
        one_resource()["mcp"]["capabilities"]["resources"][0] | {"name": f"r{i}", "uri": f"x://{i}"} for i in range(4)
    ]
    resources[3]["watch"] = {"strategy": {"type": "poll", "interval_ms": -5}}
    found = problems({"mcp": {"capabilities": {"resources": resources}}})
    assert found == ["mcp.capabilities.resources[3].watch.strategy.interval_ms: Input should be greater than 0"]


def test_every_problem_is_reported_not_just_the_first() -> None:
    raw = {
        "mcp": {
            "capabilities": {
                "resources": [
                    {"name": "a", "uri": "x://a", "backend": {"kind": "http", "url": "http://u/", "methd": "get"}},
                    {"name": "b", "uri": "x://b", "backend": {"kind": "ftp", "url": "ftp://u/"}},
                    {
                        "name": "c",
                        "uri": "x://c",
                        "backend": {"kind": "http", "url": "http://u"},
                        "watch": {"strategy": {"type": "cron"}},
                    },
                ]
            }
        }
    }
    assert problems(raw) == [
        "mcp.capabilities.resources[0].backend.methd: unknown field (check the spelling)",
        "mcp.capabilities.resources[1].backend: unknown backend kind; expected one of: http",
        "mcp.capabilities.resources[2].watch.strategy: unknown type; expected one of: poll, webhook, nats_topic, "
        "postgres_listen_notify, sql_polling, plugin",
    ]


def test_watch_on_a_tool_is_rejected_with_the_reason() -> None:
    raw = {"mcp": {"capabilities": {"tools": [{"name": "send", "watch": {}}]}}}
    [message] = problems(raw)
    assert message.startswith(
        "mcp.capabilities.tools[0]: tools do not take a watch block: there is nothing to subscribe to"
    )


def test_webhook_strategy_on_a_template_is_rejected_because_one_token_selects_one_uri() -> None:
    raw = {
        "mcp": {
            "capabilities": {
                "resource_templates": [
                    {
                        "name": "t",
                        "uri_template": "x://{id}",
                        "backend": {"kind": "http", "url": "http://u/{id}"},
                        "watch": {"strategy": {"type": "webhook", "token": "t"}},
                    }
                ]
            }
        }
    }
    [message] = problems(raw)
    assert message.startswith("mcp.capabilities.resource_templates[0]: a webhook token selects exactly one URI")


def test_two_resources_with_one_uri_are_rejected() -> None:
    raw = one_resource()
    raw["mcp"]["capabilities"]["resources"].append(
        {"name": "s", "uri": "x://r", "backend": {"kind": "http", "url": "http://u/"}}
    )
    [message] = problems(raw)
    assert "mcp.capabilities.resources[1].uri: 'x://r' is already served by resources[0]" in message


def test_expression_scope_requires_an_expression() -> None:
    [message] = problems(one_resource(watch={"notification_filter": {"scope": "expression"}}))
    assert (
        message == "mcp.capabilities.resources[0].watch.notification_filter: scope 'expression' needs an 'expression'"
    )


def test_unreadable_yaml_is_one_clear_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("mcp: [unclosed\n")
    with pytest.raises(ConfigError) as e:
        check.load_file(bad)
    [message] = map(str, e.value.problems)
    assert message.startswith(f"{bad}: not valid YAML")
