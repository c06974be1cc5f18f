"""The e2e tier: one real control plane (hack/controlplane.py) per session, a namespace per test.

Every test here is marked `e2e`. When one fails, the tail of each component's log is attached
to its report; the full logs stay in the session's tmp dir.
"""

import importlib.util
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

HERE = Path(__file__).parent
CONTROLPLANE_PY = HERE.parents[1] / "hack" / "controlplane.py"


def _load_controlplane() -> ModuleType:
    """hack/ is no package, so load the module from its path (once per session)."""
    name = "mcpg_hack_controlplane"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CONTROLPLANE_PY)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    plane = getattr(item, "funcargs", {}).get("control_plane")
    if report.failed and plane is not None:
        report.sections.append((f"control plane logs (full logs in {plane.logs_dir})", plane.log_tails()))
    return report


@pytest.fixture(scope="session")
def controlplane() -> ModuleType:
    """The hack/controlplane.py module (ControlPlane, ControlPlaneError, wait_until, ...)."""
    return _load_controlplane()


@pytest.fixture(scope="session")
def control_plane(controlplane: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running control plane (etcd, apiserver, controllers, scheduler, kwok node) for the session."""
    state = tmp_path_factory.mktemp("control-plane")
    # die_with_parent: a killed pytest must not leave the components running
    plane = controlplane.ControlPlane(state, die_with_parent=True)
    plane.start()
    yield plane
    plane.stop()


@pytest.fixture
def namespace(control_plane: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; deleted (without waiting) afterwards."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


# --- the operator, running under exactly the identity and RBAC that the Helm chart grants ----------------

ROOT = HERE.parents[1]
OPERATOR_NAMESPACE = "mcpg-system"  # the token file maps the operator token to mcpg-system:mcpg-operator


@pytest.fixture(scope="session")
def crds(control_plane: Any) -> None:
    control_plane.kubectl("apply", "-f", str(ROOT / "crds"))
    names = ["crd/resourcewatches.mcpg.dev", "crd/webhooktokens.mcpg.dev"]
    control_plane.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s")


@pytest.fixture(scope="session")
def chart_rbac(control_plane: Any, crds: None) -> None:
    """The chart's ServiceAccount, ClusterRole and binding, rendered by helm and applied as a user would."""
    helm = str(control_plane.binary("helm"))
    rendered = subprocess.run(
        [helm, "template", "mcpg", str(ROOT / "charts" / "mcpg"), "--namespace", OPERATOR_NAMESPACE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wanted = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in wanted]
    assert {d["kind"] for d in docs} == wanted
    control_plane.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    control_plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


@pytest.fixture(scope="session")
def operator(control_plane: Any, chart_rbac: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`mcpg-operator` as a process, authenticated as the chart's ServiceAccount. Yields its log file."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.operator_kubeconfig),
        "MCPG_RESYNC_SECONDS": "5",
        "MCPG_GATEWAY_IMAGE": "mcpg/gateway:e2e",
        # Three replicas rolled one at a time: more interleavings for the rotation samples to cover.
        "MCPG_GATEWAY_REPLICAS": "3",
    }
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcpg_operator", "--verbose"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    yield log
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
