"""Issue 30's four high findings, replayed against `mcpg-gateway` from its image install, each while a healthy
client is served throughout: its /healthz and a webhook POST each answered within 1 s, probe after probe.

1. A repeated `MCP-Protocol-Version` opened sessions the per-principal limit never counted (50 past a limit of 8).
2. Connections that pipelined requests and read none of the answers stayed busy for ever and filled the cap.
3. On a bus, a pull watch whose last subscriber left just after a fire could run on with no lease, and SIGTERM
   then never completed.
4. One listen naming 150,000 URIs held the event loop for 7.9 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import yaml
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from prometheus_client.parser import text_string_to_metric_families

from mcpg_testing import BOUND_S, programs
from mcpg_testing.configs import bearer, bus_section, gateway_config, principal, resource, watched
from mcpg_testing.images import ImageEnv
from mcpg_testing.scaleout import in_thread, running_nats
from mcpg_testing.servers import start_nats
from mcpg_testing.upstream import Upstream, serve

pytest_plugins = ["mcpg_testing.fixtures"]  # gateway_env: the gateway image's install

HEALTHY_S = 1.0
"""The issue's bound on the healthy client's /healthz and webhook while an attack runs."""
HOOK, HOOK_TOKEN = "drive://folder/reports", "healthy-hook"
ADMIN = "hostile-admin"
ALICE, BOB = "alice-token", "bob-token"
MODERN, HANDSHAKE = "2026-07-28", "2025-11-25"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
SESSIONS_PER_PRINCIPAL = 8
CAP = 32
LONG_URI_RESOURCES = 128
"""Resources of 2,000-character URIs: a server card of about 256 KiB, an answer larger than the socket buffers."""
ATTACKED_ROUNDS = 10
"""Probes of the healthy client an attack lasts for, at least."""
PIPELINED = 8
"""Large answers each non-reader asks for at once: within the pipelining bound, so only the cap and the write
deadline deal with it."""


# --- the healthy client ------------------------------------------------------------------------------------------


@dataclass
class Probes:
    """What the healthy client saw: how many rounds it made, and every one not answered in time (or wrongly)."""

    rounds: int = 0
    failures: list[str] = field(default_factory=list)
    slowest_s: float = 0.0


async def _probe_once(http: httpx2.AsyncClient, gw: programs.GatewayProcess, probes: Probes) -> None:
    for what, method, path in (
        ("/healthz", "GET", "/healthz"),
        ("webhook", "POST", f"/webhooks/resource-updated/{HOOK_TOKEN}"),
    ):
        started = time.monotonic()
        try:
            async with asyncio.timeout(HEALTHY_S):
                response = await http.request(method, f"{gw.base}{path}")
        except (TimeoutError, httpx2.HTTPError) as e:
            probes.failures.append(f"{what}: {type(e).__name__} after {time.monotonic() - started:.2f} s")
            continue
        probes.slowest_s = max(probes.slowest_s, time.monotonic() - started)
        if response.status_code != 200:
            probes.failures.append(f"{what}: {response.status_code}")


@contextlib.asynccontextmanager
async def served_throughout(gw: programs.GatewayProcess) -> AsyncIterator[Probes]:
    """Probe `gw` back to back (a fresh connection each time, as a new sender has) while the block runs; then
    assert that every probe was answered within `HEALTHY_S`, and that there were some."""
    probes = Probes()
    stop = asyncio.Event()

    async def probe() -> None:
        limits = httpx2.Limits(max_keepalive_connections=0)
        async with httpx2.AsyncClient(limits=limits, timeout=BOUND_S) as http:
            while not stop.is_set():
                await _probe_once(http, gw, probes)
                probes.rounds += 1
                await asyncio.sleep(0.05)  # a cadence, not a wait for anything: leave the attack the cores

    task = asyncio.create_task(probe())
    try:
        yield probes
    finally:
        stop.set()
        async with asyncio.timeout(BOUND_S):
            await task
    assert probes.rounds >= 3, "the healthy client hardly ran: the attack ended before it was probed"
    assert probes.failures == [], f"the healthy client was not served in time: {probes.failures[:10]}"


# --- programs ----------------------------------------------------------------------------------------------------


def healthy_hook() -> dict[str, Any]:
    return watched("reports", HOOK, {"type": "webhook", "token": HOOK_TOKEN})


@contextlib.contextmanager
def program(gateway_env: ImageEnv, tmp_path: Path, raw: dict[str, Any]) -> Iterator[programs.GatewayProcess]:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    with programs.gateway(gateway_env, path, {"MCPG_ADMIN_TOKEN": ADMIN}, cwd=tmp_path) as gw:
        yield gw


async def metric(gw: programs.GatewayProcess, name: str, **labels: str) -> float:
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        text = (await http.get(f"{gw.admin}/metrics")).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def initialize(request_id: int = 1) -> dict[str, Any]:
    params = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


def modern(method: str, **params: Any) -> bytes:
    envelope = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {}}
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": {"_meta": envelope, **params}}).encode()


# --- 1. a repeated protocol-version header -------------------------------------------------------------------


async def test_a_repeated_protocol_version_header_opens_no_session_and_the_principal_s_share_holds(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    raw = gateway_config(healthy_hook(), auth={"principals": [principal(ALICE, "alice"), principal(BOB, "bob")]})
    raw["gateway"]["limits"] = {"sessions_per_principal": SESSIONS_PER_PRINCIPAL, "sessions_total": 16}
    twice = [("MCP-Protocol-Version", HANDSHAKE), ("MCP-Protocol-Version", MODERN)]
    with program(gateway_env, tmp_path, raw) as gw:
        async with served_throughout(gw) as probes, httpx2.AsyncClient(timeout=BOUND_S) as http:
            alice = [*bearer(ALICE).items(), *ACCEPT.items()]
            tricks: list[httpx2.Response] = []
            async with asyncio.timeout(BOUND_S * 3):
                while len(tricks) < 50 or probes.rounds < ATTACKED_ROUNDS:  # the probe's 50, while probed
                    tricks.append(await http.post(gw.mcp_url, json=initialize(), headers=[*alice, *twice]))
            assert {r.status_code for r in tricks} == {400}
            assert all("mcp-session-id" not in r.headers for r in tricks)
            opened = [
                await http.post(gw.mcp_url, json=initialize(), headers=alice) for _ in range(SESSIONS_PER_PRINCIPAL)
            ]
            assert [r.status_code for r in opened] == [200] * SESSIONS_PER_PRINCIPAL
            one_more = await http.post(gw.mcp_url, json=initialize(), headers=alice)
            assert one_more.status_code == 429  # the tricks took none of alice's share, and the share holds
            bob = await http.post(gw.mcp_url, json=initialize(), headers={**bearer(BOB), **ACCEPT})
            assert bob.status_code == 200


# --- 2. connections that read none of their answers -------------------------------------------------------------


def small_buffers() -> socket.socket:
    """A client socket whose buffers fill fast (and a small segment size, so the gateway's side of the connection
    does not grow its send buffer to megabytes on loopback)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)
    sock.setblocking(False)
    return sock


