"""Pull-watch ownership: the lease's timing and the stored state (pure), then poll watches on gateways sharing a
real nats-server (the `bus_server` tests): one owner reads for all, hands over, expires, fences itself."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import nats as nats_py
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.js.kv import KeyValue

from mcpg_gateway import bus, errors, ownership
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

    def config(self, instance: str) -> dict[str, Any]:
        polled = resource("notes", POLLED, f"{self.upstream.url}/notes", {"type": "poll", "interval_ms": 10_000})
        raw = gateway_config(polled, sentinel(), resource("bad", "drive://bad", f"{self.upstream.url}/missing"))
        raw["gateway"]["bus"] = bus_section(
            self.server.address, self.server.user, PASSWORD_ENV, self.name, lease_ttl_s=1, instance=instance
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
    assert gw.gw.running_watches() == []


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
