"""docs/security.md's "see it for your values" recipe, run as written with the page's own `my-values.yaml`.

The page says that with `watchNamespaces` the chart renders a Role and a RoleBinding in each listed namespace and
no ClusterRole or ClusterRoleBinding at all; the recipe is how a reader checks that for their values, so it must
show exactly that for the page's example. bash runs it in a directory holding the page's values file and the
chart (as `charts/mcpg`, where the recipe names it), with the cached helm first on PATH.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from mcpg_testing import recipes
from mcpg_testing.controlplane import default_bin_dir

ROOT = Path(__file__).parents[3]
PAGE = ROOT / "docs" / "security.md"
VALUES = re.compile(r"```yaml\n# my-values\.yaml\n(.*?)```", re.S)


def test_the_pages_helm_template_shows_roles_in_the_listed_namespaces_and_no_cluster_role(tmp_path: Path) -> None:
    [recipe] = recipes.run_by(
        "tests/unit/chart/test_security_recipe.py::"
        "test_the_pages_helm_template_shows_roles_in_the_listed_namespaces_and_no_cluster_role",
        [PAGE],
    )
    values = VALUES.search(PAGE.read_text())
    assert values is not None, "docs/security.md no longer shows its my-values.yaml"
    (tmp_path / "my-values.yaml").write_text(values[1])
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "mcpg").symlink_to(ROOT / "charts" / "mcpg")
    env = {**os.environ, "PATH": f"{default_bin_dir()}:{os.environ['PATH']}"}

    done = recipes.run(recipe, cwd=tmp_path, env=env, timeout=60)

    assert done.returncode == 0, done.stderr
    rendered = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    listed = yaml.safe_load(values[1])["watchNamespaces"]
    kinds = {(d["kind"], d["metadata"].get("namespace")) for d in rendered}
    assert not {k for k, _ in kinds} & {"ClusterRole", "ClusterRoleBinding"}
    for namespace in listed:
        assert {("Role", namespace), ("RoleBinding", namespace)} <= kinds, kinds
