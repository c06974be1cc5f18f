"""The docs hold together: the site builds with `mkdocs build --strict` (a broken link or anchor between pages fails
it), the README's links (outside the site) resolve, and every shell block says who runs it.

A shell block's marker is an HTML comment on the line before its fence (`mcpg_testing.recipes` reads them):
`<!-- recipe: run-by tests/<tier>/test_x.py::test_y -->` names the test that runs the block as written, and
`<!-- recipe: not-run (why) -->` says why none can.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcpg_testing import recipes

ROOT = Path(__file__).parents[2]
BUILD_S = 120.0
"""Bound on one site build (about a second here)."""
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")
CODE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


# --- the site ---------------------------------------------------------------------------------------------------


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor, not a finding
    return subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_S, env=env, check=False)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    built = build(ROOT / "mkdocs.yml", tmp_path / "site")

    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "guides" / "rotation" / "index.html").is_file()


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The site's sources in a scratch directory, to break on purpose."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


@pytest.mark.parametrize(
    ("link", "named"),
    [
        ("[gone](concepts/no-such-page.md)", "concepts/no-such-page.md"),
        ("[gone](concepts/watches.md#no-such-heading)", "no-such-heading"),
        ("[gone](#no-such-heading-here)", "no-such-heading-here"),
        ("[out of the site](../README.md)", "../README.md"),
    ],
)
def test_a_broken_link_fails_the_strict_build_naming_it(copy: Path, link: str, named: str) -> None:
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + f"\nSee {link}.\n")

    built = build(copy / "mkdocs.yml", copy / "site")

    assert built.returncode != 0
    assert named in built.stderr


# --- the README's links -----------------------------------------------------------------------------------------


def shown(path: Path) -> Path:
    """A path as a message names it: from the repository's root when it is in it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def slug(heading: str) -> str:
    """GitHub's anchor for a heading, where the README and its links are read."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = CODE.sub("", page.read_text())
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def links(page: Path) -> list[str]:
    """Every link target of a page, outside code."""
    text = INLINE_CODE.sub("", CODE.sub("", page.read_text()))
    return [m["target"] for m in LINK.finditer(text)]


def broken(page: Path, target: str) -> str | None:
    """Why a relative link does not resolve, or None when it does (or leaves the repository: not checked)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    if not resolved.exists():
        return f"{target}: no such file"
    if anchor and anchor not in anchors(resolved):
        return f"{target}: no heading #{anchor} in {shown(resolved)}"
    return None


def test_the_readmes_relative_links_and_anchors_resolve() -> None:
    found = links(ROOT / "README.md")

    assert len(found) > 20  # the landing page links into the docs
    assert [why for target in found if (why := broken(ROOT / "README.md", target))] == []


def test_a_missing_page_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A `coded` heading, with commas\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[a](other.md#a-coded-heading-with-commas) [b](other.md#nope) [c](gone.md) [d](#page)\n")

    found = [broken(page, target) for target in links(page)]

    assert found == [None, f"other.md#nope: no heading #nope in {tmp_path / 'other.md'}", "gone.md: no such file", None]


# --- every shell block says who runs it -------------------------------------------------------------------------


def defined(test_id: str) -> bool:
    """Whether `tests/x/test_y.py::test_z` (or `::Class::test_z`) names a file and a function in it."""
    path, *names = test_id.split("::")
    file = ROOT / path
    if not names or not path.startswith("tests/") or not file.is_file():
        return False
    scope: list[ast.stmt] = ast.parse(file.read_text()).body
    for name in names:
        found = [node for node in scope if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
        match = next((node for node in found if node.name == name), None)
        if match is None:
            return False
        scope = match.body
    return True


def problem(block: recipes.Block) -> str | None:
    """What is wrong with a block's marker, or None."""
    where = f"{shown(block.path)}:{block.line}"
    if block.marker is None:
        return f"{where}: a {block.language} block with no <!-- recipe: ... --> marker on the line before it"
    kind, rest = block.marker
    if kind == "not-run" and not rest:
        return f"{where}: not-run without a reason"
    if kind == "run-by" and not defined(rest):
        return f"{where}: run-by names {rest or 'nothing'}, which is not a test file and function"
    return None


def test_every_shell_block_of_the_readme_and_the_docs_is_run_by_a_test_or_says_why_not() -> None:
    found = [block for page in recipes.documents() for block in recipes.blocks(page)]

    assert len(found) > 20
    assert [why for block in found if (why := problem(block))] == []


def test_a_block_with_no_marker_a_missing_test_or_no_reason_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\necho a\n```\n"
        "<!-- recipe: run-by tests/unit/test_docs.py::test_no_such_test -->\n```sh\necho b\n```\n"
        "<!-- recipe: run-by tests/unit/no_such_file.py::test_x -->\n```sh\necho c\n```\n"
        "<!-- recipe: not-run -->\n```console\n$ echo d\n```\n"
        "<!-- recipe: run-by tests/unit/test_docs.py::test_the_site_builds_strict -->\n```bash\necho e\n```\n"
        "<!-- recipe: not-run (needs Docker: kind) -->\n```bash\nkind create cluster\n```\n"
    )
    found = [problem(block) for block in recipes.blocks(page)]

    assert [why.split(": ", 1)[1] if why else None for why in found] == [
        "a bash block with no <!-- recipe: ... --> marker on the line before it",
        "run-by names tests/unit/test_docs.py::test_no_such_test, which is not a test file and function",
        "run-by names tests/unit/no_such_file.py::test_x, which is not a test file and function",
        "not-run without a reason",
        None,
        None,
    ]
