"""A configuration file is bounded before anything walks it: aliases expanded, nesting, and values YAML cannot convert.

PyYAML shares an aliased node, so a few hundred bytes of anchors can stand for millions of values; the environment
substitution and the schema (a plugin's own fields, a tool's) walked each of them, and one such file ran `--check`
to 775 MB. The file is now refused, naming itself and the bound, before the first walk; aliases within the bound
load as written.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from mcpg_gateway.contract import check, documents, loading
from mcpg_gateway.contract.errors import ConfigError

RESOURCE = "      - {name: r, uri: 'x://r', backend: {kind: http, url: 'http://u/'}, watch: {strategy: %s}}\n"


def bomb(levels: int, fanout: int = 9) -> str:
    """Anchors each naming the previous one `fanout` times: `fanout ** levels` strings once expanded."""
    anchors = ["[" + ", ".join(["lol"] * fanout) + "]"]
    anchors += ["[" + ", ".join([f"*a{i}"] * fanout) + "]" for i in range(levels - 1)]
    return "[" + ", ".join(f"&a{i} {text}" for i, text in enumerate(anchors)) + "]"


def plugin_file(tmp_path: Path, fields: str) -> Path:
    path = tmp_path / "gw.yaml"
    strategy = "{type: plugin, kind: k, " + fields + "}"
    path.write_text("mcp:\n  capabilities:\n    resources:\n" + RESOURCE % strategy)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        check.load_file(path, environ={})
    [problem] = map(str, e.value.problems)
    return problem


def test_an_alias_bomb_in_a_plugins_fields_is_refused_before_anything_walks_it(tmp_path: Path) -> None:
    path = plugin_file(tmp_path, f"bomb: {bomb(7)}")  # 9**7: 4.8 million strings, from 300 bytes
    with mock.patch.object(loading, "_substitute", side_effect=AssertionError("walked")) as walked:
        problem = refusal(path)
    assert problem == (
        f"{path}: holds more than {documents.MAX_VALUES} values once its YAML aliases are expanded (each use of an "
        "alias counts); a configuration is far smaller, so it is refused before it is read"
    )
    assert walked.call_count == 0


def test_an_alias_bomb_in_the_tools_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(f"mcp:\n  capabilities:\n    tools:\n      - {{name: t, extra: {bomb(7)}}}\n")
    assert "holds more than" in refusal(path)


def test_aliases_within_the_bound_load_as_written(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "mcp:\n  capabilities:\n    resources:\n"
        "      - {name: a, uri: 'x://a', backend: &shared {kind: http, url: 'http://u/', headers: {X: '1'}}}\n"
        "      - {name: b, uri: 'x://b', backend: *shared}\n"
    )
    cfg = check.load_file(path, environ={})
    assert [r.backend.headers["X"].get_secret_value() for r in cfg.mcp.capabilities.resources] == ["1", "1"]


def test_a_document_nested_deeper_than_the_bound_is_refused_naming_the_bound(tmp_path: Path) -> None:
    path = plugin_file(tmp_path, "deep: " + "[" * 80 + "]" * 80)
    assert refusal(path) == (
        f"{path}: is nested more than {documents.MAX_DEPTH} levels deep; a configuration is far shallower"
    )


def test_a_document_too_deep_for_the_yaml_parser_is_one_problem_not_a_crash(tmp_path: Path) -> None:
    path = plugin_file(tmp_path, "deep: " + "[" * 2000 + "]" * 2000)
    problem = refusal(path)  # libyaml refuses past 1,000 levels; PyYAML alone exhausts the stack
    assert problem.startswith(f"{path}: ")
    assert "nest" in problem


@pytest.mark.parametrize(
    ("value", "why"),
    [("2024-13-01", "month must be in 1..12"), ("9" * 5000, "an integer of more than 4300 digits")],
    ids=["date", "integer"],
)
def test_a_value_yaml_cannot_convert_is_one_problem_not_a_crash(tmp_path: Path, value: str, why: str) -> None:
    path = plugin_file(tmp_path, f"value: {value}")
    assert refusal(path) == f"{path}: not valid YAML: a value cannot be read ({why})"


def test_a_mapping_given_directly_is_bounded_as_a_file_is() -> None:
    shared = ["lol"] * 1000
    wide = [shared] * 1000  # a million strings, sharing one list
    raw = {"mcp": {"capabilities": {"tools": [{"name": "t", "extra": wide}]}}}
    problems = [str(p) for p in check.problems(raw, environ={})]
    assert problems == [
        f"(top level): holds more than {documents.MAX_VALUES} values once its YAML aliases are expanded (each use of "
        "an alias counts); a configuration is far smaller, so it is refused before it is read"
    ]
