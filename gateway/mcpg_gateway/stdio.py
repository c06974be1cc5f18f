"""`mcpg-gateway --stdio`: one MCP client over stdin and stdout, as desktop clients launch local servers.

The client gets the same handlers as /mcp (`mcp_handlers.build_server`), in both protocol eras: the SDK's
dual-era loop lets the client's first request choose. There is no bearer token on a pipe: whoever starts the
process acts as one configured principal, named on the command line or else the anonymous one (`principal_for`).
It is set in the SDK's auth context for the whole connection, so every handler sees it exactly as it sees an
HTTP caller (`identity.current()`), and read policies and notification filters apply unchanged.

No HTTP port is served: stdout carries the protocol (logs go to stderr), and webhook-strategy watches, which
need `POST /webhooks/...`, never fire here. Poll and the event-driven strategies (NATS, PostgreSQL, SQL) do. The
transport is ours (`stdio_transport.py`), not the SDK's: a stop ends the session even while stdin stays open, and a
line that is no JSON-RPC message is answered with an error instead of being dropped.
"""

from __future__ import annotations

import asyncio
import logging

from mcpg_gateway import cancellation, identity, mcp_handlers, reconfigure, stdio_transport
from mcpg_gateway.contract import config
from mcpg_gateway.contract.errors import GatewayError
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.identity import Principal
from mcpg_gateway.sdk import auth

logger = logging.getLogger(__name__)

LISTEN_DRAIN_TIMEOUT_S = 2.0


class PrincipalError(GatewayError):
    """No principal for the stdio client: the one named is not configured, or none was named and anonymous
    access is off. Its message is the whole one-line error."""


def principal_for(auth: config.AuthConfig, principal_id: str | None) -> Principal:
    """The principal a stdio client acts as: `principal_id` if `auth` defines it, else the anonymous principal if
    enabled; `PrincipalError` naming the choices otherwise. The check is against the configuration, since on a pipe
    there is no token to check."""
    known = [p.principal_id for p in auth.principals]
    choices = ", ".join(known) or "none defined"
    if principal_id is not None:
        for p in auth.principals:
            if p.principal_id == principal_id:
                return Principal.from_config(p)
        if auth.anonymous.enabled and auth.anonymous.principal_id == principal_id:
            return Principal.from_config(auth.anonymous)
        raise PrincipalError(f"--principal {principal_id!r} is not in gateway.auth.principals ({choices})")
    if auth.anonymous.enabled:
        return Principal.from_config(auth.anonymous)
    raise PrincipalError(
        f"--stdio acts as one principal: pass --principal NAME ({choices}), or enable gateway.auth.anonymous"
    )


async def serve(gw: Gateway, principal: Principal, stop: asyncio.Event, hangup: asyncio.Event | None = None) -> None:
    """Serve one client on stdin/stdout until it closes stdin or `stop` is set (stdin open or not), then shut down
    gracefully: its listen streams are answered first. New configurations are applied in place meanwhile
    (`reconfigure.followers`; there are no sessions to end on a pipe: a principal removed is refused from then on)."""
    server = mcp_handlers.build_server(gw)
    # Every task the connection starts copies this context: its handlers run as `principal`.
    auth.act_as(identity.access_token(principal))
    await gw.start()
    reconfigurer = reconfigure.Reconfigurer(gw)
    followers = [
        asyncio.create_task(f, name="mcpg configuration") for f in reconfigure.followers(gw, reconfigurer, hangup)
    ]
    try:
        async with stdio_transport.streams() as (read, write):
            logger.info("gateway serving MCP on stdio as principal %r", principal.principal_id)
            session = asyncio.create_task(server.run(read, write, server.create_initialization_options()))
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait([session, stopper], return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if session.done():
                session.result()  # the client closed stdin; or the loop failed, which must show
            else:
                await _end(gw, session)
    finally:
        for task in followers:
            task.cancel()
        await cancellation.stopped(followers, cancellation.STEP_TIMEOUT_S, "stopping the configuration followers")
        await gw.aclose()


async def _end(gw: Gateway, session: asyncio.Task[None]) -> None:
    """Answer the client's listen streams (a deliberate end, not a drop), then close the connection."""
    gw.fanout.end_listen_streams()
    if not await gw.fanout.wait_listen_streams_ended(LISTEN_DRAIN_TIMEOUT_S):
        logger.warning("some listen streams did not end in time; closing the connection")
    session.cancel()
    await cancellation.stopped([session], cancellation.STEP_TIMEOUT_S, "ending the stdio session")
