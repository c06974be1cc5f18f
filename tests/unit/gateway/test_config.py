"""The configuration contract: the examples load as written; every problem names its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from mcpg_gateway.contract import check, config
from mcpg_gateway.contract.errors import ConfigError, Problem
from mcpg_testing.configs import EXAMPLE_ENV

EXAMPLES = Path(__file__).parents[3] / "examples" / "gateway"


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


def one_template(uri_template: str, url: str) -> dict[str, Any]:
    template = {"name": "t", "uri_template": uri_template, "backend": {"kind": "http", "url": url}}
    return {"mcp": {"capabilities": {"resource_templates": [template]}}}


def test_a_template_that_repeats_a_variable_is_refused_naming_uri_template() -> None:
    # `{1}` is no placeholder (a variable name starts with a letter or _), so only {a} and {b} are repeats.
    assert problems(one_template("x://{a}/{b}/{1}/{a}/{b}/{1}/{a}", "http://u/{a}")) == [
        "mcp.capabilities.resource_templates[0].uri_template: repeats {a}, {b}: each variable names one part of "
        "a concrete URI, so give every occurrence its own name"
    ]


def test_a_backend_url_variable_the_template_does_not_define_is_refused_naming_the_defined_ones() -> None:
    # The defined variables may appear any number of times, in any order; only {b} and {d} are undefined.
    raw = one_template("x://{a}/{c}", "http://u/{c}/{b}/{a}/{d}/{a}?q={b}")
    # Asked as the operator asks before it renders, so it refuses this as the gateway would at start.
    assert check.problems(raw, environ={}, plugin_kinds=None) == [
        Problem(
            "mcp.capabilities.resource_templates[0].backend.url",
            "names {b}, {d}, which uri_template does not define (its variables: {a}, {c}); the gateway would "
            "request the braces literally, so use a defined variable or remove them",
        )
    ]


def test_a_backend_url_variable_under_a_template_without_variables_is_refused() -> None:
    [message] = problems(one_template("x://fixed", "http://u/{id}"))
    assert message.startswith(
        "mcp.capabilities.resource_templates[0].backend.url: names {id}, which uri_template does not define "
        "(its variables: none)"
    )


def test_a_backend_url_variable_on_a_resource_is_refused_because_a_resource_has_none() -> None:
    assert problems(one_resource(backend={"kind": "http", "url": "http://u/{id}"})) == [
        "mcp.capabilities.resources[0].backend.url: names {id}, but a resource has no variables (a resource "
        "template's uri_template defines them); the gateway would request the braces literally, so remove them "
        "or make this a resource template"
    ]


def test_the_model_itself_refuses_what_the_catalog_could_not_serve() -> None:
    # The rules live in the model, not only in `check`: nothing builds a catalog from an entry that breaks them.
    backend = {"kind": "http", "url": "http://u/{a}"}
    with pytest.raises(ValidationError) as e:
        config.ResourceTemplateConfig.model_validate({"name": "t", "uri_template": "x://{a}/{a}", "backend": backend})
    assert [err["loc"] for err in e.value.errors()] == [("uri_template",)]
    with pytest.raises(ValidationError) as e:
        config.ResourceConfig.model_validate({"name": "r", "uri": "x://r", "backend": backend})
    assert [err["loc"] for err in e.value.errors()] == [("backend", "url")]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, []),
        ({"gateway": {}}, []),
        ({"mcp": "x"}, ["mcp: Input should be a valid dictionary or instance of McpConfig"]),
        ({"mcp": [1]}, ["mcp: Input should be a valid dictionary or instance of McpConfig"]),
        ({"mcp": None}, ["mcp: Input should be a valid dictionary or instance of McpConfig"]),
    ],
    ids=["empty", "no-mcp", "mcp-string", "mcp-list", "mcp-null"],
)
def test_any_top_level_shape_is_a_verdict_never_a_crash(raw: dict[str, Any], expected: list[str]) -> None:
    assert [str(p) for p in check.problems(raw, environ={})] == expected


def test_a_backend_that_contains_itself_through_a_yaml_alias_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    cyclic = tmp_path / "cyclic.yaml"
    cyclic.write_text(
        "mcp:\n  capabilities:\n    resources:\n"
        "      - {name: r, uri: 'x://r', backend: &b {kind: http, url: 'http://u', x: *b}}\n"
    )
    with pytest.raises(ConfigError) as e:
        check.load_file(cyclic, environ={})
    assert "mcp.capabilities.resources[0].backend.x: contains itself (a YAML alias inside its own anchor)" in map(
        str, e.value.problems
    )


def test_a_file_that_is_not_utf8_is_one_clear_problem(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError) as e:
        check.load_file(binary)
    [message] = map(str, e.value.problems)
    assert message.startswith(f"{binary}: not UTF-8 text")


def bus(**fields: Any) -> dict[str, Any]:
    return {"gateway": {"bus": {"url": "nats://bus:4222", **fields}}}


def test_no_bus_section_means_the_gateway_runs_alone() -> None:
    assert check.load({}, environ={}).gateway.bus is None


def test_the_bus_password_comes_from_the_environment_and_never_shows() -> None:
    cfg = check.load(bus(user="mcpg-team-a", password="${env.BUS_PASSWORD}"), environ={"BUS_PASSWORD": "s3cret"})
    assert cfg.gateway.bus is not None
    assert cfg.gateway.bus.password is not None
    assert cfg.gateway.bus.password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(cfg)
    assert "s3cret" not in str(cfg.gateway.bus)


def test_a_missing_bus_password_variable_names_the_bus_and_the_variable() -> None:
    assert problems(bus(user="u", password="${env.BUS_PASSWORD}")) == [
        "gateway.bus.password: the bus needs environment variable BUS_PASSWORD, which is not set"
    ]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"url": "nats://mcpg:hunter2@bus:4222"}, "gateway.bus.url: must not carry credentials"),
        ({"url": "http://bus:4222"}, "gateway.bus.url: expected a nats:// or tls:// URL"),
        ({"password": "p"}, "gateway.bus: password: set user as well"),
        ({"subject_prefix": "mcpg.*"}, "gateway.bus.subject_prefix: String should match pattern"),
        ({"bucket": "a.b"}, "gateway.bus.bucket: String should match pattern"),
        ({"lease_ttl_s": 0}, "gateway.bus.lease_ttl_s: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_bus_field_is_named_and_a_url_with_credentials_is_never_echoed(
    fields: dict[str, Any], expected: str
) -> None:
    found = problems(bus(**fields))
    assert len(found) == 1, found
    assert found[0].startswith(expected), found
    assert "hunter2" not in found[0]


SECRET = "hunter2-never-shown"
WHSEC = "whsec_" + "A" * 44


def signed(**signature: Any) -> dict[str, Any]:
    strategy = {"type": "webhook", "token": "t", "signature": signature}
    return one_resource(watch={"strategy": strategy})


SIGNATURE_AT = "mcp.capabilities.resources[0].watch.strategy.signature"


@pytest.mark.parametrize(
    ("signature", "where", "says"),
    [
        ({"scheme": "svix", "secrets": [SECRET]}, ".scheme", "'standard-webhooks', 'github'"),
        ({"scheme": "hmac", "secrets": [SECRET]}, "", "header: scheme hmac needs the header"),
        ({"scheme": "standard-webhooks", "secrets": [WHSEC, SECRET]}, ".secrets", "entry 1: a standard-webhooks"),
        ({"scheme": "github", "secrets": [SECRET] * 17}, ".secrets", "at most 16"),
        ({"scheme": "github", "secrets": ["", ""]}, ".secrets", "every secret is empty"),
        ({"scheme": "github", "secrets": [SECRET], "prefix": "sha1="}, "", "prefix: only for scheme hmac"),
        ({"scheme": "gitlab", "secrets": [f" {SECRET}"]}, ".secrets", "travels as a header value"),
        ({"scheme": "slack", "secrets": [SECRET], "tolerance_s": 3601}, ".tolerance_s", "3600"),
    ],
    ids=["scheme", "hmac-header", "whsec", "too-many", "all-empty", "hmac-only", "gitlab-header", "tolerance"],
)
def test_a_bad_signature_block_names_the_field_and_never_a_secret(
    signature: dict[str, Any], where: str, says: str
) -> None:
    [problem] = problems(signed(**signature))
    assert problem.startswith(f"{SIGNATURE_AT}{where}: "), problem
    assert says in problem
    assert SECRET not in problem
