"""Pull-watch ownership: the lease's timing and the stored state (pure), then poll watches on gateways sharing a
real nats-server (the `bus_server` tests): one owner reads for all, hands over, expires, fences itself."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx2
import nats as nats_py
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from mcpg_gateway import bus, errors, ownership, rendezvous
from mcpg_gateway.contract import config
from mcpg_testing import BOUND_S
from mcpg_testing.clients import Subscription, refusal, subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import bus_section, gateway_config, resource
from mcpg_testing.gateways import (
    ADMIN_TOKEN,
    SENTINEL_TOKEN,
    SENTINEL_URI,
    GatewayFactory,
    RunningGateway,
    admin_watches,
    sentinel,
)
from mcpg_testing.servers import NatsServer
from mcpg_testing.upstream import Upstream

POLLED = "drive://file/notes"
V1, V2 = '{"v": 1}', '{"v": 2}'
PASSWORD_ENV = "BUS_PASSWORD"


# --- pure parts ---------------------------------------------------------------------------------------------


def test_a_lease_is_renewed_a_third_of_its_ttl_after_the_last_success() -> None:
    lease = ownership.Lease(ttl_s=9.0, revision=1, renewed_at=100.0)
    assert lease.wait_s(100.0) == 3.0
    assert lease.wait_s(101.0) == 2.0
    lease.renewed(2, 103.0)
    assert (lease.revision, lease.wait_s(103.0)) == (2, 3.0)


def test_an_overdue_renewal_is_retried_every_twelfth_of_the_ttl_but_never_past_the_fence() -> None:
    lease = ownership.Lease(ttl_s=9.0, revision=1, renewed_at=100.0)
    assert lease.wait_s(103.0) == 0.75
    assert lease.wait_s(105.5) == 0.5  # the fence is at 106
    assert lease.wait_s(106.5) == 0.0


def test_an_owner_fences_itself_two_thirds_of_the_ttl_after_its_last_renewal_was_sent() -> None:
    lease = ownership.Lease(ttl_s=9.0, revision=1, renewed_at=100.0)
    assert not lease.fenced(105.99)
    assert lease.fenced(106.0)
    lease.renewed(2, 105.0)
    assert not lease.fenced(106.0)


@given(st.floats(1, 300), st.floats(0, 1e6))
def test_an_owner_whose_renewals_all_fail_retries_then_stops_a_third_of_the_ttl_before_expiry(
    ttl: float, renewed_at: float
) -> None:
    lease, now, attempts = ownership.Lease(ttl, 1, renewed_at), renewed_at, 0
    while not lease.fenced(now):
        wait = lease.wait_s(now)
        assert wait >= 0
        now += wait
        attempts += 1
        assert attempts < 100, "the loop must reach the fence"
    assert now <= lease.fence_at + 1e-6 * max(1.0, renewed_at)
    assert lease.fence_at + ttl / 3 == pytest.approx(renewed_at + ttl)  # the server drops it a third later
    assert attempts >= 3  # the renewal that came due, and retries before giving up


def test_a_stored_state_round_trips_and_anything_else_is_no_state() -> None:
    assert ownership.stored_state(ownership.state_value("abc")) == "abc"
    for data in (None, b"", b"not json", b"[]", b'{"v": 99, "state": "x"}', b'{"v": 1, "state": 3}'):
        assert ownership.stored_state(data) is None


# --- poll watches on gateways sharing a real bus --------------------------------------------------------------


def digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


class Cluster:
    """Gateways of one test on one bus (its own prefix and buckets), a poll URI and the sentinel on each."""

    def __init__(self, factory: GatewayFactory, server: NatsServer, upstream: Upstream, clock: ManualClock) -> None:
        self.factory, self.server, self.upstream, self.clock = factory, server, upstream, clock
        self.name = f"t{uuid.uuid4().hex[:12]}"
        self.lease_ttl_s = 5.0
        """Real time, as the bus's key-value TTL is: long enough that a loaded machine's stall (an owner fences
        itself after 2/3 of it without a renewal) is not a takeover the test did not ask for. A test about
        expiry sets 1 s before `start`."""

    def config(self, instance: str) -> dict[str, Any]:
        polled = resource("notes", POLLED, f"{self.upstream.url}/notes", {"type": "poll", "interval_ms": 10_000})
        raw = gateway_config(polled, sentinel(), resource("bad", "drive://bad", f"{self.upstream.url}/missing"))
        raw["gateway"]["bus"] = bus_section(
            self.server.address,
            self.server.user,
            PASSWORD_ENV,
            self.name,
            lease_ttl_s=self.lease_ttl_s,
            instance=instance,
        )
        return raw

    async def start(self, *names: str) -> list[RunningGateway]:
        env = {PASSWORD_ENV: self.server.password}
        return [await self.factory(self.config(n), env, clock=self.clock, admin_token=ADMIN_TOKEN) for n in names]

    @contextlib.asynccontextmanager
    async def state_bucket(self) -> AsyncIterator[KeyValue]:
        nc = await nats_py.connect(self.server.url)
        try:
            yield await nc.jetstream().key_value(f"{self.name}-state")
        finally:
            await nc.close()

    async def stored(self) -> str | None:
        async with self.state_bucket() as kv:
            return ownership.stored_state((await kv.get(bus.uri_hash(POLLED))).value)


@pytest.fixture
def cluster(gateway_factory: GatewayFactory, bus_server: NatsServer, upstream: Upstream, clock: ManualClock) -> Cluster:
    upstream.set("/notes", V1)
    return Cluster(gateway_factory, bus_server, upstream, clock)


def owners(gws: list[RunningGateway]) -> list[bool | None]:
    return [g.gw.owner_of(POLLED) for g in gws]


async def owning(gw: RunningGateway, owns: bool = True) -> None:
    """Wait until `gw` holds (or no longer holds) the lease of POLLED."""
    the_owners = gw.gw.owners
    assert the_owners is not None
    async with asyncio.timeout(BOUND_S):
        await the_owners.until(lambda: the_owners.owns(POLLED) is owns)


async def only_sentinel_follows(gw: RunningGateway, subs: list[Subscription]) -> None:
    async with httpx2.AsyncClient() as http:
        assert (await http.post(f"{gw.base}/webhooks/resource-updated/{SENTINEL_TOKEN}")).status_code == 200
    for sub in subs:
        assert await sub.next_update() == SENTINEL_URI
        assert sub.drained() == []


def sample(gw: RunningGateway, name: str, **labels: str) -> float:
    return gw.gw.metrics.registry.get_sample_value(name, labels) or 0.0


async def subscribe_each(stack: contextlib.AsyncExitStack, gw: RunningGateway, mode: str) -> Subscription:
    return await stack.enter_async_context(subscribed(gw.mcp_url, mode, [POLLED, SENTINEL_URI]))


@dataclass
class Held:
    """A subscriber in a task of its own, so that any one can leave first (the SDK's scopes nest per task)."""

    sub: Subscription
    leave: asyncio.Event
    task: asyncio.Task[None]

    async def close(self) -> None:
        self.leave.set()
        async with asyncio.timeout(BOUND_S):
            await self.task


async def hold(gw: RunningGateway, mode: str) -> Held:
    ready: asyncio.Future[Subscription] = asyncio.get_running_loop().create_future()
    leave = asyncio.Event()

    async def run() -> None:
        async with subscribed(gw.mcp_url, mode, [POLLED, SENTINEL_URI]) as sub:
            ready.set_result(sub)
            await leave.wait()

    task = asyncio.create_task(run())
    either: list[asyncio.Future[Any]] = [ready, task]
    async with asyncio.timeout(BOUND_S):
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        task.result()  # raises what went wrong
    return Held(ready.result(), leave, task)


async def test_a_poll_subscribed_on_three_gateways_is_read_by_one_owner_and_each_subscriber_is_told_once(
    cluster: Cluster,
) -> None:
    gws = await cluster.start("a", "b", "c")
    async with contextlib.AsyncExitStack() as stack:
        subs = [await subscribe_each(stack, g, m) for g, m in zip(gws, ["legacy", "listen", "listen"], strict=True)]
        await cluster.clock.sleepers(1)  # the owner reads on the clock; the others only contend for the lease
        assert sorted(owners(gws), key=str) == [False, False, True]
        assert [(await admin_watches(g))[POLLED]["owner"] for g in gws] == owners(gws)
        assert cluster.upstream.hits["/notes"] == 3  # each took its own baseline when subscribed
        assert await cluster.stored() == digest(V1)  # the first owner stored its baseline ...
        await only_sentinel_follows(gws[0], subs)  # ... and told nobody
        cluster.upstream.set("/notes", V2)
        await cluster.clock.tick()
        assert cluster.upstream.hits["/notes"] == 4  # one read for three gateways
        for sub in subs:
            assert await sub.next_update() == POLLED
        await only_sentinel_follows(gws[2], subs)
        assert await cluster.stored() == digest(V2)
    assert sum(sample(g, "mcpg_bus_lease_changes_total", event="acquired") for g in gws) == 1


async def test_when_the_owner_s_last_subscriber_leaves_another_takes_over_and_tells_a_change_made_meanwhile(
    cluster: Cluster,
) -> None:
    gws = await cluster.start("a", "b", "c")
    held = [await hold(g, "legacy") for g in gws]
    try:
        await cluster.clock.sleepers(1)
        first = owners(gws).index(True)
        cluster.upstream.set("/notes", V2)  # the owner never reads it: it leaves first
        await held[first].close()
        await owning(gws[first], False)
        rest = [i for i in range(3) if i != first]
        for i in rest:  # the next owner resumed from the stored state (V1), read V2 at once and told everyone
            assert await held[i].sub.next_update() == POLLED
        await only_sentinel_follows(gws[rest[0]], [held[i].sub for i in rest])
        assert sample(gws[first], "mcpg_bus_lease_changes_total", event="released") == 1
        await cluster.clock.sleepers(1)
        second = owners(gws).index(True)
        [last] = [i for i in rest if i != second]
        await held[second].close()  # a handover with no change in it tells nothing
        await owning(gws[second], False)
        await owning(gws[last])
        await cluster.clock.sleepers(1)  # the new owner has checked and sleeps
        await only_sentinel_follows(gws[last], [held[last].sub])
        assert cluster.upstream.hits["/notes"] == 3 + 2  # three baselines, one check per takeover
    finally:
        for h in held:
            await h.close()


async def test_a_lease_nobody_renews_expires_and_the_next_owner_tells_a_change_made_in_the_gap_once(
    cluster: Cluster,
) -> None:
    cluster.lease_ttl_s = 1.0
    [gw] = await cluster.start("heir")
    the_bus = gw.gw.bus
    assert the_bus is not None
    async with asyncio.timeout(BOUND_S):
        await the_bus.until(lambda: the_bus.buckets is not None)
    # A dead owner: its lease (never renewed again) and the state it last stored, from before a change.
    nc = await nats_py.connect(cluster.server.url)
    js = nc.jetstream()
    await (await js.key_value(f"{cluster.name}-owners")).create(bus.uri_hash(POLLED), ownership.lease_value("dead"))
    await (await js.key_value(f"{cluster.name}-state")).put(bus.uri_hash(POLLED), ownership.state_value(digest(V1)))
    await nc.close()
    cluster.upstream.set("/notes", V2)
    async with subscribed(gw.mcp_url, "listen", [POLLED, SENTINEL_URI]) as sub:
        assert gw.gw.owner_of(POLLED) is False
        assert await sub.next_update() == POLLED  # once the dead owner's lease expired (lease_ttl_s: 1)
        await cluster.clock.sleepers(1)
        await only_sentinel_follows(gw, [sub])
        assert gw.gw.owner_of(POLLED) is True
        assert await cluster.stored() == digest(V2)


async def test_an_owner_cut_off_from_the_bus_fences_itself_and_one_owner_is_elected_after_the_outage(
    cluster: Cluster,
) -> None:
    cluster.lease_ttl_s = 1.0
    gws = await cluster.start("a", "b")
    async with contextlib.AsyncExitStack() as stack:
        subs = [await subscribe_each(stack, g, "listen") for g in gws]
        await cluster.clock.sleepers(1)
        first = owners(gws).index(True)
        cluster.server.kill()
        try:
            await owning(gws[first], False)  # it could not renew for 2/3 of the TTL
            assert sample(gws[first], "mcpg_bus_lease_changes_total", event="fenced") == 1
            assert sample(gws[first], "mcpg_bus_owned_watches") == 0
        finally:
            await asyncio.to_thread(cluster.server.start)
        for sub in subs:  # reconnected: each held URI told once, in case a change was missed
            assert {await sub.next_update(), await sub.next_update()} == {POLLED, SENTINEL_URI}
        await cluster.clock.sleepers(1)  # re-elected once the old lease expired; it resumed and reads again
        assert sorted(owners(gws), key=str) == [False, True]
        await only_sentinel_follows(gws[0], subs)


async def test_on_a_bus_a_pull_watch_whose_backend_refuses_the_baseline_still_refuses_the_subscription(
    cluster: Cluster,
) -> None:
    [gw] = await cluster.start("a")
    error = await refusal(gw.mcp_url, "legacy", ["drive://bad"])
    assert error.code == errors.INVALID_PARAMS  # the upstream answered 404
    assert gw.gw.fanout.running_watches() == []


async def test_a_stopping_owner_releases_its_lease_and_another_gateway_takes_over(cluster: Cluster) -> None:
    gws = await cluster.start("a", "b")
    held = [await hold(g, "legacy") for g in gws]
    try:
        await cluster.clock.sleepers(1)
        first = owners(gws).index(True)
        [other] = [i for i in range(2) if i != first]
        await gws[first].shutdown()  # with its subscriber still there
        assert sample(gws[first], "mcpg_bus_lease_changes_total", event="released") == 1
        await owning(gws[other])
        await cluster.clock.sleepers(1)
        await only_sentinel_follows(gws[other], [held[other].sub])
    finally:
        for h in held:
            await h.close()


# --- a watch whose last subscriber leaves stops, whatever its cancellation met ---------------------------------


class CancelSwallowingState:
    """The state bucket, but an armed put returns normally when its caller is cancelled after the reply came:
    what 3.11's `asyncio.wait_for` in nats-py does when the reply and the cancel land in the same loop pass."""

    def __init__(self, real: KeyValue) -> None:
        self.real = real
        self.armed = False
        self.entered = asyncio.Event()
        self.swallowed = 0

    async def put(self, key: str, value: bytes) -> int:
        revision: int = await self.real.put(key, value)
        if self.armed:
            self.armed = False
            self.entered.set()
            try:
                await asyncio.Event().wait()  # the reply is in; the caller's cancel comes now ...
            except asyncio.CancelledError:
                self.swallowed += 1  # ... and is lost, the result returned
        return revision

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


async def swallow_state_puts(the_bus: bus.Bus) -> CancelSwallowingState:
    async with asyncio.timeout(BOUND_S):
        await the_bus.until(lambda: the_bus.buckets is not None)
    assert the_bus.buckets is not None
    state = CancelSwallowingState(the_bus.buckets.state)
    the_bus.buckets = dataclasses.replace(the_bus.buckets, state=cast(KeyValue, state))
    return state


@dataclass
class ScriptedPull:
    """A pull strategy that reports whatever the test says, counting its reads."""

    changed: bool = False
    checks: int = 0
    interval_s: float = 10.0

    async def check(self) -> bool:
        self.checks += 1
        return self.changed

    def snapshot(self) -> str:
        return str(self.checks)

    def resume(self, state: str) -> None:
        return None


def bus_config(server: NatsServer, lease_ttl_s: float) -> config.BusConfig:
    """A bus of its own on `server`: a fresh subject prefix and buckets."""
    name = f"t{uuid.uuid4().hex[:12]}"
    return config.BusConfig(
        url=server.address,
        user=server.user,
        password=SecretStr(server.password),
        subject_prefix=name,
        bucket=name,
        lease_ttl_s=lease_ttl_s,
    )


def a_bus(server: NatsServer, registry: CollectorRegistry) -> bus.Bus:
    cfg = bus_config(server, 1)
    return bus.Bus(cfg, "a", registry, grace_s=5)


def watch_tasks(uri: str) -> list[asyncio.Task[Any]]:
    """The tasks still running a watcher of `uri` (`watch <uri>`, and its lease's and reading's `watch <uri> …`)."""
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(f"watch {uri}") and not t.done()]


