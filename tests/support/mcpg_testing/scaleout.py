"""Gateway processes on one JetStream nats-server serving as one, and what the scale-out tests observe of them.

`running_cluster()` runs `mcpg-gateway` from the gateway image once per name in `INSTANCES`, all on one bus,
behind a round-robin proxy (a Service without affinity), reading from a `recording_upstream` that logs which
process read what. `subscribers_everywhere()` puts clients of both eras on every process. `tenant()` and
`tenant_gateways()` run namespaces that share one managed bus, each under its own account, as the operator renders it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import nats
import pytest
import yaml
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NoKeysError

from mcpg_gateway import bus as gateway_bus
from mcpg_gateway import ownership
from mcpg_gateway.contract.config import POLL_FLOOR_MS
from mcpg_operator import bus
from mcpg_testing import BOUND_S, programs
from mcpg_testing.clients import Subscription, subscribed
from mcpg_testing.configs import bus_section, gateway_config, resource, watched
from mcpg_testing.gateways import SENTINEL_TOKEN, SENTINEL_URI, sentinel
from mcpg_testing.images import ImageEnv
from mcpg_testing.recording_upstream import READER, ReadLog, serve_reads
from mcpg_testing.roundrobin import RoundRobin
from mcpg_testing.servers import NatsServer, start_nats

T = TypeVar("T")

INSTANCES = ("gw-0", "gw-1", "gw-2")
ORDERS, ORDERS_TOKEN = "orders://feed", "orders-token"
AUDIT, AUDIT_TOKEN = "audit://log", "audit-token"
"""A webhook nobody subscribes to: posted while the bus is down, so no fire of it can reach a subscriber later."""
SIGNED, SIGNED_TOKEN = "orders://signed", "signed-token"
SIGNING_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
"""A webhook that also needs a Standard Webhooks signature with this secret; a replay is refused on every process."""
P, Q = "report://p", "report://q"
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


# --- configurations ---------------------------------------------------------------------------------------------


def polled(name: str, uri: str, upstream: str, instance: str) -> dict[str, Any]:
    """A resource polled at the floor interval; each backend request names `instance` in the `READER` header."""
    strategy = {"type": "poll", "interval_ms": POLL_FLOOR_MS}
    return resource(name, uri, f"{upstream}/{name}", strategy, headers={READER: instance})


SIGNATURE = {"scheme": "standard-webhooks", "secrets": [SIGNING_SECRET]}


def member_config(instance: str, upstream: str, bus_block: dict[str, Any]) -> dict[str, Any]:
    """One process's configuration: the shared one, plus its own bus instance name and reader header."""
    raw = gateway_config(
        watched("orders", ORDERS, {"type": "webhook", "token": ORDERS_TOKEN}),
        watched("audit", AUDIT, {"type": "webhook", "token": AUDIT_TOKEN}),
        watched("signed", SIGNED, {"type": "webhook", "token": SIGNED_TOKEN, "signature": SIGNATURE}),
        polled("p", P, upstream, instance),
        polled("q", Q, upstream, instance),
        sentinel(),
    )
    raw["gateway"]["bus"] = {**bus_block, "instance": instance, "lease_ttl_s": LEASE_TTL_S}
    return raw


def write_configs(where: Path, configs: dict[str, dict[str, Any]]) -> list[Path]:
    """Each configuration as `<where>/<name>.yaml`, in order."""
    paths = [where / f"{name}.yaml" for name in configs]
    for path, raw in zip(paths, configs.values(), strict=True):
        path.write_text(yaml.safe_dump(raw))
    return paths


# --- the cluster: NATS, three gateways, the proxy ---------------------------------------------------------------


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
    """The server `start` returns, started and stopped off the event loop."""
    server = await asyncio.to_thread(start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def running_cluster(gateway_env: ImageEnv, where: Path) -> AsyncIterator[Cluster]:
    """A JetStream nats-server storing under `where`, one ready gateway per `INSTANCES` name, the proxy in front."""
    async with (
        serve_reads() as upstream,
        running_nats(lambda: start_nats(store_dir=where / "jetstream")) as server,
    ):
        block = {"url": server.address, "user": server.user, "password": f"${{env.{PASSWORD_ENV}}}"}
        configs = write_configs(where, {i: member_config(i, upstream.url, block) for i in INSTANCES})
        environ = {PASSWORD_ENV: server.password, "MCPG_ADMIN_TOKEN": ADMIN_TOKEN}
        started = programs.gateways(gateway_env, configs, environ, cwd=where)
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
    """POST the webhook of `token` to `gw`."""
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        return await http.post(f"{gw.base}/webhooks/resource-updated/{token}")


async def post_signed(gw: programs.GatewayProcess, body: bytes, headers: Mapping[str, str]) -> httpx2.Response:
    """POST a signed delivery to `gw`'s signed webhook."""
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        return await http.post(f"{gw.base}/webhooks/resource-updated/{SIGNED_TOKEN}", content=body, headers=headers)


async def assert_refused(gw: programs.GatewayProcess, token: str) -> None:
    """`gw` answers the webhook of `token` with a 503 and a JSON error."""
    refused = await post(gw, token)
    assert refused.status_code == 503, refused.text
    assert isinstance(refused.json()["error"], str)


async def assert_only_sentinel_arrives(gw: programs.GatewayProcess, subscribers: Sequence[Subscriber]) -> None:
    """Fire the sentinel through `gw`; every subscriber is told it and had nothing else pending before it."""
    assert (await post(gw, SENTINEL_TOKEN)).status_code == 200
    await all_told(subscribers, SENTINEL_URI)
    pending = {f"{s.sub.mode}@{s.instance}": s.sub.drained() for s in subscribers}
    assert pending == {key: [] for key in pending}


# --- what only asking tells: readiness, ownership, stored state ------------------------------------------------


async def eventually(check: Callable[[], Awaitable[bool]], bound: float, what: str) -> None:
    """Ask until `check` holds: for state only reachable by asking (a readiness endpoint, a key-value bucket)."""
    try:
        async with asyncio.timeout(bound):
            while not await check():
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"{what} did not happen within {bound:.0f}s") from None


