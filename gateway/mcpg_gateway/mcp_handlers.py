"""The MCP face of the gateway: list, read, and subscriptions in both protocol eras.

Handshake-era clients subscribe on a stateful session and are told on the session's GET stream; 2026-07-28
clients open `subscriptions/listen`, whose response is the stream. Both become `Subscriber`s of the same
watch registry. A subscription is refused up front (before any acknowledgement) when its URI is unknown,
has no watch, or its watch cannot take a baseline.

Every handler acts for the principal the SDK's auth context names, stored on the subscriber at subscribe or
listen time. The read policy gates read, subscribe and each listened URI, and is checked before anything else
about the URI, so a refusal is word for word the "unknown resource" error: it cannot reveal that a URI exists.
A listen stream the gateway ends because it is stopping says so in its result (`END_REASON_META_KEY`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Any

import mcp.types as types
from mcp.server import NotificationOptions, Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from mcpg_gateway import catalog, errors
from mcpg_gateway.errors import ReadError, StrategyError
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.identity import Principal
from mcpg_gateway.subscribers import OutboxClosed, Subscriber

logger = logging.getLogger(__name__)

Ctx = ServerRequestContext[Any, Any]
_SESSION_KEY = "mcpg.subscriber"

END_REASON_META_KEY = "io.mcpg/endReason"
"""In a subscriptions/listen result's `_meta`: why the gateway ended the stream."""
SERVER_STOPPING = "server_stopping"
"""The gateway is stopping: listen again at once (another replica takes it) and re-read what you watch."""


class WatchServer(Server[Any]):
    # Over Streamable HTTP the session manager builds initialization options with a default
    # NotificationOptions, which would advertise listChanged=false; we do announce list changes.
    def create_initialization_options(self, *args: Any, **kwargs: Any) -> Any:
        if not args and "notification_options" not in kwargs:
            kwargs["notification_options"] = NotificationOptions(resources_changed=True)
        return super().create_initialization_options(*args, **kwargs)


def build_server(gw: Gateway) -> WatchServer:
    h = _Handlers(gw)
    return WatchServer(
        "mcpg-gateway",
        version="0.1.0",
        instructions="Subscribe to a resource to be told when it changes; then read it again.",
        on_list_resources=h.list_resources,
        on_list_resource_templates=h.list_templates,
        on_read_resource=h.read,
        on_subscribe_resource=h.subscribe,
        on_unsubscribe_resource=h.unsubscribe,
        on_subscriptions_listen=h.listen,
    )


