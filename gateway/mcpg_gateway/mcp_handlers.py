"""The MCP face of the gateway: list, read, and subscriptions in both protocol eras.

Handshake-era clients subscribe on a stateful session and are told on the session's GET stream; 2026-07-28
clients open `subscriptions/listen`, whose response is the stream. Both become `Subscriber`s of the same
watch registry. A subscription is refused up front (before any acknowledgement) when its URI is unknown,
has no watch, or its watch cannot take a baseline.

Every handler acts for the principal the SDK's auth context names, stored on the subscriber at subscribe or
listen time. The read policy gates read, subscribe and each listened URI, and is checked before anything else
about the URI, so a refusal is word for word the "unknown resource" error: it cannot reveal that a URI exists.
Limits (`limits.py`) are decided before any upstream read; refusals carry the codes in `errors.py`. A listen
stream the gateway ends says why in its result (`endings.py`); every notification carries its watch's state
(`lease.py`), and every request served on a session renews that session's lease.

Everything about watches and subscribers is the fan-out's (`fanout/fanout.py`, the one fan-out module imported
here): it opens each subscriber with its writer, to the listen request's response stream or the session's GET
stream over Streamable HTTP, or through the SDK's session off HTTP (stdio), where these handlers give it `send`.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.metadata
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import mcp.types as types
from mcp.server import NotificationOptions, Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from mcpg_gateway import card, catalog, errors
from mcpg_gateway.contract import uris
from mcpg_gateway.errors import ReadError, StrategyError
from mcpg_gateway.fanout import frames, states
from mcpg_gateway.fanout.fanout import Kind, Refusal, Send, Subscriber
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.identity import Principal
from mcpg_gateway.sdk import connection as connections
from mcpg_gateway.sdk import responses

logger = logging.getLogger(__name__)

DISTRIBUTION = "mcpg-watch"
"""The distribution whose version the server reports (serverInfo, the server card)."""

CHECKS_PER_YIELD = 32
"""URIs of one listen checked between two yields to the loop: one check (syntax, catalog, policy) was measured at
about 30 us, so about a millisecond."""

Ctx = ServerRequestContext[Any, Any]
_SESSION_KEY = "mcpg.subscriber"

T = TypeVar("T")


class WatchServer(Server[Any]):
    # Over Streamable HTTP the session manager builds initialization options with a default
    # NotificationOptions, which would advertise listChanged=false; we do announce list changes.
    def create_initialization_options(self, *args: Any, **kwargs: Any) -> Any:
        if not args and "notification_options" not in kwargs:
            kwargs["notification_options"] = NotificationOptions(resources_changed=True)
        return super().create_initialization_options(*args, **kwargs)


def build_server(gw: Gateway) -> WatchServer:
    h = _Handlers(gw)
    h.server = WatchServer(
        "mcpg-gateway",
        version=importlib.metadata.version(DISTRIBUTION),  # the release's, as pyproject.toml states it
        instructions="Subscribe to a resource to be told when it changes; then read it again.",
        on_list_resources=h.list_resources,
        on_list_resource_templates=h.list_templates,
        on_read_resource=h.read,
        on_subscribe_resource=h.subscribe,
        on_unsubscribe_resource=h.unsubscribe,
        on_subscriptions_listen=h.listen,
    )
    return h.server


class _Handlers:
    def __init__(self, gw: Gateway) -> None:
        self.gw, self.fanout = gw, gw.fanout
        self.server: Server[Any] | None = None
        """The server these handlers serve (set once it is built): a listen's result is shaped as it would."""

    async def list_resources(self, ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        self._renew(ctx)
        principal = self._caller()
        # Listing only what the caller may read keeps the refusal's promise: existence is not revealed.
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    name=r.name,
                    uri=r.uri,
                    description=card.description(r),
                    mime_type=r.mime_type,
                    _meta=card.meta(r),
                )
                for r in self.gw.resources(principal)
            ]
        )

    async def list_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        self._renew(ctx)
        principal = self._caller()
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name=t.name,
                    uri_template=t.uri_template,
                    description=card.description(t),
                    mime_type=t.mime_type,
                    _meta=card.meta(t),
                )
                for t in self.gw.templates(principal)
            ]
        )

    async def read(self, ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        self._renew(ctx)
        binding = self._readable(str(params.uri), self._caller())
        try:
            content = await self.gw.reader.read(binding)
        except ReadError as e:
            raise MCPError(read_error_code(e), str(e)) from None
        return types.ReadResourceResult(contents=[_contents(binding.uri, content.body, content.mime_type)])

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        principal = self._caller()
        self._refuse_while_stopping("resources/subscribe")
        binding = self._watchable(str(params.uri), principal, "resources/subscribe")
        seen = _seen_one(params.meta, binding.uri)
        sub = self._session_subscriber(ctx, principal)
        self.fanout.touch(sub)
        await self._join([binding], sub, "resources/subscribe")
        self.fanout.catch_up(sub, seen)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        sub = _connection(ctx).state.get(_SESSION_KEY)
        if isinstance(sub, Subscriber):
            self.fanout.touch(sub)
            self.fanout.unsubscribe(str(params.uri), sub)
        return types.EmptyResult()

    async def listen(self, ctx: Ctx, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        rid = ctx.request_id
        if rid is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        self._renew(ctx)
        self._refuse_while_stopping("subscriptions/listen")
        principal = self._caller()
        named = params.notifications.resource_subscriptions or []
        # Cheap bounds first: how many URIs, before any is deduplicated, resolved or checked against policy.
        self._refusing("subscriptions/listen", lambda: self.fanout.check_named(principal.principal_id, len(named)))
        wanted = list(dict.fromkeys(named))
        seen = _seen(params.meta, wanted)
        # All or nothing, before any acknowledgement and any upstream read: every URI must be subscribable.
        bindings = await self._all_watchable(wanted, principal, "subscriptions/listen")
        sub = self._refusing("subscriptions/listen", lambda: self._open("listen", ctx, principal, rid))
        sub.list_changed = bool(params.notifications.resources_list_changed)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: rid}
        handed = False
        try:  # from here on the stream is counted: whatever fails, `close` gives its slot back
            await self._join(bindings, sub, "subscriptions/listen")
            del bindings  # the watchers hold their own: not kept for as long as the stream stays open
            self.fanout.catch_up(sub, seen)  # waits in its outbox until the acknowledgement has gone out
            await self._acknowledge(ctx, sub, wanted, meta, rid)
            # Over HTTP the stream is carried on at the seam, and this request's SDK machinery let go: the result
            # returned below is not written; the one `_result_event` gives when the stream ends is. (It keeps the
            # version, not `ctx`, which would keep the machinery.)
            version = ctx.protocol_version
            handed = self.fanout.hand_over(sub, ctx.request, lambda: self._result_event(version, rid, sub, meta))
            if not handed:
                await self.fanout.carry(sub)  # until the gateway ends the stream, or the client leaves
        finally:
            if not handed:
                self.fanout.close(sub)
        return _result(sub, meta)

    def _result_event(self, version: str, rid: types.RequestId, sub: Subscriber, meta: dict[str, Any]) -> bytes:
        """The event that ends a listen stream carried past the SDK: its result, as the SDK would have written it."""
        assert self.server is not None, "set by build_server"
        return responses.result_event(self.server, version, "subscriptions/listen", rid, _result(sub, meta))

    def _open(self, kind: Kind, ctx: Ctx, principal: Principal, rid: types.RequestId | None) -> Subscriber:
        """A subscriber written to over its HTTP stream if it has one, else by the SDK's session (`_sender`)."""
        return self.fanout.open(kind, principal, ctx.request, _sender(ctx.session, rid), subscription_id=rid)

    async def _acknowledge(
        self, ctx: Ctx, sub: Subscriber, wanted: list[str], meta: dict[str, Any], rid: types.RequestId
    ) -> None:
        """Say what the stream carries. (Its models live only as long as this call, not as long as the stream.)"""
        honored = types.SubscriptionFilter(
            resources_list_changed=True if sub.list_changed else None,
            resource_subscriptions=wanted or None,
        )
        await ctx.session.send_notification(
            types.SubscriptionsAcknowledgedNotification(
                params=types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
            ),
            related_request_id=rid,
        )

    def _caller(self) -> Principal:
        principal = self.gw.identity.current()
        if principal is None:  # only reachable if /mcp were served without identity.protect: fail closed
            raise MCPError(types.INVALID_REQUEST, "authentication required")
        return principal

    def _renew(self, ctx: Ctx) -> None:
        """Any request served on a session renews its subscriptions' lease (`lease.py`); ping and initialize
        never reach a handler, and notifications are not requests."""
        sub = _connection(ctx).state.get(_SESSION_KEY)
        if isinstance(sub, Subscriber):
            self.fanout.touch(sub)

    def _refuse_while_stopping(self, method: str) -> None:
        if self.fanout.closing.is_set():
            self.gw.metrics.refusals.labels(method, str(errors.UNAVAILABLE)).inc()
            raise MCPError(errors.UNAVAILABLE, "the gateway is shutting down; subscribe again on another replica")

    def _readable(self, uri: str, principal: Principal) -> catalog.Binding:
        """The binding of `uri` if `principal` may read it; otherwise exactly the unknown-resource error.
        A URI the gateway would not serve as written is refused first, saying why (that depends on its text
        alone, so it reveals nothing about what exists)."""
        try:
            uris.check(uri)
        except uris.UriError as e:
            raise MCPError(types.INVALID_PARAMS, f"invalid resource URI: {e}") from None
        binding = self.gw.readable(uri, principal)
        if binding is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown resource: {uri}")
        if binding.uri != uri:  # a template's value spelled otherwise than its expansion (`catalog._bound`)
            raise MCPError(types.INVALID_PARAMS, f"invalid resource URI: {uris.NotCanonical(binding.uri)}")
        return binding

    def _watchable(self, uri: str, principal: Principal, method: str) -> catalog.Binding:
        binding = self._readable(uri, principal)
        if binding.watch is None:
            self.gw.metrics.refusals.labels(method, str(errors.INVALID_PARAMS)).inc()
            raise MCPError(errors.INVALID_PARAMS, f"{uri} has no watch, so it cannot be subscribed; read it instead")
        return binding

    async def _all_watchable(self, wanted: list[str], principal: Principal, method: str) -> list[catalog.Binding]:
        """Each URI's binding (`_watchable`), letting the loop run other work every `CHECKS_PER_YIELD` URIs: a
        principal allowed many watches may name them all, and no request holds the loop for long."""
        bindings = []
        for n, uri in enumerate(wanted, 1):
            bindings.append(self._watchable(uri, principal, method))
            if n % CHECKS_PER_YIELD == 0:
                await asyncio.sleep(0)
        return bindings

    def _refusing(self, method: str, step: Callable[[], T]) -> T:
        """Run `step`; a limit's refusal becomes the JSON-RPC error it names (counted)."""
        try:
            return step()
        except Refusal as e:
            self.gw.metrics.refusals.labels(method, str(e.code)).inc()
            raise MCPError(e.code, e.message) from None

    async def _join(self, bindings: list[catalog.Binding], sub: Subscriber, method: str) -> None:
        try:
            await self.fanout.subscribe(bindings, sub)
        except Refusal as e:
            self.gw.metrics.refusals.labels(method, str(e.code)).inc()
            raise MCPError(e.code, e.message) from None
        except StrategyError as e:
            code = read_error_code(e.read) if e.read is not None else errors.INTERNAL_ERROR
            self.gw.metrics.refusals.labels(method, str(code)).inc()
            raise MCPError(code, f"the watch could not start: {e}") from None

    def _session_subscriber(self, ctx: Ctx, principal: Principal) -> Subscriber:
        """The subscriber of this handshake-era session, created with its writer on first use."""
        conn = _connection(ctx)
        sub = conn.state.get(_SESSION_KEY)
        if isinstance(sub, Subscriber):
            if sub.principal is None or sub.principal.principal_id != principal.principal_id:
                # The SDK binds a session to its creator's credential; this guards that promise, not a real path.
                raise MCPError(types.INVALID_REQUEST, "this session belongs to another principal")
            return sub
        sub = self._open("session", ctx, principal, None)
        conn.state[_SESSION_KEY] = sub
        # The SDK unwinds this stack when the session ends: DELETE, idle timeout, crash or shutdown.
        conn.exit_stack.push_async_callback(self.fanout.hang_up, sub)
        return sub


def _result(sub: Subscriber, meta: dict[str, Any]) -> types.SubscriptionsListenResult:
    """A listen's result: its `subscriptionId`, and why the gateway ended it if it did (`endings.py`)."""
    ending = sub.ending.meta() if sub.ending is not None else {}
    return types.SubscriptionsListenResult(_meta={**meta, **ending})


def _sender(session: Any, related_request_id: types.RequestId | None) -> Send:
    """Off HTTP (stdio): how the fan-out's session writer has the SDK write one notification (`session_writer.py`)."""

    async def send(uri: str, meta: dict[str, Any]) -> None:
        note: types.ServerNotification
        if uri == frames.LIST_CHANGED_KEY:
            changed = types.NotificationParams(_meta=meta) if meta else None
            note = types.ResourceListChangedNotification(params=changed)
        else:
            params = types.ResourceUpdatedNotificationParams(uri=uri, _meta=meta)
            note = types.ResourceUpdatedNotification(params=params)
        await session.send_notification(note, related_request_id=related_request_id)

    return send


def _seen(meta: Any, wanted: list[str]) -> dict[str, str]:
    """The state tokens a listen hands back (`_meta["dev.mcpg/states"]`); a bad one refuses the listen, naming it."""
    try:
        return states.seen(_meta_value(meta, states.STATES_META_KEY), wanted)
    except ValueError as e:
        raise MCPError(errors.INVALID_PARAMS, f'_meta["{states.STATES_META_KEY}"] {e}') from None


def _seen_one(meta: Any, uri: str) -> dict[str, str]:
    """The state token a resources/subscribe hands back (`_meta["dev.mcpg/state"]`), as `_seen` gives them."""
    token = _meta_value(meta, states.STATE_META_KEY)
    if token is None:
        return {}
    try:
        return {uri: states.one_token(token)}
    except ValueError as e:
        raise MCPError(errors.INVALID_PARAMS, f'_meta["{states.STATE_META_KEY}"]: {e}') from None


def _meta_value(meta: Any, key: str) -> Any:
    """One key of a request's `_meta` (the SDK gives it as a dict, or None)."""
    return meta.get(key) if isinstance(meta, dict) else None


def read_error_code(e: ReadError) -> int:
    """The JSON-RPC code for a failed read (a resources/read, or a subscription's first read)."""
    if e.gone:
        return errors.INVALID_PARAMS
    if e.rate_limited:
        return errors.TOO_MANY_REQUESTS
    return errors.INTERNAL_ERROR


def _connection(ctx: Ctx) -> connections.Scratch:
    # The session's per-connection state and exit stack, which the SDK keeps out of reach (`sdk/connection.py`).
    return connections.of(ctx)


def _contents(uri: str, body: bytes, mime_type: str | None) -> types.TextResourceContents | types.BlobResourceContents:
    try:
        return types.TextResourceContents(uri=uri, mime_type=mime_type, text=body.decode("utf-8"))
    except UnicodeDecodeError:
        return types.BlobResourceContents(uri=uri, mime_type=mime_type, blob=base64.b64encode(body).decode())
