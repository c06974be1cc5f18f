"""pytest fixtures for the tiers that run what ships: the image envs, a control plane, and the operator on it.

One control plane per session (etcd, apiserver, controllers, scheduler, a kwok node) with mcpg's CRDs and the
chart's RBAC installed, `mcpg-operator` from `.venv-operator` under the chart's ServiceAccount, and a fresh
namespace per test. Use as a plugin (`pytest_plugins = ["mcpg_testing.fixtures"]` in the top-level conftest)
or import the fixtures by name into a conftest or test module. When a test using the control plane fails, the
tail of each component's log is attached to its report.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpg_testing import images, installation, runtimes
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.images import ImageEnv
from mcpg_testing.operators import OperatorReplicas

OPERATOR_SETTINGS = {
    # As the chart's downward API sets it: the Lease of the leader election lives beside the operator.
    "POD_NAMESPACE": installation.OPERATOR_NAMESPACE,
    "MCPG_RESYNC_SECONDS": "5",
    # Gateway pods of this image are run by the local kubelet (`runtimes.IMAGES`), for real.
    "MCPG_GATEWAY_IMAGE": runtimes.GATEWAY_IMAGE,
    # Three replicas rolled one at a time: more interleavings for the rotation samples to cover.
    "MCPG_GATEWAY_REPLICAS": "3",
    # Not the gateway's defaults, so a test can tell they were rendered (`test_limits_on_pods.py`); looser than
    # the defaults where another test might meet them. The write deadline is shorter, so a pod can be seen holding
    # it within a test's bound: no test's client leaves its buffers full for seconds.
    "MCPG_GATEWAY_LIMITS": '{"watches_per_principal": 12, "listen_streams_per_principal": 96, "write_timeout_s": 5}',
    "MCPG_GATEWAY_SUBSCRIPTIONS": '{"idle_after_s": 2400}',
    # Beyond the chart's bounds on McpGateways, as an admin may allow: tests/e2e/test_gateway_settings.py chooses a
    # node port and sets an lb.example/ annotation (the other bounds are the defaults: test_gateway_bounds_on_cluster).
    "MCPG_GATEWAY_ALLOW_NODE_PORTS": "true",
    "MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS": "lb.example/",
    # Two operator replicas contend for the Lease, as the chart runs them; a short lease makes a killed leader's
    # successor take over within seconds (the chart keeps controller-runtime's 15 s).
    "MCPG_LEADER_ELECTION_LEASE_DURATION_SECONDS": "4",
    "MCPG_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "3",
    "MCPG_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "1",
}


@pytest.fixture(scope="session")
def gateway_env() -> ImageEnv:
    """`.venv-gateway`: what the gateway image installs, up to date with the sources."""
    return images.ensure("gateway")


@pytest.fixture(scope="session")
def operator_env() -> ImageEnv:
    """`.venv-operator`: what the operator image installs, up to date with the sources."""
    return images.ensure("operator")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A running control plane (etcd, apiserver, controllers, scheduler, kwok node) for the session."""
    # die_with_parent: a killed pytest must not leave the components running
    with ControlPlane(tmp_path_factory.mktemp("control-plane"), die_with_parent=True) as plane:
        yield plane


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> None:
    installation.install_crds(control_plane)


@pytest.fixture(scope="session")
def chart_rbac(control_plane: ControlPlane, crds: None) -> None:
    """The chart's ServiceAccount, ClusterRole and binding, rendered by helm and applied as a user would."""
    installation.install_chart_rbac(control_plane)


@pytest.fixture(scope="session")
def operators(
    control_plane: ControlPlane, chart_rbac: None, operator_env: ImageEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorReplicas]:
    """Two `mcpg-operator` replicas from its image env, as the chart's ServiceAccount, one of them leading."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    kubeconfig = control_plane.operator_kubeconfig
    with OperatorReplicas(operator_env, kubeconfig, log, OPERATOR_SETTINGS, ["--verbose"]) as replicas:
        yield replicas


@pytest.fixture
def operator(operators: OperatorReplicas) -> Path:
    """The operator's log file (every replica writes to it), once a replica is active."""
    operators.leader()
    return operators.log


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; deleted (without waiting) afterwards."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")  # a test may delete it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    plane = getattr(item, "funcargs", {}).get("control_plane")
    if report.failed and isinstance(plane, ControlPlane):
        report.sections.append((f"control plane logs (full logs in {plane.logs_dir})", plane.log_tails()))
    return report
