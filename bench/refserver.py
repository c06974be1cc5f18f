"""The reference for fan-out and memory: a minimal server written directly on the MCP SDK.

    python bench/refserver.py PORT

Low-level `Server` + a stateful `StreamableHTTPSessionManager`; legacy `resources/subscribe` records the session,
`subscriptions/listen` is the SDK's `ListenHandler` over an `InMemorySubscriptionBus`. `POST /notify?uri=U`
broadcasts `notifications/resources/updated` for U to every subscribed session (send_resource_updated, one task
each) and every listen stream (bus.publish). No auth, no filters, no metrics, no outboxes.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as types
import uvicorn
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Ctx = ServerRequestContext[Any, Any]


def build(port: int) -> Starlette:
    bus = InMemorySubscriptionBus()
    subscribers: dict[str, set[Any]] = {}

    async def subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        subscribers.setdefault(str(params.uri), set()).add(ctx.session)
        return types.EmptyResult()

    # The SDK's default caps (1,024 listen streams, and its session cap) are lifted, as the gateway's are in bench.
    listen = ListenHandler(bus, max_subscriptions=100_000)
    server: Server[Any] = Server("bench-reference", on_subscribe_resource=subscribe, on_subscriptions_listen=listen)
    manager = StreamableHTTPSessionManager(server, stateless=False, max_sessions=100_000)
    tasks: set[asyncio.Task[None]] = set()

    async def send(session: Any, uri: str) -> None:
        try:
            await session.send_resource_updated(uri)
        except Exception:  # a closed session: forget it
            subscribers.get(uri, set()).discard(session)

    async def notify(request: Request) -> Response:
        uri = request.query_params["uri"]
        for session in list(subscribers.get(uri, ())):
            task = asyncio.create_task(send(session, uri))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await bus.publish(ResourceUpdated(uri=uri))
        return JSONResponse({"ok": True, "uri": uri})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    routes = [
        Route("/mcp", endpoint=StreamableHTTPASGIApp(manager)),
        Route("/notify", endpoint=notify, methods=["POST"]),
        Route("/healthz", endpoint=lambda r: JSONResponse({"ok": True})),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(build(port), host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=2048)
