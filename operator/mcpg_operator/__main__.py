"""`mcpg-operator`: serve probes and metrics, hold the Lease, and run kopf in this process on our handlers.

In this order, and why:

1. Flags, then settings: a bad one exits 2 before anything starts, in one line (one per variable for settings);
   `--help` and `--version` import neither kopf, a client nor the settings' models. A metrics address that
   cannot be bound exits 3 in one line, and an API server that cannot be reached (no kubeconfig, nothing
   listening, credentials refused) exits 4 in one line. The statuses are the three programs' (`command_line.Exit`).
2. kopf's logging set-up (the flags `kopf run` takes for it), then /healthz, /readyz and /metrics
   (`--metrics-bind-address`): a standby has to answer its probes, and kopf serves none before it runs.
3. Leader election (`candidacy.Candidacy`): wait to hold the Lease. The elector runs on a thread of its own, with
   its own event loop and API client, so no reconcile work here can hold a renewal back. A SIGTERM meanwhile
   exits 0.
4. kopf, standalone (the Lease, not kopf's peering, keeps it alone) on the configured namespaces, while the
   Lease is renewed. kopf's handlers module is imported by name, once, as the installed package. The memo kopf
   hands the handlers carries the elector's fence: the reconciler's client asks it before every write.
5. Lease lost: the passes are cancelled where they are (`handlers.halt`), kopf is cancelled at once and the
   process exits 1, so the kubelet restarts it as a standby (controller-runtime does the same). SIGTERM: kopf
   stops gracefully, then the Lease is released, so a standby takes over at its next try rather than after the
   lease duration; exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpg_gateway.contract import command_line
from mcpg_gateway.contract.command_line import Exit

if TYPE_CHECKING:  # imported where used: pydantic's models and prometheus_client are not --help's to pay for
    from mcpg_operator import metrics, settings

logger = logging.getLogger(__name__)

USAGE_ERROR = Exit.USAGE
LOST = Exit.FAILED
"""Exit status after losing the Lease, or when kopf stopped by itself: the kubelet restarts the container."""
LOG_FORMATS = ("plain", "full", "json")
DEFAULT_BIND = "0.0.0.0:8080"  # a pod's probes and scrapes reach it on the pod's IP
EPILOG = command_line.epilog(
    [
        (Exit.OK, "stopped by SIGTERM or ^C (the Lease released)"),
        (Exit.FAILED, "the Lease was lost, or kopf stopped by itself: the kubelet restarts it as a standby"),
        (
            Exit.USAGE,
            f"{command_line.SHARED_MEANINGS[Exit.USAGE]},\n"
            "or an environment variable refused (one line per variable, naming it)",
        ),
        (Exit.UNBINDABLE, command_line.SHARED_MEANINGS[Exit.UNBINDABLE]),
        (Exit.UNREACHABLE, "the Kubernetes API cannot be reached, or refuses this process's credentials"),
    ]
)
API_CHECK_S = 15.0
"""How long the API server gets to answer at start before the operator gives up on it (exit 4; the kubelet
restarts it), longer than a connection's set-up to a busy server."""
CANCEL_S = 5.0
"""How long a cancelled kopf gets to unwind after the Lease was lost, before the process exits anyway."""


@dataclass(frozen=True, slots=True)
class Options:
    """The command line: where to serve, which namespaces (overriding MCPG_WATCH_NAMESPACES), kopf's logging."""

    bind: tuple[str, int]
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    verbose: bool = False
    debug: bool = False
    quiet: bool = False
    log_format: str = "full"
    log_prefix: bool | None = None
    log_refkey: str | None = None


