"""Reading recipes out of Markdown as a user copies them: markers, transcripts, continuations, indented blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpg_testing import recipes

PAGE = """\
# A page

<!-- recipe: run-by tests/e2e/test_x.py::test_y -->
```console
$ v=$(kubectl patch secret s \\
      -p '{}')
$ kubectl wait x --for=jsonpath='{.a}'="$v"
x condition met
```

1. In a list:

   <!-- recipe: not-run (needs Docker: kind) -->
   ```bash
   kind create cluster
   ```

```python
print("not a shell block")
```

```sh
echo unmarked
```
"""


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    return path


def test_each_shell_block_is_found_with_its_marker(page: Path) -> None:
    found = recipes.blocks(page)
    assert [(b.line, b.language, b.marker) for b in found] == [
        (4, "console", ("run-by", "tests/e2e/test_x.py::test_y")),
        (14, "bash", ("not-run", "needs Docker: kind")),
        (22, "sh", None),
    ]
    assert found[1].text == "kind create cluster"  # the list's indentation is the page's, not the command's


def test_a_transcript_splits_into_what_is_typed_and_what_is_printed(page: Path) -> None:
    transcript = recipes.blocks(page)[0]
    assert (
        transcript.script()
        == "v=$(kubectl patch secret s \\\n      -p '{}')\nkubectl wait x --for=jsonpath='{.a}'=\"$v\""
    )
    assert transcript.printed() == ["x condition met"]


def test_a_test_finds_its_blocks_and_only_its_own(page: Path) -> None:
    assert [b.line for b in recipes.run_by("tests/e2e/test_x.py::test_y", [page])] == [4]
    with pytest.raises(LookupError, match="test_z"):
        recipes.run_by("tests/e2e/test_x.py::test_z", [page])


def test_an_unclosed_fence_is_an_error_naming_its_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.md"
    broken.write_text("text\n```bash\necho never closed\n")
    with pytest.raises(ValueError, match="line 2"):
        recipes.blocks(broken)


def test_a_transcript_reads_as_steps_each_with_what_it_printed(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```console\n$ a \\\n  --b\none\ntwo\n\n$ c\n\n$ d\nthree\n```\n")
    [block] = recipes.blocks(page)
    assert block.steps() == [("a \\\n  --b", ["one", "two"]), ("c", []), ("d", ["three"])]
