"""URI templates (`scheme://x/{a}/{b}`): their variables, and the pattern a concrete URI is matched with.

A variable is `{name}` with `name` a letter or `_` then letters, digits or `_`; any other brace is literal text.
The same syntax names the variables a backend URL takes (`reader.render_url` substitutes them).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def variables(text: str) -> list[str]:
    """The variable names in `text` (a URI template or a backend URL), in order of appearance, repeats included."""
    return PLACEHOLDER.findall(text)


def repeated(uri_template: str) -> list[str]:
    """The variables `uri_template` names more than once, each listed once, in order of first appearance."""
    return [name for name, count in Counter(variables(uri_template)).items() if count > 1]


def undefined(url: str, defined: Collection[str]) -> list[str]:
    """The variables `url` names that are not in `defined`, each listed once, in order of first appearance."""
    return list(dict.fromkeys(name for name in variables(url) if name not in defined))


def pattern(uri_template: str) -> re.Pattern[str]:
    """A regex matching the concrete URIs of `uri_template`; each variable matches one path segment.

    Precondition: no variable is repeated (`repeated(uri_template)` is empty), as the configuration model
    guarantees for every `uri_template` it accepts. Each variable becomes a named group, and a regex cannot
    name two groups alike: a repeated variable would make `re.compile` raise.
    """
    out, pos = [], 0
    for m in PLACEHOLDER.finditer(uri_template):
        out.append(re.escape(uri_template[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>[^/?#]+)")
        pos = m.end()
    out.append(re.escape(uri_template[pos:]))
    return re.compile("".join(out))