async def test_an_owner_whose_state_store_swallowed_its_cancel_still_stops_and_releases_its_lease(
    bus_server: NatsServer, clock: ManualClock
) -> None:
    registry = CollectorRegistry()
    the_bus = a_bus(bus_server, registry)
    await the_bus.start()
    try:
        state = await swallow_state_puts(the_bus)
        owners, pull, told = ownership.Owners(the_bus, clock), ScriptedPull(), asyncio.Event()

        async def deliver() -> None:
            told.set()

        task = asyncio.create_task(owners.run(POLLED, "poll", pull, deliver), name=f"watch {POLLED}")
        await clock.sleepers(1)  # owned, its baseline stored; it waits for its interval
        state.armed, pull.changed = True, True
        await clock.release(1)
        async with asyncio.timeout(BOUND_S):
            await told.wait()
            await state.entered.wait()  # told everyone; storing the state after the fire
        task.cancel()  # its last subscriber left
        await asyncio.wait([task, *watch_tasks(POLLED)], timeout=BOUND_S)
        assert watch_tasks(POLLED) == [], "the owned loop kept running after its watcher was cancelled"
        assert task.cancelled()
        assert state.swallowed == 1
        assert pull.checks == 1  # it read nothing more
        assert not owners.owns(POLLED)
        assert registry.get_sample_value("mcpg_bus_lease_changes_total", {"event": "released"}) == 1
    finally:
        await the_bus.close()


