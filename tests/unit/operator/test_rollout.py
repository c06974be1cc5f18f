"""The rollout-complete rule, as `kubectl rollout status` applies it."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_operator.rollout import rollout_complete


def dep(
    generation: int = 2, observed: int = 2, desired: int = 2, running: int = 2, updated: int = 2, available: int = 2
) -> dict[str, Any]:
    status = {
        "observedGeneration": observed,
        "replicas": running,
        "updatedReplicas": updated,
        "availableReplicas": available,
    }
    return {"metadata": {"generation": generation}, "spec": {"replicas": desired}, "status": status}


def stuck() -> dict[str, Any]:
    d = dep()
    d["status"]["conditions"] = [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]
    return d


@pytest.mark.parametrize(
    ("deployment", "complete"),
    [
        (dep(), True),
        (dep(generation=3, observed=2), False),  # the controller has not seen the new template
        (dep(updated=1), False),  # still replacing pods
        (dep(running=3), False),  # an old pod is still running beside the two updated ones
        (dep(available=1), False),  # a new pod is not Ready yet
        (stuck(), False),
        ({"metadata": {"generation": 1}, "spec": {"replicas": 1}}, False),  # no status at all
    ],
)
def test_rollout_complete(deployment: dict[str, Any], complete: bool) -> None:
    assert rollout_complete(deployment) is complete
