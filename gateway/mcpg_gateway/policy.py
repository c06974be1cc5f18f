"""Read policies and notification filters, evaluated fail-closed on the expressions the contract compiled.

An evaluation that fails at run time (a missing attribute key) counts as false for that subscriber alone, is
counted in `mcpg_policy_evaluation_errors_total`, and is logged once per cause (site and reason), so a broken
expression can neither let anyone through nor flood the log.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from prometheus_client import Counter

from mcpg_gateway import catalog
from mcpg_gateway.contract import cel, config
from mcpg_gateway.fanout.subscribers import Subscriber
from mcpg_gateway.identity import Principal

logger = logging.getLogger(__name__)

_STATUS_CODE = re.compile(r"^([A-Z_]+):")
_LOGGED_DETAIL_MAX = 300
_MISSING_RESOURCE_VALUE = re.compile(r'No value with name "resource\.')
"""cel-cpp's error for a variable the activation lacks: how a template's listing sees that a policy needs the URI."""


class Failures:
    """Counts every run-time failure; logs the first of each cause (site and reason) so logs cannot flood."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._logged: set[tuple[str, str]] = set()

    def record(self, site: cel.Site, detail: str) -> None:
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


def allows(expression: cel.Compiled, inputs: dict[str, Any], failures: Failures) -> bool:
    """Evaluate `expression`; anything but a true bool (an error included) is false."""
    try:
        value = expression.program.eval(data=inputs)
        if value.type() == cel.Type.BOOL:
            return bool(value.value())
        detail = str(value.value()) if value.type() == cel.Type.ERROR else f"NOT_BOOL: {value.type().name()}"
    except Exception as e:  # isolation boundary: a failing evaluation refuses this subscriber only
        detail = f"{type(e).__name__}: {e}"
    failures.record(expression.site, detail)
    return False


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


def resource_inputs(binding: catalog.Binding) -> dict[str, Any]:
    out: dict[str, Any] = {"resource.uri": binding.uri, "resource.name": binding.entry.name}
    out.update({f"resource.variables.{k}": v for k, v in binding.variables.items()})
    subject = subject_of(binding)
    if subject is not None:
        out["resource.subject_id"] = subject
    return out


class Policies:
    """Who may read (and so subscribe to) a binding, and who among its subscribers is told when it fires."""

    def __init__(self, expressions: cel.Expressions, failures: Counter) -> None:
        self._expressions = expressions
        self._failures = Failures(failures)

    def replace(self, expressions: cel.Expressions) -> None:
        """Decide by `expressions` from now on (compiled and checked before: `check.verify`)."""
        self._expressions = expressions

    def may_read(self, principal: Principal | None, binding: catalog.Binding) -> bool:
        """The read policy: read, subscribe and each listened URI. No policy: any authenticated principal."""
        if principal is None:
            return False
        policy = self._expressions.read_policies.get(binding.entry.name)
        inputs = {**subscriber_inputs(principal), **resource_inputs(binding)}
        return policy is None or allows(policy, inputs, self._failures)

    def may_list_template(self, principal: Principal | None, entry: config.ResourceTemplateConfig) -> bool:
        """Whether `resources/templates/list` shows `entry` to `principal`: unless its read policy is false for
        them whatever the concrete URI. The policy runs with the caller's fields and the template's name only;
        CEL's `&&` and `||` decide without the missing operand when the other one settles it, so an error that
        a `resource.*` value is missing means the answer depends on the URI: the template is listed, and each
        read under it is still checked."""
        if principal is None:
            return False
        policy = self._expressions.read_policies.get(entry.name)
        if policy is None:
            return True
        inputs = {**subscriber_inputs(principal), "resource.name": entry.name}
        try:
            value = policy.program.eval(data=inputs)
        except Exception as e:  # isolation boundary, as in `allows`
            self._failures.record(policy.site, f"{type(e).__name__}: {e}")
            return False
        if value.type() == cel.Type.BOOL:
            return bool(value.value())
        detail = str(value.value()) if value.type() == cel.Type.ERROR else f"NOT_BOOL: {value.type().name()}"
        if _MISSING_RESOURCE_VALUE.search(detail):
            return True
        self._failures.record(policy.site, detail)
        return False

    def should_tell(self, binding: catalog.Binding, sub: Subscriber) -> bool:
        """The notification filter, for one subscriber of a fired URI. Never raises."""
        scope = binding.watch.notification_filter.scope if binding.watch is not None else "all"
        if scope == "all":
            return True
        if sub.principal is None:
            return False
        if scope == config.SUBJECT_ID:
            return subject_of(binding) == sub.principal.principal_id
        expr = self._expressions.notification_filters.get(binding.entry.name)
        inputs = {**subscriber_inputs(sub.principal), "event.uri": binding.uri}
        return expr is not None and allows(expr, inputs, self._failures)