async def test_ten_listen_change_close_cycles_leave_no_watch_running_and_the_gateway_stops_in_bound(
    cluster: Cluster,
) -> None:
    """Each listen leaves right after the fire, while the owner stores its state, and the store swallows the
    cancel each time (the race a real client hits now and then, made certain here)."""
    [gw] = await cluster.start("a")
    assert gw.gw.bus is not None
    state = await swallow_state_puts(gw.gw.bus)
    for n in range(10):
        async with subscribed(gw.mcp_url, "listen", [POLLED]) as sub:
            await owning(gw)
            await cluster.clock.sleepers(1)  # the owner has resumed, checked, and waits for its interval
            cluster.upstream.set("/notes", f'{{"v": {n + 10}}}')
            state.armed, state.entered = True, asyncio.Event()
            await cluster.clock.release(1)
            assert await sub.next_update() == POLLED
            async with asyncio.timeout(BOUND_S):
                await state.entered.wait()
    await asyncio.wait(watch_tasks(POLLED) or [asyncio.create_task(asyncio.sleep(0))], timeout=BOUND_S)
    assert watch_tasks(POLLED) == []
    assert state.swallowed == 10
    listed = await admin_get_watches(gw)
    assert (listed["watches"], listed["stopping"]) == ([], [])
    assert sample(gw, "mcpg_bus_owned_watches") == 0
    reads = cluster.upstream.hits["/notes"]
    await cluster.clock.release(0)  # anything still reading would read now
    await gw.shutdown()  # within BOUND_S
    assert cluster.upstream.hits["/notes"] == reads


