"""The release's Python distributions as .github/workflows/release.yml builds them, installed as a user installs them.

`python -m build` of the wheel and sdist from the source tree, `twine check --strict` of both (what PyPI would
refuse), and the wheel installed with its gateway extra into a fresh venv, whose programs answer from there. It
needs the package index (the build backend, the dependencies), hence this tier; the workflow's offline steps are
tests/unit/release. `pip install 'mcpg-watch[gateway]'` of the published release installs exactly this wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from mcpg_testing.images import LEAKY_VARIABLES

ROOT = Path(__file__).parents[2]
TIMEOUT_S = 600.0
"""A cold pip cache downloads every dependency of the gateway extra."""


def version() -> str:
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert isinstance(found, str)
    return found


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    """Run to completion; fail with what it printed. No PYTHONPATH or VIRTUAL_ENV: a fresh venv sees only itself."""
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARIABLES} | {"PYTHONNOUSERSITE": "1"}
    result = subprocess.run(
        [str(a) for a in argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{argv} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and sdist, built as the workflow builds them."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", out, ROOT)
    return out


def test_the_build_makes_one_wheel_and_one_sdist_of_the_release_version(dist: Path) -> None:
    v = version()
    assert sorted(p.name for p in dist.iterdir()) == [f"mcpg_watch-{v}-py3-none-any.whl", f"mcpg_watch-{v}.tar.gz"]


def test_twine_finds_nothing_pypi_would_refuse_in_either(dist: Path) -> None:
    checked = run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))
    assert checked.stdout.count("PASSED") == 2


def test_the_wheel_installs_into_a_fresh_venv_and_its_programs_start(dist: Path, tmp_path: Path) -> None:
    [wheel] = dist.glob("*.whl")
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    run(env / "bin" / "python", "-m", "pip", "install", "--quiet", f"{wheel}[gateway]")
    assert run(env / "bin" / "mcpg-gateway", "--version").stdout == f"mcpg-gateway {version()}\n"
    # Every requirement of the wheel and its extra is installed, at a version it accepts.
    run(env / "bin" / "python", "-m", "pip", "check")
    assert "usage: mcpg-subscribe" in run(env / "bin" / "mcpg-subscribe", "--help").stdout
