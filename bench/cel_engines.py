"""Compare the CEL engines on PyPI for the gateway's expressions: same answers first, then µs per evaluation.

Why this exists: the gateway evaluates a notification filter once per subscriber per fire, and a read policy
once per read, subscribe and listened URI, so the engine's per-evaluation cost multiplies by fan-out.

    .venv/bin/pip install cel-expr-python common-expression-language cel-python
    .venv/bin/python bench/cel_engines.py

Engines: `cel-expr-python` (Google's cel-cpp wrapper, github.com/cel-expr/cel-python; the one the gateway uses),
`common-expression-language` (the Rust `cel-interpreter` crate via PyO3) and `cel-python` (pure Python, lark).
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

# The two other engines are installed by hand, only to run this comparison; cel-expr-python ships no types.
import cel as rust_cel  # type: ignore[import-not-found]
import celpy  # type: ignore[import-not-found]
from cel_expr_python import cel as google_cel  # type: ignore[import-untyped]

from mcpg_gateway import policy
from mcpg_gateway.contract import cel
from mcpg_gateway.contract.errors import Problem
from mcpg_gateway.identity import Principal
from mcpg_gateway.metrics import Metrics

EXPRESSIONS = {
    "seed filter": 'subscriber.trust_level == "verified" && "finance" in subscriber.groups',
    "per-person policy": 'resource.subject_id == subscriber.principal_id || "admin" in subscriber.roles',
}

PEOPLE: list[dict[str, Any]] = [
    {"principal_id": "alice", "trust_level": "verified", "groups": ["finance", "staff"], "roles": []},
    {"principal_id": "bob", "trust_level": "verified", "groups": ["staff"], "roles": ["admin"]},
    {"principal_id": "carol", "trust_level": "unverified", "groups": ["finance"], "roles": []},
    {"principal_id": "dave", "trust_level": "", "groups": [], "roles": []},
]
RESOURCE = {"uri": "mail://inbox/alice", "subject_id": "alice"}


def expected(name: str, person: dict[str, Any]) -> bool:
    if name == "seed filter":
        return bool(person["trust_level"] == "verified" and "finance" in person["groups"])
    return bool(RESOURCE["subject_id"] == person["principal_id"] or "admin" in person["roles"])


def nested(person: dict[str, Any]) -> dict[str, Any]:
    subscriber = {"scopes": [], "attributes": {}, **person}
    return {"subscriber": subscriber, "resource": RESOURCE, "event": {"uri": RESOURCE["uri"]}}


def flat(person: dict[str, Any]) -> dict[str, Any]:
    return {f"{top}.{k}": v for top, fields in nested(person).items() for k, v in fields.items()}


Engine = tuple[Callable[[Any], bool], Callable[[Any], bool], Callable[[dict[str, Any]], Any]]
"""(evaluate a prebuilt activation, evaluate from plain Python inputs, build the activation from a person)."""


def google_engine(src: str) -> Engine:
    t = google_cel.Type
    strings = t.List(t.STRING)
    env = google_cel.NewEnv(
        variables={
            "subscriber.principal_id": t.STRING,
            "subscriber.trust_level": t.STRING,
            "subscriber.groups": strings,
            "subscriber.roles": strings,
            "subscriber.scopes": strings,
            "subscriber.attributes": t.Map(t.STRING, t.STRING),
            "resource.uri": t.STRING,
            "resource.subject_id": t.STRING,
            "event.uri": t.STRING,
        }
    )
    expr = env.compile(src)
    return (
        lambda act: bool(expr.eval(act).value()),
        lambda person: bool(expr.eval(data=flat(person)).value()),
        lambda person: env.Activation(flat(person)),
    )


def rust_engine(src: str) -> Engine:
    program = rust_cel.compile(src)
    return (
        lambda ctx: bool(program.execute(ctx)),
        lambda person: bool(program.execute(nested(person))),
        lambda person: rust_cel.Context(nested(person)),
    )


def python_engine(src: str) -> Engine:
    env = celpy.Environment()
    program = env.program(env.compile(src))

    def prepare(person: dict[str, Any]) -> Any:
        return {k: celpy.json_to_cel(v) for k, v in nested(person).items()}

    return (
        lambda act: bool(program.evaluate(act)),
        lambda person: bool(program.evaluate(prepare(person))),
        prepare,
    )


ENGINES = {
    "cel-expr-python 0.1.3 (Google)": google_engine,
    "common-expression-language 0.10 (Rust)": rust_engine,
    "cel-python 0.5 (pure Python)": python_engine,
}


def per_call_us(fn: Callable[[], object], n: int = 20_000) -> float:
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def measure(build: Callable[[str], Engine], name: str, src: str) -> tuple[bool, float, float]:
    with_activation, from_inputs, prepare = build(src)
    correct = all(with_activation(prepare(p)) == from_inputs(p) == expected(name, p) for p in PEOPLE)
    act, person = prepare(PEOPLE[0]), PEOPLE[0]
    return correct, per_call_us(lambda: with_activation(act)), per_call_us(lambda: from_inputs(person))


def gateway_us() -> float:
    """What one subscriber costs a fire: `policy.allows` with inputs built from the principal."""
    site = cel.Site("notification_filter", "bench", "bench")
    problems: list[Problem] = []
    failures = policy.Failures(Metrics().policy_errors)
    expr = cel.compile_expression(cel.FILTER_VARIABLES, EXPRESSIONS["seed filter"], site, problems)
    assert expr is not None, problems
    alice = Principal("alice", "verified", groups=("finance", "staff"))
    assert policy.allows(expr, {**policy.subscriber_inputs(alice), "event.uri": "u://x"}, failures)
    return per_call_us(lambda: policy.allows(expr, {**policy.subscriber_inputs(alice), "event.uri": "u://x"}, failures))


def main() -> None:
    print(f"{'engine':40} {'expression':18} {'correct':8} {'µs/eval, prebuilt':>18} {'µs/eval, from dict':>19}")
    for engine_name, build in ENGINES.items():
        for expr_name, src in EXPRESSIONS.items():
            correct, prebuilt, from_dict = measure(build, expr_name, src)
            print(f"{engine_name:40} {expr_name:18} {correct!s:8} {prebuilt:18.2f} {from_dict:19.2f}")
    print(f"gateway filter path (policy.allows, inputs from a Principal): {gateway_us():.2f} µs/eval")


if __name__ == "__main__":
    main()
