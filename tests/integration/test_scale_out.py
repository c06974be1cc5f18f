"""Three gateway processes on one NATS bus serve as one: the programs from the gateway image, a real nats-server.

Each process is `mcpg-gateway` from `.venv-gateway` with `gateway.bus` naming the same JetStream server and its
own `instance`; a round-robin proxy stands in for a Service without affinity (2026-07-28 listen clients go
through it), while handshake-era clients talk to each process directly, as ClientIP affinity would pin them.
Every polled backend request carries the reading process's name, so the upstream can tell who reads.
Nothing waits by sleeping: each wait is bounded, and "nothing more arrives" is proven by a sentinel fired last.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import nats
import pytest
import yaml
from aiohttp import web
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NoKeysError

from mcpg_gateway import bus as gateway_bus
from mcpg_gateway import ownership
from mcpg_gateway.contract.config import POLL_FLOOR_MS
from mcpg_operator import bus
from mcpg_testing import BOUND_S, programs
from mcpg_testing.clients import Subscription, subscribed
from mcpg_testing.configs import gateway_config, resource, watched
from mcpg_testing.gateways import SENTINEL_TOKEN, SENTINEL_URI, sentinel
from mcpg_testing.images import ImageEnv
from mcpg_testing.roundrobin import RoundRobin
from mcpg_testing.servers import NatsServer, start_nats, start_nats_with_config

pytest_plugins = ["mcpg_testing.fixtures"]  # gateway_env: the gateway image's install

T = TypeVar("T")

INSTANCES = ("gw-0", "gw-1", "gw-2")
ORDERS, ORDERS_TOKEN = "orders://feed", "orders-token"
AUDIT, AUDIT_TOKEN = "audit://log", "audit-token"
"""A webhook nobody subscribes to: posted while the bus is down, so no fire of it can reach a subscriber later."""
P, Q = "report://p", "report://q"
READER = "x-mcpg-reader"
"""The header each process's polled backend requests carry: the process's instance name."""
PASSWORD_ENV = "MCPG_BUS_PASSWORD"
BUCKET = "mcpg"
"""`gateway.bus.bucket` as the cluster's processes leave it (the default)."""
ADMIN_TOKEN = "scale-out-admin"
LEASE_TTL_S = 3.0
INTERVAL_S = POLL_FLOOR_MS / 1000
POLL_BOUND_S = INTERVAL_S + LEASE_TTL_S + BOUND_S
"""Bound on the next periodic read, or a fire it causes: an interval, a lease expiring, and the usual slack."""
RECONNECT_BOUND_S = 2 * BOUND_S
"""Bound on every process being back on a restarted bus and having fired what it holds."""


# --- the upstream: who reads what ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Read:
    path: str
    reader: str


class ReadLog:
    """A real HTTP upstream whose documents the test changes; it logs each read with the reader's name."""

    def __init__(self) -> None:
        self.url = ""
        self.docs: dict[str, bytes] = {}
        self.reads: list[Read] = []
        self._changed = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        self.reads.append(Read(request.path, request.headers.get(READER, "(none)")))
        async with self._changed:
            self._changed.notify_all()
        body = self.docs.get(request.path)
        if body is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.Response(body=body, content_type="application/json")

    def readers(self, path: str, since: int) -> list[str]:
        """Who read `path`, in order, among the reads after the first `since`."""
        return [r.reader for r in self.reads[since:] if r.path == path]

    async def until(self, what: str, check: Callable[[], bool], bound: float = POLL_BOUND_S) -> None:
        try:
            async with asyncio.timeout(bound), self._changed:
                await self._changed.wait_for(check)
        except TimeoutError:
            raise AssertionError(f"the upstream did not see {what} within {bound:.0f}s: {self.reads}") from None


@contextlib.asynccontextmanager
async def serve_reads() -> AsyncIterator[ReadLog]:
    log = ReadLog()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", log.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    log.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield log
    finally:
        await runner.cleanup()


# --- the cluster: NATS, three gateways, the proxy ------------------------------------------------------------


def polled(name: str, uri: str, upstream: str, instance: str) -> dict[str, Any]:
    strategy = {"type": "poll", "interval_ms": POLL_FLOOR_MS}
    return resource(name, uri, f"{upstream}/{name}", strategy, headers={READER: instance})


def member_config(instance: str, upstream: str, bus_block: dict[str, Any]) -> dict[str, Any]:
    """One process's configuration: the shared one, plus its own bus instance name and reader header."""
    raw = gateway_config(
        watched("orders", ORDERS, {"type": "webhook", "token": ORDERS_TOKEN}),
        watched("audit", AUDIT, {"type": "webhook", "token": AUDIT_TOKEN}),
        polled("p", P, upstream, instance),
        polled("q", Q, upstream, instance),
        sentinel(),
    )
    raw["gateway"]["bus"] = {**bus_block, "instance": instance, "lease_ttl_s": LEASE_TTL_S}
    return raw


