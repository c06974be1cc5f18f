"""CEL in the configuration: read policies and notification filters, compiled and type-checked.

The engine is Google's cel-expr-python (cel-cpp): unlike the other engines on PyPI it type-checks against
declared variables, so a typo (`subscriber.trust_levl`) or a type error (`subscriber.trust_level == 1`) is a
configuration problem with its line and column, found by the operator before it renders and by the gateway
before it serves. Variables are declared as dotted names (`subscriber.groups`, `resource.variables.subject_id`),
which CEL resolves as qualified identifiers, so every field is checked. Evaluating them is the gateway's
business (`policy.py`); this module only compiles.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

# cel-expr-python ships no py.typed; it is used only here and in policy.py, behind typed wrappers.
from cel_expr_python import cel  # type: ignore[import-untyped]

from mcpg_gateway.contract import config, templates
from mcpg_gateway.contract.errors import ConfigError, Problem

Type = cel.Type
_STRINGS = Type.List(Type.STRING)
SUBSCRIBER_VARIABLES = {
    "subscriber.principal_id": Type.STRING,
    "subscriber.trust_level": Type.STRING,
    "subscriber.roles": _STRINGS,
    "subscriber.groups": _STRINGS,
    "subscriber.scopes": _STRINGS,
    "subscriber.attributes": Type.Map(Type.STRING, Type.STRING),
}
FILTER_VARIABLES = {**SUBSCRIBER_VARIABLES, "event.uri": Type.STRING}
_TYPES = {**FILTER_VARIABLES, "resource.uri": Type.STRING, "resource.name": Type.STRING}
"""The type of each variable by name; any other name (`resource.variables.*`, `resource.subject_id`) is a string."""
_COMPILE_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): (.+?)(?: \(in container '[^']*'\))?$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Site:
    """Where an expression is configured, for messages: what it checks, its field path and its resource."""

    check: str
    path: str
    entry: str


@dataclass(frozen=True, slots=True)
class Compiled:
    """One compiled, type-checked expression (a cel-cpp program) and where it came from."""

    program: Any
    site: Site


@dataclass(frozen=True, slots=True)
class Expressions:
    """Every expression of a configuration, by the name of the entry that carries it."""

    read_policies: dict[str, Compiled] = field(default_factory=dict)
    notification_filters: dict[str, Compiled] = field(default_factory=dict)


def compile_all(caps: config.Capabilities) -> Expressions:
    """Compile every read policy and expression filter; `ConfigError` with every problem if any is bad."""
    out, problems = Expressions(), list[Problem]()
    for kind, entries in config.entries_by_kind(caps):
        for i, entry in enumerate(entries):
            _compile_entry(f"mcp.capabilities.{kind}[{i}]", kind, entry, out, problems)
    if problems:
        raise ConfigError(problems)
    return out


def _compile_entry(where: str, kind: str, entry: config.Entry, out: Expressions, problems: list[Problem]) -> None:
    label = f"{'resource template' if kind == 'resource_templates' else 'resource'} {entry.name!r}"
    if entry.read_policy is not None:
        site = Site("read_policy", f"{where}.read_policy", label)
        compiled = compile_expression(read_variables(entry), entry.read_policy, site, problems)
        if compiled is not None:
            out.read_policies[entry.name] = compiled
    source = entry.watch.notification_filter.expression if entry.watch is not None else None
    if source is not None:
        site = Site("notification_filter", f"{where}.watch.notification_filter.expression", label)
        compiled = compile_expression(FILTER_VARIABLES, source, site, problems)
        if compiled is not None:
            out.notification_filters[entry.name] = compiled


def compile_expression(variables: dict[str, Any], source: str, site: Site, problems: list[Problem]) -> Compiled | None:
    """Compile and type-check `source`; on failure append one problem per error (with its position)."""
    program, error = _program(frozenset(variables), source)
    if error is not None:  # cel-cpp reports every parse and check error in one message
        found = _COMPILE_ERROR.findall(error)
        problems.extend(
            Problem(site.path, f"{site.entry}, line {line}, column {col}: {_hint(msg, variables)}")
            for line, col, msg in found
        )
        if not found:
            problems.append(Problem(site.path, f"{site.entry}: {error.splitlines()[0]}"))
        return None
    result = program.return_type()
    if result not in (Type.BOOL, Type.DYN):
        problems.append(
            Problem(site.path, f"{site.entry}, line 1, column 1: must evaluate to a bool, not {result.name().lower()}")
        )
        return None
    return Compiled(program, site)


@functools.lru_cache(maxsize=4096)
def _program(names: frozenset[str], source: str) -> tuple[Any, str | None]:
    """The compiled program for `source` over the variables `names`, or cel-cpp's error message.

    Memoised: the operator checks the same expressions on every reconcile of a namespace, and compiling is
    most of a check's cost. A variable's type is fixed by its name in this module, so the names are the key.
    Programs are immutable (evaluation takes its own activation), so sharing one is safe.
    """
    variables = {name: _TYPES.get(name, Type.STRING) for name in names}
    try:
        return cel.NewEnv(variables=variables).compile(source), None
    except RuntimeError as e:
        return None, str(e)


def _hint(message: str, variables: dict[str, Any]) -> str:
    if not message.startswith("undeclared reference"):
        return message
    return f"{message} (this expression can use: {', '.join(sorted(variables))})"


def read_variables(entry: config.Entry) -> dict[str, Any]:
    """What a read policy of `entry` may name: `resource.subject_id` and template variables only if it has them."""
    out = {**SUBSCRIBER_VARIABLES, "resource.uri": Type.STRING, "resource.name": Type.STRING}
    if isinstance(entry, config.ResourceTemplateConfig):
        out.update({f"resource.variables.{name}": Type.STRING for name in templates.variables(entry.uri_template)})
    if has_subject(entry):
        out["resource.subject_id"] = Type.STRING
    return out


def has_subject(entry: config.Entry) -> bool:
    """Whether `entry` is about one principal: a template with `{subject_id}`, or a resource with `subject_id`."""
    if isinstance(entry, config.ResourceTemplateConfig):
        return entry.has_subject
    return entry.subject_id is not None
