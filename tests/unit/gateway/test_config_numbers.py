"""Every number the configuration accepts is one the running gateway can use: finite, and bounded.

`.inf` passed `gt=0` and then broke the gateway (`idle_after_s: .inf` made every webhook answer 500, when a
notification's `renewBy` was computed; `session_idle_timeout_s: .inf` crashed the start), and an unbounded duration
breaks the same way a little further out (`time.gmtime` refuses 1e17 s, a float refuses a 400-digit `interval_ms`).
The rules are read off the model itself, so a field added later is held to them too.
"""

from __future__ import annotations

import datetime
import types
import typing
from collections.abc import Iterator
from typing import Any

import annotated_types
import httpx2
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from mcpg_gateway.contract import check, config
from mcpg_testing.configs import gateway_config, resource, watched
from mcpg_testing.gateways import ADMIN_TOKEN, GatewayFactory, admin_watches
from mcpg_testing.upstream import Upstream
from mcpg_testing.watching import watching

HOOK, POLLED = "drive://folder/reports", "drive://file/notes"


def _members(annotation: Any) -> Iterator[tuple[Any, str]]:
    """The types a field's annotation admits, each with the path step it adds (`[]` for a list's items)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _members(typing.get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _members(arg)
    elif origin is list:
        yield from ((kind, "[]" + step) for kind, step in _members(typing.get_args(annotation)[0]))
    else:
        yield annotation, ""


def numeric_fields(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, FieldInfo, type]]:
    """Every int and float field reachable from `model`, with its path (`[]` marks a list)."""
    for name, info in model.model_fields.items():
        for kind, step in _members(info.annotation):
            where = f"{path}.{name}{step}".lstrip(".")
            if kind in (int, float):
                yield where, info, kind
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                yield from numeric_fields(kind, where)


def upper_bound(info: FieldInfo) -> float | None:
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Le | annotated_types.Lt):
            return float(rule.le if isinstance(rule, annotated_types.Le) else rule.lt)  # type: ignore[arg-type]
    return None


DURATIONS = sorted({path for path, _, _ in numeric_fields(config.GatewayConfig) if path.endswith(("_s", "_ms"))})
FLOATS = sorted({path for path, _, kind in numeric_fields(config.GatewayConfig) if kind is float and "[]" not in path})


def test_the_rules_see_every_duration_and_float_of_the_configuration() -> None:
    # A walk that found nothing would make the rules below vacuous.
    assert "gateway.subscriptions.idle_after_s" in FLOATS
    assert "gateway.server.session_idle_timeout_s" in FLOATS
    assert "mcp.capabilities.resources[].watch.strategy.interval_ms" in DURATIONS


@pytest.mark.parametrize("path", DURATIONS)
def test_every_duration_has_an_upper_bound_of_at_most_a_year(path: str) -> None:
    bounds = {upper_bound(info) for where, info, _ in numeric_fields(config.GatewayConfig) if where == path}
    unit = 1000 if path.endswith("_ms") else 1
    assert None not in bounds, f"{path} has no upper bound"
    assert max(b for b in bounds if b is not None) <= config.LONGEST_S * unit


def raw_with(path: str, value: Any) -> dict[str, Any]:
    """A configuration that sets `path` (dotted, no lists) to `value`; a bus gets the url it requires."""
    raw: dict[str, Any] = {"gateway": {"bus": {"url": "nats://bus:4222"}}} if ".bus." in path else {}
    *parents, leaf = path.split(".")
    at = raw
    for step in parents:
        at = at.setdefault(step, {})
    at[leaf] = value
    return raw


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("path", FLOATS)
def test_a_number_that_is_not_finite_is_refused_naming_its_field(path: str, value: float) -> None:
    found = [str(p) for p in check.problems(raw_with(path, value), environ={})]
    assert found == [f"{path}: Input should be a finite number"]


def test_a_duration_past_a_year_is_refused_naming_its_field_and_the_bound() -> None:
    raw = gateway_config(resource("notes", POLLED, "http://u/", {"type": "poll", "interval_ms": 10**400}))
    raw["gateway"]["subscriptions"] = {"lifetime_s": 1e300}
    assert sorted(str(p) for p in check.problems(raw, environ={})) == [
        "gateway.subscriptions.lifetime_s: Input should be less than or equal to 31536000",
        "mcp.capabilities.resources[0].watch.strategy.interval_ms: Input should be less than or equal to 31536000000",
    ]


async def test_at_their_largest_the_durations_still_serve_a_webhook_and_a_poll(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    # Each at the bound: the gateway starts, a webhook is answered and notifies, the admin API shows the watch.
    upstream.set("/notes", "{}")
    raw = gateway_config(
        watched("reports", HOOK, {"type": "webhook", "token": "tok"}),
        resource("notes", POLLED, f"{upstream.url}/notes", {"type": "poll", "interval_ms": config.LONGEST_MS}),
        session_idle_timeout_s=config.LONGEST_S,
    )
    raw["gateway"]["subscriptions"] = {
        "idle_after_s": config.LONGEST_S,
        "slow_interval_ms": config.LONGEST_MS,
        "lifetime_s": config.LONGEST_S,
    }
    running = await gateway_factory(raw, admin_token=ADMIN_TOKEN)
    async with watching(running.mcp_url, "legacy", [HOOK, POLLED]) as sub:
        async with httpx2.AsyncClient() as http:
            assert (await http.post(f"{running.base}/webhooks/resource-updated/tok")).status_code == 200
        note = await sub.next()
        assert (await admin_watches(running))[POLLED]["cadence_ms"] == config.LONGEST_MS
    renew_by = datetime.datetime.strptime(note.watch["renewBy"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert renew_by - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=364)
