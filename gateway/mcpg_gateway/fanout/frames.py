"""`notifications/resources/updated` as the bytes of one SSE event, encoded once per fire.

Every subscriber of a fired URI gets the same message but for its `_meta`: a listen stream's `subscriptionId`
and the watch's state for that subscriber (`lease.py`). So a fire encodes what follows the `_meta` members once
(`after_meta`, which holds the URI), each subscriber adds its own members as bytes already encoded, and `frame`
joins them: no message object is built and nothing is re-encoded per subscriber.

The bytes are the ones the MCP SDK writes for the same message in both eras: an `event: message` with the
JSON-RPC notification as its one `data` line, lines ended by CRLF (`test_sdk_contract.py` compares them with the
SDK's own encoders, so an SDK that changes its framing fails loudly).
"""

from __future__ import annotations

import json
from typing import Any

from mcpg_gateway.sdk.protocol import SUBSCRIPTION_ID_META_KEY

RequestId = int | str
UPDATED = "notifications/resources/updated"
_BEFORE_META = b'event: message\r\ndata: {"jsonrpc":"2.0","method":"' + UPDATED.encode() + b'","params":{"_meta":{'


def after_meta(uri: str) -> bytes:
    """The frame of a notification of `uri` from the end of its `_meta` members: the URI, then the frame's end.
    (`_meta` comes first, where the SDK's models put it.)"""
    return b"".join((b'},"uri":', _json(uri), b"}}\r\n\r\n"))


def member(key: str, value: Any) -> bytes:
    """One `_meta` member, `"key":value`, as JSON bytes."""
    return _json({key: value})[1:-1]


def subscription_member(request_id: RequestId) -> bytes:
    """A listen stream's `subscriptionId` member: the id of its subscriptions/listen request."""
    return member(SUBSCRIPTION_ID_META_KEY, request_id)


def subscription_meta(request_id: RequestId) -> dict[str, Any]:
    """The same member as a `_meta` dict, for a notification the SDK encodes (off HTTP)."""
    return {SUBSCRIPTION_ID_META_KEY: request_id}


def frame(after_meta: bytes, *members: bytes) -> bytes:
    """The whole SSE event: its `_meta` members (at least one), and `after_meta` of its URI."""
    return b"".join((_BEFORE_META, b",".join(members), after_meta))


def _json(value: Any) -> bytes:
    # Compact and UTF-8, as the SDK's pydantic encoder writes it; JSON escapes CR and LF, so the data stays one line.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
