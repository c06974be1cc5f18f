"""The shipped gateway examples (`examples/gateway/*.yaml`) as tests run them: pointed at servers on loopback.

`rebased` moves every HTTP backend to a local upstream by its scheme, host and port only; the path and the query
stay the example's, so what the upstream is asked is the request the example makes against the real service.
`${env.NAME}` values are the tests' own (`configs.EXAMPLE_ENV`), resolved here where a test needs the value
itself (a webhook token to post, a header the upstream must see).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import yaml

from mcpg_testing.configs import EXAMPLE_ENV
from mcpg_testing.images import REPO

GATEWAY_EXAMPLES = REPO / "examples" / "gateway"
MANIFEST_EXAMPLES = REPO / "examples" / "manifests"
SENDERS = REPO / "examples" / "senders"
REAL_WORLD = "real-world example"
"""What the header comment of an example with a placeholder says, so nobody mistakes it for one that runs as is."""
PLACEHOLDER = re.compile(r"(?<![A-Za-z_])[A-Z][A-Z0-9]*_ID(?![A-Za-z0-9_])")
"""FOLDER_ID, FILE_ID, PROJECT_ID: what a user replaces with an id of theirs (percent-quoted too: %27FOLDER_ID%27)."""
_ENV = re.compile(r"\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")


def gateway_examples() -> list[Path]:
    return sorted(GATEWAY_EXAMPLES.glob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    raw = yaml.safe_load(path.read_text())
    assert isinstance(raw, dict), path
    return raw


def entries(raw: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every resource and resource template of a configuration, in file order."""
    capabilities = raw["mcp"]["capabilities"]
    yield from capabilities.get("resources") or []
    yield from capabilities.get("resource_templates") or []


def rebase(url: str, base: str) -> str:
    """`url` with the scheme, host and port of `base`; its path (template variables and all) and query kept."""
    parts, to = urlsplit(url), urlsplit(base)
    return urlunsplit((to.scheme, to.netloc, parts.path, parts.query, parts.fragment))


def rebased(raw: dict[str, Any], base: str) -> dict[str, Any]:
    """A copy of `raw` whose every HTTP backend reads from `base` instead."""
    out = copy.deepcopy(raw)
    for entry in entries(out):
        backend = entry["backend"]
        assert backend.get("kind", "http") == "http", f"{entry['name']}: a backend kind this helper cannot move"
        backend["url"] = rebase(backend["url"], base)
    return out


def target(url: str, variables: dict[str, str] | None = None) -> str:
    """The path and query a backend URL asks for, its template variables filled in (plain values only)."""
    parts = urlsplit(url.format(**variables) if variables else url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def decoded(target: str) -> tuple[str, list[tuple[str, str]]]:
    """A request target as its server reads it: the path and the query's fields, percent-decoded.

    How the gateway's client writes the query is its own: yarl re-quotes it, sending `%27` as `'`, which a server
    decoding the fields reads alike (RFC 3986 calls the two forms different URIs; no server here tells them apart).
    """
    parts = urlsplit(target)
    return unquote(parts.path), parse_qsl(parts.query, keep_blank_values=True)


def resolved(text: str, environ: Mapping[str, str] = EXAMPLE_ENV) -> str:
    """`text` with each `${env.NAME}` replaced by its value in `environ` (by default the tests' values)."""
    return _ENV.sub(lambda m: environ[m.group(1)], text)


def header_comment(path: Path) -> str:
    """The comment lines a file opens with, joined, without their `#`."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def placeholders(path: Path) -> set[str]:
    """The placeholders the file's YAML (not its comments) holds."""
    body = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
    return set(PLACEHOLDER.findall(body))
