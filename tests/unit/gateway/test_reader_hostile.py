"""Upstreams that misbehave while sending a body: each is a `ReadError` that says what happened, never a hang.

`timeout_ms` bounds the whole read, the body included, so one that stalls halfway fails at its timeout; one whose
Content-Length promises more than it sends and then closes fails at once. Real HTTP upstreams on loopback.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcpg_gateway import reader
from mcpg_gateway.contract import check
from mcpg_gateway.errors import ReadError
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_testing import BOUND_S
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.upstream import Stream, Upstream

URI = "drive://doc"


async def read(upstream: Upstream, **backend: Any) -> reader.Content:
    raw = gateway_config(resource("doc", URI, f"{upstream.url}/doc", watch=False, **backend))
    gw = Gateway(check.load(raw, environ={}), Options(clock=ManualClock()))
    binding = gw.readable(URI, Principal("tester"))
    assert binding is not None
    try:
        async with asyncio.timeout(BOUND_S):  # a hang fails the test here, not in the code under test
            return await gw.reader.read(binding)
    finally:
        await gw.aclose()


async def test_a_body_that_stalls_halfway_fails_at_the_backends_timeout(upstream: Upstream) -> None:
    upstream.stream("/doc", Stream(b"x" * 65_536, 4, stall_after=2))
    with pytest.raises(ReadError, match=rf"^{URI}: upstream did not answer within 300 ms$"):
        await read(upstream, timeout_ms=300)


async def test_a_content_length_that_promises_more_than_is_sent_is_a_read_error(upstream: Upstream) -> None:
    upstream.stream("/doc", Stream(b"x" * 1000, 3, content_length=10_000))
    with pytest.raises(ReadError) as cut:
        await read(upstream, timeout_ms=60_000)
    assert str(cut.value) == f"{URI}: upstream's response body was cut short or malformed (ClientPayloadError)"


async def test_a_body_that_is_not_the_gzip_it_claims_is_a_read_error(upstream: Upstream) -> None:
    upstream.set("/doc", b"not gzip at all", content_type="text/plain", headers={"Content-Encoding": "gzip"})
    with pytest.raises(ReadError, match=r"cut short or malformed \(ClientPayloadError\)$"):
        await read(upstream, timeout_ms=60_000)
