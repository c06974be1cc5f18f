"""A gateway that needs no bus, no PostgreSQL and no tracing imports none of their libraries: nats, asyncpg and
the OpenTelemetry SDK and exporter are imported by the first use that needs them (1.7 MB of idle RSS for nats
alone). And `--help`, `--version` and a bad flag, of each of the three programs, import nothing heavy: they took
0.8 to 1.4 s (4 to 6 s on a busy machine) while the MCP SDK, uvicorn and the configuration model loaded.
Checked in a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mcpg_testing.configs import gateway_config, resource, watched

PROGRAM = """
import asyncio, json, sys
import mcpg_gateway.process  # everything the command imports at start
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


HEAVY = ("mcp", "uvicorn", "starlette", "httpx2", "pydantic", "yaml", "kopf", "kubernetes_asyncio", "aiohttp")
"""Each takes from tens to hundreds of milliseconds to import; the SDK alone, most of a second."""
COMMAND_LINE = """
import json, sys
from {module} import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    print(json.dumps([e.code, sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})]))
"""


@pytest.mark.parametrize("module", ["mcpg_gateway.__main__", "mcpg_gateway.subscribe_cli", "mcpg_operator.__main__"])
@pytest.mark.parametrize(
    ("argv", "status"), [(["--help"], 0), (["--version"], 0), (["--no-such-flag"], 2)], ids=["help", "version", "bad"]
)
def test_help_version_and_a_bad_flag_import_nothing_heavy(module: str, argv: list[str], status: int) -> None:
    program = COMMAND_LINE.format(module=module, heavy=HEAVY)
    run = subprocess.run(
        [sys.executable, "-c", program, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == [status, []]
