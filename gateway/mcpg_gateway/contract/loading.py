"""Parse a configuration: YAML to a dict, `${env.NAME}` resolved, the schema validated, every problem named.

Every problem carries the path of the offending field (`mcp.capabilities.resources[3].watch.strategy.
interval_ms`) so a user can go straight to it. `${env.NAME}` in backend, strategy and `gateway.bus` fields is
resolved here, before validation, and a missing variable names the resource (or the bus) and the variable. The
rules that look at the whole configuration (and the CEL) are `check.py`'s: this module only parses.
`parse_without_env` puts a placeholder in for each reference instead, and says which fields used which variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mcpg_gateway.contract import config, documents
from mcpg_gateway.contract.errors import ConfigError, Problem

_ENV_REF = re.compile(r"\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")
# Fields that may carry `${env.NAME}`: the binding and the watch strategy (tokens, URLs, headers), and `gateway.bus`.
_RESOLVED_KEYS = ("backend", "watch")
# Discriminator tags pydantic inserts into error locations; users never write them.
_UNION_TAGS = frozenset({*config.STRATEGY_TYPES, "http"})


def read_file(path: Path) -> Any:
    """The YAML document in `path` (an empty file is an empty mapping), bounded before anything walks it
    (`documents.py`: an alias bomb is refused, not expanded)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError([Problem(str(path), f"cannot read: {e.strerror}")]) from e
    except UnicodeDecodeError as e:
        raise ConfigError([Problem(str(path), f"not UTF-8 text (byte {e.start}): save it as UTF-8")]) from e
    raw = documents.load(text, str(path))
    return raw if raw is not None else {}


PLACEHOLDER_PREFIX = "mcpg-placeholder-"
"""What `${env.NAME}` becomes when validating without the environment: `mcpg-placeholder-NAME`, which fits
every field that takes a variable (a webhook token's path segment too), and differs per variable."""


_PLACEHOLDER_FAILED = (
    "with a placeholder for its environment variable; the rest can only be checked with the real value"
)


@dataclass(frozen=True, slots=True)
class EnvUse:
    """A `${env.NAME}` reference, and the field (its path) whose value depends on it."""

    variable: str
    path: str


def parse(raw: Any, environ: Mapping[str, str] | None = None) -> config.GatewayConfig:
    """`raw` with its environment references resolved, validated against the schema."""
    return _parse(raw, _Env(os.environ if environ is None else environ))


def parse_without_env(raw: Any) -> tuple[config.GatewayConfig, list[EnvUse]]:
    """`raw` validated with a placeholder for every `${env.NAME}`, and each reference made.

    A problem the schema finds in a field holding a placeholder depends on the real value, so it is not
    reported; everything else is checked as `parse` checks it."""
    env = _Env(None)
    return _parse(raw, env), env.uses


def _parse(raw: Any, env: _Env) -> config.GatewayConfig:
    if not isinstance(raw, dict):
        raise ConfigError([Problem("(top level)", f"expected a mapping, got {type(raw).__name__}")])
    documents.bounded(raw, "(top level)")  # a document given as a mapping is walked below too: bound it first
    resolved = _resolve_env(raw, env)
    try:
        model = config.GatewayConfig.model_validate(resolved)
    except ValidationError as e:
        found = [_format_error(err) for err in e.errors(include_url=False, include_input=False)]
        env.problems.extend(p for p in found if not env.depends(p.path))
        if not env.problems:
            # Placeholders alone made the schema fail: nothing else to name, but no configuration to check on.
            env.problems = [Problem(p.path, f"{p.message} ({_PLACEHOLDER_FAILED})") for p in found]
        raise ConfigError(env.problems) from None
    if env.problems:
        raise ConfigError(env.problems)
    return model


