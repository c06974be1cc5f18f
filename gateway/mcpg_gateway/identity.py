"""Who is calling /mcp: bearer tokens to principals, through the MCP SDK's own auth hooks (`sdk/auth.py`).

The SDK's bearer backend asks our `TokenVerifier` about the token, answers 401 with `WWW-Authenticate`, and
makes the caller visible to handlers (`current()`). The SDK also binds each stateful session to the credential
(client_id) that opened it, so the principal_id is the client_id: a session opened by one principal answers 404
to any other. Tokens are configured and compared
only as SHA-256 digests, and the raw token is never kept beyond the request that presented it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from starlette.authentication import AuthCredentials
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp

from mcpg_gateway.contract import config
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.sdk import auth
from mcpg_gateway.sdk.auth import AccessToken, AuthenticatedUser, BearerAuthBackend

logger = logging.getLogger(__name__)


def token_digest(token: str) -> str:
    """What the configuration holds for a token: the SHA-256 of its UTF-8 bytes, as lowercase hex."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller, as read policies and notification filters see it (`subscriber.*`)."""

    principal_id: str
    trust_level: str = ""
    roles: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    attributes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_config(cls, cfg: config.PrincipalConfig | config.AnonymousConfig) -> Principal:
        return cls(
            cfg.principal_id,
            cfg.trust_level,
            tuple(cfg.roles),
            tuple(cfg.groups),
            tuple(cfg.scopes),
            MappingProxyType(dict(cfg.attributes)),
        )


class Identity:
    """The configured principals, by token digest and by id. Also the SDK's `TokenVerifier`."""

    def __init__(self, auth: config.AuthConfig) -> None:
        self.replace(auth)

    def replace(self, auth: config.AuthConfig) -> None:
        """Serve `auth` from now on, as a configuration applied in place does: the next request is verified
        against it. The three tables are assigned with no await between, so no request sees half of each."""
        by_digest = {p.token_sha256: Principal.from_config(p) for p in auth.principals}
        anonymous = Principal.from_config(auth.anonymous) if auth.anonymous.enabled else None
        by_id = {p.principal_id: p for p in by_digest.values()}
        if anonymous is not None:
            by_id[anonymous.principal_id] = anonymous
        # One token per principal, shared by its requests: an open stream keeps its request's token (the SDK's
        # auth user in its scope), and a fresh one each was 2.8 KB per open stream. Nothing writes to it.
        tokens = {principal_id: access_token(p) for principal_id, p in by_id.items()}
        self._by_digest, self.anonymous, self._by_id, self._tokens = by_digest, anonymous, by_id, tokens
        if not self._by_id:
            logger.warning(
                "gateway.auth has no principals and anonymous access is disabled: every /mcp request will be "
                "refused with 401"
            )

    async def verify_token(self, token: str) -> AccessToken | None:
        # A dict lookup on the digest: timing can reveal at most a digest prefix, which says nothing of a token.
        principal = self._by_digest.get(token_digest(token))
        return None if principal is None else self._tokens[principal.principal_id]

    def token_of(self, principal: Principal) -> AccessToken:
        """The one `AccessToken` the SDK is given for `principal`'s requests."""
        return self._tokens.get(principal.principal_id) or access_token(principal)

    def by_id(self, principal_id: str) -> Principal | None:
        """The principal of that id as configured now; None once the configuration no longer has it."""
        return self._by_id.get(principal_id)

    def principal_of(self, token: AccessToken | None) -> Principal | None:
        """The principal a verified token stands for; None if there is none (fail closed)."""
        return None if token is None else self._by_id.get(token.client_id)

    def current(self) -> Principal | None:
        """The principal of the request being handled (the SDK's auth context)."""
        return self.principal_of(auth.current_token())


def access_token(principal: Principal) -> AccessToken:
    # client_id and subject are what the SDK compares to bind a session to its creator. `token` carries a
    # marker, not the bearer token: nothing downstream needs it, and a repr must never print a credential.
    return AccessToken(
        token=f"principal:{principal.principal_id}",
        client_id=principal.principal_id,
        subject=principal.principal_id,
        scopes=list(principal.scopes),
    )


class _Backend(BearerAuthBackend):
    """The SDK's bearer backend, plus: no Authorization header at all means the anonymous principal, if enabled."""

    def __init__(self, identity: Identity, metrics: Metrics) -> None:
        super().__init__(identity)
        self._identity, self._failures = identity, metrics.auth_failures

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, AuthenticatedUser] | None:
        anonymous = self._identity.anonymous
        if "authorization" not in conn.headers:
            if anonymous is None:
                self._failures.labels("missing").inc()
                return None
            return AuthCredentials(list(anonymous.scopes)), AuthenticatedUser(self._identity.token_of(anonymous))
        result: Any = await super().authenticate(conn)
        if result is None:
            # A wrong token is refused even when anonymous access is on: presenting one is not anonymity.
            self._failures.labels("invalid_token").inc()
            return None
        credentials, user = result
        return credentials, user


def protect(app: ASGIApp, identity: Identity, metrics: Metrics) -> ASGIApp:
    """Wrap `app` so it runs only for a known principal (401 with `WWW-Authenticate` otherwise)."""
    return auth.required(app, _Backend(identity, metrics))
