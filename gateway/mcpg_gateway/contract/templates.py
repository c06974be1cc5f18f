"""URI templates (`scheme://x/{a}/{b}`): their variables, and how a concrete URI is matched against one.

A variable is `{name}` with `name` a letter or `_` then letters, digits or `_`; any other brace is literal text.
The same syntax names the variables a backend URL takes (`reader.render_url` substitutes them).

Matching takes time linear in the URI's length, whatever the URI holds: a URI is text from any caller, and a
backtracking regex over `{a}-{b}` is quadratic (a 32k-character URI once held the event loop for 1.4 s). So a
template is a list of literal pieces and variables walked once, left to right, with these rules:

- A variable's value is a non-empty run of characters other than `/`, `?` and `#`: it never leaves its segment.
- Where a segment holds more than one variable, each but the last ends at the first occurrence of the literal
  text after it (`{owner}-{repo}` on `a-b-c`: owner `a`, repo `b-c`); the last takes the rest of the segment up
  to the template's text that closes it. No value ends inside a percent-encoding (`%4` of `%40`).
- Two variables with nothing between them (`{a}{b}`) could split a value anywhere: the configuration refuses them.

`expand` is the inverse (RFC 6570 simple expansion: every character but the unreserved percent-encoded), so
`match(expand(values))` gives back the same URI.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from urllib.parse import quote

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SEGMENT_END = re.compile(r"[/?#]")
_DELIMITERS = "/?#"


def variables(text: str) -> list[str]:
    """The variable names in `text` (a URI template or a backend URL), in order of appearance, repeats included."""
    return PLACEHOLDER.findall(text)


def repeated(uri_template: str) -> list[str]:
    """The variables `uri_template` names more than once, each listed once, in order of first appearance."""
    return [name for name, count in Counter(variables(uri_template)).items() if count > 1]


def undefined(url: str, defined: Collection[str]) -> list[str]:
    """The variables `url` names that are not in `defined`, each listed once, in order of first appearance."""
    return list(dict.fromkeys(name for name in variables(url) if name not in defined))


def adjacent(uri_template: str) -> list[tuple[str, str]]:
    """Each pair of variables with no text between them (`{a}{b}`), in order."""
    found = list(PLACEHOLDER.finditer(uri_template))
    return [(a.group(1), b.group(1)) for a, b in itertools.pairwise(found) if a.end() == b.start()]


def literals(uri_template: str) -> list[str]:
    """The text between (and around) the variables, in order; empty pieces left out."""
    return [piece for piece in PLACEHOLDER.split(uri_template)[::2] if piece]


@dataclass(frozen=True, slots=True)
class _Var:
    name: str


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed URI template. Build with `parse`; the configuration guarantees its preconditions."""

    text: str
    pieces: tuple[str | _Var, ...]

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables' values (as they are written in `uri`, still percent-encoded), or None if `uri` is not
        one of this template's URIs. Linear in `len(uri)`."""
        values: dict[str, str] = {}
        pos = 0
        for i, piece in enumerate(self.pieces):
            if isinstance(piece, str):
                if not uri.startswith(piece, pos):
                    return None
                pos += len(piece)
                continue
            end = self._value_end(uri, pos, i)
            if end is None or end <= pos:
                return None
            values[piece.name] = uri[pos:end]
            pos = end
        return values if pos == len(uri) else None

    def _value_end(self, uri: str, pos: int, i: int) -> int | None:
        """Where the value of the variable at `self.pieces[i]`, starting at `pos`, ends (None: it cannot)."""
        found = _SEGMENT_END.search(uri, pos)
        segment_end = found.start() if found is not None else len(uri)
        after = self.pieces[i + 1] if i + 1 < len(self.pieces) else None
        if after is None:
            return segment_end
        assert isinstance(after, str)  # `parse`'s precondition: no adjacent variables
        closes_at = _first_delimiter(after)
        if closes_at is not None:  # the text after closes the segment: the value runs up to its first part
            end = segment_end - closes_at
        elif i + 2 == len(self.pieces):  # the text after ends the URI
            end = segment_end - len(after)
        else:  # another variable follows in this segment: the first place the text after fits
            return _first_fit(uri, after, pos, segment_end)
        return None if _cuts_an_encoding(uri, pos, end) else end

    def expand(self, values: Mapping[str, str]) -> str:
        """The URI for `values` (RFC 6570 simple expansion): each value percent-encoded but its unreserved
        characters, so it stays within its segment. `KeyError` if a variable has no value."""
        return "".join(piece if isinstance(piece, str) else quote(values[piece.name], safe="") for piece in self.pieces)


def _first_fit(uri: str, text: str, pos: int, segment_end: int) -> int | None:
    """The first index after `pos` where `text` occurs before `segment_end` and a value ending there would not
    cut a percent-encoding in two. Each search starts past the last, so the walk stays linear."""
    start = pos + 1
    while (found := uri.find(text, start, segment_end)) != -1:
        if not _cuts_an_encoding(uri, pos, found):
            return found
        start = found + 1
    return None


def _cuts_an_encoding(uri: str, pos: int, end: int) -> bool:
    """Whether the value `uri[pos:end]` would end inside a `%XX` (its last or second-last character a `%`)."""
    return uri[end - 1 : end] == "%" or (end - 2 >= pos and uri[end - 2] == "%")


def _first_delimiter(text: str) -> int | None:
    found = _SEGMENT_END.search(text)
    return found.start() if found is not None else None


def parse(uri_template: str) -> Template:
    """`uri_template` ready for matching. Precondition: no variable is repeated (`repeated`) and no two are
    adjacent (`adjacent`), as the configuration model guarantees for every `uri_template` it accepts."""
    pieces: list[str | _Var] = []
    pos = 0
    for m in PLACEHOLDER.finditer(uri_template):
        if m.start() > pos:
            pieces.append(uri_template[pos : m.start()])
        pieces.append(_Var(m.group(1)))
        pos = m.end()
    if pos < len(uri_template):
        pieces.append(uri_template[pos:])
    return Template(uri_template, tuple(pieces))
