"""The values a sql_polling tracking query returns, as text and back, exactly: its state on the bus.

Another gateway that takes a watch over compares its next value with this one, so the round trip must keep
both the value and its type (an int is not a Decimal; a naive timestamp is not an aware one): each value is
written as a JSON pair `[tag, text]`. Floats go through their hex form (exact, NaN and infinities included),
Decimals through `str` (exact, exponent and NaN included), date/times through ISO 8601 (offset included).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Callable
from typing import Any

_Codec = tuple[type, str, Callable[[Any], str], Callable[[str], Any]]


def _interval_text(value: dt.timedelta) -> str:
    return f"{value.days},{value.seconds},{value.microseconds}"


def _interval(text: str) -> dt.timedelta:
    days, seconds, microseconds = (int(part) for part in text.split(","))
    return dt.timedelta(days=days, seconds=seconds, microseconds=microseconds)


def _same(text: str) -> str:
    return text


# Subclasses before their bases: a datetime is also a date, a bool also an int (and refused below).
_CODECS: tuple[_Codec, ...] = (
    (dt.datetime, "datetime", dt.datetime.isoformat, dt.datetime.fromisoformat),
    (dt.date, "date", dt.date.isoformat, dt.date.fromisoformat),
    (dt.time, "time", dt.time.isoformat, dt.time.fromisoformat),
    (dt.timedelta, "interval", _interval_text, _interval),
    (decimal.Decimal, "decimal", str, decimal.Decimal),
    (float, "float", float.hex, float.fromhex),
    (int, "int", str, int),
    (str, "text", _same, _same),
    (uuid.UUID, "uuid", str, uuid.UUID),
)
_BY_TAG = {tag: parse for _, tag, _, parse in _CODECS}
_NULL = "null"


def encode(value: Any) -> str:
    """`value` (None or a tracking-query value) as text. `TypeError` for a type no tracking query returns."""
    if value is None:
        return json.dumps([_NULL, ""])
    if isinstance(value, bool):
        raise TypeError("a bool is not a tracking value")
    for kind, tag, show, _ in _CODECS:
        if isinstance(value, kind):
            return json.dumps([tag, show(value)])
    raise TypeError(f"a {type(value).__name__} is not a tracking value")


def decode(text: str) -> Any:
    """The value `encode` wrote. `ValueError` if `text` is not one."""
    try:
        tag, shown = json.loads(text)
    except (ValueError, TypeError, RecursionError) as e:  # RecursionError: nested deeper than the parser goes
        raise ValueError("not an encoded tracking value") from e
    if not isinstance(tag, str) or not isinstance(shown, str):
        raise ValueError("not an encoded tracking value")
    if tag == _NULL:
        return None
    parse = _BY_TAG.get(tag)
    if parse is None:
        raise ValueError(f"unknown tracking value tag {tag!r}")
    try:
        return parse(shown)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise ValueError(f"a malformed {tag} value") from e
