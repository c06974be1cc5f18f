"""What the bus holds comes from any client of the namespace's account (`bus.py`, `ownership.py`): whatever the
bytes, decoding a state entry, a lease or a fire message gives a valid value or None, never an exception; a
sql_polling state that cannot be read back is a `ValueError` (the owner then takes its own baseline)."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from mcpg_gateway import bus, ownership
from mcpg_gateway.strategies import sql_values

PREFIX = "mcpg"
DEEP = b"[" * 30_000 + b"]" * 30_000
"""Nested far deeper than the JSON parser goes, and within every entry's size bound but the lease's."""
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["v", "state", "uri", "owner"]), inner),
    max_leaves=12,
)
ENTRIES = st.binary() | JSON.map(lambda v: json.dumps(v).encode())


@given(data=ENTRIES)
@example(data=DEEP)
@example(data=b'{"v": 1, "state": "\\ud800"}')
@example(data=b'{"v": true, "state": "x"}')
def test_any_bytes_decode_to_a_state_or_none(data: bytes) -> None:
    state = ownership.stored_state(data)
    if state is not None and len(state) < ownership.MAX_STATE_BYTES // 12:  # escaped, it still fits the bound
        assert ownership.stored_state(ownership.state_value(state)) == state  # and it is stored back as read


@given(data=ENTRIES)
@example(data=DEEP)
@example(data=b'{"owner": "\\ud800"}')
def test_any_bytes_decode_to_a_lease_holder_a_log_line_can_show_or_none(data: bytes) -> None:
    holder = ownership.lease_holder(data)
    if holder is not None:
        assert holder.isprintable()
        assert 0 < len(holder) <= ownership.MAX_HOLDER_CHARS
        holder.encode()


@given(uri=st.text(max_size=64), data=ENTRIES, on_its_subject=st.booleans())
@example(uri="x", data=DEEP, on_its_subject=True)
@example(uri="x", data=b'{"uri": "\\ud800"}', on_its_subject=True)
def test_any_bytes_on_a_fire_subject_decode_to_the_subject_s_uri_or_none(
    uri: str, data: bytes, on_its_subject: bool
) -> None:
    if on_its_subject and bus.encodable(uri):  # a real fire of `uri`, or junk on its subject
        data = json.dumps({"uri": uri, "strategy": "poll", "origin": "gw-0"}).encode()
    subject = bus.fire_subject(PREFIX, uri) if bus.encodable(uri) else f"{PREFIX}.fire.0"
    got = bus.fire_uri(data, subject, PREFIX)
    if got is not None:
        assert bus.fire_subject(PREFIX, got) == subject


@given(text=st.text() | JSON.map(json.dumps))
@example(text=DEEP.decode())
@example(text='["decimal", "' + "9" * 5000 + '"]')
@example(text='["decimal", "sNaN"]')
def test_any_text_decodes_to_a_tracking_value_or_a_value_error(text: str) -> None:
    try:
        value = sql_values.decode(text)
    except ValueError:
        return
    encoded = sql_values.encode(value)  # compared as text: a NaN equals nothing, a signalling one raises
    assert sql_values.encode(sql_values.decode(encoded)) == encoded
