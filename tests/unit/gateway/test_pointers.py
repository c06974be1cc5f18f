"""JSON Pointers for `watch.strategy.ignore`: RFC 6901 parsing, the `*` wildcard, and removal from a document.

The poll strategy hashes a body without its ignored fields, so two promises matter most and are checked on
arbitrary input: removal never raises on any JSON value and never touches its input, and the digest moves with
every field that is not ignored and with none that is.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mcpg_gateway.contract import pointers
from mcpg_gateway.strategies import poll

# Small runs keep the unit tier fast, as in test_config_properties.py.
SMALL = settings(max_examples=200, deadline=None)

# Keys from a small alphabet (and pointer tokens from the same one), so that pointers often hit something.
KEYS = st.sampled_from(["a", "b", "0", "1", "", "~", "a/b", "*"]) | st.text(max_size=4)
TOKENS = st.sampled_from(["*", "a", "b", "0", "1", "01", "-", "", "~", "a/b"]) | st.text(max_size=4)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=20
)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def body(value: Any) -> bytes:
    return json.dumps(value).encode()


# --- parsing -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", ()),  # the whole document
        ("/", ("",)),  # the member named ""
        ("/foo/0", ("foo", "0")),
        ("/a~1b", ("a/b",)),
        ("/m~0n", ("m~n",)),
        ("/~01", ("~1",)),  # ~1 is unescaped first, so this is "~" then "1", never "/"
        ("/c%d/e^f/ ", ("c%d", "e^f", " ")),
        ("/jobs/*/duration", ("jobs", "*", "duration")),
    ],
)
def test_a_pointer_parses_into_its_unescaped_reference_tokens(text: str, tokens: tuple[str, ...]) -> None:
    assert pointers.parse(text) == tokens


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("jobs/0", "'jobs/0' is not a JSON Pointer: it must be empty or start with '/'"),
        ("/a~2", "'~2' is not an escape"),
        ("/a~", "'~' is not an escape"),
        ("/~x/b", "'~x' is not an escape"),
    ],
)
def test_a_malformed_pointer_is_refused_saying_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as e:
        pointers.parse(text)
    assert repr(text) in str(e.value)  # the message names the pointer it refuses


def test_the_whole_document_cannot_be_ignored_but_the_member_named_empty_can() -> None:
    with pytest.raises(ValueError, match="whole document: ignoring it would leave nothing to compare"):
        pointers.parse_ignored("")
    assert pointers.parse_ignored("/") == ("",)


def test_escaping_a_key_makes_it_one_token() -> None:
    assert pointers.escape("a/b~c") == "a~1b~0c"
    assert pointers.format_pointer(("a/b", "~", "*")) == "/a~1b/~0/*"


# --- removal -------------------------------------------------------------------------------------------------


def without(document: Any, *texts: str) -> Any:
    return pointers.without(document, [pointers.parse(t) for t in texts])


def test_an_object_member_pointed_at_is_deleted() -> None:
    assert without({"a": 1, "b": {"c": 2, "d": 3}}, "/b/c") == {"a": 1, "b": {"d": 3}}


def test_an_array_element_pointed_at_becomes_null_so_the_others_keep_their_indices() -> None:
    assert without({"xs": [1, 2, 3]}, "/xs/1") == {"xs": [1, None, 3]}


def test_the_wildcard_matches_every_array_element_and_every_object_member() -> None:
    jobs = {"jobs": [{"status": "ok", "duration": 1.5}, {"status": "run", "duration": 9}, "not-an-object"]}
    assert without(jobs, "/jobs/*/duration") == {"jobs": [{"status": "ok"}, {"status": "run"}, "not-an-object"]}
    assert without({"x": {"a": 1, "b": 2}, "y": 3}, "/x/*") == {"x": {}, "y": 3}
    assert without({"xs": [1, 2]}, "/xs/*") == {"xs": [None, None]}


def test_an_escaped_key_is_removed_by_its_unescaped_name() -> None:
    assert without({"a/b": 1, "a": {"b": 2}, "m~n": 3}, "/a~1b", "/m~0n") == {"a": {"b": 2}}


@pytest.mark.parametrize(
    "text", ["/missing", "/xs/3", "/xs/-", "/xs/01", "/xs/+1", "/xs/" + "9" * 5000, "/n/0", "/n/*", "/o/0"]
)
def test_a_pointer_that_matches_nothing_changes_nothing(text: str) -> None:
    document = {"xs": [1, 2, 3], "n": 7, "o": {"1": True}}
    assert without(document, text) == {"xs": [1, 2, 3], "n": 7, "o": {"1": True}}


def test_the_empty_pointer_removes_the_whole_document() -> None:
    assert without({"a": 1}, "") is None


def test_the_input_is_never_changed() -> None:
    document = {"jobs": [{"duration": 1}, {"duration": 2}], "xs": [1, 2]}
    before = copy.deepcopy(document)
    without(document, "/jobs/*/duration", "/xs/0")
    assert document == before


def test_a_document_nested_far_deeper_than_the_recursion_limit_is_handled() -> None:
    deep: Any = {"leaf": 1, "keep": 2}
    for _ in range(5_000):
        deep = [deep]
    result = pointers.without(deep, [("0",) * 5_000 + ("leaf",)])
    for _ in range(5_000):
        result = result[0]
    assert result == {"keep": 2}


# --- properties ----------------------------------------------------------------------------------------------


@SMALL
@given(document=JSON, found=st.lists(st.lists(TOKENS, max_size=4).map(tuple), max_size=4))
def test_removal_never_raises_never_mutates_and_removes_once_for_all(
    document: Any, found: list[tuple[str, ...]]
) -> None:
    before = canonical(document)
    once = pointers.without(document, found)
    assert canonical(document) == before
    assert canonical(pointers.without(once, found)) == canonical(once)


@SMALL
@given(base=st.dictionaries(KEYS, JSON, max_size=4), key=KEYS.filter(lambda k: k != "*"), a=JSON, b=JSON)
def test_changing_an_ignored_field_never_changes_the_digest(base: dict[str, Any], key: str, a: Any, b: Any) -> None:
    ignored = [(key,)]
    assert poll.digest(body({**base, key: a}), ignored) == poll.digest(body({**base, key: b}), ignored)


@SMALL
@given(
    base=st.dictionaries(KEYS, JSON, max_size=4),
    ignored_key=KEYS.filter(lambda k: k != "*"),
    other=KEYS,
    a=JSON,
    b=JSON,
)
def test_changing_a_field_that_is_not_ignored_always_changes_the_digest(
    base: dict[str, Any], ignored_key: str, other: str, a: Any, b: Any
) -> None:
    assume(other != ignored_key and canonical(a) != canonical(b))  # a change, of a field that is not ignored
    ignored = [(ignored_key,)]
    assert poll.digest(body({**base, other: a}), ignored) != poll.digest(body({**base, other: b}), ignored)


@SMALL
@given(
    jobs=st.lists(st.tuples(st.sampled_from(["running", "success", "failed"]), st.floats(0, 1e6)), max_size=4),
    durations=st.lists(st.floats(0, 1e6) | st.none(), min_size=8, max_size=8),
)
def test_a_ci_jobs_durations_are_ignored_and_its_statuses_are_not(
    jobs: list[tuple[str, float]], durations: list[float | None]
) -> None:
    ignored = [pointers.parse("/jobs/*/duration"), pointers.parse("/jobs/*/queued_duration")]

    def pipeline(statuses: list[str], seconds: list[float | None]) -> bytes:
        return body(
            {
                "jobs": [
                    {"status": s, "duration": d, "queued_duration": d} for s, d in zip(statuses, seconds, strict=True)
                ]
            }
        )

    statuses = [status for status, _ in jobs]
    first = poll.digest(pipeline(statuses, [d for _, d in jobs]), ignored)
    assert poll.digest(pipeline(statuses, durations[: len(jobs)]), ignored) == first
    if jobs:
        moved = ["cancelled", *statuses[1:]]
        assert poll.digest(pipeline(moved, durations[: len(jobs)]), ignored) != first


@SMALL
@given(raw=st.binary())
def test_without_ignore_the_digest_is_of_the_bytes_exactly_as_before(raw: bytes) -> None:
    assert poll.digest(raw, []) == hashlib.sha256(raw).digest()


def test_with_ignore_a_body_that_is_not_json_cannot_be_digested_and_says_why() -> None:
    with pytest.raises(ValueError, match=r"not JSON: watch\.strategy\.ignore needs a JSON body"):
        poll.digest(b"<html>busy</html>", [("a",)])
    with pytest.raises(ValueError, match="not JSON"):
        poll.digest(b"[" * 100_000, [("a",)])  # deeper than the parser goes


def test_with_ignore_the_layout_of_the_json_does_not_matter() -> None:
    ignored = [("t",)]
    assert poll.digest(b'{"a": 1, "b": [1, 2], "t": 1}', ignored) == poll.digest(b'{"b":[1,2],"a":1}', ignored)
