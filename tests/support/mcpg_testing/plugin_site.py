"""The test plugin (`tests/plugins/mcpg_test_plugin`) laid out as `pip install --target DIR` lays out its wheel, so
a program from an image environment loads it through PYTHONPATH.

An image environment holds only what the image installs; a user adds a plugin to their image with pip. Building
the plugin's wheel here would fetch its build backend (hatchling) from an index, so `install` writes the files the
wheel's install would: the module, and a dist-info whose METADATA and entry_points.txt come from the plugin's
pyproject.toml. The gateway finds it through `importlib.metadata`, as it finds any installed plugin.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from mcpg_testing.images import REPO

PLUGIN = REPO / "tests" / "plugins" / "mcpg_test_plugin"


def install(target: Path, plugin: Path = PLUGIN) -> Path:
    """Lay the plugin out in `target` (created if need be) and return it: the PYTHONPATH entry to give."""
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    target.mkdir(parents=True, exist_ok=True)
    for module in plugin.glob("*.py"):
        shutil.copy2(module, target / module.name)
    dist_info = target / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir(exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    (dist_info / "METADATA").write_text(metadata)
    (dist_info / "entry_points.txt").write_text(_entry_points(project.get("entry-points", {})))
    return target


def _entry_points(groups: dict[str, dict[str, str]]) -> str:
    """entry_points.txt: one INI section per group, as a wheel carries it."""
    sections = []
    for group, points in groups.items():
        lines = [f"[{group}]", *(f"{name} = {value}" for name, value in points.items())]
        sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)
