"""`mcpg-gateway --config FILE`: validate the configuration (exit 2 with one line per problem), then serve.

Serve over HTTP (the default), or one client over stdin/stdout (`--stdio`, `stdio.py`). `--check` validates and
exits; `--check --no-env` does so without the secrets, listing the environment variables a start would need.
While serving, a new configuration is applied in place (`reconfigure.py`): the file is read again on SIGHUP and
when it changes, or, with `--config-secret NAME` (in a cluster, as the operator runs it), the named Secret of the
pod's namespace is followed through the API. There a configuration the process refuses at start does not stop it:
it serves nothing, unready, and says why in its acknowledgement until the Secret holds one it accepts.

This module is the command line only: the process (`process.py`) is imported once the flags are parsed, so
`--help`, `--version` and a bad flag answer without importing the MCP SDK, uvicorn or the configuration model.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mcpg_gateway.contract import command_line
from mcpg_gateway.contract.command_line import Exit

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
EPILOG = command_line.epilog(
    [
        (Exit.OK, "stopped by SIGTERM or ^C, or --check found the configuration valid"),
        (
            Exit.USAGE,
            f"{command_line.SHARED_MEANINGS[Exit.USAGE]},\n"
            "or a configuration refused (one line per problem, naming its field)",
        ),
        (Exit.UNBINDABLE, command_line.SHARED_MEANINGS[Exit.UNBINDABLE]),
    ]
)


def log_level(text: str) -> str:
    """A logging level by name, in any case (`--log-level`, `$MCPG_LOG_LEVEL`)."""
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level ({', '.join(LOG_LEVELS)})")
    return text.upper()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = command_line.Parser(
        prog="mcpg-gateway", description="Serve MCP resource subscriptions and run watches.", epilog=EPILOG
    )
    p.add_argument("--config", required=True, type=Path, help="gateway configuration YAML")
    p.add_argument("--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")  # noqa: S104
    p.add_argument(
        "--port", type=command_line.port, default=8080, help="public port: /mcp, webhooks, health (default 8080)"
    )
    p.add_argument(
        "--admin-port", type=command_line.port, default=9090, help="admin port: /metrics, /admin/v1 (default 9090)"
    )
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=os.environ.get("MCPG_LOG_FORMAT", "text"),
        help="default: $MCPG_LOG_FORMAT, else text",
    )
    p.add_argument(
        "--log-level",
        type=log_level,
        default=os.environ.get("MCPG_LOG_LEVEL", "INFO"),
        help=f"{', '.join(LOG_LEVELS)} (default: $MCPG_LOG_LEVEL, else INFO)",
    )
    p.add_argument(
        "--config-secret",
        default=os.environ.get("MCPG_CONFIG_SECRET") or None,
        help="in a cluster: follow this Secret of the pod's namespace (key gateway.yaml) through the API and apply "
        "each new version in place (default: $MCPG_CONFIG_SECRET); without it the file is read again on SIGHUP "
        "and when it changes",
    )
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
    # Here, not at the top: everything the process needs (the MCP SDK, uvicorn, pydantic's models) takes seconds
    # to import, which --help, --version and a bad flag never need.
    from mcpg_gateway import process

    return process.main(args)


if __name__ == "__main__":
    sys.exit(main())
