"""mcpg installed into a control plane as a user installs it: the CRDs from `crds/`, then the Helm chart's RBAC.

The RBAC is what `helm template charts/mcpg` renders (ServiceAccount, ClusterRole and its binding, and the Role
and RoleBinding for the leader-election Lease in the operator's namespace), applied with kubectl, so the operator
runs under exactly the permissions the chart grants and a missing verb fails a test.

`on_kwok` puts a namespace's pods on kwok's fake node instead of the real one: for scale scenarios whose pods
need not run (hundreds of gateways on 2 cores), with the workloads left exactly as the operator renders them.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import yaml

from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.images import REPO

CRDS = REPO / "crds"
CHART = REPO / "charts" / "mcpg"
CRD_NAMES = ("crd/resourcewatches.mcpg.dev", "crd/webhooktokens.mcpg.dev", "crd/mcpgateways.mcpg.dev")
OPERATOR_NAMESPACE = "mcpg-system"
"""Where the chart's ServiceAccount lives; the control plane's operator token is mapped to it."""
RBAC_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
HELM_TIMEOUT_S = 120.0
KWOK_NODE_SELECTOR = {"type": "kwok"}
"""The label kwok's fake node carries (`components.fake_node`) and no other node does."""
KWOK_TOLERATIONS = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
"""What tolerates the fake node's taint (`components.KWOK_TAINT`)."""


def install_crds(plane: ControlPlane) -> None:
    """Apply every CRD and wait until the API server serves them."""
    plane.kubectl("apply", "-f", str(CRDS))
    plane.kubectl("wait", "--for=condition=Established", *CRD_NAMES, "--timeout=60s")


def chart_rbac(plane: ControlPlane) -> list[dict[str, Any]]:
    """The operator's ServiceAccount, roles and bindings as the chart renders them; every kind must be there."""
    rendered = subprocess.run(
        [str(plane.binary("helm")), "template", "mcpg", str(CHART), "--namespace", OPERATOR_NAMESPACE],
        capture_output=True,
        text=True,
        check=True,
        timeout=HELM_TIMEOUT_S,
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS]
    if {d["kind"] for d in docs} != RBAC_KINDS:
        raise AssertionError(f"the chart renders {sorted(d['kind'] for d in docs)}, expected {sorted(RBAC_KINDS)}")
    return docs


def install_chart_rbac(plane: ControlPlane) -> str:
    """Create the operator's namespace and apply the chart's RBAC; return kubectl's report."""
    docs = chart_rbac(plane)
    plane.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)  # may exist: idempotent
    return plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs)).stdout


def kwok_annotations() -> dict[str, str]:
    """The namespace annotations by which the API server's PodNodeSelector and PodTolerationRestriction plugins
    give every pod created in it kwok's node selector and the toleration of its taint."""
    return {
        "scheduler.alpha.kubernetes.io/node-selector": ",".join(f"{k}={v}" for k, v in KWOK_NODE_SELECTOR.items()),
        "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(KWOK_TOLERATIONS),
    }


def on_kwok(plane: ControlPlane, namespace: str) -> None:
    """Schedule the pods created in `namespace` from now on to kwok's fake node: Running and Ready at once, no
    container run. Pods that exist already stay where they are (admission acts on creation only)."""
    annotations = [f"{key}={value}" for key, value in kwok_annotations().items()]
    plane.kubectl("annotate", "--overwrite", "namespace", namespace, *annotations)
