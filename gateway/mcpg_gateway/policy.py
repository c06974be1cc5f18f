"""Read policies and notification filters: CEL compiled and type-checked at start-up, evaluated fail-closed.

The engine is Google's cel-expr-python (cel-cpp): unlike the other engines on PyPI it type-checks against
declared variables, so a typo (`subscriber.trust_levl`) or a type error (`subscriber.trust_level == 1`) stops
the gateway at load with its line and column instead of quietly refusing everyone at run time. Variables are
declared as dotted names (`subscriber.groups`, `resource.variables.subject_id`), which CEL resolves as qualified
identifiers, so every field is checked. An evaluation that still fails at run time (a missing attribute key)
counts as false for that subscriber alone, is counted in a metric, and is logged once per cause.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

# cel-expr-python ships no py.typed; it is used only here, behind typed wrappers.
from cel_expr_python import cel  # type: ignore[import-untyped]
from prometheus_client import Counter

from mcpg_gateway import catalog, config
from mcpg_gateway.errors import ConfigError
from mcpg_gateway.identity import Principal
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.subscribers import Subscriber

logger = logging.getLogger(__name__)

_T = cel.Type
_STRINGS = _T.List(_T.STRING)
SUBSCRIBER_VARIABLES = {
    "subscriber.principal_id": _T.STRING,
    "subscriber.trust_level": _T.STRING,
    "subscriber.roles": _STRINGS,
    "subscriber.groups": _STRINGS,
    "subscriber.scopes": _STRINGS,
    "subscriber.attributes": _T.Map(_T.STRING, _T.STRING),
}
FILTER_VARIABLES = {**SUBSCRIBER_VARIABLES, "event.uri": _T.STRING}
_COMPILE_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): (.+?)(?: \(in container '[^']*'\))?$", re.MULTILINE)
_STATUS_CODE = re.compile(r"^([A-Z_]+):")
_LOGGED_DETAIL_MAX = 300


@dataclass(frozen=True, slots=True)
class Site:
    """Where an expression is configured, for messages: its field path and its resource."""

    check: str
    path: str
    entry: str


class _Failures:
    """Counts every run-time failure; logs the first of each cause (site and reason) so logs cannot flood."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._logged: set[tuple[str, str]] = set()

    def record(self, site: Site, detail: str) -> None:
        reason = failure_reason(detail)
        self._counter.labels(site.check, reason).inc()
        if (site.path, reason) in self._logged:
            return
        self._logged.add((site.path, reason))
        logger.warning(
            "%s of %s failed to evaluate and counts as false for that subscriber: %s "
            "(further %r failures here are only counted in mcpg_policy_evaluation_errors_total)",
            site.path,
            site.entry,
            detail[:_LOGGED_DETAIL_MAX],
            reason,
        )


def failure_reason(detail: str) -> str:
    """A low-cardinality metric label: the CEL status code (`not_found`, `invalid_argument`, ...) or `other`."""
    m = _STATUS_CODE.match(detail)
    return m.group(1).lower() if m else "other"


class Expression:
    """One compiled CEL expression that must come out true."""

    def __init__(self, compiled: Any, site: Site, failures: _Failures) -> None:
        self._compiled, self.site, self._failures = compiled, site, failures

    def allows(self, inputs: dict[str, Any]) -> bool:
        try:
            value = self._compiled.eval(data=inputs)
            if value.type() == _T.BOOL:
                return bool(value.value())
            detail = str(value.value()) if value.type() == _T.ERROR else f"NOT_BOOL: {value.type().name()}"
        except Exception as e:  # isolation boundary: a failing evaluation refuses this subscriber only
            detail = f"{type(e).__name__}: {e}"
        self._failures.record(self.site, detail)
        return False


def compile_expression(
    variables: dict[str, Any], source: str, site: Site, failures: _Failures, problems: list[str]
) -> Expression | None:
    """Compile and type-check `source`; on failure append one problem per error (with its position)."""
    where = f"{site.path}: {site.entry}"
    try:
        compiled = cel.NewEnv(variables=variables).compile(source)
    except RuntimeError as e:  # cel-cpp reports every parse and check error in one RuntimeError
        found = _COMPILE_ERROR.findall(str(e))
        problems.extend(f"{where}, line {line}, column {col}: {_hint(msg, variables)}" for line, col, msg in found)
        if not found:
            problems.append(f"{where}: {str(e).splitlines()[0]}")
        return None
    result = compiled.return_type()
    if result not in (_T.BOOL, _T.DYN):
        problems.append(f"{where}, line 1, column 1: must evaluate to a bool, not {result.name().lower()}")
        return None
    return Expression(compiled, site, failures)


