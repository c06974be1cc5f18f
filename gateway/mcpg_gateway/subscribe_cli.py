"""`mcpg-subscribe URL URI...`: a small MCP client that subscribes and prints each change notification.

It is how the README and the demo show the gateway working; `--legacy` uses the handshake era
(resources/subscribe), the default uses 2026-07-28 subscriptions/listen, as the SDK's client does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import warnings
from typing import Any

import httpx2
import mcp.types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mcpg-subscribe", description="Subscribe to MCP resources and print changes.")
    p.add_argument("url", help="the gateway's MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    p.add_argument("uris", nargs="+", help="resource URIs to subscribe to")
    p.add_argument("--legacy", action="store_true", help="use resources/subscribe (protocol 2025-11-25)")
    p.add_argument("--token", help="bearer token for the gateway")
    p.add_argument("--count", type=int, default=0, help="exit after this many notifications (0: run until ^C)")
    p.add_argument("--read", action="store_true", help="re-read the resource after each notification")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 0
    except MCPError as e:
        print(f"refused: {e.message} (code {e.code})", file=sys.stderr)
        return 1
    return 0


async def _run(args: argparse.Namespace) -> None:
    headers = {"authorization": f"Bearer {args.token}"} if args.token else {}
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            await updates.put(str(message.params.uri))

    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=None)) as http,
        Client(
            streamable_http_client(args.url, http_client=http),
            mode="legacy" if args.legacy else "auto",
            # On a listen stream the same notification also reaches the message handler; count it once.
            message_handler=on_message if args.legacy else None,
        ) as client,
    ):
        print(f"connected to {args.url} (protocol {client.protocol_version})", flush=True)
        if args.legacy:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                for uri in args.uris:
                    await client.session.subscribe_resource(uri)
            print(f"subscribed (resources/subscribe) to {', '.join(args.uris)}", flush=True)
            await _print_updates(client, updates, args)
        else:
            async with client.listen(resource_subscriptions=args.uris) as stream:
                print(f"listening (subscriptions/listen) on {', '.join(args.uris)}", flush=True)
                pump = asyncio.create_task(_pump(stream, updates))
                try:
                    await _print_updates(client, updates, args)
                finally:
                    pump.cancel()


async def _pump(stream: Any, updates: asyncio.Queue[str]) -> None:
    async for event in stream:
        uri = getattr(event, "uri", None)
        if uri is not None:
            await updates.put(str(uri))


async def _print_updates(client: Client, updates: asyncio.Queue[str], args: argparse.Namespace) -> None:
    seen = 0
    while args.count == 0 or seen < args.count:
        uri = await updates.get()
        seen += 1
        print(f"notifications/resources/updated {uri}", flush=True)
        if args.read:
            result = await client.read_resource(uri)
            for content in result.contents:
                print(f"  read: {getattr(content, 'text', '<binary>')[:200]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
