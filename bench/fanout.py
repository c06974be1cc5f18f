"""Scenarios 1 and 4: webhook -> notification latency at 1/100/1,000 sessions, and RSS with 10,000 subscriptions.

Both run the same subscriber processes (bench/subscribers.py; half legacy, half listen) against the gateway and
against the SDK reference server (bench/refserver.py), one server at a time.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import procs

CLIENT_PROCS = 4
WARMUP_POSTS = 3
POST_TIMEOUT_S = 10.0


@dataclass
class Target:
    name: str
    mcp_url: str
    trigger: Callable[[int], str]
    """URL to POST to fire URI number n."""
    pid: int


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_clients(
    target: Target,
    sessions: int,
    pool: int = 1,
    per_session: int = 1,
    procs_n: int = CLIENT_PROCS,
    pattern: str = "bench://doc/{n}",
) -> list[procs.Proc]:
    """`sessions` sessions over up to `procs_n` processes, half legacy and half listen (legacy first if odd)."""
    legacy, listen = (sessions + 1) // 2, sessions // 2
    plan: list[tuple[str, int, int]] = []  # mode, sessions, offset
    offset = 0
    for mode, count in (("legacy", legacy), ("listen", listen)):
        parts = max(1, min(count, procs_n // 2 or 1))
        for i in range(parts):
            n = count // parts + (1 if i < count % parts else 0)
            if n:
                plan.append((mode, n, offset))
                offset += n * per_session
    clients = []
    for mode, n, off in plan:
        argv = [procs.PY, str(procs.HERE / "subscribers.py"), target.mcp_url, "--mode", mode, "--sessions", str(n)]
        argv += ["--pattern", pattern, "--pool", str(pool), "--per-session", str(per_session), "--offset", str(off)]
        clients.append(procs.Proc(argv))
    try:
        for c in clients:
            c.expect("READY", 120)
    except BaseException:
        for c in clients:
            c.stop()
        raise
    return clients


def latencies(target: Target, clients: list[procs.Proc], posts: int, budget_s: float) -> list[float]:
    """POST the trigger `posts` times (bounded by `budget_s`), one at a time; each sample is ms to the last receiver."""
    out: list[float] = []
    deadline = time.monotonic() + budget_s
    with httpx2.Client(timeout=POST_TIMEOUT_S) as http:
        for k in range(1, WARMUP_POSTS + posts + 1):
            t0 = time.monotonic()
            http.post(target.trigger(0)).raise_for_status()
            last = max(float(c.expect(f"DONE {k} ", POST_TIMEOUT_S)) for c in clients)
            if k > WARMUP_POSTS:
                out.append((last - t0) * 1000)
            if time.monotonic() > deadline and len(out) >= 5:
                break
    return out


def latency_case(target: Target, sessions: int, posts: int, budget_s: float) -> dict[str, Any]:
    clients = start_clients(target, sessions)
    with procs.started(*clients):
        samples = latencies(target, clients, posts, budget_s)
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p99_ms": round(percentile(samples, 0.99), 2),
        "posts": len(samples),
    }


def gateway_target(workdir: Path, uris: int, cpu: int | None = None) -> tuple[procs.Gateway, Target]:
    resources = [procs.webhook_resource(f"doc{n}", f"bench://doc/{n}", f"bench-token-{n}") for n in range(uris)]
    gw = procs.Gateway(procs.gateway_config(resources), workdir, cpu)
    return gw, Target(
        "gateway", f"{gw.base}/mcp", lambda n: f"{gw.base}/webhooks/resource-updated/bench-token-{n}", gw.pid
    )


def reference_target(cpu: int | None = None) -> tuple[procs.Proc, Target]:
    port = procs.free_port()
    proc = procs.reference([str(procs.HERE / "refserver.py"), str(port)], cpu, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    procs.wait_http(f"{base}/healthz")
    return proc, Target("reference", f"{base}/mcp", lambda n: f"{base}/notify?uri=bench://doc/{n}", proc.pid)


def run_latency(workdir: Path, sizes: list[int], posts: int, budget_s: float) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for size in sizes:
        row: dict[str, Any] = {}
        for kind in ("reference", "gateway"):
            server, target = reference_target() if kind == "reference" else gateway_target(workdir, 1)
            try:
                row[kind] = latency_case(target, size, posts, budget_s)
            finally:
                server.stop()
        row["ratio_p99"] = round(row["gateway"]["p99_ms"] / row["reference"]["p99_ms"], 2)
        row["ratio_p50"] = round(row["gateway"]["p50_ms"] / row["reference"]["p50_ms"], 2)
        rows[str(size)] = row
    return {"sizes": rows, "bar": "p99 <= 1.5x reference", "met": all(r["ratio_p99"] <= 1.5 for r in rows.values())}


def run_memory(workdir: Path, sessions: int, per_session: int, pool: int) -> dict[str, Any]:
    """RSS with `sessions` x `per_session` subscriptions over `pool` webhook URIs (no upstream reads)."""
    out: dict[str, Any] = {"sessions": sessions, "subscriptions": sessions * per_session, "uris": pool}
    for kind in ("reference", "gateway"):
        server, target = reference_target() if kind == "reference" else gateway_target(workdir, pool)
        try:
            time.sleep(0.5)
            idle = procs.rss_mb(target.pid)
            clients = start_clients(target, sessions, pool=pool, per_session=per_session)
            with procs.started(*clients):
                time.sleep(1.0)
                loaded = procs.rss_mb(target.pid)
        finally:
            server.stop()
        out[kind] = {"idle_rss_mb": round(idle, 1), "rss_mb": round(loaded, 1)}
    gw = out["gateway"]
    gw["kb_per_subscription"] = round((gw["rss_mb"] - gw["idle_rss_mb"]) * 1024 / out["subscriptions"], 2)
    out["ratio"] = round(gw["rss_mb"] / out["reference"]["rss_mb"], 2)
    out["bar"] = "gateway RSS < 300 MB"
    out["met"] = gw["rss_mb"] < 300
    return out
