"""Kubernetes resource quantities (`500m`, `64Mi`, `1e3`), read exactly as the API server reads them. Pure.

A module of its own because two layers compare them: the operator's settings (its bounds on what an McpGateway
may ask for, checked at start) and the McpGateway's overlay (its requests, limits, and those bounds). Decimal,
never float: `4Ti` and `4398046511104` must compare equal, and `0.1` plus `0.2` must not drift.
"""

from __future__ import annotations

import decimal
import re

QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""A resource quantity, as the API server's own pattern (the CRD carries the same)."""

_SUFFIXES = {
    **{s: decimal.Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: decimal.Decimal(10) ** p for s, p in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6))},
    **{s: decimal.Decimal(10) ** p for s, p in (("G", 9), ("T", 12), ("P", 15), ("E", 18))},
}
_SPLIT = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")


def is_quantity(value: str) -> bool:
    return re.fullmatch(QUANTITY, value) is not None


def parse(value: int | str) -> decimal.Decimal:
    """A Kubernetes quantity as a number (`"64Mi"` -> 67108864, `"500m"` -> 0.5)."""
    if isinstance(value, int):
        return decimal.Decimal(value)
    match = _SPLIT.match(value)
    if match is None or not is_quantity(value):
        raise ValueError(f"not a quantity: {value[:40]!r}")
    number, suffix = decimal.Decimal(match[1]), match[2]
    if suffix in _SUFFIXES:
        return number * _SUFFIXES[suffix]
    try:
        return number * decimal.Decimal(10) ** int(suffix[1:])  # an exponent: 1e3, 12E-1
    except decimal.DecimalException:  # 1e999999999: beyond any quantity, and the API server's range
        raise ValueError(f"out of range: {value[:40]!r}") from None
