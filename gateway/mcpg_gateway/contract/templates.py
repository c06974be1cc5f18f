"""URI templates (`scheme://x/{a}/{b}`): their variables, and the pattern a concrete URI is matched with."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def variables(uri_template: str) -> list[str]:
    """The variable names of `uri_template`, in order of appearance (repeats included)."""
    return PLACEHOLDER.findall(uri_template)


def pattern(uri_template: str) -> re.Pattern[str]:
    """A regex matching the concrete URIs of `uri_template`; each variable matches one path segment."""
    out, pos = [], 0
    for m in PLACEHOLDER.finditer(uri_template):
        out.append(re.escape(uri_template[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>[^/?#]+)")
        pos = m.end()
    out.append(re.escape(uri_template[pos:]))
    return re.compile("".join(out))
