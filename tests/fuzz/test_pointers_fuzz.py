"""JSON Pointers (`watch.strategy.ignore`) parsed from any text: a value or a `ValueError` saying why, never
anything else, and what is accepted reads back exactly. Removal and the digest are in tests/unit/gateway."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mcpg_gateway.contract import pointers

POINTER_PIECES = st.sampled_from(["/", "~", "~0", "~1", "~2", "*", "a", "0"]) | st.text(max_size=3)


@given(text=st.text() | st.lists(POINTER_PIECES, max_size=8).map("".join))
def test_parse_raises_nothing_but_value_error_on_any_text(text: str) -> None:
    try:
        tokens = pointers.parse(text)
    except ValueError:
        return  # anything else propagates and fails the test
    assert pointers.format_pointer(tokens) == text  # and what it accepts, it reads back exactly


@given(keys=st.lists(st.text(), max_size=6))
def test_a_pointer_built_from_any_keys_parses_back_into_them(keys: list[str]) -> None:
    assert pointers.parse(pointers.format_pointer(tuple(keys))) == tuple(keys)
