"""A read sends the backend's headers (its credentials) to the backend's origin only.

Redirects are not followed unless the backend sets `follow_redirects`, and then only within its origin (scheme,
host and port), at most five in a row. Two real upstreams on loopback: a different port is a different origin.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcpg_gateway import reader
from mcpg_gateway.contract import check
from mcpg_gateway.errors import ReadError
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_testing import BOUND_S
from mcpg_testing import upstream as upstreams
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.upstream import Upstream

URI = "drive://doc"
KEY = {"X-Api-Key": "tenant-key-5b1e"}
OPT_IN = {"follow_redirects": True}


@pytest.fixture
async def other() -> AsyncIterator[Upstream]:
    """Another origin: it must never hear from a read of `upstream`'s resource."""
    async with upstreams.serve() as served:
        yield served


def make_gateway(url: str, **backend: Any) -> Gateway:
    raw = gateway_config(resource("doc", URI, url, watch=False, headers=KEY, **backend))
    return Gateway(check.load(raw, environ={}), Options(clock=ManualClock()))


async def read(gw: Gateway) -> reader.Content:
    binding = gw.readable(URI, Principal("tester"))
    assert binding is not None
    try:
        async with asyncio.timeout(BOUND_S):
            return await gw.reader.read(binding)
    finally:
        await gw.aclose()


@pytest.mark.parametrize("backend", [{}, OPT_IN], ids=["default", "follow_redirects"])
async def test_a_redirect_to_another_origin_is_never_followed(
    upstream: Upstream, other: Upstream, backend: dict[str, Any]
) -> None:
    upstream.set("/doc", "", status=302, headers={"Location": f"{other.url}/collect"})
    other.set("/collect", "{}")
    with pytest.raises(ReadError, match=r"^drive://doc: upstream redirected") as refused:
        await read(make_gateway(f"{upstream.url}/doc", **backend))
    assert other.headers_seen == []
    assert "tenant-key" not in str(refused.value)


async def test_a_redirect_not_followed_says_so_and_names_the_field_that_opts_in(upstream: Upstream) -> None:
    upstream.set("/old", "", status=301, headers={"Location": "/new"})
    upstream.set("/new", '{"v": 1}')
    with pytest.raises(ReadError) as refused:
        await read(make_gateway(f"{upstream.url}/old"))
    assert str(refused.value) == (
        f"{URI}: upstream redirected (HTTP 301); redirects are not followed unless the backend sets "
        "follow_redirects, and then only within the upstream's origin"
    )
    assert refused.value.status == 301
    assert "/new" not in upstream.hits


async def test_a_same_origin_redirect_is_followed_with_opt_in_and_keeps_the_headers(upstream: Upstream) -> None:
    upstream.set("/old", "", status=308, headers={"Location": "/new"})
    upstream.set("/new", '{"v": 1}')
    content = await read(make_gateway(f"{upstream.url}/old", **OPT_IN))
    assert (content.body, content.status) == (b'{"v": 1}', 200)
    assert [h.get("X-Api-Key") for h in upstream.headers_seen] == [KEY["X-Api-Key"]] * 2


async def test_an_expected_redirect_status_is_the_answer(upstream: Upstream, other: Upstream) -> None:
    upstream.set("/doc", "moved", status=302, content_type="text/plain", headers={"Location": f"{other.url}/x"})
    content = await read(make_gateway(f"{upstream.url}/doc", expected_status_codes=[200, 302]))
    assert (content.body, content.status) == (b"moved", 302)
    assert other.headers_seen == []


async def test_redirects_stop_after_five_in_a_row(upstream: Upstream) -> None:
    for hop in range(10):
        upstream.set(f"/r{hop}", "", status=307, headers={"Location": f"/r{hop + 1}"})
    with pytest.raises(ReadError, match=r"^drive://doc: upstream redirected more than 5 times in a row$"):
        await read(make_gateway(f"{upstream.url}/r0", **OPT_IN))
    assert sorted(upstream.hits) == [f"/r{hop}" for hop in range(6)]  # the request and five redirects


async def test_a_see_other_after_a_post_is_read_with_a_get_and_no_body(upstream: Upstream) -> None:
    upstream.set("/search", "", status=303, headers={"Location": "/results"})
    upstream.set("/results", '{"hits": []}')
    content = await read(make_gateway(f"{upstream.url}/search", method="post", body='{"q": 1}', **OPT_IN))
    assert content.body == b'{"hits": []}'
    assert upstream.asked == [("POST", "/search"), ("GET", "/results")]
    assert upstream.headers_seen[1].get("Content-Length") in (None, "0")
