"""Resource URIs: one spelling for each resource, a bounded length, and what a template variable may hold.

Three things key on a URI's text: read policies (`resource.uri.startsWith("vault://admin")`), the watch registry
(one watcher per URI) and, through a template's variables, the path of an upstream request. Two spellings of one
resource (`vault://%61dmin-keys` for `vault://admin-keys`) would slip past the first and split the second; a
variable holding `..` would step out of its segment on the upstream. So there is one rule:

- A URI is served only in its canonical form (RFC 3986 §6.2.2): the scheme in lower case; a percent-encoded
  unreserved character (`A-Z a-z 0-9 - . _ ~`) written as itself; every other percent-encoding with upper-case
  hex digits; a character a URI cannot hold as it is (non-ASCII, space, a control character, `"<>\\^`{|}`)
  percent-encoded as UTF-8. Any other spelling is refused, and the refusal gives the canonical one. Refusing
  rather than rewriting keeps one string end to end: the URI a client subscribes to is the URI its
  notifications carry, the one policies compare and the one the admin API lists.
- At most `MAX_URI_CHARS` characters, checked before anything else looks at the text.
- No `.` or `..` path segment (`doc://x/../y`): it names a different resource on any upstream that resolves it.

A template variable's value (`decode_variable`) is its segment's text percent-decoded, which must be UTF-8 and
must not be, or step through (after decoding `%2F`), `.` or `..`. The configuration holds its own URIs and
templates to the same rules (`config.py`), so every configured resource can be asked for.
"""

from __future__ import annotations

import re
import string
from urllib.parse import unquote_to_bytes

MAX_URI_CHARS = 2048
"""The longest URI the gateway reads, subscribes to or matches against a template, in characters."""

_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_AS_IS = _UNRESERVED | frozenset(":/?#[]@!$&'()*+,;=")
"""Characters a canonical URI holds as they are: the unreserved and the reserved (RFC 3986 §2.2, §2.3)."""
_HEX = frozenset(string.hexdigits)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_DOT_STEPS = frozenset({".", ".."})
_STEP_SEPARATORS = re.compile(r"[/\\]")


class UriError(ValueError):
    """Why a text is not a URI the gateway can serve, in words a client can act on."""


def canonical(uri: str) -> str:
    """The canonical spelling of `uri`. `UriError` if it has no scheme, is malformed or is too long."""
    _check_length(uri)
    scheme = _SCHEME.match(uri)
    if scheme is None:
        raise UriError("the URI has no scheme (it must start like `scheme:`)")
    out = scheme.group().lower() + canonical_text(uri[scheme.end() :])
    _check_length(out)
    return out


def canonical_text(text: str) -> str:
    """`text` with every character and percent-encoding spelled canonically (a URI's parts, or a template's
    literal text). `UriError` on a `%` not followed by two hex digits, or text that is not valid Unicode."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "%":
            out.append(_percent(text, i))
            i += 3
        elif char in _AS_IS:
            out.append(char)
            i += 1
        else:
            out.append(_encoded(char, i))
            i += 1
    return "".join(out)


def _percent(text: str, i: int) -> str:
    digits = text[i + 1 : i + 3]
    if len(digits) != 2 or not set(digits) <= _HEX:
        raise UriError(f"malformed percent-encoding at character {i + 1}: `%` must be followed by two hex digits")
    char = chr(int(digits, 16))
    return char if char in _UNRESERVED else "%" + digits.upper()


def _encoded(char: str, i: int) -> str:
    try:
        data = char.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no byte sequence stands for it
        raise UriError(f"character {i + 1} is not valid Unicode") from None
    return "".join(f"%{b:02X}" for b in data)


class NotCanonical(UriError):
    """A URI spelled otherwise than its canonical form, which this carries."""

    def __init__(self, spelled: str, what: str = "the URI") -> None:
        super().__init__(f"{what} is not in canonical form (RFC 3986 §6.2.2); canonically it is {spelled!r}")
        self.spelled = spelled


def check(uri: str) -> None:
    """Refuse `uri` (`UriError`; `NotCanonical` with its canonical spelling) unless it is served as written."""
    spelled = canonical(uri)
    if spelled != uri:
        raise NotCanonical(spelled)
    if has_dot_segment(uri):
        raise UriError("the URI has a `.` or `..` path segment, which names another resource on the upstream")


def check_template(uri_template: str, literal_pieces: list[str]) -> None:
    """Refuse a template none of whose URIs could be served (`UriError`): its text outside the variables must
    start with a scheme in lower case, be spelled canonically and make no `.` or `..` segment, and the whole
    must leave room for values within `MAX_URI_CHARS`."""
    _check_length(uri_template)
    scheme = _SCHEME.match(uri_template)
    if scheme is None or scheme.group() != scheme.group().lower():
        raise UriError("a URI template must start with its scheme, in lower case (like `scheme:`)")
    for piece in literal_pieces:
        spelled = canonical_text(piece)
        if spelled != piece:
            raise NotCanonical(spelled, f"its text {piece!r}")
    if has_dot_segment(uri_template):
        raise UriError("the template has a `.` or `..` path segment, which names another resource on the upstream")


def has_dot_segment(uri: str) -> bool:
    """Whether a segment of `uri`'s hierarchical part (before `?` and `#`) is `.` or `..`."""
    path = re.split(r"[?#]", uri, maxsplit=1)[0]
    after_scheme = path.split(":", 1)[-1]
    return any(segment in _DOT_STEPS for segment in after_scheme.split("/"))


def _check_length(uri: str) -> None:
    if len(uri) > MAX_URI_CHARS:
        raise UriError(f"the URI is {len(uri)} characters; the gateway serves URIs of at most {MAX_URI_CHARS}")


def decode_variable(raw: str) -> str:
    """A template variable's value: its (canonical) segment text percent-decoded. `UriError` if that is not
    UTF-8, or is or steps through `.` or `..` (also where `%2F` or `\\` separate the steps)."""
    try:
        value = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise UriError("its value is not UTF-8 once percent-decoded") from None
    if any(step in _DOT_STEPS for step in _STEP_SEPARATORS.split(value)):
        raise UriError("its value is, or steps through, `.` or `..`") from None
    return value
