"""The product installed as a user installs it, on a real node: `helm install`, then a ResourceWatch, then MCP.

The session's release (`fixtures.operators`) is `helm install` of `charts/mcpg` with the operator image built from
`operator/Dockerfile`; the gateway it renders runs from the image built from `gateway/Dockerfile`. Both run as
containers of the node's runtime, under the security context each was rendered with, and the gateway is reached
through its Service's ClusterIP (kube-proxy's rules), as a client in the cluster reaches it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx2
import yaml

from mcpg_gateway.contract import digests
from mcpg_testing import installation, manifests, oci
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.pods import apply
from mcpg_testing.processes import wait_until
from mcpg_testing.release import RELEASE, OperatorRelease

ROLLOUT = "--timeout=150s"
BOUND_S = 60.0


def containers(plane: ControlPlane) -> list[dict[str, Any]]:
    """What `crictl ps` lists: the node's running containers."""
    listed: list[dict[str, Any]] = json.loads(plane.crictl("ps", "-o", "json").stdout)["containers"]
    return listed


def test_the_chart_installs_the_operator_as_pods_that_render_a_reachable_gateway(
    control_plane: ControlPlane, operators: OperatorRelease, namespace: str
) -> None:
    # The release is helm's, and its Deployment is Available with the chart's two replicas, one leading.
    status = json.loads(operators.helm("status", RELEASE, "-n", installation.OPERATOR_NAMESPACE, "-o", "json"))
    assert status["info"]["status"] == "deployed"
    deployment = json.loads(
        control_plane.kubectl(
            "-n", installation.OPERATOR_NAMESPACE, "get", "deployment", "mcpg-operator", "-o", "json"
        ).stdout
    )
    assert deployment["status"]["availableReplicas"] == 2
    operators.leader()

    apply(control_plane, namespace, manifests.polled("docs"))
    wait_until(
        lambda: control_plane.kubectl("-n", namespace, "get", "deployment/mcpg-gateway", check=False).returncode == 0,
        BOUND_S,
        "the operator to render the gateway",
    )
    control_plane.kubectl("-n", namespace, "rollout", "status", "deployment/mcpg-gateway", ROLLOUT)
    url = control_plane.service_url(namespace, "mcpg-gateway")
    host = url.removeprefix("http://").split(":")[0]
    assert host.startswith("10.0.0."), url  # the ClusterIP, not a rewritten loopback port
    card = httpx2.get(f"{url}/.well-known/mcp/server-card.json", timeout=10)
    assert card.status_code == 200, card.text

    # Both programs run as containers of the node's runtime, from the images built from their Dockerfiles.
    running = containers(control_plane)
    images = {c["image"]["image"] for c in running}
    by_name = {c["metadata"]["name"] for c in running}
    assert {"operator", "gateway"} <= by_name, by_name
    image_refs = json.loads(control_plane.crictl("images", "-o", "json").stdout)["images"]
    tags = {tag for image in image_refs for tag in image.get("repoTags", [])}
    assert {f"docker.io/{oci.GATEWAY_IMAGE}", f"docker.io/{oci.OPERATOR_IMAGE}"} <= tags | {
        f"docker.io/{t}" for t in tags
    }, tags
    assert images, running

    # The gateway container runs as the operator rendered it: uid 65532, read-only root, no capabilities.
    ours = [c for c in running if c["labels"]["io.kubernetes.pod.namespace"] == namespace]
    gateway = next(c for c in ours if c["metadata"]["name"] == "gateway")
    info = json.loads(control_plane.crictl("inspect", gateway["id"]).stdout)
    spec = info["info"]["runtimeSpec"]
    assert spec["process"]["user"]["uid"] == 65532
    assert spec["root"]["readonly"] is True
    assert not spec["process"]["capabilities"].get("effective")


def polled_watch(name: str) -> dict[str, Any]:
    """`examples/manifests/poll.yaml`'s shape with a plain backend URL: no headers, so no Secret to create."""
    spec = {
        "name": name,
        "uri": f"drive://folder/{name}",
        "mimeType": "application/json",
        "backend": {"http": {"url": "https://drive.example.invalid/files", "method": "get"}},
        "watch": {"poll": {"intervalMs": 60000}},
    }
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": name}, "spec": spec}


def get(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("-n", namespace, "get", *what, "-o", "json").stdout)


def test_the_operator_pod_reconciles_a_resourcewatch_into_its_gateway(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(polled_watch("reports")))

    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/reports", "--timeout=90s")

    deployment = get(control_plane, namespace, "deployment", "mcpg-gateway")
    assert {o["name"] for o in deployment["metadata"]["ownerReferences"]} == {"reports"}
    assert get(control_plane, namespace, "service", "mcpg-gateway")["spec"]["ports"]
    assert get(control_plane, namespace, "serviceaccount", "mcpg-gateway")["metadata"]["name"] == "mcpg-gateway"
    # One configuration Secret, mounted (what a pod starts from) and named to the container, which follows it
    # through the API under a Role that reads that one Secret and nothing else.
    template = deployment["spec"]["template"]
    [volume] = [v for v in template["spec"]["volumes"] if v["name"] == "config"]
    assert volume["secret"]["secretName"] == "mcpg-gateway-config"
    [container] = template["spec"]["containers"]
    assert {"name": "MCPG_CONFIG_SECRET", "value": "mcpg-gateway-config"} in container["env"]
    assert set(template["metadata"]["annotations"]) == {"mcpg.dev/restart-digest"}
    [rule] = get(control_plane, namespace, "role", "mcpg-gateway")["rules"]
    assert (rule["resources"], rule["resourceNames"], sorted(rule["verbs"])) == (
        ["secrets"],
        ["mcpg-gateway-config"],
        ["get", "list", "watch"],
    )
    binding = get(control_plane, namespace, "rolebinding", "mcpg-gateway")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mcpg-gateway", "namespace": namespace}]
    secret = get(control_plane, namespace, "secret", "mcpg-gateway-config")
    rendered = yaml.safe_load(base64.b64decode(secret["data"]["gateway.yaml"]))
    assert [r["uri"] for r in rendered["mcp"]["capabilities"]["resources"]] == ["drive://folder/reports"]
    assert secret["metadata"]["annotations"]["mcpg.dev/config-digest"] == digests.document(rendered)
