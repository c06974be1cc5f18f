"""The local control plane is a real one: CRDs, controllers, scheduler, kwok's fake node, GC and RBAC work.

The real node's side (images, probes, Services through kube-proxy) is what every pod test exercises; here a
Deployment of an image nobody can pull goes to kwok's node (`installation.on_kwok`), which plays its pods.
"""

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from mcpg_testing import installation
from mcpg_testing.components import KWOK_NODE
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.processes import wait_until

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.mcpg.test}
spec:
  group: e2e.mcpg.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [size]
              properties:
                size: {type: integer, minimum: 1}
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.invalid/web:1}]
"""


def widget(name: str, size: int) -> str:
    return f"apiVersion: e2e.mcpg.test/v1\nkind: Widget\nmetadata: {{name: {name}}}\nspec: {{size: {size}}}\n"


def get_json(plane: ControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture
def widget_crd(control_plane: ControlPlane) -> Iterator[str]:
    control_plane.kubectl("apply", "-f", "-", stdin=CRD)
    yield "widgets.e2e.mcpg.test"
    control_plane.kubectl("delete", "crd", "widgets.e2e.mcpg.test", "--wait=false")


def test_custom_resources_are_served_and_validated_once_the_crd_is_established(
    control_plane: ControlPlane, namespace: str, widget_crd: str
) -> None:
    control_plane.kubectl("wait", "--for=condition=Established", f"crd/{widget_crd}", "--timeout=60s")

    control_plane.kubectl("apply", "-n", namespace, "-f", "-", stdin=widget("small", 3))
    rejected = control_plane.kubectl("apply", "-n", namespace, "-f", "-", stdin=widget("bad", 0), check=False)

    assert get_json(control_plane, "widget", "small", "-n", namespace)["spec"] == {"size": 3}
    assert rejected.returncode != 0
    assert "spec.size" in rejected.stderr


def test_deployment_rolls_out_to_ready_pods_and_rolls_out_again_after_a_template_change(
    control_plane: ControlPlane, namespace: str
) -> None:
    ns = ("-n", namespace)
    installation.on_kwok(control_plane, namespace)
    control_plane.kubectl("apply", *ns, "-f", "-", stdin=DEPLOYMENT)
    control_plane.kubectl("rollout", "status", *ns, "deployment/web", "--timeout=120s")

    control_plane.kubectl("set", "image", *ns, "deployment/web", "web=registry.invalid/web:2")
    control_plane.kubectl("rollout", "status", *ns, "deployment/web", "--timeout=120s")

    deployment = get_json(control_plane, "deployment", "web", *ns)
    assert deployment["metadata"]["generation"] == 2
    status = deployment["status"]
    assert status["observedGeneration"] == 2
    assert status["updatedReplicas"] == status["readyReplicas"] == status["availableReplicas"] == 2
    replica_sets = get_json(control_plane, "replicasets", "-l", "app=web", *ns)["items"]
    assert sorted(rs["status"]["replicas"] for rs in replica_sets) == [0, 2]
    pods = get_json(control_plane, "pods", "-l", "app=web", *ns)["items"]
    current = [p for p in pods if p["spec"]["containers"][0]["image"].endswith(":2")]
    assert len(current) == 2
    assert {p["spec"]["nodeName"] for p in current} == {KWOK_NODE}
    assert all(p["status"]["phase"] == "Running" for p in current)


def test_garbage_collector_deletes_the_dependent_of_a_deleted_owner(
    control_plane: ControlPlane, namespace: str
) -> None:
    ns = ("-n", namespace)
    owner = json.loads(control_plane.kubectl("create", "configmap", "owner", *ns, "-o", "json").stdout)
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    dependent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dependent", "ownerReferences": [reference]},
    }
    control_plane.kubectl("create", *ns, "-f", "-", stdin=json.dumps(dependent))

    control_plane.kubectl("delete", "configmap", "owner", *ns)  # background propagation: the GC's job

    control_plane.kubectl("wait", "--for=delete", "configmap/dependent", *ns, "--timeout=60s")


def test_operator_token_authenticates_as_the_charts_service_account(control_plane: ControlPlane) -> None:
    whoami = control_plane.kubectl("auth", "whoami", "-o", "json", kubeconfig=control_plane.operator_kubeconfig)
    review = json.loads(whoami.stdout)

    user = review["status"]["userInfo"]
    assert user["username"] == "system:serviceaccount:mcpg-system:mcpg-operator"
    assert set(user["groups"]) == {
        "system:serviceaccounts",
        "system:serviceaccounts:mcpg-system",
        "system:authenticated",
    }


def test_operator_is_forbidden_until_a_role_binding_grants_it_access(
    control_plane: ControlPlane, namespace: str
) -> None:
    def as_operator(*args: str) -> subprocess.CompletedProcess[str]:
        kubeconfig = control_plane.operator_kubeconfig
        return control_plane.kubectl(*args, "-n", namespace, kubeconfig=kubeconfig, check=False)

    assert as_operator("auth", "can-i", "list", "configmaps").stdout.strip() == "no"
    assert "Forbidden" in as_operator("get", "configmaps").stderr

    ns = ("-n", namespace)
    control_plane.kubectl("create", "role", "reader", "--verb=get,list", "--resource=configmaps", *ns)
    sa = "--serviceaccount=mcpg-system:mcpg-operator"
    control_plane.kubectl("create", "rolebinding", "reader", "--role=reader", sa, *ns)
    wait_until(
        lambda: as_operator("auth", "can-i", "list", "configmaps").stdout.strip() == "yes",
        30,
        "the RoleBinding to take effect",
    )

    assert as_operator("get", "configmaps").returncode == 0
    assert as_operator("auth", "can-i", "list", "secrets").stdout.strip() == "no"
