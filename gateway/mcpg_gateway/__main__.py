"""`mcpg-gateway --config FILE`: validate the configuration (exit 2 with one line per problem), then serve."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from mcpg_gateway import admin_app, logs, servers
from mcpg_gateway.contract import check, config
from mcpg_gateway.contract.errors import ConfigError, Problem
from mcpg_gateway.gateway import Gateway, Options

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
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_format, args.log_level)
    try:
        admin_token = os.environ.get("MCPG_ADMIN_TOKEN") or None
        if admin_token is not None and (why := admin_app.admin_token_problem(admin_token)) is not None:
            raise ConfigError([Problem("MCPG_ADMIN_TOKEN", why)])  # before any port is bound; --check too
        cfg = check.load_file(args.config)
        gw_options = Options(admin_token=admin_token)
        if args.check:
            Gateway(cfg, gw_options)
            print(f"{args.config}: configuration is valid")
            return 0
        asyncio.run(_run(cfg, gw_options, args))
    except ConfigError as e:
        print(f"mcpg-gateway: invalid configuration in {args.config}:", file=sys.stderr)
        for problem in e.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    return 0


async def _run(cfg: config.GatewayConfig, options: Options, args: argparse.Namespace) -> None:
    gw = Gateway(cfg, options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await servers.serve(gw, args.host, args.port, args.admin_port, stop)
    logger.info("gateway stopped")


if __name__ == "__main__":
    sys.exit(main())
