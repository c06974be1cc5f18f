"""One release, one version: pyproject.toml states it, and the chart and image tags must say the same.

A release moves the chart and both images together, so a chart of one version never deploys an image of
another by default. `version` in pyproject.toml is the one place to change; this test names every other
place that disagrees with it.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import yaml

from mcpg_gateway import mcp_handlers
from mcpg_operator.settings import GatewayDefaults

ROOT = Path(__file__).parents[3]
CHART = ROOT / "charts" / "mcpg"


def release() -> str:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert isinstance(version, str)
    return version


def tag(image: str) -> str:
    return image.rpartition(":")[2]


def test_the_chart_and_every_default_image_tag_carry_the_package_version() -> None:
    version = release()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # An empty tag in values.yaml is rendered as the chart's appVersion (templates/deployment.yaml).
    operator_tag = values["image"]["tag"] or chart["appVersion"]
    gateway_tag = values["gateway"]["image"]["tag"] or chart["appVersion"]
    found = {
        "charts/mcpg/Chart.yaml version": chart["version"],
        "charts/mcpg/Chart.yaml appVersion": chart["appVersion"],
        "charts/mcpg/values.yaml image.tag (or appVersion)": operator_tag,
        "charts/mcpg/values.yaml gateway.image.tag (or appVersion)": gateway_tag,
        "operator/mcpg_operator/settings.py GatewayDefaults.image": tag(GatewayDefaults().image),
    }
    assert {where: v for where, v in found.items() if v != version} == {}, f"pyproject.toml says {version}"


def test_the_gateway_reports_the_installed_distributions_version() -> None:
    # serverInfo and the server card read it from the installed metadata, which pyproject.toml writes.
    assert importlib.metadata.version(mcp_handlers.DISTRIBUTION) == release()
