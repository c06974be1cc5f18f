"""The server card and the subscribable mark on listed entries, over real HTTP against a real gateway.

The card is read with a plain HTTP client and no credentials, as a directory would; what it claims is checked
against what the SDK's own clients are told when they connect, in both protocol eras, so the card cannot
drift from the handshake. Its secrecy is asserted on the raw response text, not on parsed fields.

It is served where the Server Card extension reserves it (`/mcp/server-card`, which must never reach the MCP
endpoint), at its first home, and found from the domain through `/.well-known/ai-catalog.json`.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcpg_gateway import card
from mcpg_gateway.contract import config
from mcpg_gateway.fanout.endings import REASONS, SUBSCRIBABLE_META_KEY, WATCH_END_META_KEY
from mcpg_testing.clients import ERAS
from mcpg_testing.configs import bearer, gateway_config, principal, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream

NOTES, REPORTS, PLAIN, LEDGER = "drive://file/notes", "drive://folder/reports", "drive://file/plain", "vault://ledger"
DOC, INBOX, RAW = "drive://doc/{doc_id}", "mail://inbox/{subject_id}", "drive://raw/{raw_id}"
WEBHOOK_TOKEN, OLD_WEBHOOK_TOKEN = "hook-token-5b1e", "hook-token-old-77c0"
HEADER_VALUE = "Bearer upstream-credential-9d2f"
ALICE_TOKEN = "alice-token-3c8a"
ALICE = bearer(ALICE_TOKEN)
FINANCE = '"finance" in subscriber.groups'
LIMITS = {
    "watches_per_principal": 3,
    "watches_total": 30,
    "listen_streams_per_principal": 4,
    "listen_streams_total": 40,
    "sessions_per_principal": 5,
}
LEASE = {"idle_after_s": 120.0, "slow_interval_ms": 300_000, "lifetime_s": 3600.0}


def template(name: str, uri_template: str, url: str, watch: bool, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "uri_template": uri_template, "backend": {"kind": "http", "url": url}}
    if watch:
        entry["watch"] = {}
    return {**entry, **fields}


def raw_config(upstream: Upstream, **server: Any) -> dict[str, Any]:
    """Watched and unwatched entries, one guarded resource and template, and a secret of every kind."""
    hook = {"type": "webhook", "token": WEBHOOK_TOKEN, "previous_tokens": [OLD_WEBHOOK_TOKEN]}
    raw = gateway_config(
        resource("notes", NOTES, f"{upstream.url}/notes", headers={"Authorization": HEADER_VALUE}),
        {**resource("reports", REPORTS, f"{upstream.url}/reports", hook), "description": "Quarterly reports. "},
        {**resource("plain", PLAIN, f"{upstream.url}/plain", watch=False), "description": "A plain file."},
        {**resource("ledger", LEDGER, f"{upstream.url}/ledger"), "read_policy": FINANCE},
        templates=[
            template("doc", DOC, f"{upstream.url}/docs/{{doc_id}}", watch=True, description="One document."),
            template(
                "inbox",
                INBOX,
                f"{upstream.url}/inbox/{{subject_id}}",
                watch=True,
                read_policy="resource.subject_id == subscriber.principal_id",
            ),
            template("raw", RAW, f"{upstream.url}/raw/{{raw_id}}", watch=False, description="Raw bytes."),
        ],
        auth={"principals": [principal(ALICE_TOKEN, "alice-in-finance", groups=["finance"])]},
        **server,
    )
    raw["gateway"] |= {"limits": LIMITS, "subscriptions": LEASE}
    return raw


@pytest.fixture
async def running(gateway_factory: GatewayFactory, upstream: Upstream) -> RunningGateway:
    return await gateway_factory(raw_config(upstream))


async def get(url: str) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.get(url)


async def fetch_card(gw: RunningGateway) -> dict[str, Any]:
    resp = await get(gw.base + card.PATH)
    assert resp.status_code == 200
    body: dict[str, Any] = resp.json()
    return body


@contextlib.asynccontextmanager
async def connected(url: str, mode: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """An SDK client of either era: `legacy` is the handshake, `listen` what the SDK negotiates by default."""
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy" if mode == "legacy" else "auto") as client,
    ):
        assert (client.protocol_version == "2026-07-28") == (mode == "listen")
        yield client


# --- served, and to whom ---------------------------------------------------------------------------------------


async def test_the_card_is_served_without_authorization_while_mcp_refuses_it(running: RunningGateway) -> None:
    async with httpx2.AsyncClient() as http:
        card_resp = await http.get(running.base + card.PATH)
        mcp_resp = await http.post(
            running.mcp_url,
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            headers={"Accept": "application/json, text/event-stream"},
        )
    assert card_resp.status_code == 200
    assert card_resp.headers["content-type"] == "application/json"
    assert card_resp.headers["cache-control"] == "public, max-age=300"
    assert card_resp.json()["subscriptions"]["supported"] is True
    assert mcp_resp.status_code == 401


async def test_with_the_switch_off_the_card_answers_404_like_any_unknown_path(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    running = await gateway_factory(raw_config(upstream, server_card=False))
    unknown = await get(running.base + "/.well-known/mcp/no-such-document.json")
    assert unknown.status_code == 404
    for path in (card.PATH, card.CARD_PATH, card.CATALOG_PATH):
        off = await get(running.base + path)
        assert (off.status_code, off.content) == (404, unknown.content), path


# --- where it lives ---------------------------------------------------------------------------------------------


async def test_the_card_is_at_the_mcp_endpoint_plus_server_card_as_the_extension_reserves(
    running: RunningGateway,
) -> None:
    async with httpx2.AsyncClient() as http:
        new = await http.get(running.mcp_url + "/server-card", headers={"Accept": card.CARD_MEDIA_TYPE})
        old = await http.get(running.base + card.PATH)
    assert new.status_code == 200
    assert new.headers["content-type"] == "application/mcp-server-card+json"
    assert new.headers["cache-control"] == "public, max-age=300"
    assert new.headers["access-control-allow-origin"] == "*"
    assert new.content == old.content  # the first home serves the same card, as plain JSON still
    assert old.headers["content-type"] == "application/json"


async def test_the_card_path_never_reaches_the_mcp_endpoint_and_mcp_answers_as_before(
    running: RunningGateway,
) -> None:
    accept = {"Accept": "application/json, text/event-stream"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with httpx2.AsyncClient() as http:
        posted_card = await http.post(running.mcp_url + "/server-card", json=initialize, headers=accept)
        posted_mcp = await http.post(running.mcp_url, json=initialize, headers=accept)
        got_mcp = await http.get(running.mcp_url, headers={"Accept": "text/event-stream"})
    assert posted_card.status_code == 405  # the card's route: GET only; the MCP endpoint would have said 401
    assert "www-authenticate" not in posted_card.headers
    assert (posted_mcp.status_code, got_mcp.status_code) == (401, 401)  # the MCP endpoint, behind its token


async def test_the_ai_catalog_points_a_domain_at_the_card(running: RunningGateway) -> None:
    async with httpx2.AsyncClient() as http:
        listed = await http.get(running.base + "/.well-known/ai-catalog.json")
        body = listed.json()
        [entry] = body["entries"]
        followed = await http.get(urllib.parse.urljoin(str(listed.url), entry["url"]))
    assert listed.status_code == 200
    assert listed.headers["content-type"] == "application/ai-catalog+json"
    assert listed.headers["access-control-allow-origin"] == "*"
    assert body["specVersion"] == "1.0"
    assert entry["type"] == "application/mcp-server-card+json"
    assert entry["url"] == "/mcp/server-card"
    published = followed.json()
    assert entry["identifier"] == f"urn:mcpg:server:{published['serverInfo']['name']}"
    assert entry["displayName"] == published["serverInfo"]["name"]
    assert followed.headers["content-type"] == "application/mcp-server-card+json"


# --- what it says ----------------------------------------------------------------------------------------------


@ERAS
async def test_its_capabilities_and_identity_are_what_a_connecting_client_is_told(
    running: RunningGateway, mode: str
) -> None:
    published = await fetch_card(running)
    async with connected(running.mcp_url, mode, ALICE) as client:
        told = client.server_capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
        version = client.protocol_version
        info = client.server_info
    assert published["capabilities"] == told
    assert told["resources"] == {"subscribe": True, "listChanged": True}
    assert version in published["supportedProtocolVersions"]
    assert info is not None
    assert published["serverInfo"] == {"name": info.name, "version": info.version}


async def test_it_names_both_methods_each_answered_on_its_own_protocols(running: RunningGateway) -> None:
    methods = (await fetch_card(running))["subscriptions"]["methods"]
    listen, subscribe = methods["subscriptions/listen"], methods["resources/subscribe"]
    assert (listen["available"], listen["since_protocol"], listen["protocols"]) == (True, "2026-07-28", ["2026-07-28"])
    assert (subscribe["available"], subscribe["since_protocol"]) == (True, "2024-11-05")
    assert subscribe["protocols"] == ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
    assert "Mcp-Session-Id" in subscribe["requires"]


async def test_it_lists_only_watched_entries_every_caller_may_read(running: RunningGateway) -> None:
    subs = (await fetch_card(running))["subscriptions"]
    assert subs["subscribable_uris"] == [NOTES, REPORTS]
    assert subs["subscribable_uri_templates"] == [DOC]
    assert "resources/list" in subs["unlisted"]
    assert subs["subscribable_meta_key"] == SUBSCRIBABLE_META_KEY


async def test_it_publishes_the_closed_end_reasons_the_lease_and_the_limits(running: RunningGateway) -> None:
    subs = (await fetch_card(running))["subscriptions"]
    assert subs["end_reasons"] == [
        "resource_gone",
        "lifetime_reached",
        "watcher_evicted",
        "shutdown",
        "resource_removed",
        "access_revoked",
        "principal_removed",
    ]
    assert subs["end_reasons"] == list(REASONS)
    assert subs["end_reason_meta_key"] == WATCH_END_META_KEY
    assert subs["notification"].startswith("notifications/resources/updated")
    assert subs["lease"] == LEASE
    assert subs["limits"] == LIMITS


async def test_it_holds_no_secret_and_names_nothing_guarded(running: RunningGateway, upstream: Upstream) -> None:
    text = (await get(running.base + card.PATH)).text
    digest = hashlib.sha256(ALICE_TOKEN.encode()).hexdigest()
    secrets = [WEBHOOK_TOKEN, OLD_WEBHOOK_TOKEN, HEADER_VALUE, "upstream-credential", ALICE_TOKEN, digest]
    guarded = [LEDGER, INBOX, FINANCE, "subscriber.principal_id", "alice-in-finance"]
    for needle in [*secrets, upstream.url, *guarded]:
        assert needle not in text, needle
    assert NOTES in text  # the same text does carry what it should


def strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a JSON document with the key it sits under (a list's items under the list's key)."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v, key)


async def test_no_text_in_the_card_or_the_catalog_is_left_unformatted(running: RunningGateway) -> None:
    # A user saw a literal {LISTEN}: a plain string joined to f-strings is not formatted. Only URI templates may
    # hold braces; every other string is prose or a name.
    for path in (card.CARD_PATH, card.PATH, card.CATALOG_PATH):
        document = (await get(running.base + path)).json()
        for key, text in strings(document):
            if key != "subscribable_uri_templates":
                assert not re.search(r"[{}]", text), (path, key, text)


# --- the mark on listed entries ---------------------------------------------------------------------------------


@ERAS
async def test_listed_resources_say_whether_they_are_subscribable(running: RunningGateway, mode: str) -> None:
    async with connected(running.mcp_url, mode, ALICE) as client:
        listed = {r.uri: r for r in (await client.list_resources()).resources}
    sentence = card.SUBSCRIBABLE_SENTENCE
    assert listed[NOTES].description == sentence
    assert listed[REPORTS].description == f"Quarterly reports. {sentence}"
    assert listed[LEDGER].description == sentence  # guarded, and alice may read it: listed to her, marked
    for uri in (NOTES, REPORTS, LEDGER):
        assert listed[uri].meta == {SUBSCRIBABLE_META_KEY: True}
    assert listed[PLAIN].description == "A plain file."
    assert listed[PLAIN].meta is None


@ERAS
async def test_listed_templates_say_whether_they_are_subscribable(running: RunningGateway, mode: str) -> None:
    async with connected(running.mcp_url, mode, ALICE) as client:
        listed = {t.uri_template: t for t in (await client.list_resource_templates()).resource_templates}
    assert listed[DOC].description == f"One document. {card.SUBSCRIBABLE_SENTENCE}"
    assert listed[DOC].meta == {SUBSCRIBABLE_META_KEY: True}
    assert listed[RAW].description == "Raw bytes."
    assert listed[RAW].meta is None


def test_the_sentence_is_one_sentence_a_strict_validator_accepts() -> None:
    sentence = card.SUBSCRIBABLE_SENTENCE
    assert sentence.endswith(".")
    assert sentence.count(". ") == 0
    assert not set(sentence) & set(";<>`\"'{}[]\\")
    assert "subscriptions/listen (protocol 2026-07-28)" in sentence
    assert "resources/subscribe" in sentence


def test_an_unwatched_entry_keeps_its_description_exactly_and_an_empty_one_stays_absent() -> None:
    backend = {"kind": "http", "url": "http://upstream.invalid/x"}
    bare = config.ResourceConfig.model_validate({"name": "x", "uri": "x://y", "backend": backend})
    assert (card.description(bare), card.meta(bare)) == (None, None)
    watched = bare.model_copy(update={"watch": config.WatchConfig()})
    assert (card.description(watched), card.meta(watched)) == (
        card.SUBSCRIBABLE_SENTENCE,
        {SUBSCRIBABLE_META_KEY: True},
    )
