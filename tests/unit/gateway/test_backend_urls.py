"""A backend's url is http:// or https:// with a host of the configuration's choosing, and its method takes any case.

The CRD's CEL form of the same rule is held to these answers in tests/unit/operator/test_backend_rules.py.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import yaml

from mcpg_gateway.contract import backend_urls, check, config
from mcpg_gateway.contract.errors import ConfigError
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, resource

ACCEPTED = [
    "https://api.example.com/files/{id}",
    "http://u",
    "HTTPS://API.example.com",
    "https://api.example.com:8443/x?page={page}#{frag}",
    "https://user:pass@api.example.com/x",
    "http://[::1]:8080/x",
]
REFUSED = {
    "api.example.com/x": "has no scheme",
    "ftp://x/y": "not another scheme",
    "http:///path": "names no host",
    "http://:8080/x": "names no host",
    "https://user@/x": "names no host",
    "https://{host}/x": "has a {variable} in its host",
    "https://api.example.com:{port}/x": "has a {variable} in its host, port or user",
    "https://{user}@api.example.com/x": "has a {variable} in its host, port or user",
    "https://a@b@c/x": "more than one @",
    "": "has no scheme",
}
SECRET = "hunter2-s3cret"


@pytest.mark.parametrize("url", ACCEPTED)
def test_an_http_or_https_url_with_a_host_is_accepted(url: str) -> None:
    assert backend_urls.problem(url) is None
    assert config.HttpBackend.model_validate({"kind": "http", "url": url}).url == url


@pytest.mark.parametrize(("url", "says"), REFUSED.items())
def test_a_url_without_http_or_a_host_of_its_own_is_refused_saying_what_is_wrong(url: str, says: str) -> None:
    problem = backend_urls.problem(url)
    assert problem is not None
    assert says in problem


@pytest.mark.parametrize(
    "url", [f"{SECRET}@api.example.com/x", f"ftp://u:{SECRET}@x/y", f"https://u:{SECRET}@/x", f"{SECRET}://h/"]
)
def test_the_refusal_never_repeats_the_url(url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check.load(gateway_config(resource("r", "x://r", url)), environ={})
    (problem,) = refused.value.problems
    assert problem.path == "mcp.capabilities.resources[0].backend.url"
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("method", ["GET", "Get", "get", "pOsT", "HEAD"])
def test_a_method_in_any_case_is_one_method(method: str) -> None:
    backend = config.HttpBackend.model_validate({"kind": "http", "url": "http://u", "method": method})
    assert backend.method == method.lower()


def test_an_unknown_method_is_refused_in_any_case() -> None:
    with pytest.raises(ConfigError) as refused:
        check.load(gateway_config(resource("r", "x://r", "http://u", method="FETCH")), environ={})
    assert [p.path for p in refused.value.problems] == ["mcp.capabilities.resources[0].backend.method"]


def test_check_names_every_bad_backend_url_and_takes_a_capitalised_method(tmp_path: Path) -> None:
    raw = gateway_config(
        resource("no-scheme", "x://a", "api.example.com/x", method="GET"),
        resource("ftp", "x://b", "ftp://x/y"),
        resource("no-host", "x://c", "http:///path"),
        resource("fine", "x://d", "https://api.example.com/d", method="Post"),
        templates=[
            {"name": "t", "uri_template": "x://{host}", "backend": {"kind": "http", "url": "https://{host}/x"}},
        ],
    )
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw))
    code, out = asyncio.run(check_file(path))
    assert code == 2
    named = [line.split(":")[0].strip() for line in out.splitlines()[1:]]
    assert named == [
        "mcp.capabilities.resources[0].backend.url",
        "mcp.capabilities.resources[1].backend.url",
        "mcp.capabilities.resources[2].backend.url",
        "mcp.capabilities.resource_templates[0].backend.url",
    ]


async def check_file(path: Path) -> tuple[int, str]:
    """`mcpg-gateway --check --config PATH`, as a user runs it: its status and what it printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mcpg_gateway",
        "--check",
        "--config",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(BOUND_S * 3):  # an import-heavy start on a busy machine
        out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()
