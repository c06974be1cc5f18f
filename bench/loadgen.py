"""Fallback load generator when `wrk` is not installed: `python bench/loadgen.py URL SECONDS CONNECTIONS`.

Keeps CONNECTIONS POST loops busy for SECONDS over one aiohttp session and prints the requests/s.
"""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp


async def main(url: str, seconds: float, connections: int) -> None:
    done = 0
    deadline = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            async with session.post(url, data=b"{}") as resp:
                await resp.read()
                resp.raise_for_status()
            done += 1

    started = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    print(f"rps {done / (time.monotonic() - started):.1f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
