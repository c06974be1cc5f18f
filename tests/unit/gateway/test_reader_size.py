"""An upstream's response is read as a stream and refused past the backend's `max_response_bytes` (10 MiB unless set).

A gzip bomb is counted as it is decompressed, a Content-Length over the cap is refused before the body is read, and a
poll hashes its body as it arrives, so it holds a few chunks of it however large it is. Memory is Python's as
tracemalloc sees it (the peak while the read runs), against real HTTP upstreams on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from mcpg_gateway import reader
from mcpg_gateway.contract import check
from mcpg_gateway.errors import ReadError
from mcpg_gateway.fanout.subscribers import Subscriber
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_testing import BOUND_S
from mcpg_testing.clients import legacy_client
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.gateways import GatewayFactory
from mcpg_testing.outboxes import next_fire
from mcpg_testing.upstream import Stream, Upstream

URI = "drive://big"
MIB = 1 << 20
DEFAULT_CAP = 10 * MIB
TOO_LARGE = "upstream response is larger than max_response_bytes"


@dataclass
class Peak:
    bytes: int = 0


@contextlib.contextmanager
def traced() -> Iterator[Peak]:
    """The most memory Python held at once inside the block, beyond what it held on entry."""
    peak = Peak()
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def gzip_bomb(size: int) -> bytes:
    """`size` zero bytes gzipped, in about a thousandth of that: members of 16 MiB each, concatenated (as gzip
    allows), so building a 1 GiB bomb costs one 16 MiB compression."""
    member = gzip.compress(bytes(16 * MIB), compresslevel=9)
    return member * (size // (16 * MIB))


def make_gateway(upstream: Upstream, path: str, strategy: dict[str, Any] | None = None, **backend: Any) -> Gateway:
    entry = resource("big", URI, f"{upstream.url}{path}", strategy, watch=strategy is not None, **backend)
    return Gateway(check.load(gateway_config(entry), environ={}), Options(clock=ManualClock()))


async def read(gw: Gateway) -> reader.Content:
    binding = gw.readable(URI, Principal("tester"))
    assert binding is not None
    async with asyncio.timeout(BOUND_S):
        return await gw.reader.read(binding)


def too_large_count(gw: Gateway, upstream: Upstream) -> float:
    value: float = gw.metrics.upstream_too_large.labels(upstream.url.removeprefix("http://"))._value.get()
    return value


async def test_a_gzip_bomb_is_refused_once_its_decompressed_bytes_pass_the_cap_and_memory_stays_bounded(
    upstream: Upstream,
) -> None:
    upstream.set("/bomb", gzip_bomb(1024 * MIB), content_type="text/plain", headers={"Content-Encoding": "gzip"})
    gw = make_gateway(upstream, "/bomb")
    with traced() as peak, pytest.raises(ReadError) as refused:
        await read(gw)
    assert str(refused.value) == f"{URI}: {TOO_LARGE} (10485760)"
    assert peak.bytes < 3 * DEFAULT_CAP
    assert too_large_count(gw, upstream) == 1
    await gw.aclose()


async def test_a_content_length_over_the_cap_is_refused_without_reading_the_body(upstream: Upstream) -> None:
    # The body stalls after its first piece: a reader that read it would time out instead of refusing.
    upstream.stream("/big", Stream(bytes(MIB), 11, stall_after=1))
    gw = make_gateway(upstream, "/big", timeout_ms=5_000)
    with pytest.raises(ReadError, match=rf"^{URI}: {TOO_LARGE} \(10485760\)$"):
        await read(gw)
    await gw.aclose()


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
async def test_a_body_at_the_cap_is_read_whole_and_one_byte_more_is_refused(upstream: Upstream, encoding: str) -> None:
    # identity: the Content-Length says so up front; gzip: the decompressed bytes are counted as they arrive.
    for size in (1000, 1001):
        body = b"x" * size
        sent = gzip.compress(body) if encoding == "gzip" else body
        upstream.set(f"/{size}", sent, content_type="text/plain", headers={"Content-Encoding": encoding})
    at_cap = make_gateway(upstream, "/1000", max_response_bytes=1000)
    over = make_gateway(upstream, "/1001", max_response_bytes=1000)
    assert (await read(at_cap)).body == b"x" * 1000
    with pytest.raises(ReadError, match=rf"{TOO_LARGE} \(1000\)"):
        await read(over)
    await at_cap.aclose()
    await over.aclose()


async def test_the_cap_applies_to_resources_read_over_mcp(gateway_factory: GatewayFactory, upstream: Upstream) -> None:
    upstream.set("/big", b"x" * (DEFAULT_CAP + 1), content_type="text/plain")
    gw = await gateway_factory(gateway_config(resource("big", URI, f"{upstream.url}/big", watch=False)))
    async with legacy_client(gw.mcp_url) as sub:
        with pytest.raises(MCPError, match=rf"{TOO_LARGE} \(10485760\)"):
            await sub.client.read_resource(URI)


async def subscribed(gw: Gateway) -> Subscriber:
    sub = Subscriber("session")
    binding = gw.readable(URI, Principal("tester"))
    assert binding is not None
    await gw.fanout.subscribe([binding], sub)
    return sub


async def test_a_poll_hashes_a_body_far_larger_than_it_holds_and_still_sees_it_change(upstream: Upstream) -> None:
    before, after = Stream(b"a" * MIB, 40), Stream(b"b" * MIB, 40)  # 40 MiB each, made before tracing
    upstream.stream("/big", before)
    clock = ManualClock()
    raw = gateway_config(
        resource("big", URI, f"{upstream.url}/big", {"type": "poll"}, max_response_bytes=64 * MIB, timeout_ms=60_000)
    )
    gw = Gateway(check.load(raw, environ={}), Options(clock=clock))
    with traced() as peak:
        sub = await subscribed(gw)
        upstream.docs["/big"].stream = after
        await clock.tick()
        async with asyncio.timeout(BOUND_S):
            assert await next_fire(sub.outbox) == (URI, "poll")
    assert peak.bytes < 4 * MIB
    await gw.aclose()


async def test_a_streamed_poll_s_state_is_the_sha256_of_the_body_as_a_whole_read_hashes_it(upstream: Upstream) -> None:
    # Gateways share a poll's state on the bus: the streamed hash must be the one the whole body would give.
    body = b'{"v": 1}' * 10_000
    upstream.set("/doc", body)
    gw = make_gateway(upstream, "/doc", {"type": "poll"})
    await subscribed(gw)
    [watch] = gw.fanout.running_watches()
    assert watch.pull is not None
    assert watch.pull.snapshot() == hashlib.sha256(body).hexdigest()
    await gw.aclose()
