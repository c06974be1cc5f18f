"""Digests of a configuration document, computed the same way by the program that renders it and the one serving it.

A digest is of the document as written (the raw mapping, before `${env.NAME}` is resolved), canonical JSON
(keys sorted, no spaces) under SHA-256, so a YAML file and the dict it was rendered from have the same one.
Three are named here, each with one use:

- `document`: the whole configuration. A gateway applies a new configuration only when this differs from the one
  it serves, and acknowledges the one it serves by it.
- `entries`: each resource and template entry's own, shortened. A watch is served once every pod serves its entry,
  whatever happened to the others, and a webhook token is carried by the entries of the watches that use it.
- `restart`: the sections a running process cannot swap (what it bound, connected or sized at start:
  `RESTART_ONLY`). Those change only with a new process: the operator puts this digest on the pod template, so a
  change to them rolls the pods, and to nothing else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

ENTRY_DIGEST_LENGTH = 16
"""Hex digits kept of an entry's digest: 64 bits, as a ResourceWatch's `status.configHash` shows it."""

RESTART_ONLY: tuple[tuple[str, ...], ...] = (
    ("gateway", "bus"),
    ("gateway", "nats"),
    ("gateway", "liveness"),
    ("gateway", "limits", "connections"),
    ("gateway", "limits", "header_timeout_s"),
    ("gateway", "limits", "body_timeout_s"),
    ("gateway", "limits", "write_timeout_s"),
    ("gateway", "limits", "upstream_connections"),
    ("gateway", "limits", "sessions_total"),
    ("gateway", "server", "session_idle_timeout_s"),
)
"""The fields a running gateway keeps as it started: the bus and the NATS connections it opened, the liveness
rules its watches were built with, the caps and deadlines of its listening sockets, the size of its upstream
connection pool, and the SDK session manager's session cap and idle timeout. Everything else is swapped in place."""


def canonical(value: Any) -> bytes:
    """`value` as the canonical JSON the digests are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def of(value: Any) -> str:
    """The SHA-256 of `value`'s canonical JSON, in hex."""
    return hashlib.sha256(canonical(value)).hexdigest()


def document(raw: Mapping[str, Any]) -> str:
    """The digest of a whole configuration."""
    return of(raw)


def entries(raw: Mapping[str, Any]) -> dict[str, str]:
    """Each entry's name (resources and templates) -> its shortened digest. Entries without a name are left out:
    a document with one is refused whole, and names nothing."""
    out: dict[str, str] = {}
    for entry in _entries(raw):
        name = entry.get("name")
        if isinstance(name, str):
            out[name] = of(entry)[:ENTRY_DIGEST_LENGTH]
    return out


def restart(raw: Mapping[str, Any]) -> str:
    """The digest of the restart-only fields (`RESTART_ONLY`), each as written or absent."""
    return of(restart_only(raw))


def restart_only(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The restart-only fields present in `raw`, by dotted path."""
    out: dict[str, Any] = {}
    for path in RESTART_ONLY:
        found, value = _at(raw, path)
        if found:
            out[".".join(path)] = value
    return out


def restart_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The dotted paths of the restart-only fields that differ between two documents."""
    old, new = restart_only(before), restart_only(after)
    return [".".join(p) for p in RESTART_ONLY if old.get(".".join(p)) != new.get(".".join(p))]


def _entries(raw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    capabilities = (raw.get("mcp") or {}).get("capabilities") or {}
    if not isinstance(capabilities, Mapping):
        return []
    out: list[Mapping[str, Any]] = []
    for kind in ("resources", "resource_templates"):
        listed = capabilities.get(kind) or []
        if isinstance(listed, list):
            out += [e for e in listed if isinstance(e, Mapping)]
    return out


def _at(raw: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    value: Any = raw
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value
