"""The settings the end-to-end tests give operator processes of their own are the session's release's, as `helm
template` renders the session's values: such an operator and the release's replicas both reconcile the test's
namespace (they watch every namespace), and two operators that render different gateways write them in turn, each
undoing the other (a configuration Secret rewritten back and forth, a template rolled back and forth).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from mcpg_operator import settings
from mcpg_testing import installation
from mcpg_testing.controlplane import default_bin_dir
from mcpg_testing.fixtures import CHART_VALUES, OPERATOR_SETTINGS


def release_env(tmp_path: Path) -> dict[str, str]:
    """The operator container's environment as the chart renders it with the session's values (downward API
    variables left out)."""
    binary = default_bin_dir() / "helm"
    assert binary.exists(), f"{binary} is missing: run `make binaries` (helm renders the chart)"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(CHART_VALUES))
    args = [str(binary), "template", "mcpg", str(installation.CHART), "--namespace", installation.OPERATOR_NAMESPACE]
    out = subprocess.run([*args, "--values", str(values)], capture_output=True, text=True, check=True, timeout=120)
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(out.stdout) if d]
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mcpg-operator"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}


def test_an_operator_process_of_a_tests_own_renders_gateways_as_the_sessions_release_does(tmp_path: Path) -> None:
    env = release_env(tmp_path)
    chart = settings.load({**env, "POD_NAMESPACE": installation.OPERATOR_NAMESPACE, "POD_NAME": "a"})
    ours = settings.load({**OPERATOR_SETTINGS, "POD_NAME": "a"})
    assert ours.gateway == chart.gateway
    assert ours.resync_s == chart.resync_s
