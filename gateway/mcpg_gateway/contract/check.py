"""Would a gateway start on this configuration? One answer, asked by the gateway at start and by the operator
before it renders, each naming the field at fault and why.

`load` parses (YAML, environment, schema: `loading.py`), then `verify` applies the rules that relate entries to
each other, compiles the CEL (`cel.py`) and, when the caller knows which plugins are installed, checks that a
plugin provides every `kind` a watch names.

`load_file_without_env` answers the same question where the secrets are not at hand (CI): a placeholder stands in
for each `${env.NAME}`, and the references come back so the caller can say which variables a real start needs.
`warnings` names what a gateway would serve differently from what the file says (a poll under the floor).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from mcpg_gateway.contract import cel, config, loading
from mcpg_gateway.contract.errors import ConfigError, Problem

__all__ = [
    "ConfigError",
    "EnvUse",
    "Problem",
    "load",
    "load_file",
    "load_file_without_env",
    "problems",
    "verify",
    "warnings",
]

EnvUse = loading.EnvUse


def problems(
    raw: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    plugin_kinds: Collection[str] | None = None,
) -> list[Problem]:
    """Every reason a gateway would refuse `raw` (empty if it would start). `plugin_kinds=None`: not checked."""
    try:
        load(raw, environ=environ, plugin_kinds=plugin_kinds)
    except ConfigError as e:
        return e.problems
    return []


def load(
    raw: Any,
    *,
    environ: Mapping[str, str] | None = None,
    plugin_kinds: Collection[str] | None = None,
    unusable_plugins: Sequence[str] = (),
) -> config.GatewayConfig:
    """The validated configuration, or `ConfigError` with every problem. `environ` defaults to the process's."""
    cfg = loading.parse(raw, environ)
    verify(cfg, plugin_kinds=plugin_kinds, unusable_plugins=unusable_plugins)
    return cfg


def load_file(
    path: Path,
    *,
    environ: Mapping[str, str] | None = None,
    plugin_kinds: Collection[str] | None = None,
    unusable_plugins: Sequence[str] = (),
) -> config.GatewayConfig:
    return load(loading.read_file(path), environ=environ, plugin_kinds=plugin_kinds, unusable_plugins=unusable_plugins)


def load_file_without_env(
    path: Path,
    *,
    plugin_kinds: Collection[str] | None = None,
    unusable_plugins: Sequence[str] = (),
) -> tuple[config.GatewayConfig, list[EnvUse]]:
    """`load_file` with a placeholder for every `${env.NAME}` (set or not): the configuration as checked, and
    every reference in it. Raises `ConfigError` for every problem that does not depend on a variable's value."""
    cfg, uses = loading.parse_without_env(loading.read_file(path))
    verify(cfg, plugin_kinds=plugin_kinds, unusable_plugins=unusable_plugins)
    return cfg, uses


def warnings(cfg: config.GatewayConfig) -> list[Problem]:
    """What the gateway accepts but serves otherwise than written: a poll interval under the floor is raised to it."""
    out = []
    for where, entry in _watched(cfg):
        strategy = entry.watch.strategy if entry.watch is not None else None
        if isinstance(strategy, config.PollStrategy | config.SqlPollingStrategy) and (
            strategy.interval_ms < strategy.effective_interval_ms
        ):
            message = (
                f"{strategy.interval_ms} ms is under the {config.POLL_FLOOR_MS} ms floor; "
                f"the gateway polls every {strategy.effective_interval_ms} ms"
            )
            out.append(Problem(f"{where}.watch.strategy.interval_ms", message))
    return out


def verify(
    cfg: config.GatewayConfig,
    *,
    plugin_kinds: Collection[str] | None = None,
    unusable_plugins: Sequence[str] = (),
) -> cel.Expressions:
    """The rules beyond the schema; returns the compiled CEL, or raises `ConfigError` with every problem."""
    found = [*_duplicate_names(cfg), *_duplicate_uris(cfg), *_nats_without_server(cfg)]
    if plugin_kinds is not None:
        found += _missing_plugins(cfg, plugin_kinds, unusable_plugins)
    try:
        expressions = cel.compile_all(cfg.mcp.capabilities)
    except ConfigError as e:
        found += e.problems
    if found:
        raise ConfigError(found)
    return expressions


def _watched(cfg: config.GatewayConfig) -> list[tuple[str, config.Entry]]:
    """Every resource and template with its path, in configuration order."""
    return [
        (f"mcp.capabilities.{kind}[{i}]", entry)
        for kind, entries in config.entries_by_kind(cfg.mcp.capabilities)
        for i, entry in enumerate(entries)
    ]


def _duplicate_names(cfg: config.GatewayConfig) -> list[Problem]:
    seen: dict[str, str] = {}
    out = []
    for where, entry in _watched(cfg):
        if entry.name in seen:
            out.append(Problem(f"{where}.name", f"{entry.name!r} is already used by {seen[entry.name]}"))
        else:
            seen[entry.name] = where
    return out


def _duplicate_uris(cfg: config.GatewayConfig) -> list[Problem]:
    seen: dict[str, int] = {}
    out = []
    for i, res in enumerate(cfg.mcp.capabilities.resources):
        if res.uri in seen:
            where = f"mcp.capabilities.resources[{i}].uri"
            out.append(Problem(where, f"{res.uri!r} is already served by resources[{seen[res.uri]}]"))
        else:
            seen[res.uri] = i
    return out


def _nats_without_server(cfg: config.GatewayConfig) -> list[Problem]:
    if cfg.gateway.nats.url is not None:
        return []
    return [
        Problem(f"{where}.watch.strategy.url", "no NATS server for this watch: set url here or gateway.nats.url")
        for where, entry in _watched(cfg)
        if entry.watch is not None
        and isinstance(entry.watch.strategy, config.NatsTopicStrategy)
        and entry.watch.strategy.url is None
    ]


def _missing_plugins(cfg: config.GatewayConfig, kinds: Collection[str], unusable: Sequence[str]) -> list[Problem]:
    installed = ", ".join(sorted(kinds)) or "none"
    out = []
    for where, entry in _watched(cfg):
        strategy = entry.watch.strategy if entry.watch is not None else None
        if isinstance(strategy, config.PluginStrategy) and strategy.kind not in kinds:
            message = f"no installed watch-strategy plugin has kind {strategy.kind!r} (installed kinds: {installed})"
            if unusable:
                message += f"; unusable plugins: {'; '.join(unusable)}"
            out.append(Problem(f"{where}.watch.strategy.kind", message))
    return out
