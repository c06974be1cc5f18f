"""A caller's URI against the gateway's own credentials: a variable stays in its segment, one resource has one
spelling, a URI has a bounded length, and templates are listed as the read policy would allow.

The upstream here is a real static file server on loopback with a secret beside the folder the templates
serve: what a traversal would reach if a variable could step out of its segment.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from mcp.shared.exceptions import MCPError

from mcpg_gateway import errors
from mcpg_gateway.contract import uris
from mcpg_testing.clients import ERAS, connected, refusal
from mcpg_testing.configs import bearer, gateway_config, principal
from mcpg_testing.gateways import GatewayFactory, RunningGateway

SECRET = '{"private_key": "s3cr3t"}'
ALICE, BOB = bearer("alice-token"), bearer("bob-token")
PRINCIPALS = [principal("alice-token", "alice", groups=["ops"]), principal("bob-token", "bob", groups=["staff"])]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class FileServer:
    url: str = ""
    asked: list[str] = field(default_factory=list)
    """Every request's path as it arrived (still percent-encoded)."""


@pytest.fixture
async def files(tmp_path: Path) -> AsyncIterator[FileServer]:
    """aiohttp's static handler over `public/` and, beside it, `private/keys.json`, with directory listings on."""
    (tmp_path / "public" / "docs").mkdir(parents=True)
    (tmp_path / "public" / "docs" / "a.json").write_text('{"doc": "a"}')
    (tmp_path / "public" / "inbox" / "alice").mkdir(parents=True)
    (tmp_path / "public" / "inbox" / "alice" / "1.json").write_text('{"mail": 1}')
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "keys.json").write_text(SECRET)
    server = FileServer()

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        server.asked.append(request.raw_path)
        return await handler(request)

    app = web.Application(middlewares=[record])
    app.router.add_static("/", tmp_path, show_index=True)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        await runner.cleanup()


def template(name: str, uri_template: str, url: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "uri_template": uri_template, "backend": {"kind": "http", "url": url}, "watch": {}, **fields}


@pytest.fixture
async def running(gateway_factory: GatewayFactory, files: FileServer) -> RunningGateway:
    raw = gateway_config(
        templates=[
            template("doc", "doc://{id}", f"{files.url}/public/docs/{{id}}"),
            template("site", "site://{dir}/{file}", f"{files.url}/public/{{dir}}/{{file}}"),
            template("mail", "mail://inbox/{box}", f"{files.url}/public/inbox/{{box}}"),
            template("json", "json://{id}.json", f"{files.url}/public/docs/{{id}}.json"),
            template(
                "vault",
                "vault://{key}",
                f"{files.url}/public/docs/{{key}}",
                read_policy='!resource.uri.startsWith("vault://admin")',
            ),
            template("ops", "ops://{id}", f"{files.url}/public/docs/{{id}}", read_policy='"ops" in subscriber.groups'),
            template(
                "own",
                "own://{subject_id}",
                f"{files.url}/public/inbox/{{subject_id}}",
                read_policy="resource.subject_id == subscriber.principal_id",
            ),
        ],
        auth={"principals": PRINCIPALS},
    )
    return await gateway_factory(raw)


async def read_refusal(gw: RunningGateway, mode: str, uri: str, headers: dict[str, str] = ALICE) -> MCPError:
    async with connected(gw.mcp_url, mode, headers) as client:
        with pytest.raises(MCPError) as e:
            await client.read_resource(uri)
    return e.value


# --- a variable stays in its segment -----------------------------------------------------------------------------


@ERAS
async def test_a_template_serves_what_its_folder_holds(running: RunningGateway, files: FileServer, mode: str) -> None:
    async with connected(running.mcp_url, mode, ALICE) as client:
        site = await client.read_resource("site://docs/a.json")
        escaped = await client.read_resource("json://a.json")
    assert site.contents[0].text == escaped.contents[0].text == '{"doc": "a"}'  # type: ignore[union-attr]
    assert files.asked == ["/public/docs/a.json"] * 2


@ERAS
@pytest.mark.parametrize(
    "uri",
    [
        "doc://..",  # was GET /public/: the listing of every document
        "doc://.",
        "doc://%2E%2E",  # the same, percent-encoded (and not canonical either)
        "mail://inbox/.",  # was the list of every inbox
        "site://../private%2Fkeys.json",  # was the secret beside the served folder
        "site://docs/..",
        "json://..json",  # `{id}.json` with id `.`: not a `.` segment, still a step up on the upstream
        "doc://x%2F..%2F..%2Fprivate%2Fkeys.json",  # decoded, it steps through `..`
        "site://%2E%2E/private%2Fkeys.json",
    ],
)
async def test_no_variable_steps_out_of_its_segment(
    running: RunningGateway, files: FileServer, mode: str, uri: str
) -> None:
    refused = await read_refusal(running, mode, uri)
    assert refused.code == errors.INVALID_PARAMS
    assert "s3cr3t" not in refused.message
    assert files.asked == [], f"the upstream was asked {files.asked} for {uri}"


