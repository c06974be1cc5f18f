"""Request heads held to fixed limits on both ports, below every ASGI app, so no route can forget them.

At most `MAX_REQUEST_LINE_BYTES` of request line (else 414), `MAX_HEAD_BYTES` in all and `MAX_HEADER_FIELDS` fields
(else 431), measured as the bytes h11 consumed, so the answer does not depend on how the head was split into
packets. A request with both Content-Length and Transfer-Encoding (the shape of request smuggling) is refused with
400, and so is one repeating a header read as one value (`SINGLETON_HEADERS`): two readers taking different copies
is how a limit gets bypassed (issue 30: a second `MCP-Protocol-Version` opened sessions the session limit never
counted). Each refusal closes the connection (`connections.GuardedProtocol.send_400_response`).
"""

from __future__ import annotations

from collections.abc import Iterable

import h11

MAX_REQUEST_LINE_BYTES = 8 * 1024
"""Method, target and version, without the line end: a longer request line is refused with 414."""
MAX_HEAD_BYTES = 16 * 1024
"""The whole request head, request line and final blank line included (Node.js's default): else 431."""
MAX_HEADER_FIELDS = 100
"""Header fields in one request: more is refused with 431."""
SINGLETON_HEADERS = frozenset(
    {
        b"authorization",
        b"content-type",
        b"mcp-protocol-version",
        b"mcp-session-id",
        b"mcp-method",
        b"mcp-name",
        b"last-event-id",
    }
)
"""Headers the gateway or the MCP SDK reads as one value: repeated, a request is refused with 400. (The SDK routes
on the first `MCP-Protocol-Version`; a reader taking the last would classify the same request differently.) h11
itself refuses a second Host, and Content-Length copies that differ; Origin has its own rule: `origins.py`
answers two with 403."""
Refusal = tuple[int, str]
"""A refused request's status and the fixed text answered with it (never the client's bytes)."""
REFUSED_BY_H11: dict[int, str] = {400: "Invalid HTTP request.", 501: "Transfer-Encoding other than chunked."}


class HeadLimits(h11.Connection):
    """h11's server side, holding each request head to the limits however it was split into packets.

    h11 bounds only an incomplete head (`max_incomplete_event_size`); a head that arrives whole in one read is
    parsed at any size. So each parsed head is measured as well, as the bytes its parse took from the buffer.
    """

    def __init__(self) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.refused: Refusal | None = None
        """Why the last event was refused, for the answer; None until then."""

    @property
    def buffered(self) -> int:
        """Bytes received and not yet parsed. (h11 has no public size of its buffer: `trailing_data` copies it.)"""
        return len(self._receive_buffer)

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        heading = self.their_state is h11.IDLE
        before = self.buffered
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:
            too_long = heading and e.error_status_hint == 431  # h11's bound on an incomplete head
            self.refused = _incomplete_head(bytes(self._receive_buffer)) if too_long else _refused_by_h11(e)
            raise
        if isinstance(event, h11.Request):
            self.refused = head_refusal(event, before - self.buffered)
            if self.refused is not None:
                raise h11.RemoteProtocolError(self.refused[1], error_status_hint=self.refused[0])
        return event


def head_refusal(request: h11.Request, size: int) -> Refusal | None:
    """Why a complete request head of `size` bytes is refused, or None."""
    line = len(request.method) + len(request.target) + len(b"HTTP/") + len(request.http_version) + 2
    if line > MAX_REQUEST_LINE_BYTES:
        return 414, f"Request line longer than {MAX_REQUEST_LINE_BYTES} bytes."
    if size > MAX_HEAD_BYTES or len(request.headers) > MAX_HEADER_FIELDS:
        return 431, f"Request head over {MAX_HEAD_BYTES} bytes or {MAX_HEADER_FIELDS} header fields."
    names = {name for name, _ in request.headers}  # h11 gives them lower-cased
    if b"content-length" in names and b"transfer-encoding" in names:
        # RFC 9112 6.3 lets a server refuse it; reading it either way is how a proxy and a server disagree.
        return 400, "Both Content-Length and Transfer-Encoding."
    if (repeated := _repeated_singleton(request.headers)) is not None:
        return 400, f"Header {repeated} given more than once."
    return None


def _repeated_singleton(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The first of `SINGLETON_HEADERS` that `headers` repeat (its name, one of ours: never the client's bytes)."""
    seen: set[bytes] = set()
    for name, _ in headers:
        if name in SINGLETON_HEADERS:
            if name in seen:
                return name.decode()
            seen.add(name)
    return None


def _incomplete_head(buffered: bytes) -> Refusal:
    """h11 gave up on a head longer than MAX_HEAD_BYTES before its end: 414 when its request line is too long,
    as the complete head would have been told."""
    end = buffered.find(b"\n")
    line = len(buffered) if end < 0 else len(buffered[:end].removesuffix(b"\r"))
    if line > MAX_REQUEST_LINE_BYTES:
        return 414, f"Request line longer than {MAX_REQUEST_LINE_BYTES} bytes."
    return 431, f"Request head over {MAX_HEAD_BYTES} bytes or {MAX_HEADER_FIELDS} header fields."


def _refused_by_h11(e: h11.RemoteProtocolError) -> Refusal:
    status = e.error_status_hint if e.error_status_hint in REFUSED_BY_H11 else 400
    return status, REFUSED_BY_H11[status]