async def reading_nothing(port: int, request: bytes) -> socket.socket:
    """A connection that sends `request` and reads nothing, once the gateway's answer has begun to arrive."""
    loop, sock = asyncio.get_running_loop(), small_buffers()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, request)
    arrived: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not arrived.done():
            arrived.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await arrived
    finally:
        loop.remove_reader(sock.fileno())
    return sock


def large_answers() -> dict[str, Any]:
    long_uris = [
        watched(f"long{i}", f"drive://{i}/{'x' * 2000}", {"type": "webhook", "token": f"long-{i}"})
        for i in range(LONG_URI_RESOURCES)
    ]
    raw = gateway_config(healthy_hook(), *long_uris)
    # Only the cap makes room here: the write deadline is far off, as a client slow on purpose would meet it.
    raw["gateway"]["limits"] = {"connections": CAP, "write_timeout_s": 300}
    return raw


async def test_clients_that_pipeline_and_read_nothing_cannot_hold_the_cap_against_a_healthy_client(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    card = b"GET /.well-known/mcp/server-card.json HTTP/1.1\r\nhost: gw\r\n\r\n"
    with program(gateway_env, tmp_path, large_answers()) as gw:
        held: list[socket.socket] = []
        try:
            async with served_throughout(gw) as probes:
                async with asyncio.timeout(BOUND_S * 3):
                    for _ in range(2 * CAP):  # twice the cap: each wave closes the longest-waiting of the last
                        held.append(await reading_nothing(gw.port, card * PIPELINED))
                rounds_at_full_cap = probes.rounds
                async with asyncio.timeout(BOUND_S):
                    while probes.rounds < rounds_at_full_cap + 5:  # served again and again at a full cap
                        await asyncio.sleep(0.05)
        finally:
            for sock in held:
                sock.close()
        assert await metric(gw, "mcpg_connections_closed_total", port="public", reason="cap") >= CAP


# --- 3. a pull watch on a bus whose last subscriber leaves just after a fire ------------------------------------


POLLED = "report://polled"
POLL_S = 10.0
LEASE_TTL_S = 3.0
CYCLES = 10


def bus_member(instance: str, upstream: Upstream, nats_address: str, user: str) -> dict[str, Any]:
    polled = resource("polled", POLLED, f"{upstream.url}/polled", {"type": "poll", "interval_ms": POLL_S * 1000})
    raw = gateway_config(healthy_hook(), polled)
    bus = bus_section(nats_address, user, "BUS_PASSWORD", "hostile", instance=instance, lease_ttl_s=LEASE_TTL_S)
    raw["gateway"]["bus"] = bus
    return raw


async def listen_until_told(gw: programs.GatewayProcess, acknowledged: Callable[[], None] | None = None) -> None:
    """Listen to `POLLED` over raw HTTP and hang up the moment the change is told: as the departing subscriber of
    the probe did, just after the fire, while its owner stores the state. `acknowledged` runs once the stream is."""
    body = modern("subscriptions/listen", notifications={"resourceSubscriptions": [POLLED]})
    headers = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "subscriptions/listen"}
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S, read=None)) as http,  # the caller bounds the wait
        http.stream("POST", gw.mcp_url, content=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if "notifications/subscriptions/acknowledged" in line and acknowledged is not None:
                acknowledged()
            if "notifications/resources/updated" in line:
                return
    raise AssertionError("the listen stream ended before the change was told")


async def watches(gw: programs.GatewayProcess) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=BOUND_S, headers=bearer(ADMIN)) as http:
        response = await http.get(f"{gw.admin}/admin/v1/watches")
    doc: dict[str, Any] = response.json()
    return doc