def _hint(message: str, variables: dict[str, Any]) -> str:
    if not message.startswith("undeclared reference"):
        return message
    return f"{message} (this expression can use: {', '.join(sorted(variables))})"


def subject_of(binding: catalog.Binding) -> str | None:
    """The principal a per-person URI is about: the template's `{subject_id}`, or the resource's `subject_id`."""
    if isinstance(binding.entry, config.ResourceTemplateConfig):
        return binding.variables.get(config.SUBJECT_ID)
    return binding.entry.subject_id


def subscriber_inputs(principal: Principal) -> dict[str, Any]:
    return {
        "subscriber.principal_id": principal.principal_id,
        "subscriber.trust_level": principal.trust_level,
        "subscriber.roles": list(principal.roles),
        "subscriber.groups": list(principal.groups),
        "subscriber.scopes": list(principal.scopes),
        "subscriber.attributes": dict(principal.attributes),
    }


def read_variables(entry: catalog.Entry) -> dict[str, Any]:
    """What a read policy of `entry` may name: `resource.subject_id` and template variables only if it has them."""
    out = {**SUBSCRIBER_VARIABLES, "resource.uri": _T.STRING, "resource.name": _T.STRING}
    if isinstance(entry, config.ResourceTemplateConfig):
        names = catalog.template_pattern(entry.uri_template).groupindex
        out.update({f"resource.variables.{name}": _T.STRING for name in names})
    if _has_subject(entry):
        out["resource.subject_id"] = _T.STRING
    return out


def resource_inputs(binding: catalog.Binding) -> dict[str, Any]:
    out: dict[str, Any] = {"resource.uri": binding.uri, "resource.name": binding.entry.name}
    out.update({f"resource.variables.{k}": v for k, v in binding.variables.items()})
    subject = subject_of(binding)
    if subject is not None:
        out["resource.subject_id"] = subject
    return out


def _has_subject(entry: catalog.Entry) -> bool:
    if isinstance(entry, config.ResourceTemplateConfig):
        return entry.has_subject
    return entry.subject_id is not None


class Policies:
    """Every read policy and expression filter of a configuration, compiled; raises `ConfigError` if any is bad."""

    def __init__(self, caps: config.Capabilities, metrics: Metrics) -> None:
        self._failures = _Failures(metrics.policy_errors)
        self._read: dict[str, Expression] = {}
        self._filters: dict[str, Expression] = {}
        problems: list[str] = []
        for kind, entries in config.entries_by_kind(caps):
            for i, entry in enumerate(entries):
                self._compile_entry(f"mcp.capabilities.{kind}[{i}]", kind, entry, problems)
        if problems:
            raise ConfigError(problems)

    def _compile_entry(self, where: str, kind: str, entry: catalog.Entry, problems: list[str]) -> None:
        label = f"{'resource template' if kind == 'resource_templates' else 'resource'} {entry.name!r}"
        if entry.read_policy is not None:
            site = Site("read_policy", f"{where}.read_policy", label)
            expr = compile_expression(read_variables(entry), entry.read_policy, site, self._failures, problems)
            if expr is not None:
                self._read[entry.name] = expr
        source = entry.watch.notification_filter.expression if entry.watch is not None else None
        if source is not None:
            site = Site("notification_filter", f"{where}.watch.notification_filter.expression", label)
            expr = compile_expression(FILTER_VARIABLES, source, site, self._failures, problems)
            if expr is not None:
                self._filters[entry.name] = expr

    def may_read(self, principal: Principal | None, binding: catalog.Binding) -> bool:
        """The read policy: read, subscribe and each listened URI. No policy: any authenticated principal."""
        if principal is None:
            return False
        policy = self._read.get(binding.entry.name)
        return policy is None or policy.allows({**subscriber_inputs(principal), **resource_inputs(binding)})

    def should_tell(self, binding: catalog.Binding, sub: Subscriber) -> bool:
        """The notification filter, for one subscriber of a fired URI. Never raises."""
        scope = binding.watch.notification_filter.scope if binding.watch is not None else "all"
        if scope == "all":
            return True
        if sub.principal is None:
            return False
        if scope == config.SUBJECT_ID:
            return subject_of(binding) == sub.principal.principal_id
        expr = self._filters.get(binding.entry.name)
        return expr is not None and expr.allows({**subscriber_inputs(sub.principal), "event.uri": binding.uri})
