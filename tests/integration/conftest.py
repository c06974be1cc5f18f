"""The integration tier: real NATS and PostgreSQL servers (`mcpg_testing.servers`) for the session.

Every test here is marked `integration`. A test that kills a server restarts it, and the per-test fixtures
restart it anyway if a failed test left it down.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from mcpg_testing.servers import NatsServer, PostgresServer, start_nats, start_postgres


def pytest_configure(config: pytest.Config) -> None:
    # The image environments, the control plane and the operator on it (`mcpg_testing.fixtures`), as a plugin
    # registered before any module is collected: a test module importing one of its fixtures by name first would
    # leave it unrewritten, which pytest refuses (`pytest_plugins` is refused below the top level anyway).
    config.pluginmanager.import_plugin("mcpg_testing.fixtures")


HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    server = start_nats()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture
def nats(nats_server: NatsServer) -> NatsServer:
    if not nats_server.process.running:
        nats_server.start()
    return nats_server


@pytest.fixture
def postgres(postgres_server: PostgresServer) -> PostgresServer:
    if not postgres_server.process.running:
        postgres_server.start()
    return postgres_server


@pytest.fixture
async def db(postgres: PostgresServer) -> AsyncIterator[Any]:
    """A plain connection for the test itself: NOTIFY, inserts, and looking at pg_stat_activity."""
    conn = await asyncpg.connect(postgres.url)
    try:
        yield conn
    finally:
        if not conn.is_closed():
            await conn.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """A failed test's report gets what its fixtures can say about themselves (`failure_report()`): the logs of
    the programs it ran, say."""
    report = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            describe = getattr(value, "failure_report", None)
            if callable(describe):
                report.sections.append((f"{name}: failure report", str(describe())))
    return report
