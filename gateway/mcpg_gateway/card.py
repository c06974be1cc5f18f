"""What the gateway publishes about itself: the server card, and the mark on each watched entry it lists.

A directory, or a client deciding whether to connect, should learn how to subscribe here without a session:
`GET /mcp/server-card` (the MCP endpoint's URL plus `/server-card`, where the Server Card extension reserves it,
as `application/mcp-server-card+json`; unauthenticated, `public_app.py`) answers `server_card(...)`, and so does
its first home `GET /.well-known/mcp/server-card.json` (`PATH`, as `application/json`), kept for directories
that learned it. Domain discovery is `GET /.well-known/ai-catalog.json`: an AI Catalog (`ai_catalog(...)`) whose
one entry points at the card. Its `capabilities` are what the handshake returns, taken from the MCP server
itself, so the card cannot drift from what a client is told.

The card is unauthenticated, so it holds nothing a caller could not learn by connecting with any valid
credential: no backend URL, header, token, digest, principal or bus setting, and no entry guarded by a
read policy. Listing such an entry would reveal that it exists, which a refused read never does (it is word
for word "unknown resource"); the card says where those entries are listed instead.

The listed entries carry the same knowledge: a watched resource or template ends its description with one
generated sentence (`SUBSCRIBABLE_SENTENCE`, never written by hand) and carries `_meta[SUBSCRIBABLE_META_KEY]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from mcpg_gateway.contract import config
from mcpg_gateway.fanout.endings import REASONS, SUBSCRIBABLE_META_KEY, WATCH_END_META_KEY, WATCH_META_KEY
from mcpg_gateway.fanout.states import STATE_META_KEY, STATES_META_KEY
from mcpg_gateway.sdk.protocol import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from mcpg_gateway.sdk.surface import Surface

PATH = "/.well-known/mcp/server-card.json"
"""The card's first home, kept: the Server Card extension now recommends against a `.well-known` card."""
MCP_ENDPOINT = "/mcp"
CARD_PATH = f"{MCP_ENDPOINT}/server-card"
"""`GET <streamable-http-endpoint>/server-card`, the location the Server Card extension reserves."""
CARD_MEDIA_TYPE = "application/mcp-server-card+json"
CATALOG_PATH = "/.well-known/ai-catalog.json"
CATALOG_MEDIA_TYPE = "application/ai-catalog+json"
CATALOG_SPEC_VERSION = "1.0"
LISTEN, SUBSCRIBE = "subscriptions/listen", "resources/subscribe"
LISTEN_SINCE = MODERN_PROTOCOL_VERSIONS[0]
SUBSCRIBE_SINCE = HANDSHAKE_PROTOCOL_VERSIONS[0]

# One sentence, no semicolon, nothing a strict gateway validator rejects (no quotes, brackets, backticks).
SUBSCRIBABLE_SENTENCE = (
    f"Subscribable: {LISTEN} (protocol {LISTEN_SINCE}), or {SUBSCRIBE} on a stateful session (earlier protocols)."
)

E = TypeVar("E", config.ResourceConfig, config.ResourceTemplateConfig)

_LEASE_FIELDS = frozenset({"idle_after_s", "slow_interval_ms", "lifetime_s"})
_LIMIT_FIELDS = frozenset(
    {
        "watches_per_principal",
        "watches_total",
        "listen_streams_per_principal",
        "listen_streams_total",
        "sessions_per_principal",
    }
)


# --- the mark on a listed entry --------------------------------------------------------------------------------


def description(entry: config.Entry) -> str | None:
    """The entry's own description; for a watched entry, followed by the one generated sentence."""
    if entry.watch is None:
        return entry.description or None
    own = entry.description.rstrip()
    return f"{own} {SUBSCRIBABLE_SENTENCE}" if own else SUBSCRIBABLE_SENTENCE


def meta(entry: config.Entry) -> dict[str, Any] | None:
    """`_meta` of a listed entry: the subscribable flag on a watched one, nothing on the rest."""
    return {SUBSCRIBABLE_META_KEY: True} if entry.watch is not None else None


# --- the card --------------------------------------------------------------------------------------------------


def server_card(cfg: config.GatewayConfig, served: Surface) -> dict[str, Any]:
    """The card as JSON-ready data: a pure function of the configuration and the server's surface."""
    return {
        "serverInfo": {"name": served.name, "version": served.version},
        "supportedProtocolVersions": [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS],
        "transport": {"type": "streamable-http", "endpoint": MCP_ENDPOINT},
        "authentication": {"schemes": ["bearer"], "anonymous": cfg.gateway.auth.anonymous.enabled},
        "capabilities": served.handshake,
        "instructions": served.instructions,
        "subscriptions": _subscriptions(cfg, served),
    }