class _Handlers:
    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def list_resources(self, ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        principal = self._caller()
        # Listing only what the caller may read keeps the refusal's promise: existence is not revealed.
        return types.ListResourcesResult(
            resources=[
                types.Resource(name=r.name, uri=r.uri, description=r.description or None, mime_type=r.mime_type)
                for r in self.gw.resources(principal)
            ]
        )

    async def list_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name=t.name,
                    uri_template=t.uri_template,
                    description=t.description or None,
                    mime_type=t.mime_type,
                )
                for t in self.gw.templates()
            ]
        )

    async def read(self, ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        binding = self._readable(str(params.uri), self._caller())
        try:
            content = await self.gw.read(binding)
        except ReadError as e:
            raise MCPError(errors.UPSTREAM_READ_FAILED, str(e)) from None
        return types.ReadResourceResult(contents=[_contents(binding.uri, content.body, content.mime_type)])

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        principal = self._caller()
        binding = self._watchable(str(params.uri), principal)
        sub = self._session_subscriber(ctx, principal)
        await self._join(binding, sub)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        sub = _connection(ctx).state.get(_SESSION_KEY)
        if isinstance(sub, Subscriber):
            self.gw.unsubscribe(str(params.uri), sub)
        return types.EmptyResult()

    async def listen(self, ctx: Ctx, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        rid = ctx.request_id
        if rid is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        if self.gw.subscribers.closing.is_set():
            raise MCPError(types.INTERNAL_ERROR, "the gateway is shutting down; listen again on another replica")
        principal = self._caller()
        wanted = list(dict.fromkeys(params.notifications.resource_subscriptions or []))
        bindings = [self._watchable(uri, principal) for uri in wanted]  # all-or-nothing, before any acknowledgement
        sub = self.gw.subscribers.open("listen", principal)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: rid}
        try:
            for binding in bindings:
                await self._join(binding, sub)
            honored = types.SubscriptionFilter(
                resources_list_changed=True if params.notifications.resources_list_changed else None,
                resource_subscriptions=wanted or None,
            )
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
                ),
                related_request_id=rid,
            )
            await self._drain(sub, ctx, meta, rid)
        finally:
            self.gw.subscribers.close(sub)
        if self.gw.subscribers.closing.is_set():
            meta = {**meta, END_REASON_META_KEY: SERVER_STOPPING}
        return types.SubscriptionsListenResult(_meta=meta)

    async def _drain(self, sub: Subscriber, ctx: Ctx, meta: dict[str, Any], rid: types.RequestId) -> None:
        while True:
            try:
                uri, strategy = await sub.outbox.get()
            except OutboxClosed:
                return
            note = types.ResourceUpdatedNotification(
                params=types.ResourceUpdatedNotificationParams(uri=uri, _meta=meta)
            )
            await ctx.session.send_notification(note, related_request_id=rid)
            self.gw.metrics.notifications_sent.labels(strategy).inc()

    def _caller(self) -> Principal:
        principal = self.gw.identity.current()
        if principal is None:  # only reachable if /mcp were served without identity.protect: fail closed
            raise MCPError(types.INVALID_REQUEST, "authentication required")
        return principal

    def _readable(self, uri: str, principal: Principal) -> catalog.Binding:
        """The binding of `uri` if `principal` may read it; otherwise exactly the unknown-resource error."""
        binding = self.gw.readable(uri, principal)
        if binding is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown resource: {uri}")
        return binding

    def _watchable(self, uri: str, principal: Principal) -> catalog.Binding:
        binding = self._readable(uri, principal)
        if binding.watch is None:
            raise MCPError(errors.NOT_SUBSCRIBABLE, f"{uri} has no watch configured, so it cannot be subscribed")
        return binding

    async def _join(self, binding: catalog.Binding, sub: Subscriber) -> None:
        try:
            await self.gw.subscribe(binding, sub)
        except StrategyError as e:
            raise MCPError(errors.WATCH_START_FAILED, f"the watch could not start: {e}") from None

    def _session_subscriber(self, ctx: Ctx, principal: Principal) -> Subscriber:
        """The subscriber of this handshake-era session, created with its sender task on first use."""
        conn = _connection(ctx)
        sub = conn.state.get(_SESSION_KEY)
        if isinstance(sub, Subscriber):
            if sub.principal is None or sub.principal.principal_id != principal.principal_id:
                # The SDK binds a session to its creator's credential; this guards that promise, not a real path.
                raise MCPError(types.INVALID_REQUEST, "this session belongs to another principal")
            return sub
        sub = self.gw.subscribers.open("session", principal)
        conn.state[_SESSION_KEY] = sub
        sender = asyncio.create_task(self._send_loop(sub, ctx.session), name=f"mcpg session sender {sub.id}")

        async def on_close() -> None:
            # The SDK unwinds this stack when the session ends: DELETE, idle timeout, crash or shutdown.
            self.gw.subscribers.close(sub)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

        conn.exit_stack.push_async_callback(on_close)
        return sub

    async def _send_loop(self, sub: Subscriber, session: Any) -> None:
        timeout = self.gw.options.send_timeout_s
        while True:
            try:
                uri, strategy = await sub.outbox.get()
            except OutboxClosed:
                return
            try:
                async with asyncio.timeout(timeout):
                    await session.send_resource_updated(uri)
            except TimeoutError:
                # The GET stream's buffer is full: this client stopped reading. Only it misses out.
                self.gw.metrics.notifications_dropped.labels(strategy).inc()
                continue
            self.gw.metrics.notifications_sent.labels(strategy).inc()


def _connection(ctx: Ctx) -> Any:
    # The SDK keeps the per-connection state and exit stack on a private attribute (pinned mcp==2.3.0;
    # test_sdk_contract.py fails loudly if that changes).
    return ctx.session._connection


def _contents(uri: str, body: bytes, mime_type: str | None) -> types.TextResourceContents | types.BlobResourceContents:
    try:
        return types.TextResourceContents(uri=uri, mime_type=mime_type, text=body.decode("utf-8"))
    except UnicodeDecodeError:
        return types.BlobResourceContents(uri=uri, mime_type=mime_type, blob=base64.b64encode(body).decode())
