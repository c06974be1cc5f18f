"""Scenario 3: poll watchers at scale. N concrete URIs of one resource template, polled at the 10 s floor.

The upstream is an aiohttp server process that counts hits per path prefix, so the gateway's polls (/items/…)
and the reference's (/ref/items/…) are counted apart. The reference is a bare loop: N tasks that each GET the
same body and take its SHA-256 every 10 s, over one aiohttp session set up as the gateway's (connections per
upstream, no cookie jar). CPU per poll = the process's CPU time over the window / the polls the upstream counted in
that window. The window is a whole number of poll intervals (`whole_intervals`): both sides poll in bursts, one
per interval, and a window of 25 s caught two bursts of one side and three of the other depending on where its
edges fell, which moved the reference's CPU per poll between 0.115 and 0.183 ms from round to round.

The reference's tasks all start at one instant, so their polls come in bursts that share event-loop wake-ups;
the gateway's watches start as subscriptions arrive, and its interval sleeps end on a 100 ms grid
(`strategies.base.wake_at`) so that they share wake-ups too. Without that grid a poll woke alone and cost about
three times one in a burst, on either side.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx2
import procs
from fanout import Target, start_clients

INTERVAL_MS = 10_000  # the gateway's floor

UPSTREAM = """
import sys
from aiohttp import web
hits = {}
BODY = b'{"id": "x", "status": "green", "items": [1, 2, 3, 4, 5, 6, 7, 8]}'
async def item(request):
    prefix = request.path.split("/")[1]
    hits[prefix] = hits.get(prefix, 0) + 1
    return web.Response(body=BODY, content_type="application/json")
async def count(request):
    return web.json_response(hits)
app = web.Application()
app.router.add_get("/_hits", count)
app.router.add_get("/{tail:.*}", item)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None, backlog=2048)
"""

BARE_LOOP = """
import asyncio, hashlib, sys
import aiohttp
async def watch(session, url):
    async with session.get(url) as r:
        digest = hashlib.sha256(await r.read()).digest()
    while True:
        await asyncio.sleep(INTERVAL)
        async with session.get(url) as r:
            new = hashlib.sha256(await r.read()).digest()
        if new != digest:
            digest = new
async def main(base, n):
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=32)  # the gateway: limits.upstream_connections, no total
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:
        tasks = [asyncio.create_task(watch(session, f"{base}/ref/items/{i}")) for i in range(n)]
        print("READY", flush=True)
        await asyncio.gather(*tasks)
asyncio.run(main(sys.argv[1], int(sys.argv[2])))
""".replace("INTERVAL", str(INTERVAL_MS / 1000))


def hits(base: str, prefix: str) -> int:
    return int(httpx2.get(f"{base}/_hits", timeout=5).json().get(prefix, 0))


def start_gateway(workdir: Path, upstream: str, uris: int) -> tuple[procs.Gateway, list[procs.Proc]]:
    template = {
        "name": "item",
        "uri_template": "bench://item/{id}",
        "backend": {"kind": "http", "url": f"{upstream}/items/{{id}}"},
        "watch": {"strategy": {"type": "poll", "interval_ms": INTERVAL_MS}},
    }
    gw = procs.Gateway(procs.gateway_config([], [template]), workdir)
    target = Target("gateway", f"{gw.base}/mcp", lambda n: "", gw.pid)
    try:
        clients = start_clients(
            target, 2, pool=uris, per_session=max(1, uris // 2), procs_n=2, pattern="bench://item/{n}"
        )
    except BaseException:
        gw.stop()
        raise
    return gw, clients


def whole_intervals(window_s: float) -> float:
    """`window_s` rounded to a whole number of poll intervals (at least one): over whole periods each side's
    polls and CPU are counted alike wherever the window's edges fall in its bursts."""
    interval_s = INTERVAL_MS / 1000
    return max(1, round(window_s / interval_s)) * interval_s


