"""The gateway process, once its command line is read (`__main__`): the configuration checked, then served.

Served over HTTP (`servers`) or to one client over stdin/stdout (`stdio`); `--check` validates and exits. Every
failure a user can expect is one line on stderr and an exit status of `command_line.Exit`: a configuration refused
(2, one line per problem), a port or an address that cannot be bound (3). Imported only after the flags were
parsed, so that `--help` and `--version` pay for none of the MCP SDK, uvicorn or the configuration model.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpg_gateway import admin_app, cancellation, config_secret, logs, memory_fit, servers, stdio, tracing
from mcpg_gateway.contract import check, config, loading
from mcpg_gateway.contract.command_line import Exit
from mcpg_gateway.contract.errors import ConfigError, Problem
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_gateway.strategies import plugin

logger = logging.getLogger("mcpg_gateway")


def main(args: argparse.Namespace) -> int:
    """Run the command `args` asks for; its exit status (`command_line.Exit`)."""
    logs.configure(args.log_format, args.log_level)  # stderr: with --stdio, stdout is the protocol's alone
    try:
        admin_token = os.environ.get("MCPG_ADMIN_TOKEN") or None
        if admin_token is not None and (why := admin_app.admin_token_problem(admin_token)) is not None:
            raise ConfigError([Problem("MCPG_ADMIN_TOKEN", why)])  # before any port is bound; --check too
        # Loaded once, here: the check a start makes is the whole one, against the plugins this process has.
        plugins = plugin.PluginRegistry.load()
        gw_options = Options(
            admin_token=admin_token, config_file=args.config, config_secret=args.config_secret, plugins=plugins
        )
        if args.config_secret is not None and not args.check:
            config_secret.ApiAccess.in_cluster(os.environ)  # here, not once the ports are bound: one line, exit 2
        if args.check:
            return _check(args, gw_options)
        start = _starting(args, plugins)
        for warning in check.warnings(start.cfg):
            logger.warning("configuration: %s", warning)
        if args.stdio:
            principal = stdio.principal_for(start.cfg.gateway.auth, args.principal)
            cancellation.run(_run_stdio(start, gw_options, principal))
        else:
            cancellation.run(_run(start, gw_options, args))
    except (stdio.PrincipalError, config_secret.NotInClusterError) as e:
        print(f"mcpg-gateway: {e}", file=sys.stderr)
        return Exit.USAGE
    except ConfigError as e:
        print(f"mcpg-gateway: invalid configuration in {args.config}:", file=sys.stderr)
        for problem in e.problems:
            print(f"  {problem}", file=sys.stderr)
        return Exit.USAGE
    except servers.BindError as e:
        print(f"mcpg-gateway: {e}", file=sys.stderr)
        return Exit.UNBINDABLE
    return Exit.OK


def _check(args: argparse.Namespace, options: Options) -> int:
    """`--check [--no-env]`: validate as a start would (the whole Gateway is built), print what it found, exit."""
    uses: list[check.EnvUse] = []
    if args.no_env:
        cfg, uses = check.load_file_without_env(args.config)
    else:
        cfg = check.load_file(args.config)
    Gateway(cfg, options)
    for warning in check.warnings(cfg):
        print(f"mcpg-gateway: warning: {warning}", file=sys.stderr)
    if args.no_env:
        print(f"{args.config}: configuration is valid, apart from the values of its environment variables")
        print(f"environment variables needed: {len({use.variable for use in uses})}")
        for variable, paths in _by_variable(uses).items():
            print(f"  {variable}: {', '.join(paths)}")
    else:
        print(f"{args.config}: configuration is valid")
    return Exit.OK


@dataclass(frozen=True, slots=True)
class Start:
    """What the process starts on: the configuration, as written and as checked, or the problems of one refused."""

    cfg: config.GatewayConfig
    document: Mapping[str, Any] | None
    refused: ConfigError | None = None


def _starting(args: argparse.Namespace, plugins: plugin.PluginRegistry) -> Start:
    """The file's configuration; `ConfigError` if it is refused, unless the process follows its Secret: then it
    starts on an empty one (serving nothing, unready) and waits for the Secret to hold one it accepts.

    Checked whole, against `plugins`, as every configuration offered later is (`Gateway.verify`): a problem only
    the whole check finds (a plugin kind this image lacks) would otherwise stop the process once it is built."""
    try:
        raw = loading.read_file(args.config)
        cfg = check.load(raw, plugin_kinds=plugins.kinds, unusable_plugins=plugins.broken)
        return Start(cfg, raw if isinstance(raw, Mapping) else None)
    except ConfigError as e:
        if args.config_secret is None or args.stdio:
            raise
        logger.error(
            "configuration %s refused; waiting for Secret %s to hold one: %s", args.config, args.config_secret, e
        )
        return Start(config.GatewayConfig(), None, e)


def _gateway(start: Start, options: Options) -> Gateway:
    # Serving, the caps fit the container's memory limit, read once: the kernel would kill the process long
    # before the configured caps refused anyone (`memory_fit.py`).
    options = dataclasses.replace(options, memory_limit_bytes=memory_fit.container_limit())
    gw = Gateway(start.cfg, options, start.document)
    if start.refused is not None and start.document is None:
        gw.served.refuse({}, start.refused.problems, None)
    return gw


def _by_variable(uses: list[check.EnvUse]) -> dict[str, list[str]]:
    """Each variable, in order of first use, with every field that uses it."""
    out: dict[str, list[str]] = {}
    for use in uses:
        out.setdefault(use.variable, []).append(use.path)
    return out


async def _run(start: Start, options: Options, args: argparse.Namespace) -> None:
    tracing.install()  # OpenTelemetry traces, only when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set
    gw = _gateway(start, options)
    stop, hangup = _signals()
    _settled()
    await servers.serve(gw, args.host, args.port, args.admin_port, stop, hangup=hangup)
    logger.info("gateway stopped")


GC_YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation (Python's default is 700). Nearly everything a
request or a poll allocates is freed by reference counting, not by the collector, so at 700 it ran about 3 times
a second under 1,000 polls, and a full collection (over every subscriber and watcher) every 25 s."""


def _settled() -> None:
    """Move what start-up made (the SDK, pydantic's schemas, the configuration: about 180,000 objects, nearly all
    held for the process's life) out of the garbage collector's reach. Each full collection scanned them all: one
    took 138 ms of CPU, about a fifth of what 2,000 polls cost (the poll benchmark); frozen, a collection scans
    only what serving made since."""
    gc.collect()  # what start-up left unreachable goes now, not into the frozen generation
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


async def _run_stdio(start: Start, options: Options, principal: Principal) -> None:
    tracing.install()  # as _run: an OTLP exporter writes to the network, never to stdout
    gw = _gateway(start, options)
    stop, hangup = _signals()
    _settled()
    await stdio.serve(gw, principal, stop, hangup=hangup)
    logger.info("gateway stopped")


def _signals() -> tuple[asyncio.Event, asyncio.Event]:
    """(stop: set on SIGTERM and SIGINT, hangup: set on SIGHUP, to read the configuration file again)."""
    stop, hangup = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, hangup.set)
    return stop, hangup
