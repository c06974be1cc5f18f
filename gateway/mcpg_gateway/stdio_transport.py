"""Newline-delimited JSON-RPC on stdin and stdout, read on the event loop: the transport of `--stdio` (`stdio.py`).

The SDK's `stdio_server` reads stdin in a worker thread, a blocking read that nothing cancels: a gateway told to
stop waited for its client's next line, for ever while stdin stayed open. Here the loop watches stdin, so stopping
ends the read at once. Each line is bounded (`MAX_LINE_BYTES`: a longer one is refused as it passes the bound, never
buffered) and parsed with the SDK's `JSONRPCMessage` model; a line that is not JSON is answered -32700 and one that
is JSON but no JSON-RPC message -32600 (JSON-RPC 2.0, section 5.1), and the session carries on. As in the SDK, fd 0
reads the null device and fd 1 writes to stderr while serving: nothing else in the process can take the client's
input or tear a frame on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcpg_gateway import cancellation

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 4 * 1024 * 1024
"""The longest line read, one JSON-RPC message: as much as /mcp takes in one request body (the SDK's 4 MiB)."""
READ_CHUNK_BYTES = 64 * 1024
FLUSH_TIMEOUT_S = 2.0
"""How long the answers the session already sent may take to reach the client at the end; then they are dropped."""

Incoming = SessionMessage | Exception
Streams = tuple[MemoryObjectReceiveStream[Incoming], MemoryObjectSendStream[SessionMessage]]


class TooLong:
    """What `Lines` yields for a line past its bound: once, where it passes it."""


TOO_LONG = TooLong()
Line = bytes | TooLong


@contextlib.asynccontextmanager
async def streams() -> AsyncIterator[Streams]:
    """The session's streams over stdin and stdout for the block. At its end reading stops at once, and what the
    session already sent is written out within `FLUSH_TIMEOUT_S`."""
    with _claimed(0, lambda: os.open(os.devnull, os.O_RDONLY)) as stdin, _claimed(1, lambda: os.dup(2)) as stdout:
        source, sink = await _Input.open(stdin), await _Output.open(stdout)
        incoming_sender, incoming = anyio.create_memory_object_stream[Incoming](0)
        outgoing, outgoing_receiver = anyio.create_memory_object_stream[SessionMessage](0)
        reading = asyncio.create_task(_read(source, incoming_sender, sink), name="stdio reader")
        writing = asyncio.create_task(_write(outgoing_receiver, sink), name="stdio writer")
        try:
            yield incoming, outgoing
        finally:
            reading.cancel()
            outgoing.close()  # the session is over: the writer ends once it has written what it was handed
            await _finish(reading, writing, source, sink)


class Lines:
    """Splits bytes into lines of at most `limit` bytes (newline excluded). A longer line yields `TOO_LONG` once, as
    it passes the bound, and the rest of it, up to its newline, is dropped: never held."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> list[Line]:
        """The lines `chunk` completes."""
        out: list[Line] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            out += self._piece(chunk[start:end], complete=True)
            start = end + 1
        return out + self._piece(chunk[start:], complete=False)

    def end(self) -> list[Line]:
        """At the end of input: a last line without its newline is a line too."""
        return [] if self._skipping or not self._buffer else self._piece(b"", complete=True)

    def _piece(self, piece: bytes, *, complete: bool) -> list[Line]:
        if self._skipping:  # the rest of a line already refused
            self._skipping = not complete
            return []
        if len(self._buffer) + len(piece) > self._limit:
            self._buffer.clear()
            self._skipping = not complete
            return [TOO_LONG]
        self._buffer += piece
        if not complete:
            return []
        line = bytes(self._buffer)
        self._buffer.clear()
        return [line]


def parse(line: Line) -> SessionMessage | types.JSONRPCError | None:
    """A line as the session takes it, or the error answering it; None for a blank line."""
    if isinstance(line, TooLong):
        return _error(None, types.INVALID_REQUEST, f"Invalid Request: a line longer than {MAX_LINE_BYTES} bytes")
    if not line.strip():
        return None
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValidationError as e:
        if any(err["type"] == "json_invalid" for err in e.errors(include_input=False, include_url=False)):
            return _error(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
    return _error(
        _request_id(line),
        types.INVALID_REQUEST,
        "Invalid Request: the line is JSON but not a JSON-RPC 2.0 request, notification or response",
    )


def encode(message: types.JSONRPCMessage | types.JSONRPCError) -> bytes:
    """One frame on the wire, as the SDK writes it."""
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def _error(request_id: types.RequestId | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


def _request_id(line: bytes) -> types.RequestId | None:
    """The id of an invalid message, when it has one a response may carry (a string or an integer); else None,
    as JSON-RPC 2.0 answers when the id cannot be told."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return None
    found = doc.get("id") if isinstance(doc, dict) else None
    return found if isinstance(found, str | int) and not isinstance(found, bool) else None


async def _read(source: _Input, messages: MemoryObjectSendStream[Incoming], sink: _Output) -> None:
    """Every line of stdin to the session, or its error answer to stdout, until stdin ends (that ends the session)."""
    lines, refused = Lines(MAX_LINE_BYTES), 0
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):  # the session stopped reading
        async with messages:
            while chunk := await source.read():
                for line in lines.feed(chunk):
                    refused += await _take(line, messages, sink, refused)
            for line in lines.end():
                await _take(line, messages, sink, refused)


