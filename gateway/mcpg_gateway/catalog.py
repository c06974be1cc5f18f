"""The catalog: which URIs the gateway serves, and which configured entry answers each one.

A concrete URI resolves either to a resource (exact match) or to a resource template whose `{var}`
placeholders match it; the template's variables travel with the binding, percent-decoded, so backends and
filters can use them. Only canonical URIs resolve (`uris.check`), and under a template only the spelling its
expansion gives (`_bound`): one upstream object has one URI, one watcher, and one string policies compare.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcpg_gateway.contract import config, templates, uris


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
        self.replace(caps)

    def replace(self, caps: config.Capabilities) -> None:
        """Serve `caps` from now on (a configuration applied in place): assigned with no await between, so a lookup sees
        the old catalog or the new one, never a mix."""
        parsed = [(templates.parse(t.uri_template), t) for t in caps.resource_templates]
        self.resources, self.templates = list(caps.resources), list(caps.resource_templates)
        self._by_uri = {r.uri: r for r in self.resources}
        self._parsed = parsed

    def resolve(self, uri: str) -> Binding | None:
        """The binding of `uri`, or None when no entry serves it. A template whose variable would hold a value
        that is not UTF-8, or is or steps through `.` or `..` (`uris.decode_variable`), does not serve it: that
        value would name another path on the upstream. Under a template, the binding's `uri` may be spelled
        otherwise than `uri` (see `_bound`); a caller serves only a binding whose `uri` is what was asked for."""
        try:  # callers refuse a URI not served as written with the reason; here it simply serves nothing
            uris.check(uri)
        except uris.UriError:
            return None
        resource = self._by_uri.get(uri)
        if resource is not None:
            return Binding(uri, resource)
        for template, entry in self._parsed:
            binding = _bound(uri, template, entry)
            if binding is not None:
                return binding
        return None


def _bound(uri: str, template: templates.Template, entry: config.ResourceTemplateConfig) -> Binding | None:
    """`entry`'s binding of `uri`, or None if it does not serve it. The binding's URI is the template's own
    spelling of the values (`Template.expand`): for `doc://{id}`, `doc://a:b` and `doc://a%3Ab` name one upstream
    object, and only `doc://a%3Ab` is its URI (callers refuse the other, giving that spelling)."""
    raw = template.match(uri)
    if raw is None:
        return None
    try:
        values = {name: uris.decode_variable(value) for name, value in raw.items()}
    except uris.UriError:
        return None
    return Binding(template.expand(values), entry, values)
