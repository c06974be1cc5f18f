"""A gateway that needs no bus, no PostgreSQL and no tracing imports none of their libraries: nats, asyncpg and
the OpenTelemetry SDK and exporter are imported by the first use that needs them (1.7 MB of idle RSS for nats
alone). Checked in a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys

from mcpg_testing.configs import gateway_config, resource, watched

PROGRAM = """
import asyncio, json, sys
import mcpg_gateway.__main__  # everything the command imports at start
from mcpg_gateway.contract import check
from mcpg_gateway.gateway import Gateway, Options

async def main() -> None:
    gw = Gateway(check.load(json.loads(sys.argv[1]), environ={}), Options())
    await gw.aclose()

asyncio.run(main())
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {"nats", "asyncpg"} or m.startswith(
    ("opentelemetry.sdk", "opentelemetry.exporter")))))
"""


def test_a_gateway_without_a_bus_postgres_or_tracing_imports_none_of_their_libraries() -> None:
    config = gateway_config(
        watched("hook", "drive://folder/a", {"type": "webhook", "token": "tok"}),
        resource("polled", "https://docs.example/b", "https://docs.example/b", {"type": "poll"}),
    )
    run = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == []
