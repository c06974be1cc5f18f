"""The local kubelet's image table and the kwok stages it keeps kwok away from."""

from __future__ import annotations

import yaml

from mcpg_testing import components, runtimes


def test_the_gateway_image_runs_the_dockerfiles_entrypoint_and_command() -> None:
    runtime = runtimes.runtime(runtimes.GATEWAY_IMAGE)
    assert runtime is not None
    assert (runtime.component, runtime.entrypoint) == ("gateway", ("mcpg-gateway",))
    assert runtime.cmd == ("--config", "/etc/mcpg/gateway.yaml")
    assert runtime.env == {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    assert runtimes.runtime("registry.k8s.io/pause:3.10") is None


STAGES = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-initialize}
spec: {resourceRef: {apiGroup: v1, kind: Node}, selector: {matchExpressions: []}, next: {}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions: [{key: .metadata.deletionTimestamp, operator: DoesNotExist}]
  next: {}
"""


def test_every_kwok_pod_stage_skips_the_local_images_and_node_stages_are_untouched() -> None:
    node, pod = yaml.safe_load_all(components.kwok_stages(STAGES, ["mcpg/gateway:local"]))
    assert node["spec"]["selector"]["matchExpressions"] == []
    assert pod["spec"]["selector"]["matchExpressions"][-1] == {
        "key": ".spec.containers.[0].image",
        "operator": "NotIn",
        "values": ["mcpg/gateway:local"],
    }
