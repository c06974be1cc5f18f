"""The wire's floor for fan-out: a minimal server writing one pre-encoded SSE frame to every open stream.

    python bench/wireserver.py PORT

Plain ASGI on uvicorn (the gateway's HTTP stack), speaking just enough MCP for bench/subscribers.py in both eras:
handshake-era `initialize` (JSON answer with a session id), `notifications/initialized` (202), a GET stream and
`resources/subscribe`; 2026-07-28 `subscriptions/listen`, whose response is the stream (acknowledged first).
`POST /notify?uri=U` encodes `notifications/resources/updated` for U once, then writes it to every stream
subscribed to U, one `send` after another in the request's own task: no per-message objects, no queues, no task
hops, no filters, no auth, no isolation (one stalled reader would hold up the rest). A listen stream's frame
carries its `subscriptionId`, joined in as bytes.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import uvicorn

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
JSON_HEADERS = [(b"content-type", b"application/json")]
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


class Stream:
    """One open SSE response and the bytes its frames carry in `_meta` (empty for a handshake-era stream)."""

    def __init__(self, send: Send, meta: bytes) -> None:
        self.send, self.meta = send, meta


class Wire:
    def __init__(self) -> None:
        self.sessions: dict[str, set[str]] = {}  # session id -> subscribed URIs
        self.get_streams: dict[str, Stream] = {}  # session id -> its GET stream
        self.listeners: dict[str, set[Stream]] = {}  # uri -> listen streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/healthz":
            await respond(send, 200, b'{"ok":true}')
        elif path == "/notify" and method == "POST":
            await self.notify(parse_qs(scope["query_string"].decode())["uri"][0])
            await respond(send, 200, b'{"ok":true}')
        elif path == "/mcp" and method == "GET":
            await self.get_stream(scope, receive, send)
        elif path == "/mcp" and method == "POST":
            await self.post(scope, receive, send)
        else:
            await respond(send, 404, b"{}")

    async def notify(self, uri: str) -> None:
        head = b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/resources/updated","params":'
        head += b'{"uri":' + json.dumps(uri).encode() + b',"_meta":{'
        tail = b"}}}\r\n\r\n"
        for sid, uris in self.sessions.items():
            stream = self.get_streams.get(sid)
            if stream is not None and uri in uris:
                await stream.send({"type": "http.response.body", "body": head + tail, "more_body": True})
        for stream in list(self.listeners.get(uri, ())):
            body = b"".join((head, stream.meta, tail))
            await stream.send({"type": "http.response.body", "body": body, "more_body": True})

    async def get_stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        sid = header(scope, b"mcp-session-id")
        if sid is None or sid not in self.sessions:
            await respond(send, 404, b"{}")
            return
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        self.get_streams[sid] = Stream(send, b"")
        try:
            await until_disconnected(receive)
        finally:
            self.get_streams.pop(sid, None)

    async def post(self, scope: Scope, receive: Receive, send: Send) -> None:
        msg = json.loads(await body(receive))
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            sid = uuid.uuid4().hex
            self.sessions[sid] = set()
            result = {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"resources": {"subscribe": True}},
                "serverInfo": {"name": "bench-wire", "version": "0"},
            }
            answer = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
            await respond(send, 200, answer, [(b"mcp-session-id", sid.encode())])
        elif method == "resources/subscribe":
            self.sessions.setdefault(header(scope, b"mcp-session-id") or "", set()).add(msg["params"]["uri"])
            await respond(send, 200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": {}}).encode())
        elif method == "subscriptions/listen":
            await self.listen(msg, receive, send)
        else:  # notifications/initialized and anything else a client posts without needing an answer
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    async def listen(self, msg: dict[str, Any], receive: Receive, send: Send) -> None:
        uris = msg["params"]["notifications"].get("resourceSubscriptions") or []
        meta = {SUBSCRIPTION_ID: msg["id"]}
        ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {"_meta": meta}}
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        frame = b"event: message\r\ndata: " + json.dumps(ack).encode() + b"\r\n\r\n"
        await send({"type": "http.response.body", "body": frame, "more_body": True})
        stream = Stream(send, json.dumps(meta).encode()[1:-1])
        for uri in uris:
            self.listeners.setdefault(uri, set()).add(stream)
        try:
            await until_disconnected(receive)
        finally:
            for uri in uris:
                self.listeners.get(uri, set()).discard(stream)


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


async def body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def until_disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def respond(send: Send, status: int, payload: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS + (extra or [])})
    await send({"type": "http.response.body", "body": payload})


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(Wire(), host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=2048)
