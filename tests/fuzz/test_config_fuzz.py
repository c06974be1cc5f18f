"""The configuration contract on arbitrary input: always a verdict (problems or a configuration), never a crash,
and whatever it accepts the gateway can serve (the catalog builds, each template matches its own URIs). YAML whose
anchors alias one another (and themselves) costs no more than the document bound however far it expands."""

from __future__ import annotations

import builtins
import contextlib
import string
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import assume, event, example, given
from hypothesis import strategies as st

from mcpg_gateway import catalog, reader
from mcpg_gateway.contract import check, config, documents, loading, templates
from mcpg_gateway.contract.errors import ConfigError, Problem

# Not empty: an empty string fails `min_length` at once, and Hypothesis would try it far more often than anything.
PRINTABLE = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=40)
ANY_TEXT = st.text(max_size=40)
# Literal pieces and a few placeholders, so repeats, adjacent variables, `{subject_id}` and near-misses are common;
# most start with a scheme, as a template the contract accepts must.
PIECES = st.one_of(PRINTABLE, st.sampled_from(["{a}", "{b}", "{subject_id}", "{", "}", "/", "{1}", "{a-b}", "-"]))
TEMPLATE_LIKE = st.builds(
    lambda scheme, pieces: scheme + "".join(pieces),
    st.sampled_from(["doc://", "doc:", "Doc://", ""]),
    st.lists(PIECES, min_size=1, max_size=6),
)
FIELD_TEXT = st.one_of(ANY_TEXT, TEMPLATE_LIKE)
# A field is either a value the contract takes or arbitrary text: mostly-valid entries get past the schema, so
# the later rules (the CEL, the cross-entry checks) see arbitrary text too.
CEL = st.sampled_from(["true", 'subscriber.principal_id == "p"', "resource.variables.a == subscriber.principal_id"])
STRATEGIES = st.one_of(
    st.just({"type": "poll"}),
    st.builds(lambda t: {"type": "webhook", "token": t}, PRINTABLE),
    st.builds(lambda s: {"type": "nats_topic", "subject": s}, PRINTABLE),
    st.builds(lambda k: {"type": "plugin", "kind": k}, PRINTABLE),
)
FILTERS = st.one_of(
    st.just({"scope": "all"}),
    st.just({"scope": "subject_id"}),
    st.builds(lambda e: {"scope": "expression", "expression": e}, CEL | PRINTABLE),
)
OPTIONAL_FIELDS = st.fixed_dictionaries(
    {}, optional={"mime_type": PRINTABLE, "read_policy": CEL | PRINTABLE, "subject_id": PRINTABLE}
)
# YAML-shaped values, what a document can hold anywhere, under keys the contract reads at some level.
KEYS = st.sampled_from(["mcp", "gateway", "capabilities", "resources", "resource_templates", "backend", "watch", "url"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), PRINTABLE, st.just("${env.UNSET}")
)
DOCUMENT_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS | PRINTABLE | st.integers(), inner, max_size=3),
    max_leaves=12,
)


def entry(fields: dict[str, Any], *, template: bool) -> dict[str, Any]:
    kind = "resource_templates" if template else "resources"
    return {"mcp": {"capabilities": {kind: [fields]}}, "gateway": {"nats": {"url": "nats://n"}}}


def servable(cfg: config.GatewayConfig) -> None:
    """What the gateway does with an accepted configuration: build the catalog and render every backend URL."""
    caps = cfg.mcp.capabilities
    catalog.Catalog(caps)
    for res in caps.resources:
        assert templates.variables(res.backend.url) == [], f"{res.backend.url!r} keeps a placeholder"
    for tpl in caps.resource_templates:
        rendered = reader.render_url(tpl.backend.url, dict.fromkeys(templates.variables(tpl.uri_template), "v"))
        assert templates.variables(rendered) == [], (
            f"{tpl.backend.url!r} keeps a placeholder under {tpl.uri_template!r}"
        )


@given(
    template=st.booleans(),
    address=FIELD_TEXT,
    url=FIELD_TEXT,
    name=PRINTABLE,
    description=PRINTABLE,
    optional=OPTIONAL_FIELDS,
    text=PRINTABLE,
    strategy=STRATEGIES,
    notification_filter=FILTERS,
)
def test_any_text_in_any_field_gets_a_verdict_and_what_is_accepted_can_be_served(
    template: bool,
    address: str,
    url: str,
    name: str,
    description: str,
    optional: dict[str, str],
    text: str,
    strategy: dict[str, str],
    notification_filter: dict[str, str],
) -> None:
    fields: dict[str, Any] = {
        "name": name,
        "description": description,
        "uri_template" if template else "uri": address,
        "backend": {"kind": "http", "url": url, "headers": {"X": text}, "body": text},
        "watch": {"strategy": strategy, "notification_filter": notification_filter},
        **optional,
    }
    raw = entry(fields, template=template)
    plugin_kinds = (strategy.get("kind", "none"),)
    found = check.problems(raw, environ={}, plugin_kinds=plugin_kinds)
    assert isinstance(found, list)
    assert all(isinstance(p, Problem) and p.path and p.message for p in found)
    event("accepted" if not found else "refused")  # `--hypothesis-show-statistics`: both branches are exercised
    if not found:
        servable(check.load(raw, environ={}, plugin_kinds=plugin_kinds))


