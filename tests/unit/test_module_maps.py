"""Every package's module map is complete and names nothing that is gone, so a reader can trust it.

A package's map is its `__init__` docstring. Its *entries* are the docstring's indented lines at the least
indentation among them; an entry's *heading* is the name, or comma-separated names, it starts with
(`reconcile/`, `statuses, events, conditions`); the rest of the entry, continuation lines included, is its
*description*. A module or subpackage `m` of package `P` is named in `P`'s map when:

1. `m` (or `m/`) is in the heading of one of `P`'s entries; or
2. `m` is written in backticks anywhere in `P`'s docstring: `m`, `m.py`, `m/`, or `m.` followed by more; or
3. `P` is a subpackage and `m` is a word of the description of `P`'s own entry in its parent's map (an entry
   may list its subpackage's modules, as `contract/ ... (config: the model; ...)` does).

And every name in a heading is a module or subpackage of `P`, so a map never points at a module that moved.
Docstrings are read with `ast`, so no module is imported to check it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGES = ("mcpg_operator", "mcpg_gateway")
HEADING = re.compile(r"[A-Za-z_]\w*/?(?:, [A-Za-z_]\w*/?)*(?=\s|$)")


@dataclass(frozen=True)
class Entry:
    names: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Package:
    dotted: str
    path: Path
    docstring: str
    description_in_parent: str
    """The description of this package's entry in its parent's map ("" for a top-level package)."""


def _root(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None, name
    assert spec.submodule_search_locations, name
    return Path(next(iter(spec.submodule_search_locations)))


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _children(package: Path) -> dict[str, bool]:
    """Each module (False) and subpackage (True) directly in `package`, `__init__` aside."""
    modules = {p.stem: False for p in package.glob("*.py") if p.stem != "__init__"}
    return modules | {p.name: True for p in package.iterdir() if (p / "__init__.py").is_file()}


def entries(docstring: str) -> list[Entry]:
    lines = [line for line in docstring.splitlines() if line.startswith(" ") and line.strip()]
    if not lines:
        return []
    margin = min(len(line) - len(line.lstrip()) for line in lines)
    found: list[tuple[str, list[str]]] = []
    for line in lines:
        if len(line) - len(line.lstrip()) == margin:
            heading = HEADING.match(line.strip())
            names = heading.group() if heading else ""
            found.append((names, [line.strip()[len(names) :]]))
        elif found:
            found[-1][1].append(line)
    return [_entry(heading, rest) for heading, rest in found]


def _entry(heading: str, rest: list[str]) -> Entry:
    names = tuple(n.strip().rstrip("/") for n in heading.split(",")) if heading else ()
    return Entry(names, " ".join(rest))


def named(module: str, package: Package) -> bool:
    if any(module in e.names for e in entries(package.docstring)):
        return True
    quoted = re.findall(r"`([^`]+)`", package.docstring)
    if any(q in (module, f"{module}.py", f"{module}/") or q.startswith(f"{module}.") for q in quoted):
        return True
    return re.search(rf"(?<![\w.]){re.escape(module)}(?!\w)", package.description_in_parent) is not None


def packages() -> list[Package]:
    found = []
    for top in PACKAGES:
        pending = [Package(top, _root(top), _docstring(_root(top)), "")]
        while pending:
            package = pending.pop()
            found.append(package)
            for child, is_package in _children(package.path).items():
                if is_package:
                    described = [e.description for e in entries(package.docstring) if child in e.names]
                    path = package.path / child
                    pending.append(Package(f"{package.dotted}.{child}", path, _docstring(path), " ".join(described)))
    return sorted(found, key=lambda p: p.dotted)


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.dotted)
def test_every_module_and_subpackage_is_named_in_its_package_map(package: Package) -> None:
    missing = sorted(m for m in _children(package.path) if not named(m, package))
    assert not missing, f"{package.dotted}'s map (its __init__ docstring) does not name: {', '.join(missing)}"


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.dotted)
def test_every_name_heading_a_map_entry_is_a_module_or_subpackage_of_its_package(package: Package) -> None:
    children = _children(package.path)
    stale = sorted({n for e in entries(package.docstring) for n in e.names if n not in children})
    assert not stale, f"{package.dotted}'s map names what it does not hold: {', '.join(stale)}"


def test_the_rule_reads_headings_backticks_and_the_parents_description() -> None:
    doc = "Map:\n\n    a, b/      one `c.py`, `d.thing`\n               and more\n    e the (f: x)\n    `z`: y\n"
    package = Package("p", Path("."), doc, "g and h")
    assert [e.names for e in entries(doc)] == [("a", "b"), ("e",), ()]
    assert all(named(m, package) for m in ("a", "b", "c", "d", "e", "g", "h", "z"))
    assert not any(named(m, package) for m in ("f", "x", "more", "thing"))
