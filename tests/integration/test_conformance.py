"""The official MCP conformance suite against `mcpg-gateway` from `.venv-gateway`, standalone on loopback.

`hack/install-conformance.sh` installs the suite (pinned, with the Node 22 it needs) into $MCPG_CACHE once and
names its program. The suite's active server scenarios run against a gateway serving the resources they ask for
(test://static-text, test://static-binary, the template test://template/{id}/data, test://watched-resource) from
a real loopback upstream, with anonymous access, as the DNS-rebinding scenario's local server has. The baseline
(`data/conformance-baseline.yaml`) names the scenarios that do not apply, each with its reason; a failure not in
it fails the test, and so does a listed scenario that passes, so the baseline stays true.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_testing import programs, upstream
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv

__all__ = ["gateway_env"]  # a fixture, used by name

REPO = Path(__file__).resolve().parents[2]
INSTALLER = REPO / "hack" / "install-conformance.sh"
BASELINE = Path(__file__).parent / "data" / "conformance-baseline.yaml"
INSTALL_S = 600.0
"""The first install downloads the suite and a Node (about 40 MB); later ones find it in the cache."""
SUITE_S = 300.0
"""The whole active server set takes seconds; a loaded machine starting Node thirty-odd times, much more."""

MUST_PASS = frozenset(
    {
        "server-initialize",
        "ping",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "resources-subscribe",
        "resources-unsubscribe",
        "dns-rebinding-protection",
    }
)
"""What the gateway is for, and the local-server rule it keeps: never in the baseline."""

TEXT = "This is the content of the static text resource."
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108000000003a7e9b550000000a49444154789c636000000002000148afa471"
    "0000000049454e44ae426082"
)
"""A 1x1 PNG: not UTF-8, so the gateway serves it as a blob."""
RESULT_DIR = re.compile(r"server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[0-9-]+Z")
"""The suite's `-o` directory holds `server-<scenario>-<timestamp>/checks.json` per scenario run."""


@dataclass(frozen=True, slots=True)
class Baseline:
    version: str
    reasons: dict[str, str]
    """Scenario name -> why it does not apply."""


def load_baseline() -> Baseline:
    raw = yaml.safe_load(BASELINE.read_text())
    return Baseline(str(raw["version"]), {str(k): str(v) for k, v in raw["server"].items()})


@pytest.fixture(scope="session")
def conformance() -> Path:
    """The suite's program, installed by the script the Makefile's `conformance-tool` target runs."""
    done = subprocess.run([str(INSTALLER)], capture_output=True, text=True, timeout=INSTALL_S, check=False)
    if done.returncode != 0:
        pytest.fail(f"{INSTALLER} exited {done.returncode}:\n{done.stderr}")
    return Path(done.stdout.strip())


def described(entry: dict[str, Any], mime_type: str) -> dict[str, Any]:
    return {**entry, "description": f"The {entry['name']} resource.", "mime_type": mime_type}


def served_config(upstream_url: str) -> dict[str, Any]:
    """The resources the suite's scenarios read and subscribe to, each read from the upstream."""
    template = {
        "name": "template-data",
        "uri_template": "test://template/{id}/data",
        "backend": {"kind": "http", "url": f"{upstream_url}/template/{{id}}"},
    }
    return gateway_config(
        described(resource("static-text", "test://static-text", f"{upstream_url}/text", watch=False), "text/plain"),
        described(resource("static-binary", "test://static-binary", f"{upstream_url}/png", watch=False), "image/png"),
        described(resource("watched", "test://watched-resource", f"{upstream_url}/watched"), "application/json"),
        templates=[described(template, "application/json")],
    )


def serve_documents(up: upstream.Upstream) -> None:
    up.set("/text", TEXT, content_type="text/plain")
    up.set("/png", PNG, content_type="image/png")
    up.set("/template/123", '{"id":"123","templateTest":true,"data":"Data for ID: 123"}')
    up.set("/watched", '{"watched": true}')


async def run_suite(program: Path, url: str, baseline: Baseline, work: Path) -> tuple[int, str]:
    """`conformance server` over the active server set, told the baseline as its own expected failures: its exit
    status and output."""
    expected = work / "expected-failures.yaml"
    expected.write_text(yaml.safe_dump({"server": sorted(baseline.reasons)}))
    argv = [str(program), "server", "--url", url, "--expected-failures", str(expected), "-o", str(work / "results")]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        async with asyncio.timeout(SUITE_S):
            output, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return await proc.wait(), output.decode(errors="replace")


def outcomes(results: Path) -> dict[str, list[str]]:
    """Per scenario run, its problems as the suite counts them (a check that failed, or only warned): none when it
    passed."""
    problems: dict[str, list[str]] = {}
    for checks in sorted(results.glob("*/checks.json")):
        match = RESULT_DIR.fullmatch(checks.parent.name)
        assert match is not None, checks.parent.name
        bad = [c for c in json.loads(checks.read_text()) if c["status"] in ("FAILURE", "WARNING")]
        problems[match["scenario"]] = [f"{c['status']} {c['id']}: {c.get('errorMessage', '')}" for c in bad]
    return problems


def described_problems(problems: dict[str, list[str]], scenarios: set[str]) -> str:
    return "\n".join(f"{name}: {' | '.join(problems.get(name, ['not run']))}" for name in sorted(scenarios))


async def version_of(program: Path) -> str:
    proc = await asyncio.create_subprocess_exec(str(program), "--version", stdout=asyncio.subprocess.PIPE)
    async with asyncio.timeout(60):
        output, _ = await proc.communicate()
    return output.decode().strip()


def test_the_baseline_never_excuses_what_the_gateway_is_for_and_gives_every_reason() -> None:
    baseline = load_baseline()
    assert MUST_PASS.isdisjoint(baseline.reasons)
    for scenario, reason in baseline.reasons.items():
        assert len(reason.split()) >= 8, scenario  # a sentence saying why, not a placeholder


async def test_the_gateway_passes_the_conformance_suite_but_for_its_baseline(
    gateway_env: ImageEnv, conformance: Path, tmp_path: Path
) -> None:
    baseline = load_baseline()
    assert await version_of(conformance) == baseline.version  # a new pin: run this, then update the baseline
    async with upstream.serve() as up:
        serve_documents(up)
        config = tmp_path / "gw.yaml"
        config.write_text(yaml.safe_dump(served_config(up.url)))
        with programs.gateway(gateway_env, config, cwd=tmp_path) as gw:
            status, output = await run_suite(conformance, gw.mcp_url, baseline, tmp_path)

    problems = outcomes(tmp_path / "results")
    failed = {scenario for scenario, found in problems.items() if found}
    assert sorted(MUST_PASS - problems.keys()) == [], output  # what the gateway is for was run
    unexcused = failed - baseline.reasons.keys()
    assert sorted(unexcused) == [], described_problems(problems, unexcused)
    assert sorted(baseline.reasons.keys() - failed) == [], "listed in the baseline, yet passing (or no longer run)"
    assert status == 0, output  # the suite's own verdict against the same baseline agrees
