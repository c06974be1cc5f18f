"""Checks that a Secret value reached no log, status, Event or metric: as itself, or base64-encoded."""

from __future__ import annotations

import base64
from pathlib import Path


def base64_forms(value: str) -> set[str]:
    """How `value` shows inside any base64 text, at each of the three byte offsets (mod 3) it can start at.

    Secret data travels base64-encoded in API bodies, alone (a token key) or inside a larger value (the rendered
    gateway.yaml, a rotation state's JSON); only the characters that `value`'s own bits fully determine are kept.
    """
    raw = value.encode()
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw).decode()
        forms.add(encoded[(8 * offset + 5) // 6 : 8 * (offset + len(raw)) // 6])
    return forms


def assert_absent(text: str, where: str, *values: str) -> None:
    """None of `values` is in `text`, plainly or base64-encoded; the message names `where`, never the value."""
    for value in values:
        assert value not in text, f"a Secret value is in {where}"
        leaked = [form for form in base64_forms(value) if form in text]
        assert not leaked, f"a Secret value is in {where}, base64-encoded"


def assert_not_logged(log: Path, *values: str) -> None:
    """No Secret value reached the log file `log`, as itself or base64-encoded."""
    assert_absent(log.read_text(errors="replace"), str(log), *values)