class _Env:
    """Where `${env.NAME}` is looked up (None: nowhere, a placeholder stands in), and what the lookups found."""

    def __init__(self, environ: Mapping[str, str] | None) -> None:
        self.environ = environ
        self.problems: list[Problem] = []
        self.uses: list[EnvUse] = []

    def lookup(self, var: str, path: str, who: str) -> str:
        if self.environ is None:
            self.uses.append(EnvUse(var, path))
            return PLACEHOLDER_PREFIX + var
        if var not in self.environ:
            self.problems.append(Problem(path, f"{who} needs environment variable {var}, which is not set"))
            return ""
        return self.environ[var]

    def depends(self, path: str) -> bool:
        """Whether a problem found at `path` is about a field holding a placeholder. A problem about the entry
        around it is still reported: only the field's own value is unknown."""
        return any(path == use.path or path.startswith((f"{use.path}.", f"{use.path}[")) for use in self.uses)


def _resolve_env(raw: dict[str, Any], env: _Env) -> dict[str, Any]:
    return _resolve_bus(_resolve_entries(raw, env), env)


def _resolve_bus(raw: dict[str, Any], env: _Env) -> dict[str, Any]:
    gateway = raw.get("gateway")
    if not isinstance(gateway, dict) or not isinstance(gateway.get("bus"), dict):
        return raw
    bus = _substitute(gateway["bus"], "gateway.bus", "the bus", env, frozenset())
    return {**raw, "gateway": {**gateway, "bus": bus}}


def _resolve_entries(raw: dict[str, Any], env: _Env) -> dict[str, Any]:
    # Any shape is possible here (no `mcp`, or `mcp: [..]`): leave what is not a mapping to the schema to name.
    mcp = raw.get("mcp")
    if not isinstance(mcp, dict) or not isinstance(mcp.get("capabilities"), dict):
        return raw
    caps = mcp["capabilities"]
    out_caps = dict(caps)
    for kind in ("resources", "resource_templates"):
        entries = caps.get(kind)
        if not isinstance(entries, list):
            continue
        out_caps[kind] = [_resolve_entry(f"mcp.capabilities.{kind}[{i}]", e, env) for i, e in enumerate(entries)]
    return {**raw, "mcp": {**mcp, "capabilities": out_caps}}


def _resolve_entry(where: str, entry: Any, env: _Env) -> Any:
    if not isinstance(entry, dict):
        return entry
    who = f"resource {entry.get('name', '?')!r}"
    out = dict(entry)
    for key in _RESOLVED_KEYS:
        if key in entry:
            out[key] = _substitute(entry[key], f"{where}.{key}", who, env, frozenset())
    return out


def _substitute(value: Any, path: str, who: str, env: _Env, inside: frozenset[int]) -> Any:
    """`value` with its `${env.NAME}` resolved. `inside`: the ids of the containers on the way down, because a
    YAML alias can put a mapping inside itself and walking it would never end."""
    if isinstance(value, dict | list):
        if id(value) in inside:
            env.problems.append(Problem(path, "contains itself (a YAML alias inside its own anchor)"))
            return None
        inside |= {id(value)}
    if isinstance(value, dict):
        return {k: _substitute(v, f"{path}.{k}", who, env, inside) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, f"{path}[{i}]", who, env, inside) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value
    return _ENV_REF.sub(lambda match: env.lookup(match.group(1), path, who), value)


def _format_error(err: Any) -> Problem:
    parts: list[str] = []
    loc = list(err["loc"])
    for i, item in enumerate(loc):
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif (item in _UNION_TAGS and i > 0 and loc[i - 1] in ("strategy", "backend")) or item.startswith("function-"):
            continue
        else:
            parts.append(("." if parts else "") + item)
    path = "".join(parts) or "(top level)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "union_tag_invalid":
        msg = f"unknown type; expected one of: {', '.join(config.STRATEGY_TYPES)}"
        if loc and loc[-1] == "backend":
            msg = "unknown backend kind; expected one of: http"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling)"
    return Problem(path, msg)
