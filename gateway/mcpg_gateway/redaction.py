"""Keep credentials that ride inside server URLs out of logs, errors, the admin API and metrics.

`postgres://user:pass@host/db` and `nats://user:pass@host` (or `nats://token@host`) carry secrets in the URL
itself, and a connect error from a client library may echo parts of it. Everything the event-driven
strategies log or raise goes through `redact_url`, and any foreign error text through `scrub`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

MASK = "***"
UNPARSABLE = "<unparsable URL>"

# A lone user part is a role name for PostgreSQL but a token for NATS (`nats://TOKEN@host`): keep it only where
# it is known not to be a secret.
_USER_IS_NOT_SECRET = frozenset({"postgres", "postgresql"})
_SECRET_PARAM = re.compile(r"pass|token|secret|key|credential", re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` with its password (and any secret-looking query parameter) replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return UNPARSABLE
    if "@" in url and parts.username is None:
        return UNPARSABLE  # an `@` outside the authority (no `//`?) could be anything: show nothing
    host = parts.netloc.rpartition("@")[2]
    userinfo = _redacted_userinfo(parts.scheme, parts.username, parts.password)
    query = _redacted_query(parts.query)
    return urlunsplit((parts.scheme, f"{userinfo}{host}", parts.path, query, parts.fragment))


def _redacted_userinfo(scheme: str, username: str | None, password: str | None) -> str:
    if username is None and password is None:
        return ""
    if password is not None:
        return f"{username or ''}:{MASK}@"
    if scheme.lower() in _USER_IS_NOT_SECRET:
        return f"{username}@"
    return f"{MASK}@"


def _redacted_query(query: str) -> str:
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, MASK if _SECRET_PARAM.search(k) else v) for k, v in pairs], safe="/:*")


def secrets_in(url: str) -> list[str]:
    """The secret fragments of `url` (password, token-like user, secret query values), longest first."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = []
    if parts.password:
        found.append(parts.password)
    if parts.username and parts.password is None and parts.scheme.lower() not in _USER_IS_NOT_SECRET:
        found.append(parts.username)
    found.extend(v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_PARAM.search(k) and v)
    variants = {s for f in found for s in (f, unquote(f))}
    return sorted((s for s in variants if s), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` (an error message from a client library) with `url` and every secret in it masked."""
    out = text.replace(url, redact_url(url)) if url else text
    for secret in secrets_in(url):
        out = out.replace(secret, MASK)
    return out
