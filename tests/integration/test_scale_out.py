"""Three gateway processes on one NATS bus serve as one: the programs from the gateway image, a real nats-server.

Each process is `mcpg-gateway` from `.venv-gateway` with `gateway.bus` naming the same JetStream server and its
own `instance`; a round-robin proxy stands in for a Service without affinity (2026-07-28 listen clients go
through it), while handshake-era clients talk to each process directly, as ClientIP affinity would pin them.
Every polled backend request carries the reading process's name, so the upstream can tell who reads.
Nothing waits by sleeping: each wait is bounded, and "nothing more arrives" is proven by a sentinel fired last.
The cluster, its clients and the waits are `mcpg_testing.scaleout`; the upstream is `mcpg_testing.recording_upstream`.
"""

from __future__ import annotations

import asyncio
import datetime
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from standardwebhooks.webhooks import Webhook

from mcpg_gateway import bus as gateway_bus
from mcpg_gateway import rendezvous
from mcpg_gateway.contract import digests
from mcpg_operator import bus
from mcpg_testing import BOUND_S
from mcpg_testing.clients import subscribed
from mcpg_testing.gateways import SENTINEL_URI
from mcpg_testing.images import ImageEnv
from mcpg_testing.recording_upstream import serve_reads
from mcpg_testing.scaleout import (
    AUDIT_TOKEN,
    INSTANCES,
    INTERVAL_S,
    LEASE_TTL_S,
    ORDERS,
    ORDERS_TOKEN,
    POLL_BOUND_S,
    RECONNECT_BOUND_S,
    SIGNED,
    SIGNING_SECRET,
    Cluster,
    P,
    Q,
    Subscriber,
    all_told,
    assert_only_sentinel_arrives,
    assert_refused,
    assert_unreadable_by,
    eventually,
    kill,
    owners,
    post,
    post_signed,
    running_cluster,
    running_nats,
    serving,
    subscribers_everywhere,
    tenant,
    tenant_gateways,
    until_ready,
    until_stored,
    write_configs,
)
from mcpg_testing.servers import start_nats_with_config

pytest_plugins = ["mcpg_testing.fixtures"]  # gateway_env: the gateway image's install


LIVENESS_S = 10.0
"""`gateway.liveness.interval_s` as the cluster leaves it: a process is handed leases once heard that long."""
SETTLE_BOUND_S = LIVENESS_S + LEASE_TTL_S + BOUND_S


def winner(uri: str) -> str:
    """The process the rendezvous ranking gives `uri`'s lease when every process wants it (`rendezvous.py`)."""
    return rendezvous.ranked(gateway_bus.uri_hash(uri), INSTANCES)[0]


async def settled(cluster: Cluster, *uris: str) -> None:
    """Until each of `uris` is owned by the process the ranking gives it: the leases spread once every process has
    been heard for a liveness interval, and a test that counts reads must not count that move."""

    async def placed() -> bool:
        return all([await owners(cluster, uri) == [winner(uri)] for uri in uris])

    await eventually(placed, SETTLE_BOUND_S, f"the leases of {', '.join(uris)} with their rendezvous winners")


@pytest.fixture
async def cluster(gateway_env: ImageEnv, tmp_path: Path) -> AsyncIterator[Cluster]:
    async with running_cluster(gateway_env, tmp_path) as running:
        yield running


# --- every process serves every subscriber ---------------------------------------------------------------------


async def test_a_webhook_posted_to_any_process_tells_every_subscriber_of_either_era_exactly_once(
    cluster: Cluster,
) -> None:
    async with subscribers_everywhere(cluster, [ORDERS, SENTINEL_URI]) as everyone:
        for gw in cluster.gateways:
            posted = await post(gw, ORDERS_TOKEN)
            assert posted.status_code == 200
            assert posted.json() == {"ok": True, "uri": ORDERS}
            await all_told(everyone, ORDERS)

        await assert_only_sentinel_arrives(cluster.gateways[1], everyone)


# --- pull strategies: one owner --------------------------------------------------------------------------------


