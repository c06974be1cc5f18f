"""Scenarios 1, 4, 4c and 4b: webhook -> notification latency at 1/100/1,000 sessions; RSS with 10,000
subscriptions; RSS per session of each era alone; RSS with 10,000 sessions of 10 subscriptions each.

Each runs the same subscriber processes (bench/subscribers.py; half legacy, half listen) against three servers, one
at a time: the gateway, a bare MCP SDK server (bench/refserver.py) and the wire's floor, a minimal server writing
one pre-encoded SSE frame to every open stream (bench/wireserver.py). The latency figures are held to the floor:
the SDK's are reported beside them, as the cost of the library the gateway is built on.
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


KINDS = ("wire", "reference", "gateway")
P99_BAR = 2.0
"""The gateway's p99 over the wire server's, at 100 and 1,000 sessions."""
CPU_BAR = 3.0
"""The gateway's server CPU per fire over the wire server's, at 1,000 sessions."""
CAPACITY_BAR_MB = 400
PER_ERA_BAR = 2.0
ERAS = ("legacy", "listen")


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
    eras: tuple[str, ...] = ERAS,
) -> list[procs.Proc]:
    """`sessions` sessions over up to `procs_n` processes, half legacy and half listen (legacy first if odd); of
    one era only if `eras` names one."""
    legacy, listen = (sessions + 1) // 2, sessions // 2
    if eras != ERAS:
        legacy, listen = (sessions, 0) if eras == ("legacy",) else (0, sessions)
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
            c.expect("READY", max(120.0, sessions * per_session * 0.005))
    except BaseException:
        for c in clients:
            c.stop()
        raise
    return clients


def latencies(target: Target, clients: list[procs.Proc], posts: int, budget_s: float) -> tuple[list[float], float]:
    """POST the trigger `posts` times (bounded by `budget_s`), one at a time; each sample is ms to the last receiver.
    Also the server's CPU time per measured fire (ms): the webhook or notify request included, warm-up excluded."""
    out: list[float] = []
    deadline = time.monotonic() + budget_s
    cpu_before = 0.0
    with httpx2.Client(timeout=POST_TIMEOUT_S) as http:
        for k in range(1, WARMUP_POSTS + posts + 1):
            if k == WARMUP_POSTS + 1:
                cpu_before = procs.cpu_seconds(target.pid)
            t0 = time.monotonic()
            http.post(target.trigger(0)).raise_for_status()
            last = max(float(c.expect(f"DONE {k} ", POST_TIMEOUT_S)) for c in clients)
            if k > WARMUP_POSTS:
                out.append((last - t0) * 1000)
            if time.monotonic() > deadline and len(out) >= 5:
                break
    return out, (procs.cpu_seconds(target.pid) - cpu_before) * 1000 / len(out)


def latency_case(target: Target, sessions: int, posts: int, budget_s: float) -> dict[str, Any]:
    clients = start_clients(target, sessions)
    with procs.started(*clients):
        samples, cpu_ms = latencies(target, clients, posts, budget_s)
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p99_ms": round(percentile(samples, 0.99), 2),
        "cpu_ms_per_fire": round(cpu_ms, 3),
        "posts": len(samples),
    }


def gateway_target(workdir: Path, uris: int, cpu: int | None = None) -> tuple[procs.Gateway, Target]:
    resources = [procs.webhook_resource(f"doc{n}", f"bench://doc/{n}", f"bench-token-{n}") for n in range(uris)]
    gw = procs.Gateway(procs.gateway_config(resources), workdir, cpu)
    return gw, Target(
        "gateway", f"{gw.base}/mcp", lambda n: f"{gw.base}/webhooks/resource-updated/bench-token-{n}", gw.pid
    )


def reference_target(cpu: int | None = None) -> tuple[procs.Proc, Target]:
    return _notify_server("reference", "refserver.py", cpu)


def wire_target(cpu: int | None = None) -> tuple[procs.Proc, Target]:
    return _notify_server("wire", "wireserver.py", cpu)


