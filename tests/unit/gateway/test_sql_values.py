"""sql_polling's state codec: every value a tracking query returns survives the trip to text and back, exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpg_gateway.strategies import sql_values

OFFSETS = st.builds(lambda minutes: dt.timezone(dt.timedelta(minutes=minutes)), st.integers(-23 * 60, 23 * 60))
TRACKED = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False),
    st.text(),
    st.dates(),
    st.times(),
    st.times(timezones=OFFSETS),
    st.datetimes(),
    st.datetimes(timezones=OFFSETS),
    st.timedeltas(),
    st.uuids(),
)


def same(a: Any, b: Any) -> bool:
    """Equal, of the same type, and (for times and date-times) at the same UTC offset."""
    if type(a) is not type(b) or a != b:
        return False
    return not isinstance(a, dt.datetime | dt.time) or a.utcoffset() == b.utcoffset()


@given(TRACKED)
def test_every_tracking_value_round_trips_with_its_type(value: Any) -> None:
    assert same(sql_values.decode(sql_values.encode(value)), value)


@given(st.decimals(allow_nan=False), st.decimals(allow_nan=False))
def test_decoded_decimals_keep_their_order(a: decimal.Decimal, b: decimal.Decimal) -> None:
    decoded_a, decoded_b = (sql_values.decode(sql_values.encode(x)) for x in (a, b))
    assert (decoded_a < decoded_b) == (a < b)
    assert str(decoded_a) == str(a)  # the exponent too: 1.50 stays 1.50


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.0])
def test_special_floats_round_trip(value: float) -> None:
    decoded = sql_values.decode(sql_values.encode(value))
    assert type(decoded) is float
    assert repr(decoded) == repr(value)


@pytest.mark.parametrize("text", ["NaN", "sNaN", "Infinity", "-Infinity", "-0", "1E+5"])
def test_special_decimals_round_trip_to_the_same_text(text: str) -> None:
    decoded = sql_values.decode(sql_values.encode(decimal.Decimal(text)))
    assert type(decoded) is decimal.Decimal
    assert str(decoded) == text


def test_an_int_and_an_equal_decimal_stay_apart() -> None:
    assert type(sql_values.decode(sql_values.encode(1))) is int
    assert type(sql_values.decode(sql_values.encode(decimal.Decimal(1)))) is decimal.Decimal


def test_a_uuid_subclass_as_asyncpg_returns_it_decodes_as_a_plain_uuid() -> None:
    class PgUuid(uuid.UUID):
        pass

    value = PgUuid(int=7)
    assert sql_values.decode(sql_values.encode(value)) == uuid.UUID(int=7)


@pytest.mark.parametrize("value", [True, b"bytes", [1], {"a": 1}])
def test_a_value_no_tracking_query_returns_is_refused(value: Any) -> None:
    with pytest.raises(TypeError, match="not a tracking value"):
        sql_values.encode(value)


@pytest.mark.parametrize(
    "text", ["", "null", "[]", '["int"]', '["int", 1]', '["int", "x"]', '["colour", "red"]', '["date", "2026-13-01"]']
)
def test_text_that_is_not_an_encoded_value_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"tracking value|malformed"):
        sql_values.decode(text)