def measure(pids: dict[str, int], upstream: str, warmup_s: float, window_s: float) -> dict[str, dict[str, float]]:
    time.sleep(warmup_s)
    before = {k: (procs.cpu_seconds(pid), hits(upstream, prefix(k))) for k, pid in pids.items()}
    time.sleep(whole_intervals(window_s))
    out = {}
    for k, pid in pids.items():
        cpu, polls = procs.cpu_seconds(pid) - before[k][0], hits(upstream, prefix(k)) - before[k][1]
        out[k] = {
            "cpu_s": round(cpu, 3),
            "polls": polls,
            "cpu_ms_per_poll": round(1000 * cpu / max(1, polls), 4),
            "rss_mb": round(procs.rss_mb(pid), 1),
        }
    return out


def prefix(kind: str) -> str:
    return "items" if kind == "gateway" else "ref"


ROUNDS = 3
"""Consecutive rounds, each a fresh reference and a fresh gateway measured over one window: the bar must hold in
every one."""


def run(workdir: Path, uris: int, warmup_s: float, window_s: float, smoke: bool) -> dict[str, Any]:
    """`ROUNDS` rounds (one in smoke mode), each measuring the reference and the gateway together, over one window.

    Together, not one after the other: measured alone in turn, the reference's own CPU per poll moved from 0.14 to
    0.235 ms between rounds (the kernel's loopback work is charged to the sending process, and depends on what the
    upstream and the machine are doing at that moment), which swung the ratio from 1.17x to 2.11x while the gateway
    stayed within 0.26 to 0.30 ms. Over the same window both meet the same upstream and the same machine."""
    port = procs.free_port()
    upstream = f"http://127.0.0.1:{port}"
    up = procs.Proc([procs.PY, "-c", UPSTREAM, str(port)], stderr=subprocess.DEVNULL)
    result: dict[str, Any] = {"uris": uris, "interval_s": INTERVAL_MS / 1000, "window_s": whole_intervals(window_s)}
    try:
        procs.wait_http(f"{upstream}/_hits")
        rounds = [_together(workdir, upstream, uris, warmup_s, window_s) for _ in range(1 if smoke else ROUNDS)]
    finally:
        up.stop()
    worst = max(rounds, key=lambda r: r["ratio"] if r["ratio"] is not None else float("inf"))
    result.update(reference=worst["reference"], gateway=worst["gateway"], ratio=worst["ratio"])
    result["ratios"] = [r["ratio"] for r in rounds]
    result["rounds"] = [{k: r[k]["cpu_ms_per_poll"] for k in ("reference", "gateway")} for r in rounds]
    result["bar"] = f"CPU per poll <= 1.5x reference, in each of {len(rounds)} consecutive rounds"
    result["met"] = all(r is not None and r <= 1.5 for r in result["ratios"])
    return result


def _together(workdir: Path, upstream: str, uris: int, warmup_s: float, window_s: float) -> dict[str, Any]:
    ref = _reference(upstream, uris)
    try:
        gw, clients = start_gateway(workdir, upstream, uris)
        with procs.started(gw.proc, *clients):
            return _ratio(measure({"reference": ref.pid, "gateway": gw.pid}, upstream, warmup_s, window_s))
    finally:
        ref.stop()


def _reference(upstream: str, uris: int) -> procs.Proc:
    ref = procs.reference(["-c", BARE_LOOP, upstream, str(uris)])
    try:
        ref.expect("READY", 30)
    except BaseException:
        ref.stop()
        raise
    return ref


def _ratio(measured: dict[str, dict[str, float]]) -> dict[str, Any]:
    ref_ms = measured["reference"]["cpu_ms_per_poll"]
    # A tiny (smoke) run can use less than one clock tick: no ratio then, rather than a division by zero.
    ratio = round(measured["gateway"]["cpu_ms_per_poll"] / ref_ms, 2) if ref_ms else None
    return {**measured, "ratio": ratio}
