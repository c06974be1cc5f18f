"""sql_polling's value rules: which column types can be tracked, what a scalar is, what "advanced" means."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest

from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies.sql_polling import advanced, column_type, scalar

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("previous", "current"),
    [
        (1, 2),
        (Decimal("1.5"), Decimal("1.50001")),
        (1.0, 1.5),
        ("2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"),
        (T0, T0 + dt.timedelta(microseconds=1)),
        (dt.date(2026, 1, 1), dt.date(2026, 1, 2)),
        (dt.timedelta(seconds=1), dt.timedelta(seconds=2)),
        (uuid.UUID(int=1), uuid.UUID(int=2)),
    ],
)
def test_a_strictly_greater_value_advances(previous: Any, current: Any) -> None:
    assert advanced(previous, current)


@pytest.mark.parametrize(("previous", "current"), [(2, 2), (2, 1), ("b", "a"), (T0, T0 - dt.timedelta(days=1))])
def test_an_equal_or_lower_value_does_not_advance_even_though_it_differs(previous: Any, current: Any) -> None:
    assert not advanced(previous, current)


@pytest.mark.parametrize("missing", [None, math.nan, Decimal("NaN")])
def test_null_and_nan_never_advance_and_anything_after_them_does(missing: Any) -> None:
    assert not advanced(1, missing)
    assert not advanced(missing, missing)
    assert advanced(missing, -1)


def test_values_of_different_types_do_not_advance() -> None:
    assert not advanced(1, "2")


def test_text_compares_by_code_point_not_collation() -> None:
    assert advanced("Z", "a")


@pytest.mark.parametrize(
    "type_name", ["int4", "int8", "numeric", "float8", "text", "varchar", "timestamptz", "date", "uuid", "pg_lsn"]
)
def test_an_orderable_column_type_is_accepted(type_name: str) -> None:
    assert column_type([type_name]) == type_name


@pytest.mark.parametrize("type_name", ["json", "jsonb", "bytea", "bool", "money", "_int4", "record", "point"])
def test_a_column_type_without_a_usable_order_is_a_clear_error(type_name: str) -> None:
    with pytest.raises(StrategyError, match=f"returns a {type_name} value, which cannot tell whether it advanced"):
        column_type([type_name])


@pytest.mark.parametrize("types", [[], ["int4", "int4"]])
def test_a_query_must_return_exactly_one_column(types: list[str]) -> None:
    with pytest.raises(StrategyError, match=f"exactly one column, not {len(types)}"):
        column_type(types)


def test_a_scalar_is_the_single_value_of_a_single_row() -> None:
    assert scalar([(42,)]) == 42
    assert scalar([(None,)]) is None


@pytest.mark.parametrize("rows", [[], [(1,), (2,)]])
def test_a_result_that_is_not_exactly_one_row_is_not_a_scalar(rows: list[tuple[int]]) -> None:
    with pytest.raises(StrategyError, match=f"exactly one row, not {len(rows)}"):
        scalar(rows)
