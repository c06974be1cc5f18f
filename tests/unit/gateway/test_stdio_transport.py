"""The stdio transport's lines: bounded, and each one a message for the session or an error answer for the client.

JSON-RPC 2.0 (section 5.1) answers a line that is not JSON with -32700 and one that is JSON but no valid message
with -32600, the id null unless the message has one to carry; the SDK's transport dropped both. The program itself,
stopped with its stdin open, is tests/integration/test_stdio_program.py.
"""

from __future__ import annotations

import json

import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from mcpg_gateway import stdio_transport
from mcpg_gateway.stdio_transport import TOO_LONG, Lines, parse


def test_lines_split_on_newlines_across_chunks_and_a_last_line_needs_none() -> None:
    lines = Lines(limit=10)
    assert lines.feed(b'{"a"') == []
    assert lines.feed(b":1}\n{}\n[") == [b'{"a":1}', b"{}"]
    assert lines.end() == [b"["]


def test_a_line_past_the_bound_is_refused_once_where_it_passes_it_and_the_next_line_is_read_whole() -> None:
    lines = Lines(limit=10)
    assert lines.feed(b"x" * 8) == []
    assert lines.feed(b"x" * 8) == [TOO_LONG]  # refused now, not when its newline arrives
    assert lines.feed(b"x" * 10_000) == []  # the rest is dropped as it comes, never held
    assert lines.feed(b"xx\n0123456789\n") == [b"0123456789"]
    assert lines.end() == []


def answer(line: stdio_transport.Line) -> dict[str, object]:
    parsed = parse(line)
    assert isinstance(parsed, types.JSONRPCError)
    decoded = json.loads(stdio_transport.encode(parsed))
    assert isinstance(decoded, dict)
    return decoded


@pytest.mark.parametrize("line", [b'{"jsonrpc": "2.0", "id": 1, "method"', b"\xff\xfe", b"ping"])
def test_a_line_that_is_not_json_is_answered_parse_error_with_a_null_id(line: bytes) -> None:
    assert answer(line) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error: the line is not JSON"},
    }


@pytest.mark.parametrize(
    ("line", "request_id"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "method": 5}', 7),
        (b'{"jsonrpc": "2.0", "id": "a"}', "a"),
        (b'{"jsonrpc": "2.0", "id": true, "result": {}}', None),
        (b"[1, 2]", None),
        (b'"text"', None),
    ],
)
def test_json_that_is_no_json_rpc_message_is_answered_invalid_request_with_its_id_if_it_has_one(
    line: bytes, request_id: object
) -> None:
    assert answer(line) == {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": -32600,
            "message": "Invalid Request: the line is JSON but not a JSON-RPC 2.0 request, notification or response",
        },
    }


def test_a_line_past_the_bound_is_answered_invalid_request_naming_the_bound() -> None:
    assert answer(TOO_LONG)["error"] == {
        "code": -32600,
        "message": f"Invalid Request: a line longer than {stdio_transport.MAX_LINE_BYTES} bytes",
    }


def test_a_message_goes_to_the_session_and_a_blank_line_is_nothing() -> None:
    parsed = parse(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\r')
    assert isinstance(parsed, SessionMessage)
    assert isinstance(parsed.message, types.JSONRPCRequest)
    assert parse(b"  \r") is None
