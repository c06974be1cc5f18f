"""The release workflow (.github/workflows/release.yml) as far as it runs here, offline.

actionlint finds nothing in it; the version check it starts with passes on this tree and stops a release that
disagrees; the chart lints strictly and packages as the release's version. Its shape too: nothing is pushed before
the check, each job holds only the permissions it uses, every action is pinned to a commit, and the images go where
the chart points. Building the wheel and sdist needs the package index: tests/integration/test_release_artifacts.py.
actionlint and helm are `make binaries`' (hack/build-control-plane.sh).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

from mcpg_testing.controlplane import default_bin_dir

ROOT = Path(__file__).parents[3]
WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
SCRIPT = ROOT / "hack" / "release_version.py"
CHART = ROOT / "charts" / "mcpg"
PINNED = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")
PUBLISHING = {"packages": "write", "id-token": "write", "contents": "write"}
"""Permissions that publish something: no job holding one may run before the version check."""


def binary(name: str) -> Path:
    path = default_bin_dir() / name
    assert path.exists(), f"{path} is missing: run `make binaries` (it builds {name})"
    return path


def run(*argv: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def version() -> str:
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert isinstance(found, str)
    return found


def check(tag: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The version check as the workflow's first job runs it."""
    return run(sys.executable, SCRIPT, tag, *args)


def jobs() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = yaml.safe_load(RELEASE.read_text())["jobs"]
    return found


def needs(name: str) -> set[str]:
    """Every job `name` waits for, directly or through another."""
    direct = jobs()[name].get("needs", [])
    direct = [direct] if isinstance(direct, str) else direct
    return set(direct).union(*(needs(n) for n in direct))


# --- what runs here, as the workflow runs it ---------------------------------------------------------------


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    # Without shellcheck and pyflakes, whether or not the machine has them: the same findings everywhere.
    files = sorted(WORKFLOWS.glob("*.yml"))
    result = run(binary("actionlint"), "-no-color", "-shellcheck=", "-pyflakes=", *files)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_version_check_passes_this_tree_and_prints_what_the_release_publishes() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    result = check(f"v{version()}", "--owner", "MCPG")  # GitHub owners are case-insensitive; GHCR's are lower
    assert result.returncode == 0, result.stderr
    assert dict(line.split("=", 1) for line in result.stdout.splitlines()) == {
        "version": version(),
        "operator_image": values["image"]["repository"],
        "gateway_image": values["gateway"]["image"]["repository"],
        "chart_repository": "oci://ghcr.io/mcpg/charts",
    }


def test_the_version_check_refuses_a_tag_of_another_version() -> None:
    for tag in (f"v{version()}.1", version(), "v0.0.0"):
        result = check(tag)
        assert result.returncode == 1, tag
        assert f"the tag is {tag}, but pyproject.toml's version is {version()}" in result.stderr
        assert result.stdout == "", "nothing for $GITHUB_OUTPUT"


def test_the_version_check_refuses_a_chart_of_another_version(tmp_path: Path) -> None:
    (tmp_path / "charts").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(CHART, tmp_path / "charts" / "mcpg")
    chart = tmp_path / "charts" / "mcpg" / "Chart.yaml"
    chart.write_text(chart.read_text().replace(f'appVersion: "{version()}"', 'appVersion: "9.9.9"'))
    result = check(f"v{version()}", "--root", tmp_path)
    assert result.returncode == 1
    assert result.stderr == f"error: charts/mcpg/Chart.yaml appVersion is 9.9.9, pyproject.toml's version {version()}\n"


def test_the_version_check_refuses_an_owner_whose_registry_the_chart_does_not_point_at() -> None:
    result = check(f"v{version()}", "--owner", "a-fork")
    assert result.returncode == 1
    assert "image.repository is ghcr.io/mcpg/operator, not under ghcr.io/a-fork/" in result.stderr
    assert "gateway.image.repository is ghcr.io/mcpg/gateway, not under ghcr.io/a-fork/" in result.stderr


def test_the_chart_lints_strictly_and_packages_as_the_release_version(tmp_path: Path) -> None:
    helm = binary("helm")
    lint = run(helm, "lint", "--strict", CHART)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    packaged = run(helm, "package", CHART, "--destination", tmp_path)
    assert packaged.returncode == 0, packaged.stderr
    [archive] = tmp_path.iterdir()
    assert archive.name == f"mcpg-{version()}.tgz"
    with tarfile.open(archive) as tar:
        member = tar.extractfile("mcpg/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
    assert (chart["version"], chart["appVersion"]) == (version(), version())


# --- the workflow's shape -----------------------------------------------------------------------------------


def test_the_workflow_runs_on_a_version_tag_or_by_hand() -> None:
    # PyYAML reads the key `on` as YAML 1.1's boolean true.
    triggers = yaml.safe_load(RELEASE.read_text())[True]
    assert triggers["push"] == {"tags": ["v*"]}
    assert triggers["workflow_dispatch"]["inputs"]["tag"]["required"] is True


def test_nothing_is_published_before_the_version_check() -> None:
    publishing = {name for name, job in jobs().items() if PUBLISHING.items() & job.get("permissions", {}).items()}
    assert publishing == {"images", "chart", "pypi", "github-release"}
    assert {name: "check" in needs(name) for name in publishing} == dict.fromkeys(publishing, True)
    # And an upload to PyPI, which can never be taken back, waits for every build that can still fail.
    assert needs("pypi") >= {"dist", "images"}


def test_every_job_holds_only_the_permissions_it_uses() -> None:
    workflow = yaml.safe_load(RELEASE.read_text())
    assert workflow["permissions"] == {}, "nothing granted to a job that does not ask"
    assert {name: job["permissions"] for name, job in jobs().items()} == {
        "check": {"contents": "read"},
        "dist": {"contents": "read"},
        "images": {"contents": "read", "packages": "write"},
        "chart": {"packages": "write"},
        "pypi": {"id-token": "write"},
        "github-release": {"contents": "write"},
    }


def test_every_step_fails_on_a_failure_before_a_pipe() -> None:
    # `shell: bash` is bash -eo pipefail; the default shell would let `| tee` hide a failed version check.
    assert yaml.safe_load(RELEASE.read_text())["defaults"] == {"run": {"shell": "bash"}}


def test_every_action_is_pinned_to_a_commit_with_its_version_beside_it() -> None:
    uses = [line for line in RELEASE.read_text().splitlines() if re.match(r"^\s*(?:- )?uses:", line)]
    assert len(uses) >= 9
    assert [line for line in uses if not PINNED.match(line)] == []


def test_the_images_are_pushed_where_the_chart_points_tagged_with_the_version() -> None:
    [build] = [s for s in jobs()["images"]["steps"] if s.get("uses", "").startswith("docker/build-push-action@")]
    tags = " ".join(build["with"]["tags"].split())
    assert "needs.check.outputs.operator_image || needs.check.outputs.gateway_image }}" in tags
    assert tags.endswith(":${{ needs.check.outputs.version }}")
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert (build["with"]["sbom"], build["with"]["provenance"], build["with"]["push"]) == (True, "mode=max", True)
    [checked] = [s for s in jobs()["check"]["steps"] if "release_version.py" in s.get("run", "")]
    assert '--owner "$OWNER"' in checked["run"]