@given(document=st.dictionaries(KEYS, DOCUMENT_VALUES, max_size=4))
def test_load_raises_only_config_error_whatever_the_document_holds(document: dict[str, Any]) -> None:
    # The same mapping as the whole document, as the capabilities and as an entry: every level's code sees it.
    for raw in (document, {"mcp": {"capabilities": document}}, entry(document, template=False)):
        with contextlib.suppress(ConfigError):  # anything else propagates and fails the test
            check.load(raw, environ={})


@given(uri_template=TEMPLATE_LIKE)
@example(uri_template="doc://{B}0{A}")  # found by a CI run: `v00v1` reads as B `v`, A `0v1`
def test_every_accepted_template_matches_the_uris_it_names(uri_template: str) -> None:
    raw = entry(
        {"name": "t", "uri_template": uri_template, "backend": {"kind": "http", "url": "http://u/"}}, template=True
    )
    found = check.problems(raw, environ={})
    event("accepted" if not found else "refused")
    if found:
        return
    names = templates.variables(uri_template)
    template = templates.parse(uri_template)
    # Any values: the URI is read as values that expand to it again. Those need not be the values it was made of:
    # `doc://{b}0{a}` with v0 and v1 is `doc://v00v1`, which reads the documented way, each value but a segment's
    # last ending at the first fit of the text after it (b `v`, a `0v1`).
    uri = template.expand({name: f"v{i}" for i, name in enumerate(names)})
    read = template.match(uri)
    assert read is not None, (uri_template, uri)
    assert template.expand(read) == uri, (uri_template, uri, read)
    # Values that share no character with the template's text: no literal can occur inside one, so the URI has one
    # reading, and it gives back the values themselves.
    free = [c for c in string.ascii_letters + string.digits if c not in uri_template]
    assume(free)
    values = {name: free[0] * (i + 1) for i, name in enumerate(names)}
    uri = template.expand(values)
    assert template.match(uri) == values, (uri_template, uri)
    caps = check.load(raw, environ={}).mcp.capabilities
    binding = catalog.Catalog(caps).resolve(uri)
    assert binding is not None, (uri_template, uri)
    assert (binding.uri, binding.variables) == (uri, values)


# --- YAML with aliases ------------------------------------------------------------------------------------------

BUDGET = 300
"""The document bound the property runs under (`documents.MAX_VALUES`, lowered so that examples pass it often)."""


@st.composite
def aliased_yaml(draw: st.DrawFn) -> str:
    """A configuration whose plugin fields (or tool) hold anchors `&a0..&aN`, each aliasing earlier ones or itself:
    a few hundred bytes that expand to anywhere from a handful of values to millions, or contain themselves."""
    nodes = []
    for i in range(draw(st.integers(1, 7))):
        # Mostly the previous anchor (so depth multiplies), sometimes any earlier one or itself, sometimes a scalar.
        alias = st.one_of(st.just(max(i - 1, 0)), st.integers(0, i)).map("*a{}".format)
        items = draw(st.lists(st.one_of(alias, alias, st.sampled_from(["x", "7", "'${env.UNSET}'"])), max_size=8))
        if draw(st.booleans()):
            nodes.append(f"&a{i} [{', '.join(items)}]")
        else:
            nodes.append(f"&a{i} {{{', '.join(f'k{k}: {item}' for k, item in enumerate(items))}}}")
    fields = f"defs: [{', '.join(nodes)}], use: *a{len(nodes) - 1}"
    if draw(st.booleans()):
        return f"mcp:\n  capabilities:\n    tools:\n      - {{name: t, {fields}}}\n"
    fields = f"type: plugin, kind: k, {fields}"
    entry = f"{{name: r, uri: 'x://r', backend: {{kind: http, url: 'http://u/'}}, watch: {{strategy: {{{fields}}}}}}}"
    return f"mcp:\n  capabilities:\n    resources:\n      - {entry}\n"


def expanded(value: Any, inside: frozenset[int], cap: int) -> int:
    """Values in `value` with every alias expanded (a container inside itself not again), counted past `cap` only
    as far as needed to know that it is past it."""
    if not isinstance(value, dict | list) or id(value) in inside:
        return 0
    children = list(value.values()) if isinstance(value, dict) else value
    total = len(children)
    for child in children:
        if total > cap:
            break
        total += expanded(child, inside | {id(value)}, cap - total)
    return total


@given(text=aliased_yaml())
def test_yaml_with_aliases_loads_or_is_refused_and_costs_no_more_than_the_bound(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.getbasetemp() / "aliases.yaml"  # session-scoped: Hypothesis runs many examples per test
    path.write_text(text)
    steps = {"walked": 0}

    def counted_len(value: Any) -> int:  # `documents` takes the `len` of each container of the document it walks
        steps["walked"] += isinstance(value, dict | list)
        return builtins.len(value)

    size = expanded(yaml.safe_load(text), frozenset(), BUDGET)
    with (
        mock.patch.object(documents, "MAX_VALUES", BUDGET),
        mock.patch.object(documents, "len", counted_len, create=True),
        mock.patch.object(loading, "_substitute", wraps=loading._substitute) as substituted,
    ):
        try:
            loading.parse(loading.read_file(path), environ={})  # what `check.load_file` does first
            refused = ""
        except ConfigError as e:
            refused = " ".join(map(str, e.problems))
    event("too large" if size > BUDGET else "refused" if refused else "loaded")
    assert ("holds more than" in refused) == (size > BUDGET)
    assert steps["walked"] <= 2 * (BUDGET + 1)  # the file's bound, then the mapping's: each stops past BUDGET
    assert substituted.call_count <= BUDGET + 8  # nothing expands past the bound once it holds
