"""`notifications/resources/updated` as the bytes of one SSE event, encoded once per fire (and
`notifications/resources/list_changed`, sent when a new configuration changes what a subscriber may list).

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

from mcpg_gateway.fanout.states import STATE_META_KEY
from mcpg_gateway.sdk.protocol import SUBSCRIPTION_ID_META_KEY

RequestId = int | str
UPDATED = "notifications/resources/updated"
LIST_CHANGED = "notifications/resources/list_changed"
LIST_CHANGED_KEY = "\x00list_changed"
"""The outbox key of a pending list change (`subscribers.Outbox` holds one entry per key): a control character no
served URI can hold (`uris.check`), so it never stands for a resource."""
_EVENT = b'event: message\r\ndata: {"jsonrpc":"2.0","method":"'
_BEFORE_META = _EVENT + UPDATED.encode() + b'","params":{"_meta":{'
_LIST_CHANGED = _EVENT + LIST_CHANGED.encode() + b'"'


def after_meta(uri: str, state: str | None = None) -> bytes:
    """The frame of a notification of `uri` from the end of its subscriber's own `_meta` members: the URI's state
    (`states.py`, the same for every subscriber of one fire), the URI, then the frame's end. (`_meta` comes first,
    where the SDK's models put it.)"""
    tail = (b'},"uri":', _json(uri), b"}}\r\n\r\n")
    return b"".join(tail if state is None else (b",", member(STATE_META_KEY, state), *tail))


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


def list_changed(*members: bytes) -> bytes:
    """notifications/resources/list_changed as one SSE event: with `_meta` members (a listen stream's
    `subscriptionId`), or none (a handshake-era session: the SDK writes its params as null there)."""
    if not members:
        return _LIST_CHANGED + b',"params":null}\r\n\r\n'
    return b"".join((_LIST_CHANGED, b',"params":{"_meta":{', b",".join(members), b"}}}\r\n\r\n"))


def _json(value: Any) -> bytes:
    # Compact and UTF-8, as the SDK's pydantic encoder writes it; JSON escapes CR and LF, so the data stays one line.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
