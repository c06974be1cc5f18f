"""A backend URL's shape: `http://` or `https://`, a host, and template variables only after the host.

A read sends the backend's headers (its credentials) to the URL's server, so the server is the configuration's,
never a caller's: a `{variable}` in the authority (user, host or port) would let whoever asks for a concrete URI
choose where those headers go (`reader.render_url` substitutes values as they are, and a host needs no escaping).
A variable in the path or query only picks what the configured server is asked for.

`problem` says what is wrong in words; `CEL_RULE` is the same test for the API server (the operator's CRD), and a
unit test holds the two to the same answers. Neither repeats the URL: it may carry a password (`https://u:p@h/`).
"""

from __future__ import annotations

import re

SCHEMES = ("http", "https")
_AUTHORITY_END = re.compile(r"[/?#]")

CEL_RULE = r"self.matches('^[Hh][Tt][Tt][Pp][Ss]?://([^/?#@{}]*@)?[^/?#@{}:][^/?#@{}]*([/?#]|$)')"
"""What `problem` accepts, as one RE2 match: scheme, optional `user@`, a host that does not start with `:` (the
port), no brace or second `@` before the path."""
CEL_MESSAGE = "url must be http:// or https:// with a host, and {variables} only after the host"


def problem(url: str) -> str | None:
    """What makes `url` unusable as a backend URL, or None. Quotes nothing of it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "has no scheme: write it as https://host/path (or http://)"
    if not scheme.isascii() or scheme.lower() not in SCHEMES:
        return "must be an http:// or https:// URL, not another scheme"
    authority = _AUTHORITY_END.split(rest, maxsplit=1)[0]
    if "{" in authority or "}" in authority:
        return (
            "has a {variable} in its host, port or user: a caller would choose the server that receives the "
            "backend's headers; put variables in the path or query only"
        )
    if authority.count("@") > 1:
        return "has more than one @ before the path: write an @ in the user or password as %40"
    host = authority.rpartition("@")[2]
    if not host or host.startswith(":"):
        return "names no host: write it as https://host/path"
    return None
