"""A YAML document as the configuration's readers take it: parsed, then bounded before anything walks it.

PyYAML shares an aliased node (`*a` is the very object `&a` built), so a few hundred bytes can stand for billions
of values: cheap to load, and exponential for whatever then walks, copies or validates it (an alias bomb in a
plugin's fields ran `--check` to 775 MB). `bounded` counts a document as its readers see it, every alias expanded,
and refuses one past `MAX_VALUES` values or `MAX_DEPTH` levels; the count stops at the bound, so it costs at most
the bound's work whatever the document says. `load` parses YAML text and applies it (the operator too).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from mcpg_gateway.contract.errors import ConfigError, Problem

MAX_VALUES = 250_000
"""Values (mapping entries and sequence items, aliases expanded) a document may hold: a configuration of 5,000
resources with 50 values each. More is refused before it is read, and counting it costs no more than this."""
MAX_DEPTH = 64
"""Levels of nesting a document may have; a configuration has about eight (a plugin's fields a few more)."""
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where the wheel has it (every platform the images run on): besides being faster, it refuses
flow nesting past 1,000 levels at once, where PyYAML's own scanner takes time quadratic in the depth (a 4 KB line of
`[` took 5 s) and its composer exhausts the stack."""


def load(text: str, where: str) -> Any:
    """The YAML document in `text`, bounded (`bounded`); `ConfigError` naming `where` when it cannot be read."""
    try:
        raw = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        raise _refused(where, f"not valid YAML: {e}") from None
    except RecursionError:  # without libyaml: PyYAML's composer recurses once per level
        raise _refused(where, f"is nested too deeply to read (more than {MAX_DEPTH} levels are refused)") from None
    except ValueError as e:  # a scalar its tag cannot hold: `2024-13-01` as a date, an integer past Python's limit
        raise _refused(where, f"not valid YAML: a value cannot be read ({_value_problem(e)})") from None
    return bounded(raw, where)


def bounded(doc: Any, where: str) -> Any:
    """`doc` itself, or `ConfigError` naming `where` if it expands past `MAX_VALUES` values or `MAX_DEPTH` levels."""
    problem = oversize(doc, MAX_VALUES, MAX_DEPTH)
    if problem is not None:
        raise _refused(where, problem)
    return doc


def oversize(doc: Any, max_values: int, max_depth: int) -> str | None:
    """Why `doc` is too large to read (expanded: each use of an alias counts), or None. At most `max_values` steps.

    A container met again inside itself (an alias within its own anchor) is not walked again: the parse names
    where it is, which a count could not."""
    count = 0
    path: set[int] = set()  # the containers from the root to the one being walked
    stack: list[tuple[Any, bool]] = [(doc, False)] if isinstance(doc, dict | list) else []
    # (container, False): walk it; (container, True): its walk is over, it leaves the path
    while stack:
        value, leaving = stack.pop()
        if leaving:
            path.discard(id(value))
            continue
        if id(value) in path:
            continue
        if len(path) >= max_depth:
            return f"is nested more than {max_depth} levels deep; a configuration is far shallower"
        count += len(value)  # counted before anything is copied: a huge flat list stops here
        if count > max_values:
            return (
                f"holds more than {max_values} values once its YAML aliases are expanded (each use of an alias "
                "counts); a configuration is far smaller, so it is refused before it is read"
            )
        path.add(id(value))
        stack.append((value, True))
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, False) for child in children if isinstance(child, dict | list))
    return None


def _value_problem(error: ValueError) -> str:
    if "integer string conversion" in str(error):  # Python's own text suggests a call nobody writing YAML can make
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return str(error)[:200]


def _refused(where: str, message: str) -> ConfigError:
    return ConfigError([Problem(where, message)])
