"""The SDK's bearer-auth hooks, and its auth context: how a caller's principal reaches a handler.

Over HTTP the SDK's starlette backend asks a `TokenVerifier` (`identity.Identity`) about the bearer token,
`RequireAuthMiddleware` answers 401 with `WWW-Authenticate`, and `AuthContextMiddleware` puts the caller into the
context every handler reads (`current_token`). The gateway binds each handshake-era session to the `client_id` of
the `AccessToken` that opened it (`client_id`, read at the door `sdk/door.py` and by the session limit). On stdio
there is no token: `act_as` puts one principal's token into that same context for the whole connection (every task
the connection starts copies it).
"""

from __future__ import annotations

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, auth_context_var, get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Scope

__all__ = [
    "AccessToken",
    "AuthenticatedUser",
    "BearerAuthBackend",
    "act_as",
    "client_id",
    "current_token",
    "required",
]


def current_token() -> AccessToken | None:
    """The token of the caller whose request is being handled; None if there is none."""
    return get_access_token()


def client_id(scope: Scope) -> str | None:
    """The `client_id` of the caller the auth middleware left in the request's scope; None without one."""
    token = getattr(scope.get("user"), "access_token", None)
    found = getattr(token, "client_id", None)
    return found if isinstance(found, str) else None


def act_as(token: AccessToken) -> None:
    """From now on in this context (and every task started from it), the caller is `token`'s."""
    auth_context_var.set(AuthenticatedUser(token))


def required(app: ASGIApp, backend: BearerAuthBackend) -> ASGIApp:
    """`app` run only for a caller `backend` authenticates (401 with `WWW-Authenticate` otherwise), with the
    caller in the auth context."""
    guarded = AuthContextMiddleware(RequireAuthMiddleware(app, required_scopes=[]))
    return AuthenticationMiddleware(guarded, backend=backend)
