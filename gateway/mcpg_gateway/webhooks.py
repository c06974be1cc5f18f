"""Inbound webhooks: `POST /webhooks/resource-updated/{token}` selects one resource by its token.

Tokens are indexed by their SHA-256 digest, so a lookup hashes the presented token first and compares digests:
the time it takes says nothing about how much of a real token the caller guessed. The body is never read
past a small bound and never used: only the token in the path selects the resource.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass

from mcpg_gateway import config

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    uri: str
    name: str
    generated_token: str | None = None
    """Set only when the config left the token empty and the gateway made one up (shown in the admin API)."""


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenIndex:
    def __init__(self) -> None:
        self._routes: dict[bytes, Route] = {}

    def lookup(self, token: str) -> Route | None:
        return self._routes.get(digest(token))

    def routes(self) -> list[Route]:
        return list({id(r): r for r in self._routes.values()}.values())

    def add(self, token: str, route: Route) -> None:
        key = digest(token)
        earlier = self._routes.get(key)
        if earlier is not None and earlier.uri != route.uri:
            # The guide's rule: log the collision naming both resources (never the token); the later wins.
            logger.error(
                "webhook token collision: resource %r reuses the token of resource %r; %r now receives it",
                route.name,
                earlier.name,
                route.name,
            )
        self._routes[key] = route


def build_index(resources: list[config.ResourceConfig]) -> TokenIndex:
    index = TokenIndex()
    for res in resources:
        if res.watch is None or not isinstance(res.watch.strategy, config.WebhookStrategy):
            continue
        strategy = res.watch.strategy
        token = strategy.token.get_secret_value()
        route = Route(res.uri, res.name)
        if not token:
            token = str(uuid.uuid4())
            route = Route(res.uri, res.name, generated_token=token)
            # Shown once so a scratch run is usable; set the token from the environment for anything real.
            logger.warning(
                "resource %r has no webhook token; generated one for this run: /webhooks/resource-updated/%s",
                res.name,
                token,
            )
        index.add(token, route)
        for old in strategy.previous_tokens:
            if old.get_secret_value():
                index.add(old.get_secret_value(), route)
    return index


def origin_allowed(origin: str | None, allowed: list[str]) -> bool:
    """No Origin (a server-to-server sender) passes; a browser's Origin must be listed exactly."""
    return origin is None or origin in allowed
