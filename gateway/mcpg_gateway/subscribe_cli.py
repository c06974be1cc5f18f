"""`mcpg-subscribe URL URI...`: a small MCP client that subscribes and prints each change notification.

It is how the README and the demo show the gateway working, and often a newcomer's first contact with a gateway,
so every failure it can expect (a URL without its scheme, a gateway not up yet, a refused token, a wrong port or
path, an unknown URI) is one line on stderr naming the cause and the fix, with an exit status per class
(`command_line.Exit`, listed in `--help`). A refused connect is tried again for `--connect-timeout` seconds, so a
client started next to its gateway waits for it. This module is the command line only: the client
(`subscribe_client.py`, which imports the MCP SDK) is imported once the flags are parsed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from mcpg_gateway.contract import command_line
from mcpg_gateway.contract.command_line import Exit

TOKEN_ENV = "MCPG_TOKEN"  # noqa: S105  # the variable's name, not a token
CONNECT_TIMEOUT_S = 30.0
"""`--connect-timeout`'s default: how long a gateway that refuses connections (not up yet) is waited for."""

EPILOG = command_line.epilog(
    [
        (Exit.OK, "stopped by --count or ^C"),
        (Exit.USAGE, f"{command_line.SHARED_MEANINGS[Exit.USAGE]},\nor a URL without http:// or https:// and a host"),
        (Exit.UNREACHABLE, command_line.SHARED_MEANINGS[Exit.UNREACHABLE]),
        (Exit.UNAUTHORIZED, "the gateway refused the token (401): pass --token or set MCPG_TOKEN"),
        (Exit.FORBIDDEN, "the principal may not use the gateway (403)"),
        (Exit.NOT_FOUND, "nothing at that URL (404): check the path (usually /mcp)"),
        (Exit.TLS, "TLS failure (for example https:// to a plain-HTTP port)"),
        (Exit.ENDED, "the gateway ended the session or the stream"),
        (
            Exit.REFUSED,
            "the gateway refused a request (unknown or unreadable URI, a limit): its JSON-RPC code and message",
        ),
        (Exit.HTTP, "any other HTTP error status"),
    ],
    after="A gateway that refuses connections (not started yet), or a proxy answering 502, 503 or 504 for it, is "
    "waited for:\nthe connect is tried again, with growing random pauses of at most 2 s, for up to --connect-timeout "
    "seconds\n(default 30; 0: try once). A subscription once made is never made again.\n\n"
    "The token may come from the MCPG_TOKEN environment variable instead of --token (which wins when both are "
    "set),\nso it need not sit in the shell's history. It is never printed.",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = command_line.Parser(
        prog="mcpg-subscribe", description="Subscribe to MCP resources and print changes.", epilog=EPILOG
    )
    p.add_argument("url", type=gateway_url, help="the gateway's MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    p.add_argument("uris", nargs="+", help="resource URIs to subscribe to")
    p.add_argument("--legacy", action="store_true", help="use resources/subscribe (protocol 2025-11-25)")
    p.add_argument("--token", help=f"bearer token for the gateway (default: ${TOKEN_ENV})")
    p.add_argument("--count", type=int, default=0, help="exit after this many notifications (0: run until ^C)")
    p.add_argument("--read", action="store_true", help="re-read the resource after each notification")
    p.add_argument(
        "--connect-timeout",
        type=seconds,
        default=CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait for a gateway that refuses connections (default {CONNECT_TIMEOUT_S:g}; 0: no wait)",
    )
    p.add_argument("--debug", action="store_true", help="show a traceback instead of the one-line error")
    return p.parse_args(argv)


def gateway_url(text: str) -> str:
    """An http(s) URL with a host: without the scheme, httpx would fail deep in the SDK with a traceback."""
    parts = urlsplit(text)
    if "://" not in text:
        raise argparse.ArgumentTypeError(f"{shown(text)!r} has no scheme: try http://{shown(text)}")
    if parts.scheme not in ("http", "https"):
        raise argparse.ArgumentTypeError(f"{shown(text)!r}: only http:// and https:// URLs are served")
    if not parts.hostname:
        raise argparse.ArgumentTypeError(f"{shown(text)!r} has no host: e.g. http://127.0.0.1:8080/mcp")
    return text


def seconds(text: str) -> float:
    """A duration in seconds: a finite number, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def shown(url: str) -> str:
    """`url` without any user:password in it: the line may be pasted into a bug report."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number: said without its authority at all
        return url.split("@")[-1]
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{host}:{port}" if port is not None else host))


def token_of(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """--token, else $MCPG_TOKEN; an empty value is no token."""
    return args.token or environ.get(TOKEN_ENV) or None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Here, not at the top: the MCP SDK takes most of a second to import, which --help and a bad flag never need.
    from mcpg_gateway import subscribe_client

    return subscribe_client.run(args, token_of(args, os.environ), shown(args.url))


if __name__ == "__main__":
    sys.exit(main())
