"""The admission caps fitted to the container's memory limit, so the gateway refuses before the kernel kills it.

The default caps (`gateway.limits`: 10,000 sessions, 512 listen streams, 512 watches) need about 1 GB; a pod given
256 MiB was OOM-killed long before any cap refused anyone, and an OOM kill drops every client at once. So at start
(and for every configuration applied later) the totals are lowered, all by one factor, until what they can hold
fits in the memory limit read from the cgroup, with headroom. A refusal at a fitted cap is the one each cap already
gives. Pure, apart from `container_limit` (which reads files under a root it is given) and `log`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

from mcpg_gateway.contract import config

logger = logging.getLogger(__name__)

SESSION_BYTES = 26_000
"""One handshake-era session with its GET stream open and 10 subscriptions: docs/benchmarks.md scenario 4c (1,000
such sessions alone, 25.3 KB a session over the idle process, since an open stream holds no asyncio Event and
sits under three frames fewer; 30.4 KB before that, 61.9 KB while requests were answered as SSE, 134.9 KB before
the gateway kept the sessions itself). Scenario 4b's average over both eras (21.4 KB a session) would understate
it."""
LISTEN_STREAM_BYTES = 26_000
"""One open `subscriptions/listen` stream with 10 URIs: scenario 4c (1,000 listen streams alone, 25.5 KB a stream
over the idle process; 28.2 KB before its subscriber's URIs lost their separate set, 60 KB before the gateway
carried an acknowledged stream on past the SDK)."""
WATCH_BYTES = 32_000
"""One watched URI (its watcher, task, state and the subscriber's link to it): measured for issue 36 at 15.6 KB of
RSS a webhook watch and 20.5 KB a poll watch (2,000 and 1,000 URIs subscribed in one process, tracemalloc on),
rounded up for a poll read in flight, which holds its response body while it runs."""
IDLE_BYTES = 104_000_000
"""An idle gateway's RSS (interpreter, SDK, Starlette, uvicorn, pydantic, prometheus_client imported and wired)."""
HEADROOM = 0.25
"""Share of the limit left free: request bodies (up to 4 MiB each, in flight at once), JSON parsing, garbage not
yet collected and the allocator's fragmentation come in bursts that the per-unit costs, measured at rest, omit."""
UNLIMITED = 2**62
"""At or above this a cgroup limit means none: cgroup v1 writes "unlimited" as 9223372036854771712."""

FITTED = ("sessions_total", "listen_streams_total", "watches_total")
"""The caps lowered to fit, all by the same factor."""
PER_PRINCIPAL = {
    "sessions_total": "sessions_per_principal",
    "listen_streams_total": "listen_streams_per_principal",
    "watches_total": "watches_per_principal",
}
"""Each fitted total's per-principal limit: lowered to the total when above it, as a valid configuration must be."""
SHOWN = (*FITTED, *PER_PRINCIPAL.values())
"""The caps `mcpg_limit_fitted` shows, as served."""


@dataclass(frozen=True, slots=True)
class Costs:
    """What each unit a cap admits costs in memory, and what the process needs before admitting any."""

    session: int = SESSION_BYTES
    listen_stream: int = LISTEN_STREAM_BYTES
    watch: int = WATCH_BYTES
    idle: int = IDLE_BYTES
    headroom: float = HEADROOM

    def of(self, limits: config.LimitsConfig) -> int:
        """Bytes `limits`' totals can hold at most."""
        return (
            limits.sessions_total * self.session
            + limits.listen_streams_total * self.listen_stream
            + limits.watches_total * self.watch
        )

    def budget(self, memory_limit: int) -> int:
        """Bytes the caps may hold under `memory_limit`: less the headroom and the idle process (never below 0)."""
        return max(0, int(memory_limit * (1 - self.headroom)) - self.idle)


COSTS = Costs()


@dataclass(frozen=True, slots=True)
class Lowered:
    field: str
    configured: int
    fitted: int


@dataclass(frozen=True, slots=True)
class Fit:
    """The limits to serve, what was lowered to get them, and the memory limit they fit (None: no limit found)."""

    limits: config.LimitsConfig
    lowered: tuple[Lowered, ...] = ()
    memory_limit: int | None = None
    costs: Costs = COSTS

    def describe(self) -> str:
        """One line: what was lowered, from what to what, and why."""
        assert self.memory_limit is not None  # only a limit lowers anything
        changes = ", ".join(f"{c.field} {c.configured} -> {c.fitted}" for c in self.lowered)
        c = self.costs
        short = (
            "; the limit leaves no room beyond an idle gateway, so each is 1" if not c.budget(self.memory_limit) else ""
        )
        return (
            f"limits lowered to fit the container memory limit of {_mib(self.memory_limit)} MiB: {changes} "
            f"(at {c.session / 1000:.1f} KB a session, {c.listen_stream / 1000:.0f} KB a listen stream, "
            f"{c.watch / 1000:.0f} KB a watch, {c.idle / 1e6:.0f} MB idle and {c.headroom:.0%} of the limit kept "
            f"free{short})"
        )


def fit(limits: config.LimitsConfig, memory_limit: int | None, costs: Costs = COSTS) -> Fit:
    """`limits` with its totals scaled down by one factor (each at least 1) so they fit `memory_limit`, and each
    per-principal limit at most its total; `limits` itself when there is no limit or they fit already."""
    if memory_limit is None:
        return Fit(limits)
    wanted = costs.of(limits)
    budget = costs.budget(memory_limit)
    if wanted <= budget:
        return Fit(limits, memory_limit=memory_limit, costs=costs)
    factor = budget / wanted
    update: dict[str, int] = {}
    for total in FITTED:
        configured = getattr(limits, total)
        update[total] = max(1, math.floor(configured * factor))
        each = PER_PRINCIPAL[total]
        update[each] = min(getattr(limits, each), update[total])
    fitted = limits.model_copy(update=update)
    lowered = tuple(
        Lowered(name, getattr(limits, name), value) for name, value in update.items() if value != getattr(limits, name)
    )
    return Fit(fitted, lowered, memory_limit, costs)


def fitted(cfg: config.GatewayConfig, memory_limit: int | None) -> tuple[config.GatewayConfig, Fit]:
    """`cfg` serving `fit`'s limits (the same object when nothing changed), and the fit."""
    result = fit(cfg.gateway.limits, memory_limit)
    if not result.lowered:
        return cfg, result
    section = cfg.gateway.model_copy(update={"limits": result.limits})
    return cfg.model_copy(update={"gateway": section}), result


def log(result: Fit) -> None:
    """One line: a warning saying what was lowered, or an info line saying the caps fit the limit found."""
    if result.lowered:
        logger.warning("%s", result.describe())
    elif result.memory_limit is not None:
        logger.info(
            "limits fit the container memory limit of %d MiB as configured (%d MiB at most, of %d MiB available)",
            _mib(result.memory_limit),
            _mib(result.costs.of(result.limits)),
            _mib(result.costs.budget(result.memory_limit)),
        )


def container_limit(root: Path = Path("/")) -> int | None:
    """This process's memory limit in bytes from its cgroup (v2 and v1, the smaller if both say one), or None when
    there is none or it cannot be read. `root`: where `/proc` and `/sys` are (tests give a tree of their own)."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            found.extend(_v2_limits(root / "sys/fs/cgroup", path))
        elif "memory" in controllers.split(","):
            found.extend(_v1_limit(root / "sys/fs/cgroup/memory", path))
    return min(found, default=None)


def _v2_limits(mount: Path, path: str) -> list[int]:
    """`memory.max` of the cgroup and of each parent up to the mount: a parent's limit binds its children too."""
    out = []
    here = _under(mount, path)
    while True:
        value = _read_limit(here / "memory.max")
        if value is not None:
            out.append(value)
        if here == mount:
            return out
        here = here.parent


def _v1_limit(mount: Path, path: str) -> list[int]:
    """The cgroup's `hierarchical_memory_limit` (its parents' included), else its `memory.limit_in_bytes`. In a
    container the mount often shows the container's own cgroup at its root, not at `path`: then the root's."""
    here = _under(mount, path)
    if not (here / "memory.limit_in_bytes").exists():
        here = mount
    value = _hierarchical(here / "memory.stat")
    if value is None:
        value = _read_limit(here / "memory.limit_in_bytes")
    return [] if value is None else [value]


def _under(mount: Path, path: str) -> Path:
    here = mount / path.strip("/")
    # A path naming a parent (`..`) must not lead out of the mount; such a line is not trusted.
    return here if here.resolve().is_relative_to(mount.resolve()) else mount


def _hierarchical(stat: Path) -> int | None:
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition(" ")
        if key == "hierarchical_memory_limit":
            return _limit(value)
    return None


def _read_limit(path: Path) -> int | None:
    try:
        return _limit(path.read_text())
    except OSError:
        return None


def _limit(text: str) -> int | None:
    """A limit file's value in bytes; None for "max", a huge value (no limit) or anything unreadable."""
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if 0 < value < UNLIMITED else None


def _mib(size: int) -> int:
    return size // (1024 * 1024)