async def test_on_a_bus_no_pull_watch_outlives_its_last_subscriber_and_sigterm_completes(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    async with (
        serve() as upstream,
        running_nats(lambda: start_nats(store_dir=tmp_path / "jetstream")) as nats,
    ):
        configs = []
        for name in ("gw-a", "gw-b"):
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump(bus_member(name, upstream, nats.address, nats.user)))
            configs.append(path)
        environ = {"BUS_PASSWORD": nats.password, "MCPG_ADMIN_TOKEN": ADMIN}
        started = programs.gateways(gateway_env, configs, environ, cwd=tmp_path)
        async with in_thread(started) as (gw_a, gw_b):
            upstream.set("/polled", '{"v": 0}')
            async with served_throughout(gw_a), served_throughout(gw_b):
                # The first owner stores its baseline (v0) and tells the change at its next poll.
                async with asyncio.timeout(POLL_S + LEASE_TTL_S + BOUND_S):
                    await listen_until_told(gw_a, lambda: upstream.set("/polled", '{"v": 1}'))
                for cycle in range(2, CYCLES + 1):
                    # Each next owner resumes from the state the last one stored, and finds the change at once.
                    upstream.set("/polled", json.dumps({"v": cycle}))
                    async with asyncio.timeout(LEASE_TTL_S + BOUND_S):
                        await listen_until_told(gw_a if cycle % 2 else gw_b)
                for gw in (gw_a, gw_b):
                    async with asyncio.timeout(BOUND_S):
                        while (doc := await watches(gw))["watches"] or doc["stopping"]:
                            await asyncio.sleep(0.1)
                    assert await metric(gw, "mcpg_bus_owned_watches") == 0
                reads = upstream.hits.get("/polled", 0)
            for gw in (gw_a, gw_b):
                await asyncio.to_thread(gw.program.stop)
                assert gw.program.proc.returncode == 0, "SIGTERM did not end the gateway cleanly in time"
            assert upstream.hits.get("/polled", 0) == reads, "a watch read its upstream for nobody"


# --- 4. one listen naming 150,000 URIs -----------------------------------------------------------------------------


async def test_a_listen_naming_150_000_uris_is_refused_before_it_holds_the_loop(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    uris = [f"drive://file/{n:06d}" for n in range(150_000)]
    huge = modern("subscriptions/listen", notifications={"resourceSubscriptions": uris})
    assert 2_000_000 < len(huge) < 4 * 1024 * 1024  # the probe's 2.4 MB and more, within what the SDK would read
    eleven = modern("subscriptions/listen", notifications={"resourceSubscriptions": uris[:11]})
    headers = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "subscriptions/listen"}
    with program(gateway_env, tmp_path, gateway_config(healthy_hook())) as gw:
        async with served_throughout(gw) as probes, httpx2.AsyncClient(timeout=BOUND_S) as http:
            async with asyncio.timeout(BOUND_S * 3):
                while probes.rounds < ATTACKED_ROUNDS:  # the attack goes on while the healthy client is probed
                    refused = await http.post(gw.mcp_url, content=huge, headers=headers)
                    assert refused.status_code == 413  # by its size, before the SDK reads it
                    counted = await http.post(gw.mcp_url, content=eleven, headers=headers)
                    assert counted.status_code == 200  # a listen's refusal is a JSON-RPC error in its answer
                    assert '"code":-42900' in counted.text.replace(" ", "")
                    assert "names 11 URIs" in counted.text  # by its count, before any URI is looked at
