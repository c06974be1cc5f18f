"""URIs and templates on hostile text: canonical spelling is a fixed point that keeps meaning, expansion never
leaves its segment, matching gives back what expansion made, and nothing a caller sends makes either raise."""

from __future__ import annotations

import string
from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from mcpg_gateway import catalog
from mcpg_gateway.contract import config, templates, uris

# What callers send: mostly URI-ish characters and percent-encodings (valid, lower-case, truncated), some
# anything-at-all, so both the refusals and the accepted paths are exercised.
URI_PIECES = st.one_of(
    st.sampled_from(["/", "?", "#", ":", ".", "..", "%", "%2", "%2e", "%2E", "%2f", "%2F", "%61", "%zz", "%C3%A9"]),
    st.text(string.ascii_letters + string.digits + "-._~!$&'()*+,;=@[]", min_size=1, max_size=6),
    st.text(min_size=1, max_size=3),  # control characters, non-ASCII, surrogates
)
SCHEMES = st.sampled_from(["doc:", "DOC:", "x-y.z:", "doc://", "1doc:", ""])
URIS = st.builds(lambda scheme, pieces: scheme + "".join(pieces), SCHEMES, st.lists(URI_PIECES, max_size=12))

NAMES = st.sampled_from(["a", "b", "c", "subject_id"])
LITERALS = st.text(string.ascii_lowercase + string.digits + "-._~:@!", min_size=1, max_size=4)
SEPARATED = st.one_of(LITERALS, st.sampled_from(["/", "-", ".", "/x/", "?q=", "#"]))


@st.composite
def template_texts(draw: st.DrawFn) -> str:
    """Templates the configuration accepts: a scheme, then variables with literal text between them."""
    names = draw(st.lists(NAMES, unique=True, min_size=1, max_size=4))
    out = [draw(st.sampled_from(["doc://", "doc:", "x-y://h/"]))]
    for i, name in enumerate(names):
        if i:
            out.append(draw(SEPARATED))
        out.append("{" + name + "}")
    out.append(draw(st.one_of(st.just(""), SEPARATED)))
    return "".join(out)


def values_for(names: list[str]) -> st.SearchStrategy[dict[str, str]]:
    text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
    return st.fixed_dictionaries(dict.fromkeys(names, text))


# --- canonical spelling -------------------------------------------------------------------------------------------


@given(uri=URIS)
def test_canonical_spelling_is_idempotent_and_keeps_what_the_uri_means(uri: str) -> None:
    try:
        spelled = uris.canonical(uri)
    except uris.UriError as e:
        event("refused")
        refusal = str(e)
        assert refusal
        return
    event("spelled")
    assert uris.canonical(spelled) == spelled
    scheme, rest = uri.split(":", 1)
    assert spelled == scheme.lower() + ":" + spelled.split(":", 1)[1]
    assert unquote_to_bytes(spelled.split(":", 1)[1]) == unquote_to_bytes(rest)  # the same octets, decoded
    assert set(spelled) <= set(string.ascii_letters + string.digits + "-._~:/?#[]@!$&'()*+,;=%")


@given(uri=URIS)
def test_a_uri_is_served_as_written_exactly_when_it_is_canonical_and_has_no_dot_segment(uri: str) -> None:
    spelled: str | None = None
    try:
        uris.check(uri)
    except uris.NotCanonical as e:
        spelled = e.spelled
    except uris.UriError:
        return
    if spelled is not None:
        assert spelled != uri
        assert uris.canonical(uri) == spelled
        return
    assert uris.canonical(uri) == uri
    assert not uris.has_dot_segment(uri)


@given(uri=st.text(max_size=300), extra=st.integers(min_value=0, max_value=5000))
def test_length_is_checked_whatever_the_text(uri: str, extra: int) -> None:
    text = "doc://" + "a" * extra + uri
    try:
        uris.check(text)
    except uris.UriError:
        return
    assert len(text) <= uris.MAX_URI_CHARS


# --- templates --------------------------------------------------------------------------------------------------


@given(data=st.data(), text=template_texts())
def test_expansion_never_leaves_its_segment_and_matching_gives_it_back(data: st.DataObject, text: str) -> None:
    template = templates.parse(text)
    names = templates.variables(text)
    values = data.draw(values_for(names))
    uri = template.expand(values)
    # Each value is percent-encoded but its unreserved characters: no `/`, `?` or `#` of its own.
    literal = "".join(templates.literals(text))
    for delimiter in "/?#":
        assert uri.count(delimiter) == literal.count(delimiter)
    raw = template.match(uri)
    assert raw is not None, (text, values, uri)
    assert set(raw) == set(names)
    assert all(not set(v) & set("/?#") for v in raw.values())
    decoded = {name: unquote_to_bytes(v).decode("utf-8") for name, v in raw.items()}
    assert template.expand(decoded) == uri  # the same URI, even where a value could split more than one way


@given(text=template_texts(), uri=URIS)
def test_matching_any_text_never_raises_and_values_stay_in_their_segment(text: str, uri: str) -> None:
    raw = templates.parse(text).match(uri)
    event("matched" if raw is not None else "no match")
    if raw is not None:
        assert all(v and not set(v) & set("/?#") for v in raw.values())


@given(text=template_texts(), uri=URIS)
def test_the_catalog_binds_only_canonical_uris_whose_values_stay_below_their_folder(text: str, uri: str) -> None:
    entry = config.ResourceTemplateConfig(
        name="t", uri_template=text, backend=config.HttpBackend(kind="http", url="http://u/")
    )
    binding = catalog.Catalog(config.Capabilities(resource_templates=[entry])).resolve(uri)
    event("bound" if binding is not None else "unbound")
    if binding is None:
        return
    uris.check(uri)  # it would have raised
    for value in binding.variables.values():
        steps = value.replace("\\", "/").split("/")
        assert "." not in steps
        assert ".." not in steps


@pytest.mark.parametrize("text", ["doc://{a}{b}", "DOC://{a}", "doc://x/../{a}", "doc://%7e{a}", "{a}://x"])
def test_a_template_no_canonical_uri_could_match_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="uri_template"):
        config.ResourceTemplateConfig(
            name="t", uri_template=text, backend=config.HttpBackend(kind="http", url="http://u/")
        )


@given(text=template_texts())
def test_every_template_the_strategy_builds_is_accepted(text: str) -> None:
    assume(not templates.repeated(text))
    config.ResourceTemplateConfig(name="t", uri_template=text, backend=config.HttpBackend(kind="http", url="http://u/"))