def ai_catalog(served: Surface) -> dict[str, Any]:
    """The AI Catalog for domain discovery: one entry, this gateway's card, the minimal shape the Server Card
    extension documents (plus `displayName`, which the AI Catalog specification requires of an entry).

    The card's `url` is a relative reference, as the card's own `transport.endpoint` is: the gateway is not told
    the scheme and host it is reached at behind an ingress, and reflecting the request's Host into a publicly
    cached document would let a caller choose what a shared cache serves. Resolved against the catalog's own URL
    it names the card on the same host. For the same reason the `identifier` is anchored on the server's name,
    not on a domain (`urn:air:{publisher-domain}:...` needs the public domain)."""
    return {
        "specVersion": CATALOG_SPEC_VERSION,
        "entries": [
            {
                "identifier": f"urn:mcpg:server:{served.name}",
                "displayName": served.name,
                "type": CARD_MEDIA_TYPE,
                "url": CARD_PATH,
            }
        ],
    }


def _subscriptions(cfg: config.GatewayConfig, served: Surface) -> dict[str, Any]:
    methods = _methods(served)
    caps = cfg.mcp.capabilities
    return {
        "supported": any(method["available"] for method in methods.values()),
        "methods": methods,
        "subscribable_uris": [r.uri for r in _public_watched(caps.resources)],
        "subscribable_uri_templates": [t.uri_template for t in _public_watched(caps.resource_templates)],
        "unlisted": (
            "Only entries every authenticated caller may read are listed here. A resource with a read policy "
            "is listed by resources/list to the callers who may read it, and templates by resources/templates/list."
        ),
        "subscribable_meta_key": SUBSCRIBABLE_META_KEY,
        "notification": (
            "notifications/resources/updated with the URI only, sent when that URI's watch sees a change "
            "(a read would return something new, or its event source fired); read it again to see what changed."
        ),
        "notification_meta_key": WATCH_META_KEY,
        "end_reasons": list(REASONS),
        "end_reason_meta_key": WATCH_END_META_KEY,
        "state": {
            "notification_meta_key": STATE_META_KEY,
            "listen_meta_key": STATES_META_KEY,
            "subscribe_meta_key": STATE_META_KEY,
            "resume": (
                "Every notification carries its URI's state token. Hand back the last token seen per URI in a "
                f"{LISTEN}'s _meta (an object of URI to token), or in a {SUBSCRIBE}'s _meta for its URI: the gateway "
                "tells you at once of each URI whose state moved since, and of no other. A token it does not know "
                "counts as moved."
            ),
        },
        "list_changed": (
            "notifications/resources/list_changed is sent to every handshake-era session and to each listen that "
            "asked for resourcesListChanged when a new configuration changes what that caller may list."
        ),
        "ending": (
            f"A {LISTEN} the gateway ends is answered with a result whose _meta carries the reason and a "
            f"sentence of advice. A {SUBSCRIBE} holds no open request, so one the gateway ends (its lifetime, an "
            f"eviction, a resource gone) ends silently; use {LISTEN} to be told why."
        ),
        "lease": cfg.gateway.subscriptions.model_dump(include=set(_LEASE_FIELDS)),
        "limits": cfg.gateway.limits.model_dump(include=set(_LIMIT_FIELDS)),
    }


def _methods(served: Surface) -> dict[str, dict[str, Any]]:
    """Per method: whether this deployment answers it, on which protocols, and what it needs."""
    return {
        LISTEN: {
            "available": _subscribe(served.modern),
            "since_protocol": LISTEN_SINCE,
            "protocols": list(MODERN_PROTOCOL_VERSIONS),
            "requires": "the request held open: it is the stream its notifications and its ending arrive on",
        },
        SUBSCRIBE: {
            "available": served.stateful and _subscribe(served.handshake),
            "since_protocol": SUBSCRIBE_SINCE,
            "protocols": list(HANDSHAKE_PROTOCOL_VERSIONS),
            "requires": "a stateful session: its Mcp-Session-Id on each request, notifications on its GET stream",
        },
    }


def _subscribe(capabilities: dict[str, Any]) -> bool:
    """What an era's capabilities promise about subscribing (at 2026-07-28 the SDK derives it from listen)."""
    return capabilities.get("resources", {}).get("subscribe") is True


def _public_watched(entries: Sequence[E]) -> list[E]:
    """Watched entries with no read policy: any authenticated caller may read them, so naming them reveals nothing."""
    return [e for e in entries if e.watch is not None and e.read_policy is None]
