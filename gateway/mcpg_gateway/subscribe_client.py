"""`mcpg-subscribe`'s MCP client: connect (waiting for a gateway that is still starting), subscribe, print each
change notification; and each failure a user can expect, classified into one line and its exit status.

`--legacy` uses the handshake era (resources/subscribe), the default 2026-07-28 subscriptions/listen, as the SDK's
client does. The SDK reports an HTTP refusal as a bare JSON-RPC error without its status, so the client's
responses are watched (`_Statuses`) to say which status it was. Anything else is a bug and keeps its traceback.
Imported by `subscribe_cli` once its flags are parsed: the SDK takes most of a second to import.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import ssl
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
import mcp.types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from mcpg_gateway import backoff
from mcpg_gateway.contract.command_line import Exit

REQUEST_TIMEOUT_S = 30.0
"""How long one request (its connect included) may take, once the gateway accepts connections."""
PING_S = 5.0
"""How often a handshake-era session is pinged: the SDK gives up on a dropped GET stream silently, so without a
ping a stopped gateway would leave the client waiting forever."""
STARTING_STATUSES = frozenset({502, 503, 504})
"""What a proxy in front of a gateway that is not serving yet answers (an ingress, a Service's load balancer)."""


def run(args: argparse.Namespace, token: str | None, shown_url: str) -> int:
    """Subscribe as `args` say until --count notifications or ^C; the exit status. `shown_url`: the URL as lines
    may say it (without credentials)."""
    statuses = _Statuses()
    try:
        asyncio.run(_waiting_run(args, token, statuses, shown_url))
    except KeyboardInterrupt:
        return Exit.OK
    except Exception as e:
        failure = classify(e, statuses, url=shown_url, had_token=token is not None)
        if failure is None or args.debug:
            raise
        print(f"mcpg-subscribe: {failure.message}", file=sys.stderr)
        return failure.status
    return Exit.OK


async def _waiting_run(args: argparse.Namespace, token: str | None, statuses: _Statuses, shown_url: str) -> None:
    """`_run`, tried again while the gateway is not up yet, for up to --connect-timeout seconds; said once.

    Only an attempt that established no session is tried again: a subscription is never made twice."""
    deadline = time.monotonic() + args.connect_timeout
    attempt = 0
    while True:
        try:
            return await _run(args, token, statuses)
        except Exception as e:
            why = None if statuses.connected else starting(e, statuses.first_error)
            delay = None if why is None else next_wait_s(attempt, deadline - time.monotonic(), random.random)
            if delay is None:
                raise
        if attempt == 0:
            wait = f"{args.connect_timeout:g} s"
            print(f"mcpg-subscribe: waiting for {shown_url}: {why}; retrying for up to {wait}", file=sys.stderr)
        attempt += 1
        statuses.first_error = None
        await asyncio.sleep(delay)


def next_wait_s(attempt: int, left_s: float, rand: Callable[[], float]) -> float | None:
    """How long to wait before attempt `attempt` + 1, never past the deadline `left_s` away; None: give up."""
    if left_s <= 0:
        return None
    return min(backoff.jittered_s(attempt, rand), left_s)


def starting(e: BaseException, status: int | None) -> str | None:
    """Why `e` looks like a gateway not up yet ("connection refused", "HTTP 503"), or None: it is something else."""
    for leaf in _leaves(e):
        if isinstance(leaf, httpx2.ConnectError) and isinstance(_root_cause(leaf), ConnectionRefusedError):
            return "connection refused"
        if isinstance(leaf, MCPError) and status in STARTING_STATUSES and _stand_in(leaf):
            return f"HTTP {status}"
    return None


class Failure(Exception):
    """An expected failure: the one line to print, and the exit status."""

    def __init__(self, status: Exit, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Statuses:
    """What the JSON-RPC errors the SDK raises leave out: the first HTTP error status the gateway answered (a 401
    becomes a bare "Server returned an error response"), and whether the session had been established."""

    first_error: int | None = None
    connected: bool = False
    """Whether the session was established: a connection lost after that is the session ending."""

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400 and self.first_error is None:
            self.first_error = response.status_code


def classify(e: BaseException, statuses: _Statuses, *, url: str, had_token: bool) -> Failure | None:
    """The expected failure `e` stands for (the first one found in an exception group), or None: a bug."""
    for leaf in _leaves(e):
        if statuses.connected and _lost(leaf):
            return Failure(Exit.ENDED, f"the gateway at {url} ended the session; run mcpg-subscribe again to resume")
        failure = _classify_one(leaf, statuses.first_error, url, had_token)
        if failure is not None:
            return failure
    return None


def _lost(e: BaseException) -> bool:
    """Whether `e` says the connection or the session went away (a stopped or restarted gateway)."""
    if isinstance(e, MCPError):
        return (e.code, e.message) == (types.INVALID_REQUEST, "Session terminated")
    return isinstance(e, httpx2.TransportError)


def _classify_one(e: BaseException, status: int | None, url: str, had_token: bool) -> Failure | None:
    if isinstance(e, MCPError) and status is not None and (status in (401, 403) or _stand_in(e)):
        return _http_failure(status, url, had_token)
    if isinstance(e, MCPError):
        return Failure(Exit.REFUSED, f"the gateway refused the request: {e.message} (JSON-RPC error {e.code})")
    if isinstance(e, SubscriptionLost | _SessionEnded):
        return Failure(Exit.ENDED, f"the gateway at {url} ended the session; run mcpg-subscribe again to resume")
    if isinstance(e, httpx2.TimeoutException):
        return Failure(Exit.UNREACHABLE, f"no answer from {url} within {REQUEST_TIMEOUT_S:.0f} s: is the gateway up?")
    if isinstance(e, httpx2.ConnectError):
        return _connect_failure(e, url)
    if isinstance(e, httpx2.RemoteProtocolError):
        return Failure(Exit.ENDED, f"the gateway at {url} closed the connection; run mcpg-subscribe again to resume")
    return None


def _http_failure(status: int, url: str, had_token: bool) -> Failure:
    if status == 401:
        what = "refused the token" if had_token else "requires a token"
        return Failure(Exit.UNAUTHORIZED, f"the gateway {what} (401): pass --token or set MCPG_TOKEN")
    if status == 403:
        return Failure(Exit.FORBIDDEN, "the gateway accepted the token but refused its principal (403): ask for access")
    if status == 404:
        return Failure(Exit.NOT_FOUND, f"nothing at {url} (404): check the path (the gateway serves MCP on /mcp)")
    return Failure(Exit.HTTP, f"the gateway at {url} answered HTTP {status}")


def _connect_failure(e: httpx2.ConnectError, url: str) -> Failure:
    cause = _root_cause(e)
    if isinstance(cause, ssl.SSLError):
        reason = getattr(cause, "reason", None) or type(cause).__name__
        return Failure(Exit.TLS, f"TLS failed with {url} ({reason}): check http:// versus https:// and the port")
    if isinstance(cause, socket.gaierror):
        host = urlsplit(url).hostname or url
        return Failure(Exit.UNREACHABLE, f"cannot resolve host {host!r} in {url}: check the URL")
    return Failure(Exit.UNREACHABLE, f"cannot connect to {url}: connection refused; is the gateway up on that port?")


def _stand_in(e: MCPError) -> bool:
    """Whether `e` is the error the SDK makes up for an HTTP status whose body held no JSON-RPC error (a 404 from
    a path that serves no MCP, a proxy's 502), as opposed to the gateway's own answer carried at status 400."""
    return (e.code, e.message) in _SDK_STAND_INS


_SDK_STAND_INS = {
    (types.INTERNAL_ERROR, "Server returned an error response"),
    (types.METHOD_NOT_FOUND, "Not Found"),
    (types.INVALID_REQUEST, "Session terminated"),
}


class _SessionEnded(Exception):
    """The listen stream ended gracefully: the gateway closed it (it is stopping, or ended the subscription)."""


def _leaves(e: BaseException) -> Iterator[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        for inner in e.exceptions:
            yield from _leaves(inner)
    else:
        yield e


def _root_cause(e: BaseException) -> BaseException:
    """The OS-level error under httpx2's and httpcore2's wrappers (httpcore2 keeps it as its argument)."""
    while True:
        inner = e.__cause__ or e.__context__ or next((a for a in e.args if isinstance(a, BaseException)), None)
        if inner is None:
            return e
        e = inner


async def _run(args: argparse.Namespace, token: str | None, statuses: _Statuses) -> None:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            await updates.put(str(message.params.uri))

    async with (
        httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, read=None),
            event_hooks={"response": [statuses.on_response]},
        ) as http,
        Client(
            streamable_http_client(args.url, http_client=http),
            mode="legacy" if args.legacy else "auto",
            # On a listen stream the same notification also reaches the message handler; count it once.
            message_handler=on_message if args.legacy else None,
        ) as client,
    ):
        statuses.connected = True
        print(f"connected to {args.url} (protocol {client.protocol_version})", flush=True)
        if args.legacy:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                for uri in args.uris:
                    await client.session.subscribe_resource(uri)
            print(f"subscribed (resources/subscribe) to {', '.join(args.uris)}", flush=True)
            pinger = asyncio.create_task(_ping(client))
            try:
                await _print_updates(client, updates, args, pinger)
            finally:
                pinger.cancel()
        else:
            async with client.listen(resource_subscriptions=args.uris) as stream:
                print(f"listening (subscriptions/listen) on {', '.join(args.uris)}", flush=True)
                pump = asyncio.create_task(_pump(stream, updates))
                try:
                    await _print_updates(client, updates, args, pump)
                finally:
                    pump.cancel()


async def _pump(stream: Any, updates: asyncio.Queue[str]) -> None:
    async for event in stream:
        uri = getattr(event, "uri", None)
        if uri is not None:
            await updates.put(str(uri))
    raise _SessionEnded()


async def _ping(client: Client) -> None:
    """Until the session fails: then raise what failed (a ping on a lost session errs, a notification never does)."""
    while True:
        await asyncio.sleep(PING_S)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # deprecated in 2026-07-28; this is the older era
            await client.send_ping()


async def _print_updates(
    client: Client, updates: asyncio.Queue[str], args: argparse.Namespace, guard: asyncio.Task[None]
) -> None:
    seen = 0
    while args.count == 0 or seen < args.count:
        uri = await _next(updates, guard)
        seen += 1
        print(f"notifications/resources/updated {uri}", flush=True)
        if args.read:
            result = await client.read_resource(uri)
            for content in result.contents:
                print(f"  read: {getattr(content, 'text', '<binary>')[:200]}", flush=True)


async def _next(updates: asyncio.Queue[str], guard: asyncio.Task[None]) -> str:
    """The next URI; if `guard` (the listen stream's pump, or the pinger) ends first, what ended it instead."""
    getter = asyncio.ensure_future(updates.get())
    await asyncio.wait([getter, guard], return_when=asyncio.FIRST_COMPLETED)
    if getter.done():
        return getter.result()
    getter.cancel()
    guard.result()  # raises what ended the stream or the session
    raise _SessionEnded()
