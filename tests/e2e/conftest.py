"""The e2e tier: one real control plane (hack/controlplane.py) per session, a namespace per test.

Every test here is marked `e2e`. When one fails, the tail of each component's log is attached
to its report; the full logs stay in the session's tmp dir.
"""

import importlib.util
import re
import secrets
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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