@ERAS
async def test_a_subscription_steps_out_no_more_than_a_read(
    running: RunningGateway, files: FileServer, mode: str
) -> None:
    refused = await refusal(running.mcp_url, mode, ["site://../private%2Fkeys.json"], ALICE)
    assert refused.code == errors.INVALID_PARAMS
    assert "`.` or `..` path segment" in refused.message
    assert files.asked == []
    assert running.gw.fanout.running_watches() == []


# --- one resource, one spelling ----------------------------------------------------------------------------------


@ERAS
@pytest.mark.parametrize(
    ("uri", "canonical"),
    [
        ("vault://%61dmin-keys", "vault://admin-keys"),  # was past `!resource.uri.startsWith("vault://admin")`
        ("VAULT://admin-keys", "vault://admin-keys"),
        ("doc://a%2fb", "doc://a%2Fb"),
        ("doc://caf\u00e9", "doc://caf%C3%A9"),
        ("doc://a:b", "doc://a%3Ab"),  # `doc://{id}` writes a reserved character of a value percent-encoded
    ],
)
async def test_a_uri_not_spelled_canonically_is_refused_with_its_canonical_spelling(
    running: RunningGateway, files: FileServer, mode: str, uri: str, canonical: str
) -> None:
    refused = await read_refusal(running, mode, uri)
    assert refused.code == errors.INVALID_PARAMS
    assert refused.message.startswith("invalid resource URI: ")
    assert f"canonically it is {canonical!r}" in refused.message
    assert files.asked == []


@ERAS
async def test_the_read_policy_sees_the_one_spelling(running: RunningGateway, mode: str) -> None:
    canonical = await read_refusal(running, mode, "vault://admin-keys")
    assert (canonical.code, canonical.message) == (errors.INVALID_PARAMS, "unknown resource: vault://admin-keys")
    respelled = await read_refusal(running, mode, "vault://%61dmin-keys")
    assert "unknown resource" not in respelled.message  # refused for its spelling, before any policy or read
    async with connected(running.mcp_url, mode, ALICE) as client:
        assert (await client.read_resource("vault://a.json")).contents


async def test_two_spellings_cannot_start_two_watchers(running: RunningGateway) -> None:
    e = await refusal(running.mcp_url, "listen", ["doc://a.json", "doc://%61.json"], ALICE)
    assert "canonically it is 'doc://a.json'" in e.message
    assert running.gw.fanout.running_watches() == []


# --- a bounded length --------------------------------------------------------------------------------------------


@ERAS
async def test_a_uri_over_the_length_limit_is_refused_without_echoing_it(running: RunningGateway, mode: str) -> None:
    long_uri = "json://" + "a-" * 5_000 + ".json"  # 10,012 characters: a header of the 2026 era holds it too
    refused = await read_refusal(running, mode, long_uri)
    assert refused.code == errors.INVALID_PARAMS
    assert f"at most {uris.MAX_URI_CHARS}" in refused.message
    assert long_uri not in refused.message


async def test_a_uri_at_the_length_limit_is_served(running: RunningGateway, files: FileServer) -> None:
    name = "b" * (uris.MAX_URI_CHARS - len("doc://"))
    async with connected(running.mcp_url, "listen", ALICE) as client:
        with contextlib.suppress(MCPError):  # no such file upstream: what matters is that it was asked
            await client.read_resource("doc://" + name)
    assert files.asked == ["/public/docs/" + name]


# --- templates are listed as the read policy allows -------------------------------------------------------------


async def listed_templates(gw: RunningGateway, headers: dict[str, str]) -> set[str]:
    async with connected(gw.mcp_url, "listen", headers) as client:
        return {t.name for t in (await client.list_resource_templates()).resource_templates}


async def test_a_template_whose_policy_is_false_for_the_caller_whatever_the_uri_is_not_listed(
    running: RunningGateway,
) -> None:
    everyone = {"doc", "site", "mail", "json", "vault", "own"}
    assert await listed_templates(running, ALICE) == everyone | {"ops"}
    assert await listed_templates(running, BOB) == everyone  # `"ops" in subscriber.groups` is false for bob
