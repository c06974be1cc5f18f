"""`mcpg-gateway --check --no-env`: validate a configuration where its secrets are not at hand (CI), listing each
`${env.NAME}` a start needs with the fields that use it; and the warning for a poll interval under the floor."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_gateway.contract import check, config, loading
from mcpg_gateway.contract.errors import ConfigError, Problem
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, resource, watched

ROOT = Path(__file__).parents[3]
ROTATION = ROOT / "examples/gateway/webhook-rotation.yaml"
SECRETS = ("REPORTS_WEBHOOK_TOKEN", "REPORTS_WEBHOOK_TOKEN_OLD", "UPSTREAM_TOKEN", "INTERVAL")


async def gateway_cli(*args: str) -> tuple[int, str, str]:
    """`python -m mcpg_gateway ARGS` with none of the variables the tests name set: status, stdout, stderr."""
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mcpg_gateway",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(BOUND_S * 3):  # an import-heavy start on a busy machine
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


async def test_no_env_validates_the_rotation_example_and_lists_each_variable_with_its_fields() -> None:
    code, out, err = await gateway_cli("--check", "--no-env", "--config", str(ROTATION))

    assert "Traceback" not in err, err
    assert (code, out.splitlines()) == (
        0,
        [
            f"{ROTATION}: configuration is valid, apart from the values of its environment variables",
            "environment variables needed: 2",
            "  REPORTS_WEBHOOK_TOKEN: mcp.capabilities.resources[0].watch.strategy.token",
            "  REPORTS_WEBHOOK_TOKEN_OLD: mcp.capabilities.resources[0].watch.strategy.previous_tokens[0]",
        ],
    )


async def test_without_no_env_the_same_file_still_needs_its_variables() -> None:
    code, _, err = await gateway_cli("--check", "--config", str(ROTATION))

    assert code == 2
    assert "needs environment variable REPORTS_WEBHOOK_TOKEN, which is not set" in err


async def test_no_env_still_reports_every_problem_that_does_not_depend_on_a_variable(tmp_path: Path) -> None:
    raw = gateway_config(
        resource(
            "a", "x://a", "http://u/a", {"type": "poll", "interval_ms": 0}, headers={"X-Key": "${env.UPSTREAM_TOKEN}"}
        )
    )

    code, out, err = await gateway_cli("--check", "--no-env", "--config", str(write(tmp_path, raw)))

    assert (code, out) == (2, "")
    assert err.splitlines()[1:] == [
        "  mcp.capabilities.resources[0].watch.strategy.interval_ms: Input should be greater than 0"
    ]


def test_a_variable_used_twice_is_listed_with_both_fields_and_one_placeholder_each() -> None:
    raw = gateway_config(
        resource("a", "x://a", "http://u/a", headers={"X-Key": "${env.UPSTREAM_TOKEN}"}),
        resource("b", "x://b", "http://u/b?key=${env.UPSTREAM_TOKEN}"),
    )

    cfg, uses = loading.parse_without_env(raw)

    assert uses == [
        check.EnvUse("UPSTREAM_TOKEN", "mcp.capabilities.resources[0].backend.headers.X-Key"),
        check.EnvUse("UPSTREAM_TOKEN", "mcp.capabilities.resources[1].backend.url"),
    ]
    assert cfg.mcp.capabilities.resources[1].backend.url == "http://u/b?key=mcpg-placeholder-UPSTREAM_TOKEN"


def test_a_problem_in_a_field_holding_a_placeholder_is_left_to_the_real_value() -> None:
    # "${env.INTERVAL}" may well be "15000"; the placeholder is no number. The other problem is still named.
    other = resource("b", "x://b", "http://u/b")
    other["bogus"] = 1
    raw = gateway_config(
        resource("a", "x://a", "http://u/a", {"type": "poll", "interval_ms": "${env.INTERVAL}"}), other
    )

    with pytest.raises(ConfigError) as refused:
        loading.parse_without_env(raw)

    assert refused.value.problems == [
        Problem("mcp.capabilities.resources[1].bogus", "unknown field (check the spelling)")
    ]


@pytest.mark.parametrize(
    ("strategy", "floored"),
    [
        ({"type": "poll", "interval_ms": 2000}, True),
        ({"type": "sql_polling", "url": "postgresql://db/app", "query": "select 1", "interval_ms": 500}, True),
        ({"type": "poll", "interval_ms": config.POLL_FLOOR_MS}, False),
        ({"type": "webhook", "token": "t"}, False),
    ],
    ids=["poll-under", "sql-under", "poll-at-floor", "webhook"],
)
def test_an_interval_under_the_floor_is_a_warning_naming_the_field_and_the_interval_used(
    strategy: dict[str, Any], floored: bool
) -> None:
    cfg = check.load(gateway_config(resource("a", "x://a", "http://u/a", strategy)), environ={})

    found = check.warnings(cfg)

    expected = Problem(
        "mcp.capabilities.resources[0].watch.strategy.interval_ms",
        f"{strategy.get('interval_ms')} ms is under the 10000 ms floor; the gateway polls every 10000 ms",
    )
    assert found == ([expected] if floored else [])


async def test_check_prints_the_floor_warning_and_still_exits_0(tmp_path: Path) -> None:
    raw = gateway_config(resource("a", "x://a", "http://u/a", {"type": "poll", "interval_ms": 1000}))

    code, out, err = await gateway_cli("--check", "--config", str(write(tmp_path, raw)))

    assert code == 0, err
    assert out.strip().endswith(": configuration is valid")
    assert (
        "mcpg-gateway: warning: mcp.capabilities.resources[0].watch.strategy.interval_ms: 1000 ms is under the "
        "10000 ms floor; the gateway polls every 10000 ms"
    ) in err.splitlines()


async def test_no_env_goes_only_with_check() -> None:
    code, _, err = await gateway_cli("--no-env", "--config", str(ROTATION))

    assert code == 2
    assert "--no-env only goes with --check" in err


def test_an_event_driven_watch_without_variables_needs_none() -> None:
    _, uses = loading.parse_without_env(gateway_config(watched("a", "x://a", {"type": "webhook", "token": "t"})))

    assert uses == []


async def test_the_gateway_logs_the_floor_warning_at_start_up(tmp_path: Path) -> None:
    raw = gateway_config(resource("a", "x://a", "http://127.0.0.1:9/a", {"type": "poll", "interval_ms": 1000}))
    argv = ["--config", str(write(tmp_path, raw)), "--host", "127.0.0.1", "--port", "0", "--admin-port", "0"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mcpg_gateway", *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    said: list[str] = []
    try:
        async with asyncio.timeout(BOUND_S * 3):
            while "serving MCP on" not in (line := (await proc.stderr.readline()).decode()):
                assert line, f"exited before serving: {said}"
                said.append(line)
    finally:
        proc.terminate()
        await proc.wait()

    assert any(
        "configuration: mcp.capabilities.resources[0].watch.strategy.interval_ms: 1000 ms is under the 10000 ms "
        "floor; the gateway polls every 10000 ms" in line
        for line in said
    ), said


def test_a_placeholder_the_schema_cannot_take_is_named_as_such_when_nothing_else_is_wrong() -> None:
    raw = gateway_config(resource("a", "x://a", "http://u/a", {"type": "poll", "interval_ms": "${env.INTERVAL}"}))

    with pytest.raises(ConfigError) as refused:
        loading.parse_without_env(raw)

    [problem] = refused.value.problems
    assert problem.path == "mcp.capabilities.resources[0].watch.strategy.interval_ms"
    assert problem.message.endswith(
        "(with a placeholder for its environment variable; the rest can only be checked with the real value)"
    )