def write_configs(where: Path, configs: dict[str, dict[str, Any]]) -> list[Path]:
    paths = [where / f"{name}.yaml" for name in configs]
    for path, raw in zip(paths, configs.values(), strict=True):
        path.write_text(yaml.safe_dump(raw))
    return paths


@dataclass
class Cluster:
    nats: NatsServer
    gateways: list[programs.GatewayProcess]
    proxy: RoundRobin
    upstream: ReadLog

    def gateway(self, instance: str) -> programs.GatewayProcess:
        return self.gateways[INSTANCES.index(instance)]

    def failure_report(self) -> str:
        """What each process said, for a failed test's report (the integration conftest attaches it)."""
        parts = [f"--- {name} ---\n" + "\n".join(gw.program.output()[-60:]) for name, gw in self.named()]
        return "\n".join([*parts, f"--- proxy connections by backend ---\n{self.proxy.chosen}"])

    def named(self) -> Iterator[tuple[str, programs.GatewayProcess]]:
        return zip(INSTANCES, self.gateways, strict=True)


@contextlib.asynccontextmanager
async def in_thread(cm: contextlib.AbstractContextManager[T]) -> AsyncIterator[T]:
    """A blocking context manager (a program's start and stop) entered and left off the event loop."""
    value = await asyncio.to_thread(cm.__enter__)
    try:
        yield value
    finally:
        await asyncio.to_thread(cm.__exit__, None, None, None)


