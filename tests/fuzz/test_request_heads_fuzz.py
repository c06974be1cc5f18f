"""The request-head parser (`request_heads.HeadLimits`) under any arrangement of repeated headers, in any packets.

A request repeating a header that the gateway or the MCP SDK reads as one value is refused with 400 (issue 30:
the SDK routed on the first MCP-Protocol-Version, the session limit read the last); a request giving each such
header at most once is never refused for it, whatever else repeats, in whatever case, however it is split. The
expected answer is computed here from the header list, apart from the code.
"""

from __future__ import annotations

import h11
from hypothesis import given
from hypothesis import strategies as st

from mcpg_gateway import request_heads

SINGLETONS = sorted({"host", *(name.decode() for name in request_heads.SINGLETON_HEADERS)})
"""Read as one value: the gateway's list, and Host, whose second copy h11 refuses itself."""
LISTS = ["accept", "x-custom", "cache-control", "origin"]
"""Headers that may repeat (origin's own rule is `origins.py`'s, above this parser)."""


def _cased(name: str, mask: int) -> str:
    """`name` with the letters `mask`'s bits pick in upper case (h11 lower-cases names: case never matters)."""
    return "".join(c.upper() if mask >> i & 1 else c for i, c in enumerate(name))


names = st.builds(_cased, st.sampled_from(SINGLETONS + LISTS), st.integers(min_value=0, max_value=2**20))
values = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-./", min_size=1, max_size=20)
fields = st.lists(st.tuples(names, values), max_size=16)
pieces = st.lists(st.integers(min_value=1, max_value=64), max_size=12)


def parsed(request: bytes, sizes: list[int]) -> h11.Request | request_heads.Refusal:
    """The request `HeadLimits` parsed from `request`, fed in pieces of `sizes` (then the rest), or its refusal."""
    head = request_heads.HeadLimits()
    start = 0
    for size in [*sizes, len(request)]:
        head.receive_data(request[start : start + size])
        start += size
        try:
            event = head.next_event()
        except h11.RemoteProtocolError:
            assert head.refused is not None
            return head.refused
        if isinstance(event, h11.Request):
            return event
    raise AssertionError("the whole head was sent and neither parsed nor refused")


def request_with(extra: list[tuple[str, str]]) -> bytes:
    lines = ["GET /healthz HTTP/1.1", "Host: gw", *(f"{name}: {value}" for name, value in extra)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def repeated_singletons(extra: list[tuple[str, str]]) -> set[str]:
    counts: dict[str, int] = {"host": 1}
    for name, _ in extra:
        counts[name.lower()] = counts.get(name.lower(), 0) + 1
    return {name for name, count in counts.items() if count > 1 and name in SINGLETONS}


@given(extra=fields, sizes=pieces)
def test_a_request_is_refused_with_400_exactly_when_it_repeats_a_header_read_as_one_value(
    extra: list[tuple[str, str]], sizes: list[int]
) -> None:
    outcome = parsed(request_with(extra), sizes)
    repeated = repeated_singletons(extra)
    if not repeated:
        assert isinstance(outcome, h11.Request), outcome
        return
    assert not isinstance(outcome, h11.Request)
    status, text = outcome
    assert status == 400
    # A fixed text naming one of the repeated headers, never a value; h11 refuses a second Host in its own words.
    texts = {f"Header {name} given more than once." for name in repeated}
    if "host" in repeated:
        texts.add(request_heads.REFUSED_BY_H11[400])
    assert text in texts
