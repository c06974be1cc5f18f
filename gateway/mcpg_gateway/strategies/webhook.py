"""webhook: the passive strategy, and the token index that says which resource a presented token fires.

A webhook watch waits; the route (`webhook_route.py`, in the HTTP layer) looks the token in the path up here and
fires the URI it selects, once the delivery's signature verifies when the watch requires one (the route's
`verifier`, built here once per configuration so its keys are decoded once). The index keys tokens (current and
`previous_tokens`) by SHA-256 digest, so a lookup hashes the presented token first and compares digests, and the
time it takes says nothing of how much of a real token was guessed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from mcpg_gateway import signatures
from mcpg_gateway.contract import config
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    uri: str
    name: str
    generated_token: str | None = None
    """Set only when the config left the token empty and the gateway made one up (shown in the admin API)."""
    verifier: signatures.Verifier | None = None
    """The watch's `signature` block, ready to verify; None: the token alone fires it."""


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenIndex:
    def __init__(self) -> None:
        self._routes: dict[bytes, Route] = {}

    def lookup(self, token: str) -> Route | None:
        if not token.isascii():  # no configured token is (config.WebhookStrategy), and not every str can be hashed
            return None
        return self._routes.get(digest(token))

    def routes(self) -> list[Route]:
        return list({id(r): r for r in self._routes.values()}.values())

    def replace(self, other: TokenIndex) -> None:
        """Route by `other`'s tokens from now on: one assignment, so a delivery is routed by the old tokens or
        by the new ones (a configuration applied in place)."""
        self._routes = other._routes

    def generated(self) -> dict[str, str]:
        """The tokens made up for this run, by URI: a reload keeps them, so a scratch URL stays valid."""
        return {r.uri: r.generated_token for r in self.routes() if r.generated_token is not None}

    def add(self, token: str, route: Route) -> None:
        key = digest(token)
        earlier = self._routes.get(key)
        if earlier is not None and earlier.uri != route.uri:
            # Two resources must not share a token: say so naming both (never the token); the later one wins.
            logger.error(
                "webhook token collision: resource %r reuses the token of resource %r; %r now receives it",
                route.name,
                earlier.name,
                route.name,
            )
        self._routes[key] = route


def build_index(resources: list[config.ResourceConfig], generated: Mapping[str, str] | None = None) -> TokenIndex:
    """The tokens of every webhook watch. `generated`: the tokens made up earlier in this run, by URI (a reload
    keeps a resource's, rather than inventing another and refusing its sender)."""
    index = TokenIndex()
    for res in resources:
        if res.watch is None or not isinstance(res.watch.strategy, config.WebhookStrategy):
            continue
        strategy = res.watch.strategy
        token = strategy.token.get_secret_value()
        verifier = signatures.Verifier(strategy.signature) if strategy.signature is not None else None
        route = Route(res.uri, res.name, verifier=verifier)
        if not token:
            token = (generated or {}).get(res.uri) or _made_up(res.name)
            route = Route(res.uri, res.name, generated_token=token, verifier=verifier)
        index.add(token, route)
        for old in strategy.previous_tokens:
            if old.get_secret_value():
                index.add(old.get_secret_value(), route)
    return index


def _made_up(name: str) -> str:
    token = str(uuid.uuid4())
    # Shown once so a scratch run is usable; set the token from the environment for anything real.
    logger.warning(
        "resource %r has no webhook token; generated one for this run: /webhooks/resource-updated/%s", name, token
    )
    return token


class WebhookWatch:
    """The watch of a webhook resource: nothing to start or poll; the route fires it."""

    def __init__(self, spec: config.WebhookStrategy, ctx: base.WatchContext) -> None:
        self._ctx = ctx

    async def start(self) -> None:
        return None

    async def run(self, fire: base.Fire) -> None:
        # Until cancelled. A bare future, not an Event: an Event's waiter deque is 624 bytes, one per watched URI.
        await asyncio.get_running_loop().create_future()

    async def close(self) -> None:
        return None


STRATEGY = base.StrategyType("webhook", WebhookWatch)