async def until_ready(gw: programs.GatewayProcess, status: int, bound: float = BOUND_S) -> None:
    """Until `gw`'s /readyz answers `status`."""

    async def answers() -> bool:
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            return (await http.get(f"{gw.base}/readyz")).status_code == status

    await eventually(answers, bound, f"{gw.base}/readyz answering {status}")


async def serving(gw: programs.GatewayProcess, digest: str, bound: float = BOUND_S) -> None:
    """Until `gw`'s acknowledgement (its admin port, no token) says it serves the configuration of `digest`."""

    async def applied() -> bool:
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            said = (await http.get(f"{gw.admin}/admin/v1/configuration")).json()
        return (said.get("serving") or {}).get("digest") == digest

    await eventually(applied, bound, f"{gw.base} serving configuration {digest[:12]}")


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
    """SIGKILL `gw`, as a node loss ends it."""
    await asyncio.to_thread(gw.program.kill)


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

    def drained(self) -> list[Msg]:
        """Every message heard and not yet taken, in order; none are left."""
        out = []
        while not self.heard.empty():
            out.append(self.heard.get_nowait())
        return out


@contextlib.asynccontextmanager
async def tenant(server: NatsServer, namespace: str, password: str) -> AsyncIterator[Tenant]:
    """A client with `namespace`'s own credentials, hearing its account's gateway subjects from the start."""
    client = await nats.connect(server.address, user=bus.account_user(namespace), password=password)
    heard: asyncio.Queue[Msg] = asyncio.Queue()
    try:
        await client.subscribe(f"{bus.SHARED}.>", cb=heard.put)
        await client.flush()
        yield Tenant(namespace, client, heard)
    finally:
        await client.close()


def password_env(namespace: str) -> str:
    """The variable holding `namespace`'s bus password in its gateway's environment."""
    return f"{PASSWORD_ENV}_{namespace.upper().replace('-', '_')}"


def tenant_config(team: Tenant, upstream: str, server: NatsServer) -> dict[str, Any]:
    """A namespace's gateway as the operator renders it in managed mode: its own account, shared names."""
    block = bus_section(server.address, bus.account_user(team.namespace), password_env(team.namespace), bus.SHARED)
    return member_config(team.namespace, upstream, block)


@contextlib.asynccontextmanager
async def tenant_gateways(
    gateway_env: ImageEnv,
    where: Path,
    server: NatsServer,
    upstream: str,
    tenants: Sequence[Tenant],
    passwords: Mapping[str, str],
) -> AsyncIterator[list[programs.GatewayProcess]]:
    """One gateway per tenant, in order, each given its namespace's password (`passwords` by namespace)."""
    configs = write_configs(where, {t.namespace: tenant_config(t, upstream, server) for t in tenants})
    environ = {password_env(ns): pw for ns, pw in passwords.items()}
    async with in_thread(programs.gateways(gateway_env, configs, environ, cwd=where)) as gws:
        yield gws


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


async def assert_unreadable_by(other: Tenant, owner: Tenant, bucket: str) -> None:
    """`owner`'s account has keys in `bucket`; `other`'s credentials, asking for the same bucket, reach none."""

    owned: set[str] = set()

    async def written() -> bool:
        # Kept from the listing that found them: in one CI run a second listing right after it came back empty
        # (not reproduced by rewriting a key 300 times under listings; the cause is not pinned down). What is
        # asserted below, that the other account reaches none of them, does not depend on it.
        owned.update(await keys(owner.client, bucket) or ())
        return bool(owned)

    await eventually(written, BOUND_S, f"{owner.namespace}'s gateway writing into {bucket}")
    seen = await keys(other.client, bucket)
    assert seen is None or not seen & owned
    if seen is not None:
        kv = await other.client.jetstream().key_value(bucket)
        for key in owned:
            with pytest.raises(KeyNotFoundError):
                await kv.get(key)
