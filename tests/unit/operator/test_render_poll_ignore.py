"""A ResourceWatch's `watch.poll.ignore` end to end in the operator: the CRD schema and the model accept it, it
is rendered as the gateway's `watch.strategy.ignore`, and a bad pointer stalls the watch naming the field, so it
never reaches a gateway pod (the gateway's own contract judges it, as for every entry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mcpg_gateway.contract import check, config
from mcpg_operator import conditions as c
from mcpg_operator import models, observed, render
from mcpg_operator.settings import GatewayDefaults

CRD = Path(__file__).parents[3] / "crds" / "resourcewatches.mcpg.dev.yaml"
DURATIONS = ["/jobs/*/duration", "/jobs/*/queued_duration"]


def ci_watch(ignore: list[str]) -> observed.Watch:
    spec = {
        "uri": "ci://pipelines/7",
        "backend": {"http": {"url": "http://ci/api/pipelines/7/jobs", "requireJsonResponse": True}},
        "watch": {"poll": {"intervalMs": 30000, "ignore": ignore}},
    }
    identity = observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", "ci", "uid-ci", 1, "2026-01-01T00:00:00Z")
    return observed.Watch(identity, spec, {})


def crd_schema() -> dict[str, Any]:
    """The ResourceWatch schema (jsonschema skips the x-kubernetes rules; the e2e tier proves those)."""
    schema: dict[str, Any] = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def manifest(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": "ci"}, "spec": spec}


def test_the_crd_and_the_model_accept_ignore_and_the_gateway_gets_it_as_its_strategys() -> None:
    rw = ci_watch(DURATIONS)
    jsonschema.validate(manifest(rw.spec), crd_schema())
    assert models.ResourceWatchSpec.model_validate(rw.spec).watch is not None
    plan = render.plan([rw], {}, {}, GatewayDefaults())
    assert plan.verdicts["ci"].served
    [entry] = plan.config["mcp"]["capabilities"]["resources"]
    assert entry["watch"]["strategy"] == {"type": "poll", "interval_ms": 30000, "ignore": DURATIONS}
    [served] = check.load(plan.config, environ={}).mcp.capabilities.resources
    assert served.watch is not None
    assert isinstance(served.watch.strategy, config.PollStrategy)
    assert served.watch.strategy.ignore == DURATIONS


def test_a_poll_without_ignore_renders_as_before_so_no_gateway_is_rolled_for_it() -> None:
    plan = render.plan([ci_watch([])], {}, {}, GatewayDefaults())
    [entry] = plan.config["mcp"]["capabilities"]["resources"]
    assert entry["watch"]["strategy"] == {"type": "poll", "interval_ms": 30000}


def test_a_bad_pointer_stalls_the_watch_naming_the_field_and_never_reaches_the_gateway() -> None:
    plan = render.plan([ci_watch(["/jobs/*/duration", "/jobs/~2", ""])], {}, {}, GatewayDefaults())
    verdict = plan.verdicts["ci"]
    assert (verdict.served, verdict.reason, verdict.stalled) == (False, c.INVALID_SPEC, True)
    assert "spec.watch.poll.ignore[1]: '/jobs/~2': '~2' is not an escape" in verdict.message
    assert verdict.message.endswith("(+1 more, see Events)")  # the Event has each
    assert "spec.watch.poll.ignore[2]: the empty pointer is the whole document" in verdict.detail
    assert "ignore[0]" not in verdict.detail
    assert plan.config["mcp"]["capabilities"]["resources"] == []


def test_the_crd_leaves_judging_a_pointer_to_the_operator_which_says_why() -> None:
    # The schema bounds the list, not the pointers: "" and "jobs" pass it, so the refusal is the contract's.
    schema = crd_schema()
    jsonschema.validate(manifest(ci_watch(["", "jobs"]).spec), schema)
    with pytest.raises(jsonschema.ValidationError, match="is too long") as refused:
        jsonschema.validate(manifest(ci_watch(["/a"] * 65).spec), schema)
    assert list(refused.value.absolute_path) == ["spec", "watch", "poll", "ignore"]
