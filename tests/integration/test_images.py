"""No Docker engine runs here, so each image's install step runs in a clean virtual environment instead.

The extra is read from the Dockerfile itself, so the test follows the image if the Dockerfile changes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def dockerfile_extra(component: str) -> str:
    text = (ROOT / component / "Dockerfile").read_text()
    [extra] = re.findall(r"pip install --no-cache-dir '\.\[(\w+)\]'", text)
    assert re.search(r"^USER 65532:65532$", text, re.M), "the image must run as a non-root user"
    assert re.search(rf"^ENTRYPOINT \[\"mcpg-{component}\"\]$", text, re.M)
    return extra


def install(component: str, tmp_path: Path) -> Path:
    env_dir = tmp_path / component
    venv.create(env_dir, with_pip=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"{ROOT}[{dockerfile_extra(component)}]"], check=True, timeout=600)
    return env_dir / "bin"


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False)


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_the_image_install_step_gives_a_working_entrypoint_and_only_its_extra(component: str, tmp_path: Path) -> None:
    bin_dir = install(component, tmp_path)
    python = str(bin_dir / "python")
    if component == "gateway":
        config = str(ROOT / "examples/gateway/quickstart.yaml")
        check = run([str(bin_dir / "mcpg-gateway"), "--check", "--config", config], QUICKSTART_WEBHOOK_TOKEN="t")
        assert check.returncode == 0, check.stderr
        assert "configuration is valid" in check.stdout
        absent = "kopf"
    else:
        helped = run([str(bin_dir / "mcpg-operator"), "--help"])
        assert helped.returncode == 0, helped.stderr
        assert "kopf run" in helped.stdout
        absent = "asyncpg"
    missing = run([python, "-c", f"import {absent}"])
    assert missing.returncode != 0, f"the {component} image should not carry {absent}"
    # The stdlib `operator` module is intact in the installed layout, too.
    assert run([python, "-c", "import operator; operator.itemgetter"]).returncode == 0
    assert sys.version_info >= (3, 11)
