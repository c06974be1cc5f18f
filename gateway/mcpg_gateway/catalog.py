"""The catalog: which URIs the gateway serves, and which configured entry answers each one.

A concrete URI resolves either to a resource (exact match) or to a resource template whose `{var}`
placeholders match it; the template's variables travel with the binding so backends and filters can use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from mcpg_gateway.contract import config, templates


@dataclass(frozen=True, slots=True)
class Binding:
    """A concrete URI bound to the entry that serves it."""

    uri: str
    entry: config.Entry
    variables: dict[str, str] = field(default_factory=dict)

    @property
    def watch(self) -> config.WatchConfig | None:
        return self.entry.watch


class Catalog:
    def __init__(self, caps: config.Capabilities) -> None:
        self.resources = list(caps.resources)
        self.templates = list(caps.resource_templates)
        self._by_uri = {r.uri: r for r in self.resources}
        self._patterns = [(templates.pattern(t.uri_template), t) for t in self.templates]

    def resolve(self, uri: str) -> Binding | None:
        resource = self._by_uri.get(uri)
        if resource is not None:
            return Binding(uri, resource)
        for pattern, template in self._patterns:
            m = pattern.fullmatch(uri)
            if m is not None:
                return Binding(uri, template, {k: unquote(v) for k, v in m.groupdict().items()})
        return None