@contextlib.asynccontextmanager
async def running_nats(start: Callable[[], NatsServer]) -> AsyncIterator[NatsServer]:
    server = await asyncio.to_thread(start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


@pytest.fixture
async def cluster(gateway_env: ImageEnv, tmp_path: Path) -> AsyncIterator[Cluster]:
    async with (
        serve_reads() as upstream,
        running_nats(lambda: start_nats(store_dir=tmp_path / "jetstream")) as server,
    ):
        block = {"url": server.address, "user": server.user, "password": f"${{env.{PASSWORD_ENV}}}"}
        configs = write_configs(tmp_path, {i: member_config(i, upstream.url, block) for i in INSTANCES})
        environ = {PASSWORD_ENV: server.password, "MCPG_ADMIN_TOKEN": ADMIN_TOKEN}
        started = programs.gateways(gateway_env, configs, environ, cwd=tmp_path)
        async with in_thread(started) as gws, RoundRobin([("127.0.0.1", gw.port) for gw in gws]) as proxy:
            for gw in gws:
                await until_ready(gw, 200)
            yield Cluster(server, gws, proxy, upstream)


# --- clients and what they are told ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscriber:
    instance: str
    """The process serving it."""
    sub: Subscription


@contextlib.asynccontextmanager
async def subscribers_everywhere(cluster: Cluster, uris: list[str]) -> AsyncIterator[list[Subscriber]]:
    """On every process: a handshake-era client (directly) and a listen client (through the proxy)."""
    failed: list[BaseException] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            out = []
            for name, gw in cluster.named():
                legacy = await stack.enter_async_context(subscribed(gw.mcp_url, "legacy", uris))
                out.append(Subscriber(name, legacy))
            for _ in INSTANCES:
                listening = await stack.enter_async_context(subscribed(f"{cluster.proxy.base}/mcp", "listen", uris))
                # A listen client holds one connection (its POSTs share it): the last one the proxy handed out.
                out.append(Subscriber(INSTANCES[cluster.proxy.chosen[-1]], listening))
            assert Counter(s.instance for s in out) == dict.fromkeys(INSTANCES, 2), "the proxy did not spread them"
            try:
                yield out
            except BaseException as e:
                failed.append(e)
                raise
    except BaseExceptionGroup:
        # Each client's task group wraps the test's own failure once more on the way out, six deep: show it bare.
        if failed:
            raise failed[0] from None
        raise


async def all_told(subscribers: Sequence[Subscriber], uri: str, bound: float = BOUND_S) -> None:
    """Each subscriber is told `uri` next; concurrently, so one bound covers them all."""

    async def told(s: Subscriber) -> None:
        try:
            got = await s.sub.next_update(bound)
        except TimeoutError:
            raise AssertionError(
                f"{s.sub.mode} client on {s.instance} was not told {uri} within {bound:.0f}s"
            ) from None
        assert got == uri, f"{s.sub.mode} client on {s.instance} was told {got}, expected {uri}"

    await asyncio.gather(*(told(s) for s in subscribers))


async def post(gw: programs.GatewayProcess, token: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        return await http.post(f"{gw.base}/webhooks/resource-updated/{token}")


async def assert_refused(gw: programs.GatewayProcess, token: str) -> None:
    refused = await post(gw, token)
    assert refused.status_code == 503, refused.text
    assert isinstance(refused.json()["error"], str)


async def assert_only_sentinel_arrives(gw: programs.GatewayProcess, subscribers: Sequence[Subscriber]) -> None:
    """Fire the sentinel through `gw`; every subscriber is told it and had nothing else pending before it."""
    assert (await post(gw, SENTINEL_TOKEN)).status_code == 200
    await all_told(subscribers, SENTINEL_URI)
    pending = {f"{s.sub.mode}@{s.instance}": s.sub.drained() for s in subscribers}
    assert pending == {key: [] for key in pending}


async def eventually(check: Callable[[], Awaitable[bool]], bound: float, what: str) -> None:
    """Ask until `check` holds: for state only reachable by asking (a readiness endpoint, a key-value bucket)."""
    try:
        async with asyncio.timeout(bound):
            while not await check():
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"{what} did not happen within {bound:.0f}s") from None


async def until_ready(gw: programs.GatewayProcess, status: int, bound: float = BOUND_S) -> None:
    async def answers() -> bool:
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            return (await http.get(f"{gw.base}/readyz")).status_code == status

    await eventually(answers, bound, f"{gw.base}/readyz answering {status}")


async def owners(cluster: Cluster, uri: str) -> list[str]:
    """The processes whose admin API says they read `uri` for all now."""
    found = []
    async with httpx2.AsyncClient(timeout=BOUND_S, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as http:
        for name, gw in cluster.named():
            if gw.program.proc.poll() is None:
                watches = (await http.get(f"{gw.admin}/admin/v1/watches")).json()["watches"]
                found += [name for w in watches if w["uri"] == uri and w["owner"]]
    return found


async def until_stored(cluster: Cluster, uri: str, body: bytes) -> None:
    """Until `uri`'s owner has stored the hash of `body` as its last state: what a successor resumes from."""
    nc = await nats.connect(cluster.nats.url)
    try:
        kv = await nc.jetstream().key_value(f"{BUCKET}-state")

        async def stored() -> bool:
            try:
                entry = await kv.get(gateway_bus.uri_hash(uri))
            except KeyNotFoundError:
                return False
            return ownership.stored_state(entry.value) == hashlib.sha256(body).hexdigest()

        await eventually(stored, BOUND_S, f"the owner of {uri} storing its state")
    finally:
        await nc.close()


async def kill(gw: programs.GatewayProcess) -> None:
    await asyncio.to_thread(gw.program.kill)


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
        baselines = len(upstream.reads)  # what each process may have read at subscribe time

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


@dataclass
class Tenant:
    namespace: str
    client: NatsClient
    heard: asyncio.Queue[Msg]
    """Every message this tenant's own credentials receive on the gateway's subjects (`mcpg.>`)."""

    async def next_fire(self) -> Msg:
        async with asyncio.timeout(BOUND_S):
            while True:
                msg = await self.heard.get()
                if msg.subject.startswith(f"{bus.SHARED}.fire."):
                    return msg


@contextlib.asynccontextmanager
async def tenant(server: NatsServer, namespace: str, password: str) -> AsyncIterator[Tenant]:
    client = await nats.connect(server.address, user=bus.account_user(namespace), password=password)
    heard: asyncio.Queue[Msg] = asyncio.Queue()
    try:
        await client.subscribe(f"{bus.SHARED}.>", cb=heard.put)
        await client.flush()
        yield Tenant(namespace, client, heard)
    finally:
        await client.close()


def tenant_config(team: Tenant, upstream: str, server: NatsServer) -> dict[str, Any]:
    """A namespace's gateway as the operator renders it in managed mode: its own account, shared names."""
    block = {
        "url": server.address,
        "user": bus.account_user(team.namespace),
        "password": f"${{env.{PASSWORD_ENV}_{team.namespace.upper().replace('-', '_')}}}",
        "subject_prefix": bus.SHARED,
        "bucket": bus.SHARED,
    }
    return member_config(team.namespace, upstream, block)


async def keys(client: NatsClient, bucket: str) -> set[str] | None:
    """The keys `client`'s account sees in `bucket`; None if its account has no such bucket."""
    try:
        kv = await client.jetstream().key_value(bucket)
    except BucketNotFoundError:
        return None
    try:
        return set(await kv.keys())
    except NoKeysError:
        return set()


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
        configs = write_configs(tmp_path, {t.namespace: tenant_config(t, upstream.url, server) for t in (a, b)})
        environ = {f"{PASSWORD_ENV}_{ns.upper().replace('-', '_')}": pw for ns, pw in passwords.items()}
        async with (
            in_thread(programs.gateways(gateway_env, configs, environ, cwd=tmp_path)) as (gw_a, gw_b),
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
            assert [m.subject for m in drain(a.heard) if m.subject == fire.subject] == []

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


async def assert_unreadable_by(other: Tenant, owner: Tenant, bucket: str) -> None:
    """`owner`'s account has keys in `bucket`; `other`'s credentials, asking for the same bucket, reach none."""

    async def written() -> bool:
        return bool(await keys(owner.client, bucket))

    await eventually(written, BOUND_S, f"{owner.namespace}'s gateway writing into {bucket}")
    owned = await keys(owner.client, bucket)
    assert owned
    seen = await keys(other.client, bucket)
    assert seen is None or not seen & owned
    if seen is not None:
        kv = await other.client.jetstream().key_value(bucket)
        for key in owned:
            with pytest.raises(KeyNotFoundError):
                await kv.get(key)


def drain(queue: asyncio.Queue[T]) -> list[T]:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out
