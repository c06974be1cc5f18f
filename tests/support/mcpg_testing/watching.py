"""An SDK client of either era that keeps everything the gateway says about its watches: each notification's
`_meta`, and (2026-07-28) the result that ends a listen stream, with its `dev.mcpg/watch-end`.

`clients.py` keeps only the URIs told; the lifecycle tests need the rest. The listen is sent as the raw request,
not through `client.listen()`, because the SDK's helper does not hand the final result back.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp.types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpg_testing import BOUND_S

WATCH = "dev.mcpg/watch"
WATCH_END = "dev.mcpg/watch-end"
STATE, STATES = "dev.mcpg/state", "dev.mcpg/states"


@dataclass
class Note:
    uri: str
    meta: dict[str, Any]

    @property
    def watch(self) -> dict[str, Any]:
        state = self.meta.get(WATCH)
        assert isinstance(state, dict), f"no {WATCH} in {self.meta}"
        return state

    @property
    def state(self) -> str:
        """The URI's state token this notification carried (`dev.mcpg/state`)."""
        token = self.meta.get(STATE)
        assert isinstance(token, str), f"no {STATE} in {self.meta}"
        return token


@dataclass
class Watching:
    client: Client
    mode: str
    notes: asyncio.Queue[Note]
    result: asyncio.Task[types.SubscriptionsListenResult] | None = None
    list_changes: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    """The `_meta` of each notifications/resources/list_changed received, in order."""

    async def next(self) -> Note:
        async with asyncio.timeout(BOUND_S):
            return await self.notes.get()

    async def ended(self) -> dict[str, Any]:
        """The `_meta` of the result that ended the listen stream (bounded wait)."""
        assert self.result is not None, "a legacy subscription holds no request to answer"
        async with asyncio.timeout(BOUND_S):
            result = await asyncio.shield(self.result)
        return dict(result.meta or {})

    @property
    def open(self) -> bool:
        return self.result is not None and not self.result.done()

    async def renew(self) -> None:
        """A request the gateway serves (resources/list): renews this session's lease."""
        await self.client.list_resources()

    async def ping(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # removed in 2026-07-28; served to legacy
            await self.client.send_ping()

    async def subscribe(self, uri: str, state: str | None = None) -> None:
        """resources/subscribe; `state`: the last state token seen of `uri`, handed back in `_meta`."""
        if state is not None:
            meta = {STATE: state}
            request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri, _meta=meta))
            await self.client.session.send_request(request, types.EmptyResult)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.client.session.subscribe_resource(uri)


@contextlib.asynccontextmanager
async def watching(
    url: str,
    mode: str,
    uris: list[str],
    headers: dict[str, str] | None = None,
    list_changed: bool = False,
    states: dict[str, str] | None = None,
    local_address: str | None = None,
    session_ids: list[str | None] | None = None,
) -> AsyncIterator[Watching]:
    """A client subscribed to `uris`: legacy (resources/subscribe) or listen (one subscriptions/listen, asking for
    list changes as well when `list_changed`); `states`: the last state token seen per URI, handed back;
    `local_address`: the address its connections come from; `session_ids`: gets the `mcp-session-id` header of
    each request sent but a closing DELETE (None on the first, which opens the session)."""
    notes: asyncio.Queue[Note] = asyncio.Queue()
    list_changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    acknowledged = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            await notes.put(Note(str(message.params.uri), dict(message.params.meta or {})))
        elif isinstance(message, types.ResourceListChangedNotification):
            params = message.params
            await list_changes.put(dict(params.meta or {}) if params is not None else {})
        elif isinstance(message, types.SubscriptionsAcknowledgedNotification):
            acknowledged.set()

    async def record(request: httpx2.Request) -> None:
        if session_ids is not None and request.method != "DELETE":
            session_ids.append(request.headers.get("mcp-session-id"))

    client_mode = "legacy" if mode == "legacy" else "auto"
    transport = httpx2.AsyncHTTPTransport(local_address=local_address) if local_address is not None else None
    async with (
        httpx2.AsyncClient(
            headers=headers or {},
            timeout=httpx2.Timeout(30, read=300),
            transport=transport,
            event_hooks={"request": [record]},
        ) as http,
        Client(streamable_http_client(url, http_client=http), mode=client_mode, message_handler=on_message) as client,
    ):
        handle = Watching(client, mode, notes, list_changes=list_changes)
        if mode == "legacy":
            for uri in uris:
                await handle.subscribe(uri, (states or {}).get(uri))
            yield handle
            return
        request = types.SubscriptionsListenRequest(
            params=types.SubscriptionsListenRequestParams(
                notifications=types.SubscriptionFilter(
                    resource_subscriptions=uris, resources_list_changed=True if list_changed else None
                ),
                _meta={STATES: states} if states is not None else None,
            )
        )
        handle.result = asyncio.create_task(client.session.send_request(request, types.SubscriptionsListenResult))
        async with asyncio.timeout(BOUND_S):
            await _first(acknowledged.wait(), handle.result)
        try:
            yield handle
        finally:
            handle.result.cancel()
            with contextlib.suppress(BaseException):
                await handle.result


async def until(predicate: Callable[[], bool]) -> None:
    """Yield to the event loop until `predicate()` holds (bounded): for a state another task reaches next."""
    async with asyncio.timeout(BOUND_S):
        while not predicate():
            await asyncio.sleep(0)


async def _first(acknowledged: Any, result: asyncio.Task[Any]) -> None:
    """Wait for the acknowledgement; a listen answered (refused) first raises its error here."""
    ack = asyncio.ensure_future(acknowledged)
    try:
        await asyncio.wait({ack, result}, return_when=asyncio.FIRST_COMPLETED)
        acked = ack.done()
    finally:
        ack.cancel()
    if not acked:
        result.result()
