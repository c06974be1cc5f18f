"""`mcpg-gateway --config FILE`: validate the configuration (exit 2 with one line per problem), then serve.

Serve over HTTP (the default), or one client over stdin/stdout (`--stdio`, `stdio.py`). `--check` validates and
exits; `--check --no-env` does so without the secrets, listing the environment variables a start would need.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from mcpg_gateway import admin_app, cancellation, logs, servers, stdio, tracing
from mcpg_gateway.contract import check, config
from mcpg_gateway.contract.errors import ConfigError, Problem
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal

logger = logging.getLogger("mcpg_gateway")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mcpg-gateway", description="Serve MCP resource subscriptions and run watches.")
    p.add_argument("--config", required=True, type=Path, help="gateway configuration YAML")
    p.add_argument("--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")  # noqa: S104
    p.add_argument("--port", type=int, default=8080, help="public port: /mcp, webhooks, health (default 8080)")
    p.add_argument("--admin-port", type=int, default=9090, help="admin port: /metrics, /admin/v1 (default 9090)")
    p.add_argument("--log-format", choices=["text", "json"], default=os.environ.get("MCPG_LOG_FORMAT", "text"))
    p.add_argument("--log-level", default=os.environ.get("MCPG_LOG_LEVEL", "INFO"))
    p.add_argument("--check", action="store_true", help="validate the configuration and exit")
    p.add_argument(
        "--no-env",
        action="store_true",
        help="with --check: put a placeholder in for each ${env.NAME} (set or not), check everything that does not "
        "depend on its value, and list the variables a start needs, each with the fields that use it",
    )
    p.add_argument("--stdio", action="store_true", help="serve one MCP client over stdin/stdout (no HTTP port)")
    p.add_argument(
        "--principal",
        help="with --stdio: the gateway.auth principal the client acts as (default: the anonymous principal)",
    )
    args = p.parse_args(argv)
    if args.no_env and not args.check:
        p.error("--no-env only goes with --check")
    if args.principal is not None and not args.stdio:
        p.error("--principal only goes with --stdio (over HTTP the bearer token says who is calling)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_format, args.log_level)  # stderr: with --stdio, stdout is the protocol's alone
    try:
        admin_token = os.environ.get("MCPG_ADMIN_TOKEN") or None
        if admin_token is not None and (why := admin_app.admin_token_problem(admin_token)) is not None:
            raise ConfigError([Problem("MCPG_ADMIN_TOKEN", why)])  # before any port is bound; --check too
        gw_options = Options(admin_token=admin_token)
        if args.check:
            return _check(args, gw_options)
        cfg = check.load_file(args.config)
        for warning in check.warnings(cfg):
            logger.warning("configuration: %s", warning)
        if args.stdio:
            cancellation.run(_run_stdio(cfg, gw_options, stdio.principal_for(cfg.gateway.auth, args.principal)))
        else:
            cancellation.run(_run(cfg, gw_options, args))
    except stdio.PrincipalError as e:
        print(f"mcpg-gateway: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"mcpg-gateway: invalid configuration in {args.config}:", file=sys.stderr)
        for problem in e.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    return 0


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
    return 0


def _by_variable(uses: list[check.EnvUse]) -> dict[str, list[str]]:
    """Each variable, in order of first use, with every field that uses it."""
    out: dict[str, list[str]] = {}
    for use in uses:
        out.setdefault(use.variable, []).append(use.path)
    return out


async def _run(cfg: config.GatewayConfig, options: Options, args: argparse.Namespace) -> None:
    tracing.install()  # OpenTelemetry traces, only when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set
    gw = Gateway(cfg, options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await servers.serve(gw, args.host, args.port, args.admin_port, stop)
    logger.info("gateway stopped")


async def _run_stdio(cfg: config.GatewayConfig, options: Options, principal: Principal) -> None:
    tracing.install()  # as _run: an OTLP exporter writes to the network, never to stdout
    gw = Gateway(cfg, options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stdio.serve(gw, principal, stop)
    logger.info("gateway stopped")


if __name__ == "__main__":
    sys.exit(main())