def _notify_server(name: str, script: str, cpu: int | None) -> tuple[procs.Proc, Target]:
    """A reference server in bench/ taking `POST /notify?uri=U` as its trigger."""
    port = procs.free_port()
    proc = procs.reference([str(procs.HERE / script), str(port)], cpu, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    procs.wait_http(f"{base}/healthz")
    return proc, Target(name, f"{base}/mcp", lambda n: f"{base}/notify?uri=bench://doc/{n}", proc.pid)


def start_target(kind: str, workdir: Path, uris: int) -> tuple[Any, Target]:
    if kind == "gateway":
        return gateway_target(workdir, uris)
    return reference_target() if kind == "reference" else wire_target()


def ratio(a: float, b: float) -> float | None:
    """a / b, or None when b is too small to measure (CPU time counts in clock ticks, 10 ms here)."""
    return round(a / b, 2) if b > 0 else None


def latency_row(row: dict[str, Any], size: int) -> dict[str, Any]:
    """Ratios of the gateway to the wire server (the bars) and to the SDK, and whether the bars hold."""
    g, wire, sdk = row["gateway"], row["wire"], row["reference"]
    row["ratio_p99"] = ratio(g["p99_ms"], wire["p99_ms"])
    row["ratio_p50"] = ratio(g["p50_ms"], wire["p50_ms"])
    row["ratio_cpu"] = ratio(g["cpu_ms_per_fire"], wire["cpu_ms_per_fire"])
    row["ratio_p99_sdk"] = ratio(g["p99_ms"], sdk["p99_ms"])
    row["ratio_cpu_sdk"] = ratio(g["cpu_ms_per_fire"], sdk["cpu_ms_per_fire"])
    met = True
    if size >= 100:
        met = row["ratio_p99"] is not None and row["ratio_p99"] <= P99_BAR
    if size >= 1000:
        met = met and row["ratio_cpu"] is not None and row["ratio_cpu"] <= CPU_BAR
    row["met"] = met
    return row


def run_latency(workdir: Path, sizes: list[int], posts: int, budget_s: float) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for size in sizes:
        row: dict[str, Any] = {}
        for kind in KINDS:
            server, target = start_target(kind, workdir, 1)
            try:
                row[kind] = latency_case(target, size, posts, budget_s)
            finally:
                server.stop()
        rows[str(size)] = latency_row(row, size)
    bar = f"p99 <= {P99_BAR}x the wire server's at 100 and 1,000 sessions; CPU per fire <= {CPU_BAR}x at 1,000"
    return {"sizes": rows, "bar": bar, "met": all(r["met"] for r in rows.values())}


def rss_case(
    kind: str, workdir: Path, sessions: int, per_session: int, pool: int, eras: tuple[str, ...] = ERAS
) -> dict[str, Any]:
    """Idle and loaded RSS of one server holding `sessions` x `per_session` subscriptions (sessions of `eras`)."""
    server, target = start_target(kind, workdir, pool)
    try:
        time.sleep(0.5)
        idle = procs.rss_mb(target.pid)
        clients = start_clients(target, sessions, pool=pool, per_session=per_session, eras=eras)
        with procs.started(*clients):
            time.sleep(1.0)
            loaded = procs.rss_mb(target.pid)
    finally:
        server.stop()
    kb_per_session = (loaded - idle) * 1024 / sessions
    return {"idle_rss_mb": round(idle, 1), "rss_mb": round(loaded, 1), "kb_per_session": round(kb_per_session, 1)}


def run_memory(
    workdir: Path, sessions: int, per_session: int, pool: int, kinds: tuple[str, ...] = KINDS
) -> dict[str, Any]:
    """RSS with `sessions` x `per_session` subscriptions over `pool` webhook URIs (no upstream reads)."""
    out: dict[str, Any] = {"sessions": sessions, "subscriptions": sessions * per_session, "uris": pool}
    for kind in kinds:
        out[kind] = rss_case(kind, workdir, sessions, per_session, pool)
    gw = out["gateway"]
    gw["kb_per_subscription"] = round((gw["rss_mb"] - gw["idle_rss_mb"]) * 1024 / out["subscriptions"], 2)
    if "reference" in out:
        out["ratio"] = round(gw["rss_mb"] / out["reference"]["rss_mb"], 2)
    out["ratio_wire"] = round(gw["rss_mb"] / out["wire"]["rss_mb"], 2)
    out["bar"] = "gateway RSS < 300 MB"
    out["met"] = gw["rss_mb"] < 300
    return out


def run_per_era(workdir: Path, sessions: int, per_session: int, pool: int) -> dict[str, Any]:
    """Scenario 4c: what one session of each era costs, `sessions` of that era alone x `per_session`
    subscriptions, against the wire server holding the same sessions: a handshake-era session (with its GET
    stream) and a listen stream each at most `PER_ERA_BAR`x the wire's per-session figure."""
    out: dict[str, Any] = {"sessions": sessions, "subscriptions": sessions * per_session, "uris": pool}
    for era in ERAS:
        row: dict[str, Any] = {
            kind: rss_case(kind, workdir, sessions, per_session, pool, eras=(era,)) for kind in ("wire", "gateway")
        }
        wire_kb, gw_kb = row["wire"]["kb_per_session"], row["gateway"]["kb_per_session"]
        row["ratio"] = round(gw_kb / wire_kb, 2) if wire_kb > 0 else None
        out[era] = row
    ratios = [out[era]["ratio"] for era in ERAS]
    out["bar"] = f"each era <= {PER_ERA_BAR}x the wire's KB per session"
    out["met"] = all(r is not None and r <= PER_ERA_BAR for r in ratios)
    return out


def run_capacity(workdir: Path, sessions: int, per_session: int, pool: int) -> dict[str, Any]:
    """Scenario 4b: one gateway holding `sessions` sessions of `per_session` subscriptions each, under
    `CAPACITY_BAR_MB` of RSS.
    Against the wire server only: the SDK server of scenario 1 did not get 10,000 sessions subscribed within
    500 s on the 2-core machine it was first run on (its RSS passed 1.2 GB on the way)."""
    out = run_memory(workdir, sessions, per_session, pool, kinds=("wire", "gateway"))
    out["bar"] = f"gateway RSS < {CAPACITY_BAR_MB} MB"
    out["met"] = out["gateway"]["rss_mb"] < CAPACITY_BAR_MB
    return out
