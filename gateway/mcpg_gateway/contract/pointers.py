"""JSON Pointers (RFC 6901) with one extension, `*`, for `watch.strategy.ignore`.

Some upstreams recompute a field on every read (a CI job's `duration` while it runs): hashed as is, such a body
would "change" on every poll. `watch.strategy.ignore` names those fields with pointers, and the poll strategy
hashes the body without them (`without`). The contract parses the pointers up front (`parse_ignored`), so a bad
one is a configuration error naming the field, never a surprise at run time.

The extension: a reference token that is exactly `*` matches every member of an object and every element of an
array (`/jobs/*/duration`). A literal member named "*" therefore cannot be addressed (`~` escapes only `~` and
`/`); that is the price of the wildcard, and no field an upstream recomputes is known to be called "*".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

Pointer = tuple[str, ...]
"""A parsed pointer: its reference tokens, unescaped. `()` is the whole document."""
WILDCARD = "*"

_BAD_ESCAPE = re.compile(r"~(?![01])")
_INDEX = re.compile(r"0|[1-9][0-9]*")
"""An array index as RFC 6901 spells it: no sign, no leading zero. `-` (past the end) is never an element."""


def parse(text: str) -> Pointer:
    """The reference tokens of `text` (RFC 6901, `~1` is `/` and `~0` is `~`); `ValueError` saying what is wrong."""
    if text == "":
        return ()
    if not text.startswith("/"):
        raise ValueError(f"{text!r} is not a JSON Pointer: it must be empty or start with '/'")
    bad = _BAD_ESCAPE.search(text)
    if bad is not None:
        found = text[bad.start() : bad.start() + 2]
        raise ValueError(
            f"{text!r}: {found!r} is not an escape: '~' must be followed by 0 ('~0' is '~') or 1 ('~1' is '/')"
        )
    # In this order, so that "~01" is "~1" (RFC 6901, section 4).
    return tuple(token.replace("~1", "/").replace("~0", "~") for token in text[1:].split("/"))


def parse_ignored(text: str) -> Pointer:
    """`parse`, refusing the empty pointer: ignoring the whole document would leave nothing to compare."""
    pointer = parse(text)
    if not pointer:
        raise ValueError("the empty pointer is the whole document: ignoring it would leave nothing to compare")
    return pointer


def escape(key: str) -> str:
    """`key` as one reference token: `~` becomes `~0` and `/` becomes `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


def format_pointer(pointer: Pointer) -> str:
    """The text of `pointer`, which `parse` takes back exactly (a token `*` stays the wildcard)."""
    return "".join("/" + escape(token) for token in pointer)


def without(document: Any, pointers: Iterable[Pointer]) -> Any:
    """A copy of `document` with every value a pointer matches removed; `document` itself is left as it was.

    An object's matched member is deleted; an array's matched element becomes null, so the other elements keep
    their indices (and two documents differing only there compare equal). A pointer that matches nothing changes
    nothing, and the empty pointer removes the whole document (null). Containers on a matched path are copied;
    the rest is shared with `document`, so treat both as read-only. Never raises on a JSON value, however deep:
    nothing here recurses.
    """
    for pointer in pointers:
        if not pointer:
            return None
        document = _remove(document, _matches(document, pointer))
    return document


Path = tuple[str | int, ...]
"""Concrete steps from the root: object keys and array indices, no wildcard."""


def _matches(document: Any, pointer: Pointer) -> list[Path]:
    """The concrete paths of every value `pointer` matches (all as deep as the pointer is long)."""
    frontier: list[tuple[Path, Any]] = [((), document)]
    for token in pointer:
        frontier = [((*path, step), node[step]) for path, node in frontier for step in _steps(node, token)]
    return [path for path, _ in frontier]


def _steps(node: Any, token: str) -> list[str | int]:
    """The keys or indices of `node` that `token` matches: none if `node` is not a container."""
    if isinstance(node, dict):
        if token == WILDCARD:
            return list(node)
        return [token] if token in node else []
    if isinstance(node, list):
        if token == WILDCARD:
            return list(range(len(node)))
        # Compare lengths first: an index of thousands of digits is past any end, and too long for int().
        fits = _INDEX.fullmatch(token) and len(token) <= len(str(len(node))) and int(token) < len(node)
        return [int(token)] if fits else []
    return []


def _remove(document: Any, paths: list[Path]) -> Any:
    """`document` with each path's value removed, copying each container on the way at most once."""
    if not paths:
        return document
    copies: dict[Path, Any] = {(): _shallow(document)}
    for path in paths:
        parent = _copied(copies, path[:-1])
        last = path[-1]
        if isinstance(parent, dict):
            del parent[last]
        else:
            parent[last] = None
    return copies[()]


def _copied(copies: dict[Path, Any], path: Path) -> Any:
    """The copy of the container at `path`, copying it (and its ancestors) on first use."""
    node = copies[()]
    for depth in range(1, len(path) + 1):
        prefix = path[:depth]
        if prefix not in copies:
            copies[prefix] = node[prefix[-1]] = _shallow(node[prefix[-1]])
        node = copies[prefix]
    return node


def _shallow(container: Any) -> Any:
    return dict(container) if isinstance(container, dict) else list(container)