def parse(argv: Sequence[str]) -> Options:
    """The flags (argparse exits 2 on a bad one, 0 after --help)."""
    p = command_line.Parser(
        prog="mcpg-operator", description="Reconcile ResourceWatches into MCP gateways.", epilog=EPILOG
    )
    p.add_argument(
        "--metrics-bind-address",
        default=DEFAULT_BIND,
        type=_address,
        metavar="HOST:PORT",
        help=f"where /metrics, /healthz and /readyz are served (default {DEFAULT_BIND})",
    )
    p.add_argument("-n", "--namespace", action="append", default=[], help="a namespace to serve (repeatable)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace")
    for short, flag in (("-v", "--verbose"), ("-d", "--debug"), ("-q", "--quiet")):
        p.add_argument(short, flag, action="store_true", help="kopf's log level")
    p.add_argument("--log-format", choices=LOG_FORMATS, default="full")
    p.add_argument("--log-prefix", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--log-refkey")
    a = p.parse_args(argv)
    if a.namespace and a.all_namespaces:
        p.error("either --namespace or --all-namespaces, not both")
    return Options(
        a.metrics_bind_address,
        tuple(a.namespace),
        a.all_namespaces,
        a.verbose,
        a.debug,
        a.quiet,
        a.log_format,
        a.log_prefix,
        a.log_refkey,
    )


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (a port from 0 to 65535; HOST may be empty)")
    return host or "0.0.0.0", int(port)  # noqa: S104  # ":8080" means every interface, as in controller-runtime


def kopf_scope(opts: Options, configured: Sequence[str]) -> dict[str, Any]:
    """kopf's namespace arguments: the command line's, else MCPG_WATCH_NAMESPACES, else every namespace."""
    if opts.all_namespaces:
        return {"clusterwide": True, "namespaces": ()}
    namespaces = tuple(opts.namespaces or configured)
    return {"clusterwide": not namespaces, "namespaces": namespaces}


def main(argv: list[str] | None = None) -> int:
    opts = parse(sys.argv[1:] if argv is None else argv)
    from mcpg_operator import settings  # after the flags: see the module's docstring

    try:
        loaded = settings.load()
    except settings.SettingsError as e:
        print(f"mcpg-operator: invalid settings: {e}", file=sys.stderr)
        return USAGE_ERROR
    try:
        return asyncio.run(run(opts, loaded))
    except Unbindable as e:
        print(f"mcpg-operator: {e}", file=sys.stderr)
        return Exit.UNBINDABLE
    except Unreachable as e:
        print(f"mcpg-operator: {e}", file=sys.stderr)
        return Exit.UNREACHABLE


class Unbindable(Exception):
    """--metrics-bind-address cannot be listened on; the message is the one line to print."""


class Unreachable(Exception):
    """The API server cannot be reached or refuses our credentials; the message is the one line to print."""


async def run(opts: Options, config: settings.OperatorSettings) -> int:
    """Everything after the settings were read; the exit status."""
    # Imported here, not at the top: `mcpg-operator --help` should pay for neither kopf nor the client.
    # Importing `handlers` registers them with kopf's default registry, by module name, once.
    from mcpg_operator import handlers, health, kube, metrics

    _configure_logging(opts)
    handlers.quiet_body_loggers()  # before the first request: the elector's, too
    stopping = asyncio.Event()
    _on_signals(stopping.set)
    routes = health.routes(metrics.REGISTRY, lambda: not stopping.is_set())
    try:
        server = await health.serve(*opts.bind, routes)
    except OSError as e:  # socket.gaierror too: a host that does not resolve
        said = f"--metrics-bind-address {opts.bind[0]}:{opts.bind[1]}"
        raise Unbindable(command_line.unbindable(e, port=said, address=said)) from e
    try:
        if (why := await kube.unreachable(API_CHECK_S)) is not None:
            raise Unreachable(why)
        if not config.leader_election.enabled:
            return await _reconcile(opts, config, stopping, _memo(), lease=None)
        return await _elect_and_reconcile(opts, config, stopping)
    finally:
        server.close()
        await server.wait_closed()


def _configure_logging(opts: Options) -> None:
    import kopf

    fmt = kopf.LogFormat[opts.log_format.upper()]
    kopf.configure(
        debug=opts.debug,
        verbose=opts.verbose,
        quiet=opts.quiet,
        log_format=fmt,
        log_prefix=opts.log_prefix,
        log_refkey=opts.log_refkey,
    )
    quiet_event_lines(opts)


PER_EVENT_LOGGER = "kopf.objects"
"""kopf's logger about each object: "Handler 'resourcewatch_event' succeeded." for every watch event it sees."""


def quiet_event_lines(opts: Options) -> None:
    """Keep kopf's per-event lines out of the log unless asked for (--verbose, --debug): the reconciler logs one
    line per change it makes (`reconcile.write`), and a pass that changes nothing logs nothing. Failures stay."""
    asked = opts.verbose or opts.debug
    logging.getLogger(PER_EVENT_LOGGER).setLevel(logging.NOTSET if asked else logging.WARNING)  # NOTSET: as kopf set


def _on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT ask for a clean stop (kopf's own handlers are replaced by these once it runs)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


async def _elect_and_reconcile(opts: Options, config: settings.OperatorSettings, stopping: asyncio.Event) -> int:
    from mcpg_operator import candidacy, handlers
    from mcpg_operator.kube import Kube

    memo = _memo()
    # The elector connects a client of its own, in its own loop, and without a fence: it writes to take the Lease.
    running = candidacy.Candidacy(config.leader_election, Kube.connect, on_lost=lambda: handlers.halt(memo))
    memo.fence = running.fence
    running.start()
    try:
        if not await candidacy.first(running.leading(), stopping.wait()) or stopping.is_set():
            return 0
        lease = asyncio.create_task(running.lost(), name="Lease lost")
        try:
            return await _reconcile(opts, config, stopping, memo, lease)
        finally:
            lease.cancel()
            await asyncio.gather(lease, return_exceptions=True)
    finally:
        await running.stop()  # it releases the Lease, unless it was lost


def _memo() -> Any:
    """kopf's operator-wide memo (a `kopf.Memo`): the startup handler's, shared with every other handler."""
    import kopf

    return kopf.Memo()


async def _reconcile(
    opts: Options,
    config: settings.OperatorSettings,
    stopping: asyncio.Event,
    memo: Any,
    lease: asyncio.Task[None] | None,
) -> int:
    """Run kopf until SIGTERM (exit 0), the loss of `lease` (exit 1) or kopf's own end (exit 1)."""
    from mcpg_operator import metrics

    kopf_stop, started = asyncio.Event(), asyncio.Event()
    # Created before kopf, so kopf counts them as the caller's tasks rather than its own to stop.
    marker = asyncio.create_task(_mark_running(started, metrics.METRICS), name="reconciler started")
    stop_asked = asyncio.create_task(stopping.wait(), name="stop asked")
    kopf_task = asyncio.create_task(_kopf(opts, config, memo, kopf_stop, started, stopping.set), name="kopf")
    watched: set[asyncio.Task[Any]] = {kopf_task, stop_asked, *([lease] if lease else [])}
    try:
        while True:
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if lease in done:
                # The passes were cancelled as the loss was reported (`handlers.halt`); kopf goes now.
                error = None if lease.cancelled() else lease.exception()
                logger.error("stopping the reconciler at once: this replica no longer holds the Lease", exc_info=error)
                kopf_stop.set()  # so that kopf does not take the cancellation for a hang and arm its own SIGKILL
                kopf_task.cancel()  # no graceful stop: another replica may be reconciling already
                await asyncio.wait({kopf_task}, timeout=CANCEL_S)
                return LOST
            if kopf_task in done:
                return _kopf_ended(kopf_task, stopping)
            if stop_asked in done:  # kopf stops gracefully while the Lease is still renewed
                kopf_stop.set()
                watched.discard(stop_asked)
    finally:
        marker.cancel()
        stop_asked.cancel()
        metrics.METRICS.reconciler_running.set(0)


async def _mark_running(started: asyncio.Event, recorder: metrics.Metrics) -> None:
    await started.wait()  # kopf raises it once the startup handlers have finished
    recorder.reconciler_running.set(1)


async def _kopf(
    opts: Options,
    config: settings.OperatorSettings,
    memo: Any,
    stop: asyncio.Event,
    started: asyncio.Event,
    on_signal: Callable[[], None],
) -> None:
    """`kopf.operator(...)` as `kopf run --standalone` runs it, split where kopf installs its signal handlers."""
    import kopf
    from kopf._core.engines.peering import Identity  # kopf's NewType of str; not re-exported

    ours = asyncio.all_tasks()  # the caller's tasks (and this one): kopf waits for and stops only its own
    # An identity of our own: kopf's default asks the password database for the user's name, and the image's
    # uid 65532 has no entry there (the first run of the image as a pod died of `getpwuid(): uid not found`).
    identity = Identity(config.leader_election.identity or socket.gethostname())
    tasks = await kopf.spawn_tasks(
        standalone=True,
        stop_flag=stop,
        ready_flag=started,
        memo=memo,
        identity=identity,
        **kopf_scope(opts, config.watch_namespaces),
    )
    _on_signals(on_signal)  # kopf's replaced ours: a SIGTERM must still reach the caller, who stops kopf
    await kopf.run_tasks(tasks, ignored=ours)


def _kopf_ended(task: asyncio.Task[None], stopping: asyncio.Event) -> int:
    if task.cancelled() or task.exception() is not None:
        logger.error("kopf stopped on an error", exc_info=None if task.cancelled() else task.exception())
        return LOST
    if not stopping.is_set():
        logger.error("kopf stopped although nobody asked it to")
        return LOST
    return 0


if __name__ == "__main__":
    sys.exit(main())