async def test_a_polled_uri_with_subscribers_on_every_process_is_read_once_per_interval(cluster: Cluster) -> None:
    upstream = cluster.upstream
    upstream.docs["/p"] = b'{"p": 1}'
    async with subscribers_everywhere(cluster, [P, SENTINEL_URI]) as everyone:
        await settled(cluster, P)
        baselines = len(upstream.reads)  # what each process may have read at subscribe time, and at the move

        def owner_read_thrice() -> bool:
            counts = Counter(upstream.readers("/p", baselines))
            return bool(counts) and counts.most_common(1)[0][1] >= 3

        await upstream.until("one process read /p three times", owner_read_thrice, POLL_BOUND_S + 2 * INTERVAL_S)

        # Three reads in two intervals, all by the owner: three processes polling would have made six or more.
        assert upstream.readers("/p", baselines) == (await owners(cluster, P)) * 3
        await assert_only_sentinel_arrives(cluster.gateways[0], everyone)


async def test_a_survivor_takes_over_a_dead_owners_polls_missing_no_change_and_inventing_none(
    cluster: Cluster,
) -> None:
    upstream = cluster.upstream
    upstream.docs |= {"/p": b'{"p": 1}', "/q": b'{"q": 1}'}
    async with subscribers_everywhere(cluster, [P, Q, SENTINEL_URI]) as everyone:
        await settled(cluster, P, Q)  # no move of its own during the test
        baselines = len(upstream.reads)
        # The owner of Q fires this at its first read and stores it; every other process's own baseline is stale.
        upstream.docs["/q"] = b'{"q": 2}'
        await all_told(everyone, Q, POLL_BOUND_S)
        [owner_p], [owner_q] = await owners(cluster, P), await owners(cluster, Q)
        assert set(upstream.readers("/q", baselines)) == {owner_q}
        # It stores after telling (a kill in between may tell twice, by design): wait, so the kill comes after.
        await until_stored(cluster, Q, upstream.docs["/q"])
        await until_stored(cluster, P, upstream.docs["/p"])

        dead = {owner_p, owner_q}
        for name in dead:
            await kill(cluster.gateway(name))
        takeover = len(upstream.reads)
        upstream.docs["/p"] = b'{"p": 2}'  # changed during the takeover: the new owner must not miss it
        survivors = [s for s in everyone if s.instance not in dead]
        await all_told(survivors, P, POLL_BOUND_S)

        # Q did not change: the new owner starts from the stored state, so it must not fire. Its second read
        # proves it has acted on its first.
        def read_twice_since_takeover() -> bool:
            return all(len(upstream.readers(path, takeover)) >= 2 for path in ("/p", "/q"))

        await upstream.until(
            "two reads each of /p and /q since the kill", read_twice_since_takeover, POLL_BOUND_S + INTERVAL_S
        )
        for path, uri in (("/p", P), ("/q", Q)):
            assert set(upstream.readers(path, takeover)) == set(await owners(cluster, uri)), path
        living = next(gw for name, gw in cluster.named() if name not in dead)
        await assert_only_sentinel_arrives(living, survivors)


