"""The README's Install from this checkout, run as written: `make cluster-install`, then the operator really runs.

The block is read from the README (`mcpg_testing.recipes`) and run by bash from the checkout's root, as a user
types it: it starts the local cluster in `.cluster` (the images built from the Dockerfiles and imported into the
node), installs the chart naming them, and lists what runs. The test then proves the operator is not just
deployed but working: two Available replicas, one holding the leader Lease, and a ResourceWatch applied after the
install served by a gateway whose pods run on the node. The cluster is taken down as the docs say
(`make cluster-down`), whatever happened.

It starts a cluster of its own (`own_cluster`): the machine's one real node cannot be held by the session's.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_testing import recipes

pytestmark = pytest.mark.own_cluster

ROOT = Path(__file__).parents[2]
STATE = ROOT / ".cluster"
INSTALL_S = 1200.0
"""Bound on `make cluster-install` from nothing running: the cluster's start and, on a fresh clone, the images'
first build (about 3 minutes), then helm's --wait on two operator pods."""
SERVED_S = 150.0
"""Bound on a ResourceWatch being served by real gateway pods on 2 busy cores."""


@pytest.fixture
def user_shell() -> Iterator[dict[str, str]]:
    """The environment a user's shell has in the checkout, and the cluster's removal afterwards."""
    if (STATE / "kubeconfig").exists():
        alive = subprocess.run(["make", "-s", "cluster-down"], cwd=ROOT, capture_output=True, text=True, check=False)
        assert alive.returncode == 0, f"a cluster left in {STATE} would not stop: {alive.stderr}"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "MAKEFLAGS", "MAKELEVEL")}
    try:
        yield env
    finally:
        subprocess.run(["make", "-s", "cluster-down"], cwd=ROOT, env=env, capture_output=True, check=False)


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    bin_dir = Path(env.get("MCPG_CACHE", Path.home() / ".cache" / "mcpg")) / "bin"
    argv = [str(bin_dir / "kubectl"), f"--kubeconfig={STATE / 'kubeconfig'}", *args]
    return subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True, check=True, timeout=300).stdout


def get(env: dict[str, str], *what: str) -> Any:
    return json.loads(kubectl(env, *what, "-o", "json"))


def test_the_readme_install_from_this_checkout_runs_the_operator(user_shell: dict[str, str]) -> None:
    [install] = recipes.run_by(
        "tests/e2e/test_install_as_written.py::test_the_readme_install_from_this_checkout_runs_the_operator",
        [ROOT / "README.md"],
    )
    ran = recipes.run(install, cwd=ROOT, env=user_shell, timeout=INSTALL_S)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "deployment.apps/mcpg-operator" in ran.stdout

    # Deployed is not running: both replicas Available, from the image the node runs.
    operator = get(user_shell, "-n", "mcpg-system", "get", "deployment", "mcpg-operator")
    assert operator["status"].get("availableReplicas") == 2, operator["status"]
    [container] = operator["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "mcpg/operator:local"

    # And it works: a watch applied now is served by gateway pods it rendered.
    kubectl(user_shell, "create", "namespace", "install-check")
    watch = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": "docs"},
        "spec": {"uri": "install://docs", "backend": {"http": {"url": "http://127.0.0.1:9/unused"}}},
    }
    kubectl(user_shell, "-n", "install-check", "apply", "-f", "-", stdin=yaml.safe_dump(watch))
    kubectl(
        user_shell, "-n", "install-check", "wait", "--for=condition=Ready", "resourcewatch/docs",
        f"--timeout={SERVED_S:.0f}s",
    )  # fmt: skip
    pods = get(user_shell, "-n", "install-check", "get", "pods", "-l", "app.kubernetes.io/name=mcpg-gateway")["items"]
    assert pods
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {"mcpg/gateway:local"}
    # Served means reconciled, which only the replica holding the Lease does.
    leases = get(user_shell, "-n", "mcpg-system", "get", "leases")["items"]
    assert any(lease["spec"].get("holderIdentity", "").startswith("mcpg-operator-") for lease in leases), leases
