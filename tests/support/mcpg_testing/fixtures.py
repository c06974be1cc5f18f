"""pytest fixtures for the tiers that run what ships: the image envs, a cluster, and the operator on it.

One cluster per session (etcd, apiserver, controllers, scheduler, a kwok node and the real node) with the
product's images built from their Dockerfiles and imported into the node's runtime; the operator installed by
`helm install` of the chart (its CRDs, RBAC and two replicas from its image, on the real node); and a fresh
namespace per test. Use as a plugin (`pytest_plugins = ["mcpg_testing.fixtures"]` in the top-level conftest)
or import the fixtures by name into a conftest or test module. When a test using the cluster fails, the tail of
each component's log is attached to its report.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Generator, Iterator
from typing import Any

import pytest
import yaml

from mcpg_testing import images, installation, oci
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.images import ImageEnv
from mcpg_testing.release import OperatorRelease

CHART_DEFAULTS: dict[str, Any] = yaml.safe_load((installation.CHART / "values.yaml").read_text())
GATEWAY_RESOURCES: dict[str, Any] = CHART_DEFAULTS["gateway"]["resources"]
"""What every gateway pod is given unless its McpGateway says otherwise: the chart's default, kept in the tests.
Its CPU request is the pod's share of the node's 2 cores under contention (cgroup cpu.shares): a smaller one
starved the gateways while an operator replica started, and senders timed out."""


def _image(reference: str) -> dict[str, str]:
    repository, _, tag = reference.rpartition(":")
    return {"repository": repository, "tag": tag, "pullPolicy": "Never"}  # imported, never pulled


CHART_VALUES: dict[str, Any] = {
    "image": _image(oci.OPERATOR_IMAGE),
    "resyncSeconds": 5,
    # Two replicas contend for the Lease, as the chart runs them; a short lease makes a killed leader's successor
    # take over within seconds (the chart keeps controller-runtime's 15 s).
    "leaderElection": {"leaseDurationSeconds": 4, "renewDeadlineSeconds": 3, "retryPeriodSeconds": 1},
    "gateway": {
        "image": _image(oci.GATEWAY_IMAGE),
        # Three replicas rolled one at a time: more interleavings for the rotation samples to cover.
        "replicas": 3,
        # Not the gateway's defaults, so a test can tell they were rendered (`test_limits_on_pods.py`); looser
        # than the defaults where another test might meet them. The write deadline is shorter, so a pod can be
        # seen holding it within a test's bound: no test's client leaves its buffers full for seconds.
        "limits": {"watches_per_principal": 12, "listen_streams_per_principal": 96, "write_timeout_s": 5},
        "subscriptions": {"idle_after_s": 2400},
        # Beyond the chart's bounds on McpGateways, as an admin may allow: tests/e2e/test_gateway_settings.py
        # chooses a node port and sets an lb.example/ annotation (the other bounds are the defaults:
        # test_gateway_bounds_on_cluster).
        "bounds": {"nodePorts": True, "serviceAnnotations": ["lb.example/"]},
    },
}
"""The values file the session's `helm install` takes: the chart's defaults but for these."""

OPERATOR_SETTINGS = {
    # What CHART_VALUES has the chart set, for the tests that run an operator process of their own: such a process
    # and the release's replicas must render the same gateway (tests/unit/support/test_fixtures.py).
    "POD_NAMESPACE": installation.OPERATOR_NAMESPACE,
    "MCPG_RESYNC_SECONDS": "5",
    "MCPG_GATEWAY_IMAGE": oci.GATEWAY_IMAGE,
    "MCPG_GATEWAY_IMAGE_PULL_POLICY": "Never",
    "MCPG_GATEWAY_REPLICAS": "3",
    "MCPG_GATEWAY_LIMITS": '{"watches_per_principal": 12, "listen_streams_per_principal": 96, "write_timeout_s": 5}',
    "MCPG_GATEWAY_SUBSCRIPTIONS": '{"idle_after_s": 2400}',
    "MCPG_GATEWAY_RESOURCES": json.dumps(GATEWAY_RESOURCES),
    "MCPG_GATEWAY_ALLOW_NODE_PORTS": "true",
    "MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS": "lb.example/",
    # The chart sets it from its default value (gateway.serverCard): rendered into every configuration.
    "MCPG_GATEWAY_SERVER_CARD": "true",
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
    """A running cluster (control plane, kwok node, real node with the product's images) for the session."""
    # die_with_parent: a killed pytest must not leave the components running
    with ControlPlane(tmp_path_factory.mktemp("control-plane"), die_with_parent=True) as plane:
        yield plane


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> None:
    installation.install_crds(control_plane)


@pytest.fixture(scope="session")
def operators(
    control_plane: ControlPlane, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorRelease]:
    """The chart, installed by `helm install`: two operator pods from its image, one of them leading."""
    with OperatorRelease(control_plane, CHART_VALUES, tmp_path_factory.mktemp("release")) as release:
        yield release


@pytest.fixture(scope="session")
def chart_rbac(operators: OperatorRelease) -> None:
    """The chart's ServiceAccount, roles and bindings, as its release installed them (an operator process of a
    test's own runs under them, by the control plane's token for that ServiceAccount)."""


@pytest.fixture
def operator(operators: OperatorRelease) -> OperatorRelease:
    """The installed operator, once a replica leads."""
    operators.leader()
    return operators


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
