"""POST load for the ingestion scenarios: `python bench/loadgen.py URL SECONDS CONNECTIONS [WHSEC]`.

Keeps CONNECTIONS POST loops busy for SECONDS over one aiohttp session and prints the requests/s. It is the
fallback when `wrk` is not installed, and the only generator of signed load: with WHSEC (a Standard Webhooks
`whsec_` secret) every request carries a body of `BODY_BYTES` and a fresh `webhook-id`, `webhook-timestamp` and
`webhook-signature`, signed as the specification says. The signature is made whatever the URL, so a route that
ignores it is loaded by exactly the same client work.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import sys
import time
from collections.abc import Callable

import aiohttp

BODY_BYTES = 1024
BODY = b'{"type":"report.updated","data":{"id":"r-1","note":"' + b"x" * (BODY_BYTES - 56) + b'"}}'
"""About 1 KiB of JSON: a typical event delivery."""


def signer(whsec: str | None) -> tuple[bytes, Callable[[], dict[str, str]]]:
    """The body to post and a function returning the headers of the next request."""
    if whsec is None:
        return b"{}", lambda: {}
    key = base64.b64decode(whsec.removeprefix("whsec_"))
    ids = itertools.count()

    def headers() -> dict[str, str]:
        msg_id, ts = f"msg_{next(ids)}_{time.monotonic_ns()}", str(int(time.time()))
        mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + BODY, hashlib.sha256).digest()
        signature = "v1," + base64.b64encode(mac).decode()
        return {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": signature}

    return BODY, headers


async def main(url: str, seconds: float, connections: int, whsec: str | None) -> None:
    done = 0
    deadline = time.monotonic() + seconds
    body, headers = signer(whsec)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            async with session.post(url, data=body, headers=headers()) as resp:
                await resp.read()
                resp.raise_for_status()
            done += 1

    started = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    print(f"rps {done / (time.monotonic() - started):.1f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None))