async def admin_get_watches(gw: RunningGateway) -> dict[str, Any]:
    async with httpx2.AsyncClient() as http:
        resp = await http.get(f"{gw.admin}/admin/v1/watches", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert resp.status_code == 200
    return cast(dict[str, Any], resp.json())


# --- what the buckets hold is another client's word ------------------------------------------------------------


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == ownership.__name__ and r.levelno >= logging.WARNING]


DEEP = b"[" * 30_000 + b"]" * 30_000
"""Within the state entry's size bound, and nested far deeper than the JSON parser goes."""


def test_a_state_entry_that_is_not_ours_is_no_state_whatever_its_bytes() -> None:
    nested_state = ownership.state_value('["text", "x"]').replace(b'[\\"text\\", \\"x\\"]', DEEP)
    for data in (DEEP, b"\xff\xfe", b'{"v": true, "state": "x"}', b'{"v": 1, "state": "\\ud800"}', nested_state):
        assert ownership.stored_state(data) is None or data is nested_state
    assert ownership.stored_state(b'{"v": 1, "state": "' + b"0" * ownership.MAX_STATE_BYTES + b'"}') is None
    with pytest.raises(ValueError, match="at most"):
        ownership.state_value("0" * ownership.MAX_STATE_BYTES)


async def test_a_state_entry_nested_too_deep_to_parse_is_discarded_once_and_a_real_change_is_still_told(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    [gw] = await cluster.start("a")
    the_bus = gw.gw.bus
    assert the_bus is not None
    async with asyncio.timeout(BOUND_S):
        await the_bus.until(lambda: the_bus.buckets is not None)
    async with cluster.state_bucket() as kv:
        await kv.put(bus.uri_hash(POLLED), DEEP)
    caplog.set_level(logging.WARNING, logger="mcpg_gateway.ownership")
    async with subscribed(gw.mcp_url, "listen", [POLLED, SENTINEL_URI]) as sub:
        await owning(gw)
        await cluster.clock.sleepers(1)  # it took its own baseline, and waits for its interval
        assert await cluster.stored() == digest(V1)  # the bad entry is gone: overwritten
        cluster.upstream.set("/notes", V2)
        await cluster.clock.release(1)
        assert await sub.next_update() == POLLED
        await only_sentinel_follows(gw, [sub])
    assert sample(gw, "mcpg_watch_strategy_restarts_total", strategy="poll") == 0
    [line] = warned(caplog)
    assert line == f"the stored state of {POLLED} is not one this gateway wrote; taking its own baseline"


def test_a_lease_names_its_holder_only_if_a_log_line_can_show_it() -> None:
    assert ownership.lease_holder(ownership.lease_value("gw-0")) == "gw-0"
    for data in (None, DEEP, b'{"owner": "a\\nb"}', b'{"owner": ""}', b'{"owner": 7}', b'{"owner": "\\ud800"}'):
        assert ownership.lease_holder(data) is None
    assert ownership.lease_holder(ownership.lease_value("x" * 254)) is None


def test_a_contended_lease_s_holder_is_suspect_once_per_episode_and_only_if_no_gateway_goes_by_its_name() -> None:
    contention = ownership.Contention(since=100.0, suspect_after_s=20.0)
    assert contention.read_due(100.0)
    contention.read_at = 100.0
    assert not contention.read_due(119.0)
    assert contention.read_due(120.0)
    assert not contention.suspect(119.0, "intruder", set())  # too early: a real gateway may not have reported yet
    assert not contention.suspect(120.0, "gw-1", {"gw-1"})  # a gateway heard on the bus
    assert contention.suspect(120.0, None, {"gw-1"})  # an entry no gateway wrote
    assert not contention.suspect(200.0, "intruder", set())  # said once this episode


async def test_a_lease_kept_by_a_name_no_gateway_goes_by_is_said_once_counted_and_shown(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    [gw] = await cluster.start("a")
    the_bus, the_owners = gw.gw.bus, gw.gw.owners
    assert the_bus is not None
    assert the_owners is not None
    async with asyncio.timeout(BOUND_S):
        await the_bus.until(lambda: the_bus.buckets is not None)
    nc = await nats_py.connect(cluster.server.url)
    kv = await nc.jetstream().key_value(f"{cluster.name}-owners")
    key, forged = bus.uri_hash(POLLED), ownership.lease_value("intruder")
    revision = await kv.create(key, forged)

    async def keep_renewing() -> None:
        nonlocal revision
        while True:
            await asyncio.sleep(0.2)  # the forger's own cadence, well within the 1 s TTL (not a wait for anything)
            revision = await kv.update(key, forged, last=revision)

    forger = asyncio.create_task(keep_renewing())
    caplog.set_level(logging.WARNING, logger="mcpg_gateway.ownership")
    try:
        async with subscribed(gw.mcp_url, "listen", [POLLED]):
            async with asyncio.timeout(BOUND_S):
                await the_owners.until(lambda: the_owners.holder(POLLED) == "intruder")
            assert (await admin_watches(gw))[POLLED]["lease_holder"] == "intruder"
            assert sample(gw, "mcpg_bus_leases_held_by_unknown_total") == 0  # not yet: too early to tell
            cluster.clock.advance(2 * 10.0)  # twice the longer of the TTL (1 s) and the liveness interval (10 s)
            async with asyncio.timeout(BOUND_S):
                await the_owners.until(lambda: sample(gw, "mcpg_bus_leases_held_by_unknown_total") == 1)
            assert gw.gw.owner_of(POLLED) is False
    finally:
        forger.cancel()
        await asyncio.gather(forger, return_exceptions=True)
        await nc.close()
    [line] = warned(caplog)
    assert line.startswith(f"the lease of {POLLED} has been held by 'intruder' for 20 s, and no gateway on the bus")


# --- leases spread over the gateways that want them (`rendezvous.py`), on a real bus --------------------------------

SPREAD_NAMES = ["gw-1", "gw-2", "gw-3"]
SPREAD_URIS = [f"drive://file/{n}" for n in range(150)]
"""Enough that hashing alone puts each gateway's share within a quarter of a third (60, 46 and 44)."""


@dataclass
class Doc:
    """An upstream document every gateway's pull reads: its version, and who read it how often."""

    version: int = 1
    reads: dict[str, int] = dataclasses.field(default_factory=dict)
    read: dict[str, asyncio.Event] = dataclasses.field(default_factory=dict)
    """Set at each read by that gateway."""

    def read_by(self, instance: str) -> asyncio.Event:
        return self.read.setdefault(instance, asyncio.Event())


@dataclass
class DocPull:
    """A pull strategy over a `Doc`, as one gateway runs it: its state is the version it last saw."""

    doc: Doc
    instance: str
    seen: int = 0
    interval_s: float = 10.0

    async def check(self) -> bool:
        self.doc.reads[self.instance] = self.doc.reads.get(self.instance, 0) + 1
        self.doc.read_by(self.instance).set()
        changed, self.seen = self.doc.version != self.seen, self.doc.version
        return changed

    def snapshot(self) -> str:
        return str(self.seen)

    def resume(self, state: str) -> None:
        self.seen = int(state)


class Spread:
    """Three `Owners` on one real bus (their own prefix and buckets), each told of the others as live gateways,
    on one manual clock; every fire each gateway tells (its own or from the bus) is counted by URI."""

    def __init__(self, server: NatsServer, clock: ManualClock) -> None:
        cfg = bus_config(server, 3)  # 450 watches in one event loop: renewals every second leave it room when loaded
        self.clock = clock
        self.told: dict[str, Counter[str]] = {n: Counter() for n in SPREAD_NAMES}
        self._told = asyncio.Event()
        self.registries = {n: CollectorRegistry() for n in SPREAD_NAMES}
        self.buses = {n: bus.Bus(cfg, n, self.registries[n], 5, hooks=self._hooks(n)) for n in SPREAD_NAMES}
        self.owners = {n: ownership.Owners(b, clock, lambda: set(SPREAD_NAMES)) for n, b in self.buses.items()}
        self.docs: dict[str, Doc] = {}
        self.tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    def _hooks(self, name: str) -> bus.Hooks:
        async def received(uri: str) -> None:
            self._tell(name, uri)

        return bus.Hooks(receiver=received)

    async def start(self) -> None:
        for b in self.buses.values():
            await b.start()
            async with asyncio.timeout(BOUND_S):
                await b.until(lambda b=b: b.buckets is not None)  # type: ignore[misc]

    def run(self, name: str, uri: str) -> None:
        doc = self.docs.setdefault(uri, Doc())
        pull = DocPull(doc, name, seen=doc.version)  # its own baseline, taken when subscribed

        async def deliver() -> None:
            self._tell(name, uri)

        self.tasks[name, uri] = asyncio.create_task(self.owners[name].run(uri, "poll", pull, deliver))

    def changes(self, event: str) -> float:
        """`mcpg_bus_lease_changes_total{event}`, summed over the three."""
        return sum(
            r.get_sample_value("mcpg_bus_lease_changes_total", {"event": event}) or 0.0
            for r in self.registries.values()
        )

    def holders(self, uri: str) -> list[str]:
        return [n for n, o in self.owners.items() if o.owns(uri)]

    async def until(self, what: str, predicate: Callable[[], bool]) -> None:
        """Until `predicate()` holds, within twice `BOUND_S` (a lease expires, and each of a few handovers takes up
        to 2/3 of the TTL): re-checked at every lease event of any of the three (`Owners.until` checks it as it
        starts waiting, so none is missed) and at every fire told."""
        try:
            async with asyncio.timeout(2 * BOUND_S):
                while not predicate():
                    told = asyncio.ensure_future(self._told.wait())
                    waits = [told, *(asyncio.ensure_future(o.until(predicate)) for o in self.owners.values())]
                    try:
                        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for w in waits:
                            w.cancel()
        except TimeoutError:
            raise AssertionError(f"not within {2 * BOUND_S} s: {what}") from None

    def _tell(self, name: str, uri: str) -> None:
        self.told[name][uri] += 1
        self._told.set()  # wakes every `until`; each waits on the fresh event next
        self._told = asyncio.Event()

    async def sentinel_seen(self, by: str, among: list[str] = SPREAD_NAMES) -> None:
        """Publish a sentinel fire from `by` and wait until every other gateway of `among` heard it: what `by`
        published before it has arrived too (one connection's messages arrive in order)."""
        await self.buses[by].publish(SENTINEL_URI, "webhook")
        others = [n for n in among if n != by]
        await self.until(f"the sentinel from {by} heard", lambda: all(self.told[n][SENTINEL_URI] for n in others))
        for n in others:
            self.told[n][SENTINEL_URI] = 0

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for b in self.buses.values():
            await b.close()


@pytest.fixture
async def spread(bus_server: NatsServer, clock: ManualClock) -> AsyncIterator[Spread]:
    s = Spread(bus_server, clock)
    await s.start()
    try:
        yield s
    finally:
        await s.close()


def winner(uri: str, names: list[str] = SPREAD_NAMES) -> str:
    return rendezvous.ranked(bus.uri_hash(uri), names)[0]


async def settled(spread: Spread, uris: list[str], names: list[str] = SPREAD_NAMES) -> None:
    """Until each of `uris` is owned by exactly its rendezvous winner among `names`."""
    await spread.until(
        "every URI owned by its winner", lambda: all(spread.holders(u) == [winner(u, names)] for u in uris)
    )


async def test_leases_all_taken_by_the_first_gateway_spread_over_the_three_once_they_have_stayed(
    spread: Spread,
) -> None:
    for uri in SPREAD_URIS:
        spread.run("gw-1", uri)
    await spread.until("gw-1 owning every URI", lambda: all(spread.holders(u) == ["gw-1"] for u in SPREAD_URIS))
    for name in ("gw-2", "gw-3"):
        for uri in SPREAD_URIS:
            spread.run(name, uri)
    await spread.until(
        "every gateway contending for every URI",
        lambda: all(spread.owners[n].holder(u) for n in SPREAD_NAMES for u in SPREAD_URIS),
    )
    assert all(spread.holders(u) == ["gw-1"] for u in SPREAD_URIS)  # the others are not live for long enough yet
    spread.clock.advance(10.0)  # the liveness interval: each has now heard the others for that long
    await settled(spread, SPREAD_URIS)
    shares = Counter(spread.holders(u)[0] for u in SPREAD_URIS)
    assert all(0.25 <= shares[n] / len(SPREAD_URIS) <= 5 / 12 for n in SPREAD_NAMES), shares
    assert spread.changes("handed_over") == sum(
        1 for u in SPREAD_URIS if winner(u) != "gw-1"
    )  # each moved once, straight to its winner
    await spread.sentinel_seen("gw-1")
    assert all(spread.told[n][u] == 0 for n in SPREAD_NAMES for u in SPREAD_URIS)  # no change: nothing told


async def test_a_handover_to_the_gateway_that_should_own_a_uri_tells_a_change_made_during_it_once_and_else_nothing(
    spread: Spread,
) -> None:
    changed, unchanged = SPREAD_URIS[:2]
    order = {uri: rendezvous.ranked(bus.uri_hash(uri), SPREAD_NAMES) for uri in (changed, unchanged)}
    for uri, (_, middle, low) in order.items():  # the one that should own it is not there yet
        spread.run(low, uri)
        spread.run(middle, uri)
    await spread.until("both URIs owned", lambda: all(spread.holders(u) for u in order))
    spread.clock.advance(10.0)
    for uri, (_, middle, low) in order.items():
        await settled(spread, [uri], [middle, low])  # each stored its state when it first owned it
    handed, unclaimed = spread.changes("handed_over"), spread.changes("unclaimed")
    spread.docs[changed].version = 2  # never read by its owner: it hands over first
    for uri, (top, _, _) in order.items():
        spread.run(top, uri)
    for uri in order:
        await settled(spread, [uri])
    top = order[unchanged][0]
    async with asyncio.timeout(BOUND_S):
        await spread.docs[unchanged].read_by(top).wait()  # the new owner resumed and checked at once
    await spread.until("everyone told of the change", lambda: all(spread.told[n][changed] for n in SPREAD_NAMES))
    await spread.sentinel_seen(order[changed][0])
    await spread.sentinel_seen(top)
    assert {n: spread.told[n][changed] for n in SPREAD_NAMES} == dict.fromkeys(SPREAD_NAMES, 1)
    assert {n: spread.told[n][unchanged] for n in SPREAD_NAMES} == dict.fromkeys(SPREAD_NAMES, 0)
    # One handover a URI, to its winner. About one run in 35 the third gateway takes a lease left free for the
    # winner (unclaimed: its grace had run out first) and hands it on, one hop more: the fires above are still
    # told exactly once, and the winner ends up owning it.
    assert spread.changes("handed_over") == handed + 2 + (spread.changes("unclaimed") - unclaimed)


async def test_the_uris_of_a_gateway_cut_off_from_the_bus_are_taken_over_by_their_winners_among_the_rest(
    spread: Spread,
) -> None:
    uris = SPREAD_URIS[:60]
    for name in SPREAD_NAMES:
        for uri in uris:
            spread.run(name, uri)
    await spread.until("every URI owned", lambda: all(spread.holders(u) for u in uris))
    spread.clock.advance(10.0)
    await settled(spread, uris)
    victim = "gw-2"
    theirs = [u for u in uris if spread.holders(u) == [victim]]
    assert theirs
    await spread.buses[victim].close()  # as a SIGKILL looks from the bus: no release, the lease expires
    spread.docs[theirs[0]].version = 2  # changed while nobody reads it
    rest = [n for n in SPREAD_NAMES if n != victim]
    await settled(spread, uris, rest)
    await spread.until("the survivors told of the change", lambda: all(spread.told[n][theirs[0]] for n in rest))
    for name in rest:
        await spread.sentinel_seen(name, rest)
    assert {n: spread.told[n][theirs[0]] for n in rest} == dict.fromkeys(rest, 1)
    assert sum(spread.told[n][u] for n in rest for u in uris) == 2  # nothing else was told
    assert spread.changes("unclaimed") == 0  # each survivor took what it should own, at once
