"""The shell blocks of the README and the docs, as a user copies them, for the tests that run them as written.

A block a test runs carries a marker on the line before its fence, naming the test:

    <!-- recipe: run-by tests/e2e/test_recipes.py::test_rotation_recipe -->

and a block no test can run here says why: `<!-- recipe: not-run (needs Docker: kind) -->`. A `console` block is
a terminal transcript: commands after `$ ` (continued by a trailing backslash), the rest what they print; a `bash`
or `sh` block is all commands.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHELLS = frozenset({"bash", "sh", "shell", "console"})
MARKER = re.compile(r"^<!--\s*recipe:\s*(?P<kind>run-by|not-run)\s*(?P<rest>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced shell block: where it is, what marks it, and its text (unindented)."""

    path: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    marker: tuple[str, str] | None
    """(`run-by` or `not-run`, the test id or the reason), from the line before the fence."""
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def script(self) -> str:
        """What a user types: a console block's `$ ` lines (with their continuations), or the whole block."""
        if self.language != "console":
            return self.text
        return "\n".join(_commands(self.text.splitlines()))

    def steps(self) -> list[tuple[str, list[str]]]:
        """A console block as (command, the lines it printed) pairs, in order; blank lines between steps dropped."""
        out: list[tuple[list[str], list[str]]] = []
        continued = False
        for line in self.text.splitlines():
            if line.startswith("$ ") or continued:
                if not continued:
                    out.append(([], []))
                out[-1][0].append(line.removeprefix("$ "))
                continued = line.endswith("\\")
            elif out:
                out[-1][1].append(line)
        return [("\n".join(typed), _trimmed(shown)) for typed, shown in out]

    def printed(self) -> list[str]:
        """A console block's lines that are output, not commands."""
        if self.language != "console":
            return []
        typed = set(_commands(self.text.splitlines(), raw=True))
        return [line for line in self.text.splitlines() if line not in typed]


def _trimmed(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _commands(lines: list[str], raw: bool = False) -> Iterator[str]:
    """The typed lines of a transcript; `raw` keeps them as written (with `$ `), for telling output apart."""
    continued = False
    for line in lines:
        if line.startswith("$ ") or continued:
            yield line if raw else line.removeprefix("$ ")
            continued = line.endswith("\\")


def blocks(path: Path) -> list[Block]:
    """Every shell block of a Markdown file, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        end = _closing(lines, i, opened["fence"])
        if opened["lang"] in SHELLS:
            found.append(_block(path, lines, i, end, opened))
        i = end + 1
    return found


def _closing(lines: list[str], start: int, fence: str) -> int:
    for j in range(start + 1, len(lines)):
        if lines[j].strip().startswith(fence) and not lines[j].strip()[len(fence) :].strip():
            return j
    raise ValueError(f"line {start + 1}: a {fence} fence that is never closed")


def _block(path: Path, lines: list[str], start: int, end: int, opened: re.Match[str]) -> Block:
    indent = len(opened["indent"])
    body = "\n".join(line[indent:] for line in lines[start + 1 : end])
    marked = MARKER.match(lines[start - 1].strip()) if start > 0 else None
    marker = (marked["kind"], marked["rest"].strip("() ")) if marked else None
    return Block(path, start + 1, opened["lang"], marker, body)


def documents() -> list[Path]:
    """The README and every hand-written page of the docs (the generated reference and benchmarks hold no recipe)."""
    generated = {"reference.md", "benchmarks.md"}
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name not in generated]
    return [ROOT / "README.md", *pages]


def run_by(test_id: str, paths: Iterable[Path] | None = None) -> list[Block]:
    """The blocks marked as run by `test_id` (`tests/e2e/file.py::test_name`), in page order."""
    marked = [b for p in paths or documents() for b in blocks(p) if b.marker == ("run-by", test_id)]
    if not marked:
        raise LookupError(f"no block is marked run-by {test_id}")
    return marked


def run(block: Block, *, cwd: Path, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`block`'s commands as a user's shell runs them, stopping at the first that fails (bash -e, pipefail), with
    what they printed; never raises on a failing command (the test judges the exit status)."""
    argv = ["bash", "-euo", "pipefail", "-c", block.script()]
    return subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False)
