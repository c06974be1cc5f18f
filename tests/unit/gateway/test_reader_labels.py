"""What callers choose never becomes gateway state without a bound: metric series, connection slots, pause rows.

A resource template whose backend url has a variable in its host (`http://{tenant}.api.example/...`) reaches as many
hosts as callers name values: labelled by the host requested, 1,500 reads made 3,000 series. An upstream is the
backend's url as configured, so the configuration bounds every label and the connections of one template. Real
reads against a loopback upstream: an IPv4 address may be written as one hex number with any number of leading
zeros (`0x7f000001`, `0x07f000001`, ...), so each value below names another host that is 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from mcpg_gateway import upstream_pauses
from mcpg_gateway.contract import check
from mcpg_gateway.errors import ReadError
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_testing import BOUND_S
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config
from mcpg_testing.upstream import Upstream

HOSTS = ["0" * zeros + "7f000001" for zeros in range(40)]
"""Values of `{n}` in the host `0x{n}`: forty host names, each of them 127.0.0.1."""


def tenant_gateway(upstream: Upstream, path: str, **limits: Any) -> tuple[Gateway, str]:
    """A gateway with templates whose backend host is a variable (`t://` waits a minute for a read, `q://` 300 ms);
    and that host:port as configured."""
    configured = f"0x{{n}}:{upstream.url.rsplit(':', 1)[1]}"
    templates = [
        {
            "name": name,
            "uri_template": f"{name}://host/{{n}}",
            "backend": {"kind": "http", "url": f"http://{configured}{path}", "timeout_ms": ms},
        }
        for name, ms in (("t", 60_000), ("q", 300))
    ]
    raw = gateway_config(templates=templates)
    raw["gateway"]["limits"] = limits
    return Gateway(check.load(raw, environ={}), Options(clock=ManualClock())), configured


async def read(gw: Gateway, host: str, scheme: str = "t") -> None:
    binding = gw.readable(f"{scheme}://host/{host}", Principal("tester"))
    assert binding is not None
    async with asyncio.timeout(BOUND_S):
        await gw.reader.read(binding)


def series(gw: Gateway, metric: str) -> dict[str, float]:
    """Each `upstream` label of `metric` with its value."""
    return {
        sample.labels["upstream"]: sample.value
        for family in gw.metrics.registry.collect()
        for sample in family.samples
        if sample.name == metric
    }


async def test_reads_of_many_values_of_a_variable_in_the_backend_host_make_one_metric_series(
    upstream: Upstream,
) -> None:
    upstream.set("/limited", "{}", status=429)
    gw, configured = tenant_gateway(upstream, "/limited")
    for host in HOSTS:
        with pytest.raises(ReadError, match="HTTP 429"):
            await read(gw, host)
    assert upstream.hits["/limited"] == len(HOSTS)  # each host its own pause: every read went out
    assert series(gw, "mcpg_upstream_rate_limited_total") == {configured: len(HOSTS)}
    await gw.aclose()


async def test_a_template_with_a_variable_host_holds_one_upstreams_connections_however_many_hosts(
    upstream: Upstream,
) -> None:
    upstream.set("/stall", "{}")
    upstream.docs["/stall"].delay = asyncio.Event()  # set when the upstream stops
    gw, configured = tenant_gateway(upstream, "/stall", upstream_connections=3)
    stalled = [asyncio.create_task(read(gw, host)) for host in HOSTS[:10]]
    try:
        async with asyncio.timeout(BOUND_S):
            await upstream.reached("/stall", 3)
        assert gw.reader.upstreams_in_use() == [configured]
        with pytest.raises(ReadError, match=f"all 3 connections to {re.escape(configured)} stayed busy for 300 ms"):
            await read(gw, HOSTS[-1], scheme="q")
        assert upstream.hits["/stall"] == 3
    finally:
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)
    assert series(gw, "mcpg_upstream_connections_busy_total") == {configured: 1}
    await gw.aclose()


def test_the_pauses_keep_at_most_a_bounded_number_of_upstreams_and_drop_the_one_ending_first() -> None:
    now = [0.0]
    pauses = upstream_pauses.UpstreamPauses(lambda: now[0])
    keys = [upstream_pauses.key_for(f"https://t{i}.api.example/", {}) for i in range(upstream_pauses.MAX_KEYS + 5)]
    for i, key in enumerate(keys):
        now[0] = float(i)  # each pause begins (and so ends) a second after the one before
        pauses.record(key, None)
    rows = pauses.snapshot()
    assert len(rows) == upstream_pauses.MAX_KEYS
    assert {row.upstream for row in rows} == {key.upstream for key in keys[5:]}