async def test_a_polled_backend_moved_in_place_is_told_once_to_every_subscriber_whichever_process_owns_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Each process restarts its watcher on the new backend; the owner, resuming from the state the old source's
    owner stored, tells everyone that the content is another: once, not once more by each process."""
    upstream = cluster.upstream
    upstream.docs |= {"/p": b'{"p": 1}', "/p-moved": b'{"p": "moved"}'}
    async with subscribers_everywhere(cluster, [P, SENTINEL_URI]) as everyone:
        await settled(cluster, P)
        await until_stored(cluster, P, upstream.docs["/p"])
        moved = {}
        for name, _ in cluster.named():
            config = yaml.safe_load((tmp_path / f"{name}.yaml").read_text())
            [entry] = [r for r in config["mcp"]["capabilities"]["resources"] if r["name"] == "p"]
            entry["backend"]["url"] = f"{upstream.url}/p-moved"
            moved[name] = config
        write_configs(tmp_path, moved)  # each process reads its file again when it changes
        for name, gw in cluster.named():
            await serving(gw, digests.document(moved[name]))
        await all_told(everyone, P, POLL_BOUND_S)
        await assert_only_sentinel_arrives(cluster.gateways[2], everyone)


# --- a signed delivery fires once, whichever processes it reaches ------------------------------------------------


async def test_a_signed_delivery_handed_to_every_process_at_once_fires_once_and_is_a_replay_for_the_others(
    cluster: Cluster,
) -> None:
    async with subscribers_everywhere(cluster, [SIGNED, SENTINEL_URI]) as everyone:
        msg_id, now = f"msg_{secrets.token_hex(8)}", datetime.datetime.now(tz=datetime.UTC)
        body = b'{"type":"order.updated"}'
        headers = {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(SIGNING_SECRET).sign(msg_id, now, body.decode()),
        }
        answers = await asyncio.gather(*(post_signed(gw, body, headers) for gw in cluster.gateways))

        assert sorted(a.status_code for a in answers) == [200, 401, 401], [a.text for a in answers]
        assert [a.json()["check"] for a in answers if a.status_code == 401] == ["replay", "replay"]
        await all_told(everyone, SIGNED)
        await assert_only_sentinel_arrives(cluster.gateways[0], everyone)  # told once, not three times


# --- the bus goes away and comes back --------------------------------------------------------------------------


async def test_while_the_bus_is_down_webhooks_are_refused_and_its_return_fires_each_held_uri_once(
    cluster: Cluster,
) -> None:
    cluster.upstream.docs["/p"] = b'{"p": 1}'
    async with subscribers_everywhere(cluster, [ORDERS, P, SENTINEL_URI]) as everyone:
        await asyncio.to_thread(cluster.nats.kill)

        # At once (a fire that reaches one process only is no delivery: the sender must retry), and after the
        # grace, when each process has also stopped calling itself ready.
        for gw in cluster.gateways:
            await assert_refused(gw, AUDIT_TOKEN)
        for gw in cluster.gateways:
            await until_ready(gw, 503)
            await assert_refused(gw, AUDIT_TOKEN)

        await asyncio.to_thread(cluster.nats.start)  # the same port, the same store

        async def told_each_held_uri_once(s: Subscriber) -> None:
            told = [await s.sub.next_update(RECONNECT_BOUND_S) for _ in range(3)]
            assert sorted(told) == sorted([ORDERS, P, SENTINEL_URI]), f"{s.sub.mode} client on {s.instance}"

        await asyncio.gather(*(told_each_held_uri_once(s) for s in everyone))
        for gw in cluster.gateways:
            await until_ready(gw, 200)
            assert (await post(gw, ORDERS_TOKEN)).status_code == 200
            await all_told(everyone, ORDERS)
        await assert_only_sentinel_arrives(cluster.gateways[2], everyone)


# --- one account per namespace ----------------------------------------------------------------------------------


async def test_a_namespaces_credentials_can_neither_hear_nor_inject_fires_nor_read_state_of_another(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    passwords = {"team-a": secrets.token_urlsafe(18), "team-b": secrets.token_urlsafe(18)}
    async with (
        serve_reads() as upstream,
        running_nats(lambda: start_nats_with_config(bus.nats_config(passwords), tmp_path)) as server,
        tenant(server, "team-a", passwords["team-a"]) as a,
        tenant(server, "team-b", passwords["team-b"]) as b,
    ):
        upstream.docs["/p"] = b'{"p": 1}'
        async with (
            tenant_gateways(gateway_env, tmp_path, server, upstream.url, (a, b), passwords) as (gw_a, gw_b),
            subscribed(gw_a.mcp_url, "listen", [ORDERS, SENTINEL_URI]) as sub_a,
            subscribed(gw_b.mcp_url, "listen", [ORDERS, P, SENTINEL_URI]) as sub_b,
        ):
            on_a, on_b = [Subscriber("team-a", sub_a)], [Subscriber("team-b", sub_b)]

            # team-b's fire is on the bus (team-b's credentials hear it) and never in team-a's account.
            assert (await post(gw_b, ORDERS_TOKEN)).status_code == 200
            await all_told(on_b, ORDERS)
            fire = await b.next_fire()
            await assert_only_sentinel_arrives(gw_a, on_a)
            own = await a.next_fire()  # team-a's own sentinel fire: team-a does hear its account's subjects
            assert own.subject != fire.subject
            assert [m.subject for m in a.drained() if m.subject == fire.subject] == []

            # The same message from team-a's credentials reaches team-a's gateway, never team-b's; from team-b's, it
            # reaches team-b's.
            await a.client.publish(fire.subject, fire.data, headers=fire.headers)
            await all_told(on_a, ORDERS)
            await assert_only_sentinel_arrives(gw_b, on_b)
            await b.client.publish(fire.subject, fire.data, headers=fire.headers)
            await all_told(on_b, ORDERS)

            # team-b's key-value state (the lease on P held for sub_b, P's stored state) is not in team-a's account.
            for bucket in (f"{bus.SHARED}-owners", f"{bus.SHARED}-state"):
                await assert_unreadable_by(a, b, bucket)
