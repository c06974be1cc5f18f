"""The gateway's servers: both HTTP servers and the MCP session manager on one event loop, and a graceful stop.

Each port has a connection guard (`connections.py`): a cap on open connections and deadlines for request
headers and bodies, so idle or slow clients cannot starve the webhook route, the probes or the admin API.

Stop order matters: answer every subscriptions/listen stream (so clients see a deliberate end, not a drop),
stop accepting connections, close MCP sessions (which ends their GET streams), then stop the watchers (which
releases their leases on the bus) and close the bus. At start the bus is connected first, within a bound: an
unreachable bus delays serving by a few seconds at most, never forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn

from mcpg_gateway import admin_app, cancellation, connections, mcp_handlers, mcp_requests, public_app, reconfigure
from mcpg_gateway.contract import command_line
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.sdk import manager as managers

logger = logging.getLogger(__name__)

LISTEN_DRAIN_TIMEOUT_S = 2.0
SERVERS_STOP_TIMEOUT_S = 5.0
"""How long both HTTP servers get to finish once told to exit (uvicorn's own graceful wait is 3 s, then it cancels
what still runs): past it, what still runs is cancelled and logged, and the gateway closes anyway."""


@dataclass(frozen=True, slots=True)
class Addresses:
    host: str
    port: int
    admin_port: int


class _Server(uvicorn.Server):
    # Signals are handled once for both servers by the caller, not by each uvicorn instance.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class BindError(Exception):
    """A port could not be listened on: `flag` (--port or --admin-port) and the OS's reason; its message is the one
    line the command prints instead of a traceback."""

    def __init__(self, flag: str, host: str, port: int, error: OSError) -> None:
        super().__init__(command_line.unbindable(error, port=f"{flag} {port}", address=f"--host {host}"))
        self.flag, self.host, self.port, self.error = flag, host, port, error


def _bind(host: str, port: int, guard: connections.Guard, flag: str) -> connections.GuardedSocket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only for sockets whose proto is
    # IPPROTO_TCP. With proto 0, Nagle plus delayed ACKs held each response and SSE event for ~40 ms
    # (webhook throughput measured 707 req/s before, 2,696 after, on one core).
    sock = connections.GuardedSocket(guard, family, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:  # socket.gaierror too: a --host that does not resolve
        sock.close()
        raise BindError(flag, host, port, e) from e
    sock.setblocking(False)
    return sock


def _bind_both(
    host: str, port: int, admin_port: int, gw: Gateway
) -> tuple[connections.GuardedSocket, connections.GuardedSocket]:
    """Both listening sockets, or BindError naming the port's flag (and neither left open)."""
    public_guard, admin_guard = _guards(gw)
    public = _bind(host, port, public_guard, "--port")
    try:
        return public, _bind(host, admin_port, admin_guard, "--admin-port")
    except BindError:
        public.close()
        raise


def _uvicorn(app: object, graceful_s: int, guard: connections.Guard) -> _Server:
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]  # a Starlette or plain ASGI app; uvicorn's type names its own protocols
        lifespan="off",
        log_level="warning",
        log_config=None,  # no handlers of uvicorn's own: its lines go through ours (`logs.py`), bounded and escaped
        access_log=False,
        timeout_graceful_shutdown=graceful_s,
        http=connections.protocol_for(guard),
        # No WebSocket upgrades: an upgraded connection would leave the guarded protocol, and its count.
        ws="none",
        # Nothing here reads the client's address or the scheme, so nothing needs X-Forwarded-* trusted (uvicorn
        # trusts them from loopback by default); its middleware would be one more frame under every open stream.
        proxy_headers=False,
    )
    return _Server(config)


def _guards(gw: Gateway) -> tuple[connections.Guard, connections.Guard]:
    """The public and admin ports' guards, capped so that both fit under the open-files limit."""
    limits = gw.config.gateway.limits
    public, admin = connections.port_caps(limits.connections)
    return connections.Guard("public", public, limits, gw.metrics), connections.Guard(
        "admin", admin, limits, gw.metrics
    )


async def serve(
    gw: Gateway,
    host: str,
    port: int,
    admin_port: int,
    stop: asyncio.Event,
    on_ready: Callable[[Addresses], None] | None = None,
    hangup: asyncio.Event | None = None,
) -> None:
    """Serve until `stop` is set, then shut down gracefully. New configurations are applied in place meanwhile
    (`reconfigure.followers`); `hangup`: set on SIGHUP, to read the configuration file again."""
    manager = managers.session_manager(
        mcp_handlers.build_server(gw),
        idle_timeout_s=gw.config.gateway.server.session_idle_timeout_s,
        max_sessions=gw.config.gateway.limits.sessions_total,
        # The SDK's own body bound is never the smaller: what /mcp reads is `mcp_requests`' (its bound follows the
        # configuration served, so the SDK gets the ceiling any configuration can reach).
        max_body_bytes=mcp_requests.BODY_CEILING_BYTES,
    )
    reconfigurer = reconfigure.Reconfigurer(gw, manager)
    public_sock, admin_sock = _bind_both(host, port, admin_port, gw)
    public = _uvicorn(public_app.build(gw, manager, bind_host=host), graceful_s=3, guard=public_sock.guard)
    admin = _uvicorn(admin_app.build(gw), graceful_s=1, guard=admin_sock.guard)
    followers: list[asyncio.Task[None]] = []
    try:
        await gw.start()
        followers = [
            asyncio.create_task(f, name="mcpg configuration") for f in reconfigure.followers(gw, reconfigurer, hangup)
        ]
        with connections.accept_errors_logged(asyncio.get_running_loop(), gw.metrics):
            async with manager.run():
                tasks = [
                    asyncio.create_task(public.serve(sockets=[public_sock]), name="mcpg public server"),
                    asyncio.create_task(admin.serve(sockets=[admin_sock]), name="mcpg admin server"),
                ]
                addrs = Addresses(host, public_sock.getsockname()[1], admin_sock.getsockname()[1])
                logger.info("gateway serving MCP on %s:%d, admin on %s:%d", host, addrs.port, host, addrs.admin_port)
                if on_ready is not None:
                    on_ready(addrs)
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                gw.fanout.end_listen_streams()
                if not await gw.fanout.wait_listen_streams_ended(LISTEN_DRAIN_TIMEOUT_S):
                    logger.warning("some listen streams did not end in time; closing them with their sessions")
                public.should_exit = admin.should_exit = True
            await _servers_stopped(tasks)
    finally:
        for task in followers:
            task.cancel()
        await cancellation.stopped(followers, cancellation.STEP_TIMEOUT_S, "stopping the configuration followers")
        await gw.aclose()
        public_sock.close()
        admin_sock.close()


async def _servers_stopped(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for the servers told to exit, in bound; then raise what one of them raised, as before."""
    done, pending = await asyncio.wait(tasks, timeout=SERVERS_STOP_TIMEOUT_S)
    for task in pending:
        logger.warning("%s did not stop within %.0f s; cancelled", task.get_name(), SERVERS_STOP_TIMEOUT_S)
        task.cancel()
    await cancellation.stopped(pending, cancellation.STEP_TIMEOUT_S, "stopping the HTTP servers")
    for task in done:
        task.result()