async def _take(line: Line, messages: MemoryObjectSendStream[Incoming], sink: _Output, refused: int) -> int:
    """Hand one line to the session, or answer it; 1 if it was refused."""
    taken = parse(line)
    if taken is None:
        return 0
    if isinstance(taken, SessionMessage):
        await messages.send(taken)
        return 0
    if not refused:  # the first only: a client that keeps sending garbage must not flood the log
        logger.warning(
            "stdio: refused a line from the client (%s); later ones are answered, not logged", taken.error.message
        )
    await sink.send(encode(taken))
    return 1


async def _write(messages: MemoryObjectReceiveStream[SessionMessage], sink: _Output) -> None:
    async with messages:
        async for message in messages:
            await sink.send(encode(message.message))


async def _finish(reading: asyncio.Task[None], writing: asyncio.Task[None], source: _Input, sink: _Output) -> None:
    """Wait for the reader (cancelled) and the writer (bounded), then give both descriptors back as they were."""
    try:
        await cancellation.stopped([reading], cancellation.STEP_TIMEOUT_S, "stdio: reading stdin")
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                await writing
        except TimeoutError:
            logger.warning("stdio: the client took none of the last answers within %g s; dropped", FLUSH_TIMEOUT_S)
    finally:
        source.close()
        await sink.close()


def _watchable(fd: int) -> bool:
    """Whether the loop can wait on `fd`: a pipe, a socket or a terminal (epoll refuses files and /dev/null)."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


class _Input:
    """stdin, chunk by chunk. A pipe (what a client launching the gateway gives it) is read by the loop; a file or
    the null device, which the loop cannot watch and whose reads never wait, is read directly."""

    def __init__(self, fd: int, reader: asyncio.StreamReader | None, transport: asyncio.ReadTransport | None) -> None:
        self._fd, self._reader, self._transport = fd, reader, transport

    @classmethod
    async def open(cls, fd: int) -> _Input:
        if not _watchable(fd):
            return cls(fd, None, None)
        reader = asyncio.StreamReader(limit=READ_CHUNK_BYTES)
        pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)  # `_claimed` closes the descriptor
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        return cls(fd, reader, transport)

    async def read(self) -> bytes:
        """The next bytes (at most `READ_CHUNK_BYTES`); empty at the end of input."""
        if self._reader is not None:
            return await self._reader.read(READ_CHUNK_BYTES)
        await asyncio.sleep(0)  # a file is read in one go otherwise: let the rest of the loop run between chunks
        return os.read(self._fd, READ_CHUNK_BYTES)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            os.set_blocking(self._fd, True)  # the loop made the pipe non-blocking; the client shares it


class _Output:
    """stdout. A pipe is written through the loop, so a client slow to read holds only the writer; a file (or the
    null device) directly, which never waits long."""

    def __init__(self, fd: int, transport: asyncio.WriteTransport | None, flow: _Flow | None) -> None:
        self._fd, self._transport, self._flow = fd, transport, flow

    @classmethod
    async def open(cls, fd: int) -> _Output:
        if not _watchable(fd):
            return cls(fd, None, None)
        pipe = os.fdopen(fd, "wb", buffering=0, closefd=False)
        transport, flow = await asyncio.get_running_loop().connect_write_pipe(_Flow, pipe)
        return cls(fd, transport, flow)

    async def send(self, frame: bytes) -> None:
        """Write one whole frame (frames never interleave: each is handed over in one call)."""
        if self._transport is None or self._flow is None:
            _write_all(self._fd, frame)
        elif not self._flow.lost:  # the client closed its end: nobody reads what would be written
            self._transport.write(frame)
            await self._flow.writable.wait()

    async def close(self) -> None:
        if self._transport is None or self._flow is None:
            return
        self._transport.close()  # writes out what is buffered first
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                await self._flow.closed.wait()
        except TimeoutError:
            self._transport.abort()
        os.set_blocking(self._fd, True)


class _Flow(asyncio.BaseProtocol):
    """A write pipe's flow control: `writable` is clear while the pipe's buffer is over its high-water mark."""

    def __init__(self) -> None:
        self.writable, self.closed = asyncio.Event(), asyncio.Event()
        self.writable.set()
        self.lost = False

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.writable.set()
        self.closed.set()


def _write_all(fd: int, frame: bytes) -> None:
    view = memoryview(frame)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def _claimed(fd: int, diversion: Callable[[], int]) -> Iterator[int]:
    """A private duplicate of `fd` to serve the protocol on, while `fd` itself points where `diversion` opens;
    `fd` is pointed back at the wire afterwards."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        elsewhere = diversion()
        os.dup2(elsewhere, fd)
        os.close(elsewhere)
        yield private
    finally:
        os.dup2(private, fd)
        os.close(private)
