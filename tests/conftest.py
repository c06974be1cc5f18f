"""Fixtures every tier shares: a real HTTP upstream, a clock the test drives, gateways on loopback ports.

The code behind them lives in `tests/support/mcpg_testing`; this file only makes fixtures of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from mcpg_testing import clock as clocks
from mcpg_testing import gateways
from mcpg_testing import upstream as upstreams


@pytest.fixture
async def upstream() -> AsyncIterator[upstreams.Upstream]:
    async with upstreams.serve() as served:
        yield served


@pytest.fixture
def clock() -> clocks.ManualClock:
    return clocks.ManualClock()


@pytest.fixture
async def gateway_factory() -> AsyncIterator[gateways.GatewayFactory]:
    async with gateways.running() as start:
        yield start
