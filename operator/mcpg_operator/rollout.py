"""Has a Deployment finished rolling out? The same rule as `kubectl rollout status`."""

from __future__ import annotations

from typing import Any


def rollout_complete(deployment: dict[str, Any]) -> bool:
    meta, spec, status = deployment.get("metadata", {}), deployment.get("spec", {}), deployment.get("status", {})
    if meta.get("generation", 0) > status.get("observedGeneration", -1):
        return False  # the controller has not seen the latest template yet
    for cond in status.get("conditions", []):
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return False
    replicas = spec.get("replicas", 1)
    updated = status.get("updatedReplicas", 0)
    return bool(
        updated >= replicas and status.get("replicas", 0) <= updated and status.get("availableReplicas", 0) >= updated
    )
