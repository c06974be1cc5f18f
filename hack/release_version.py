"""What a release publishes, checked before anything is pushed: the tag, pyproject.toml and the chart must agree.

    python hack/release_version.py TAG [--owner OWNER] [--root DIR]

A release moves the wheel, the chart and both images together, so one disagreement stops it whole (exit 1, each
disagreement named on stderr). On agreement it prints, as `key=value` lines for $GITHUB_OUTPUT, what the release
workflow publishes: the version, both image repositories as values.yaml names them (so the images land where the
chart looks) and the chart's OCI repository beside them. With --owner (the GitHub repository owner) the images
must be under ghcr.io/<owner>: a workflow's token can push only there, and a fork must not publish a chart that
points at someone else's images.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = "ghcr.io"


@dataclass(frozen=True, slots=True)
class Image:
    """One default image of the chart: where it lives in values.yaml, its repository and tag ("" = appVersion)."""

    key: str
    repository: str
    tag: str


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    chart_version: str
    app_version: str
    images: tuple[Image, ...]


def _image(values: dict[str, Any], key: str) -> Image:
    block = values
    for part in key.split("."):
        block = block[part]
    return Image(key, str(block["repository"]), str(block.get("tag") or ""))


def read(root: Path) -> Release:
    """The versions and default images as pyproject.toml and charts/mcpg state them."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((root / "charts/mcpg/Chart.yaml").read_text())
    values = yaml.safe_load((root / "charts/mcpg/values.yaml").read_text())
    images = (_image(values, "image"), _image(values, "gateway.image"))
    return Release(str(project["version"]), str(chart["version"]), str(chart["appVersion"]), images)


def disagreements(release: Release, tag: str, owner: str | None) -> list[str]:
    """Every way the tag, the files and the owner disagree; empty when the release may go ahead."""
    version = release.version
    found = []
    if tag != f"v{version}":
        found.append(f"the tag is {tag}, but pyproject.toml's version is {version} (v{version})")
    for name, value in (("version", release.chart_version), ("appVersion", release.app_version)):
        if value != version:
            found.append(f"charts/mcpg/Chart.yaml {name} is {value}, pyproject.toml's version {version}")
    for image in release.images:
        if image.tag not in ("", version):
            found.append(f"charts/mcpg/values.yaml {image.key}.tag is {image.tag}: leave it empty (the appVersion)")
        if owner is not None and not image.repository.startswith(f"{REGISTRY}/{owner.lower()}/"):
            found.append(
                f"charts/mcpg/values.yaml {image.key}.repository is {image.repository}, not under "
                f"{REGISTRY}/{owner.lower()}/ where this repository's release can push"
            )
    return found


def outputs(release: Release) -> dict[str, str]:
    """What the workflow publishes. The chart goes beside the operator image: oci://ghcr.io/<owner>/charts."""
    operator, gateway = release.images
    namespace = operator.repository.rsplit("/", 1)[0]
    return {
        "version": release.version,
        "operator_image": operator.repository,
        "gateway_image": gateway.repository,
        "chart_repository": f"oci://{namespace}/charts",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tag", help="the release tag, v<version>")
    parser.add_argument("--owner", help="the GitHub repository owner: the images must be under ghcr.io/<owner>")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository root (default: this checkout)")
    args = parser.parse_args(argv)
    release = read(args.root)
    found = disagreements(release, args.tag, args.owner)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if found:
        return 1
    print("\n".join(f"{key}={value}" for key, value in outputs(release).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
