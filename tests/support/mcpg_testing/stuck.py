"""Clients that stop reading: an SSE stream on a socket whose receive buffer is small and never read past the
stream's start, in either era, so the gateway's buffers for it fill after a few thousand notifications.

Raw sockets, not an HTTP client: a client library reads what arrives, and the point is one that does not.
"""

from __future__ import annotations

import asyncio
import json
import socket

import httpx2

from mcpg_testing import BOUND_S

RECEIVE_BUFFER = 4096
HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"
MCP_HEADERS = "host: 127.0.0.1\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\n"


def small_window(small_segments: bool = False) -> socket.socket:
    """A non-blocking client socket with a 4 KiB receive buffer; with `small_segments`, a 1,000-byte segment size
    too, which keeps the gateway's side of the connection from growing its send buffer to megabytes on loopback
    (so a few hundred notifications fill it, not tens of thousands)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    if small_segments:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)
    sock.setblocking(False)
    return sock


async def started(
    sock: socket.socket, port: int, head: str, body: bytes, until: bytes, host: str = "127.0.0.1"
) -> socket.socket:
    """Send one request (`head` without its Content-Length) on `sock` to `host:port`; read its answer up to
    `until` only."""
    loop = asyncio.get_running_loop()
    received = b""
    async with asyncio.timeout(BOUND_S):
        await loop.sock_connect(sock, (host, port))
        await loop.sock_sendall(sock, f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
        while until not in received:
            chunk = await loop.sock_recv(sock, 4096)
            assert chunk, f"the stream closed: {received[:300]!r}"
            received += chunk
    assert received.startswith(b"HTTP/1.1 200"), received[:300]
    return sock


async def listen_stream(
    port: int,
    uri: str,
    sock: socket.socket | None = None,
    headers: dict[str, str] | None = None,
    host: str = "127.0.0.1",
) -> socket.socket:
    """A 2026-07-28 listen stream of `uri` from the gateway at `host:port` (a pod's address, say), read up to its
    acknowledgement only; `headers` added (a bearer token)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "stuck", "version": "0"},
    }
    params = {"notifications": {"resourceSubscriptions": [uri]}, "_meta": meta}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params}).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    era = f"mcp-protocol-version: {MODERN}\r\nmcp-method: subscriptions/listen\r\n"
    head = f"POST /mcp HTTP/1.1\r\n{MCP_HEADERS}{extra}{era}"
    return await started(sock or small_window(), port, head, body, until=b"acknowledged", host=host)


async def session_stream(port: int, uri: str, sock: socket.socket | None = None) -> socket.socket:
    """A handshake-era session subscribed to `uri`, its GET stream read past its headers only."""
    info = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "stuck", "version": "0"}}
    headers = {"accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=BOUND_S) as http:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": info}
        r = await http.post("/mcp", json=initialize, headers=headers)
        headers |= {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE}
        await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        session = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.startswith("mcp-"))
        head = f"GET /mcp HTTP/1.1\r\n{MCP_HEADERS}{session}"
        stream = await started(sock or small_window(), port, head, b"", until=b"\r\n\r\n")
        subscribe = {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": uri}}
        assert (await http.post("/mcp", json=subscribe, headers=headers)).status_code == 200
    return stream
