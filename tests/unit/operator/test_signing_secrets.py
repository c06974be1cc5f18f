"""Signing secrets: a WebhookToken with `signatureScheme` holds one, a ResourceWatch's `signature.secretRef` names it.

Rendered into the gateway's `signature` block, generated in its scheme's format, checked with the contract's rule,
and rotated by the same state machine as a token, with the same guarantee: the previous secret stays in
`signature.secrets` until every counted pod serves an entry carrying the new one, plus the grace period. The two
roles never mix: a lost state is rebuilt only from its own role's values, and a signing secret never goes in a path.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from mcpg_gateway.contract import check, digests, signing
from mcpg_gateway.contract.acknowledgement import Acknowledgement, Serving
from mcpg_gateway.contract.config import WebhookStrategy
from mcpg_operator import actions as w
from mcpg_operator import models, objects, observed, render, rotation, statuses, tokens
from mcpg_operator.reconcile import acceptance
from mcpg_operator.reconcile import decide as decision
from mcpg_operator.rotation import Retiring, TokenState
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, ready, settle

NOW = 5_000.0
DEFAULTS = GatewayDefaults()
ROUTE, SIG = "route", "sig"
"""The two WebhookTokens of a signed watch: the routing token, and the signing secret."""


def never() -> str:
    raise AssertionError("no token should be generated")


def no_secret(scheme: signing.Scheme) -> str:
    raise AssertionError("no signing secret should be generated")


def secret_of(scheme: signing.Scheme, fill: int) -> str:
    """A valid signing secret of `scheme`, told apart by `fill`."""
    return tokens.signing_secret(scheme, bytes([fill]) * tokens.signing_key_bytes(scheme))


def signed_spec(
    name: str = "hook", token: str = ROUTE, secret: str = SIG, scheme: str = "github", **signature: Any
) -> dict[str, Any]:
    webhook = {"tokenRef": {"name": token}, "signature": {"scheme": scheme, "secretRef": {"name": secret}, **signature}}
    return {"uri": f"x://{name}", "backend": {"http": {"url": "http://u/"}}, "watch": {"webhook": webhook}}


def watch(name: str = "hook", created: str = "2026-01-01T00:00:00Z", **spec: Any) -> observed.Watch:
    identity = observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", name, f"uid-{name}", 1, created)
    return observed.Watch(identity, signed_spec(name, **spec), {})


def strategy(plan: render.Plan, index: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = plan.config["mcp"]["capabilities"]["resources"][index]["watch"]["strategy"]
    return found


# --- the CRD's model: hmac's fields with scheme hmac only -------------------------------------------------------


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        ({"scheme": "hmac"}, "hmac: scheme hmac needs hmac.header"),
        ({"scheme": "github", "hmac": {"header": "X-Sig"}}, "hmac: only for scheme hmac"),
        ({"scheme": "hmac", "hmac": {"header": "X Sig"}}, "hmac.header"),
    ],
)
def test_the_model_refuses_hmac_fields_off_their_scheme_naming_the_field(
    signature: dict[str, Any], message: str
) -> None:
    spec = signed_spec()
    spec["watch"]["webhook"]["signature"] |= signature
    with pytest.raises(ValidationError, match=message):
        models.ResourceWatchSpec.model_validate(spec)


def test_the_crds_header_pattern_takes_exactly_the_header_characters_the_contract_takes() -> None:
    taken = {chr(i) for i in range(32, 127) if re.fullmatch(models.HEADER_NAME_PATTERN, chr(i))}
    assert taken == set(signing.HEADER_NAME_CHARS)


def test_the_crd_says_the_same_rules_as_the_model() -> None:
    rules = [r.message for r in models.WebhookSignatureSpec.crd_rules]
    assert models.HMAC_NEEDED_MESSAGE in rules
    assert models.HMAC_ONLY_MESSAGE in rules


# --- rendering ----------------------------------------------------------------------------------------------------

HMAC = {"header": "X-Signature", "algorithm": "sha512", "encoding": "base64", "prefix": "sha512="}


@pytest.mark.parametrize("scheme", signing.SCHEMES)
def test_every_scheme_renders_its_signature_block_with_the_current_and_every_retiring_secret(
    scheme: signing.Scheme,
) -> None:
    current, old, retired = secret_of(scheme, 1), secret_of(scheme, 2), secret_of(scheme, 3)
    state = TokenState(current=current, retiring=(Retiring(old, 1.0), Retiring(retired, 1.0, 2.0, 3.0)))
    extra: dict[str, Any] = {"hmac": HMAC} if scheme == "hmac" else {}
    rw = watch(scheme=scheme, toleranceSeconds=60, maxBodyBytes=4096, **extra)
    plan = render.plan([rw], {ROUTE: TokenState(current="r"), SIG: state}, {}, DEFAULTS, schemes={SIG: scheme})
    assert plan.verdicts["hook"].served, plan.verdicts["hook"].message
    block = {"scheme": scheme, "secrets": [current, old], "tolerance_s": 60, "max_body_bytes": 4096}
    signature = block | (HMAC if scheme == "hmac" else {})
    assert strategy(plan) == {"type": "webhook", "token": "r", "previous_tokens": [], "signature": signature}
    check.load(plan.config, environ={})


def test_an_unset_body_limit_and_hmac_defaults_are_not_rendered_and_the_gateways_apply() -> None:
    rw = watch(scheme="hmac", hmac={"header": "X-Signature"})
    secret = secret_of("hmac", 1)
    plan = render.plan([rw], {ROUTE: TokenState("r"), SIG: TokenState(secret)}, {}, DEFAULTS, schemes={SIG: "hmac"})
    signature = strategy(plan)["signature"]
    assert signature == {"scheme": "hmac", "secrets": [secret], "tolerance_s": 300, "header": "X-Signature"}
    loaded = check.load(plan.config, environ={}).mcp.capabilities.resources[0].watch
    assert loaded is not None
    assert isinstance(loaded.strategy, WebhookStrategy)
    assert loaded.strategy.signature is not None
    assert loaded.strategy.signature.max_body_bytes == signing.DEFAULT_MAX_BODY_BYTES


def refused(states: dict[str, TokenState], schemes: dict[str, signing.Scheme], rw: observed.Watch) -> render.Verdict:
    plan = render.plan([rw], states, {}, DEFAULTS, schemes=schemes)
    assert plan.config["mcp"]["capabilities"]["resources"] == []
    return plan.verdicts[rw.name]


def test_a_missing_signing_webhook_token_is_waited_for() -> None:
    verdict = refused({ROUTE: TokenState("r")}, {}, watch())
    assert (verdict.reason, verdict.stalled) == ("WebhookTokenNotFound", False)
    assert verdict.message == "WebhookToken sig does not exist in this namespace"


def test_a_signing_webhook_token_without_a_secret_yet_is_pending() -> None:
    verdict = refused({ROUTE: TokenState("r"), SIG: TokenState()}, {SIG: "github"}, watch())
    assert (verdict.reason, verdict.stalled) == ("TokenPending", False)
    assert verdict.message == "WebhookToken sig has no signing secret yet (see its status)"


def test_a_signing_webhook_token_of_another_scheme_is_refused_naming_the_field_and_both_schemes() -> None:
    verdict = refused({ROUTE: TokenState("r"), SIG: TokenState("s")}, {SIG: "slack"}, watch(scheme="github"))
    assert (verdict.reason, verdict.stalled) == ("InvalidSpec", True)
    assert verdict.message == (
        "spec.watch.webhook.signature.secretRef: WebhookToken sig holds signatureScheme slack, not "
        "signatureScheme github"
    )


def test_a_routing_webhook_token_named_as_the_signing_secret_is_refused() -> None:
    verdict = refused({ROUTE: TokenState("r"), SIG: TokenState("s")}, {}, watch())
    assert (verdict.reason, verdict.stalled) == ("InvalidSpec", True)
    assert verdict.message == (
        "spec.watch.webhook.signature.secretRef: WebhookToken sig holds a routing token, not signatureScheme github"
    )


def test_a_signing_secret_never_goes_into_a_path_as_a_token() -> None:
    rw = watch(token=SIG, secret=SIG)
    verdict = refused({SIG: TokenState("the-signing-secret")}, {SIG: "github"}, rw)
    assert (verdict.reason, verdict.stalled) == ("InvalidSpec", True)
    assert verdict.message == (
        "spec.watch.webhook.tokenRef: WebhookToken sig holds a signing secret: name one without signatureScheme"
    )
    assert "the-signing-secret" not in verdict.message


def test_one_signing_webhook_token_signs_for_several_watches_each_with_its_own_routing_token() -> None:
    states = {"r1": TokenState("t1"), "r2": TokenState("t2"), SIG: TokenState("s")}
    watches = [watch("a", token="r1"), watch("b", "2026-01-02T00:00:00Z", token="r2")]
    plan = render.plan(watches, states, {}, DEFAULTS, schemes={SIG: "github"})
    assert [v.reason for v in plan.verdicts.values()] == ["Served", "Served"]
    assert render.values_by_entry(plan.config, "signature") == {"a": {"s"}, "b": {"s"}}
    assert render.rendered_values(plan.config, "token") == {"t1", "t2"}


# --- generation and the Secret's value --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "shape"),
    [
        ("standard-webhooks", "whsec"),
        ("slack", 32),
        *((s, 64) for s in signing.SCHEMES if s not in ("standard-webhooks", "slack")),
    ],
)
def test_a_generated_signing_secret_has_its_schemes_format_and_passes_its_check(
    scheme: signing.Scheme, shape: Any
) -> None:
    secret = tokens.new_signing_secret(scheme)
    assert signing.secret_problem(scheme, secret) is None
    if shape == "whsec":
        assert signing.whsec_key(secret) is not None
        assert len(signing.whsec_key(secret) or b"") == 32
    else:
        assert len(secret) == shape
        assert int(secret, 16) >= 0
    assert tokens.new_signing_secret(scheme) != secret


EMPTY = TokenState()
ROUTING = TokenState(current="route-token", current_accepted_at=1.0)
"""The routing token, accepted long ago: a signed watch's token need not rotate."""


def snapshot(
    sig_state: TokenState = EMPTY,
    sig_value: str | None = "s-new",
    route_state: TokenState = ROUTING,
    *,
    scheme: signing.Scheme = "github",
    generate: bool = False,
    grace: int = 0,
    config: dict[str, Any] | None = None,
    lost: tuple[str, ...] = (),
    pods: tuple[observed.Pod, ...] = (),
) -> observed.Snapshot:
    """A watch routed by WebhookToken `route` and signed with WebhookToken `sig`; `config`: the configuration Secret
    as read; `lost`: the WebhookTokens whose rotation-state Secret is gone."""
    rw = {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": "hook", "uid": "uid-hook"}}
    rw["spec"] = signed_spec(scheme=scheme)
    sig_spec = {"secretRef": {"name": "sig-secret", "key": "secret"}, "signatureScheme": scheme}
    specs: dict[str, dict[str, Any]] = {
        ROUTE: {"secretRef": {"name": "route-secret"}},
        SIG: sig_spec | {"generate": generate, "gracePeriodSeconds": grace},
    }
    secrets = [_secret("route-secret", {"token": "route-token"})]
    if sig_value is not None:
        secrets.append(_secret("sig-secret", {"secret": sig_value}))
    for name, state in ((ROUTE, route_state), (SIG, sig_state)):
        if name not in lost:
            secrets.append(
                _secret(tokens.state_secret_name(name), {tokens.STATE_KEY: json.dumps(rotation.to_json(state))})
            )
    if config is not None:
        secrets.append(objects.config_secret(NS, config, [], "1970-01-01T00:00:00Z"))
    webhook_tokens = [_token(name, spec) for name, spec in specs.items()]
    snap = observed.snapshot(NS, watches=[rw], webhook_tokens=webhook_tokens, secrets=secrets)
    return observed.Snapshot(snap.namespace, snap.watches, snap.tokens, snap.secrets, pods=pods)


def _token(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "uid": f"uid-{name}"}
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "WebhookToken", "metadata": meta, "spec": spec}


def _secret(name: str, values: dict[str, str]) -> dict[str, Any]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    return {"metadata": {"name": name}, "data": data}


def serving(config: dict[str, Any], name: str = "p") -> observed.Pod:
    """A Ready pod that acknowledges serving `config`."""
    served = Serving(
        digest=digests.document(config), entries=list(digests.entries(config).values()), since=1.0, source="secret"
    )
    return observed.Pod(name, True, False, "10.0.0.1", Acknowledgement(instance=name, serving=served))


def decide(snap: observed.Snapshot, now: float = NOW, new_secret: Any = no_secret) -> decision.Decision:
    return decision.decide(snap, DEFAULTS, now, never, new_secret=new_secret)


def by_plural(decided: decision.Decision) -> dict[str, dict[str, dict[str, Any]]]:
    return {
        plural: {r.name: s for r, s in decided.statuses.items() if r.plural == plural}
        for plural in ("resourcewatches", "webhooktokens")
    }


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    [found] = [x for x in status["conditions"] if x["type"] == type_]
    return dict(found)


def test_generate_creates_the_signing_secret_with_the_generator_for_its_scheme() -> None:
    asked: list[str] = []

    def new_secret(scheme: signing.Scheme) -> str:
        asked.append(scheme)
        return secret_of(scheme, 9)

    decided = decide(snapshot(sig_value=None, scheme="standard-webhooks", generate=True), new_secret=new_secret)
    [create] = decided.writes
    assert isinstance(create, w.CreateObject)
    assert create.ref.name == "sig-secret"
    assert base64.b64decode(create.body["data"]["secret"]).decode() == secret_of("standard-webhooks", 9)
    assert asked == ["standard-webhooks"]
    assert decided.plan.verdicts["hook"].reason == "TokenPending"


@pytest.mark.parametrize(
    ("scheme", "value"), [("standard-webhooks", "not-whsec-s3cr"), ("gitlab", " s3cr "), ("github", "s3cr\n")]
)
def test_a_value_its_scheme_refuses_is_reported_naming_the_key_never_the_value_and_changes_nothing(
    scheme: signing.Scheme, value: str
) -> None:
    in_use = TokenState(current=secret_of(scheme, 1), current_accepted_at=1.0)
    decided = decide(snapshot(in_use, value, scheme=scheme))
    status = by_plural(decided)["webhooktokens"][SIG]
    ready = condition(status, "Ready")
    assert (status["phase"], ready["reason"]) == ("Error", "InvalidSpec")
    assert ready["message"].startswith("Secret sig-secret key secret: ")
    assert decided.states[SIG] == in_use
    assert strategy(decided.plan)["signature"]["secrets"] == [secret_of(scheme, 1)]
    posted = [x.body for x in decided.writes if isinstance(x, w.PostEvent)]
    assert "s3cr" not in json.dumps([*decided.statuses.values(), *posted])


def test_two_webhook_tokens_holding_one_value_in_both_roles_are_both_refused() -> None:
    decided = decide(snapshot(TokenState(), "route-token", TokenState()))
    messages = [condition(s, "Ready")["message"] for s in by_plural(decided)["webhooktokens"].values()]
    assert len(messages) == 2
    assert all("another WebhookToken uses this value in the other role" in m for m in messages)
    assert all("route-token" not in m for m in messages)
    assert decided.states == {ROUTE: TokenState(), SIG: TokenState()}
    assert decided.plan.verdicts["hook"].reason == "TokenPending"


# --- rotation: the guarantee, for a signing secret --------------------------------------------------------------

MID_ROTATION = TokenState(current="s-new", retiring=(Retiring("s-old", 1.0),))


def test_a_replaced_signing_secret_verifies_on_every_pod_until_all_serve_the_new_one_plus_the_grace_period() -> None:
    # An edit of the Secret: s-new is promoted, s-old keeps verifying, and no pod serves s-new yet.
    edited = decide(snapshot(TokenState(current="s-old", current_accepted_at=1.0), grace=300))
    assert edited.states[SIG] == TokenState(current="s-new", retiring=(Retiring("s-old", NOW, was_accepted=True),))
    rendered = edited.plan.config
    assert strategy(edited.plan)["signature"]["secrets"] == ["s-new", "s-old"]
    # One pod still serves the configuration before: nothing is accepted, however long it takes.
    before = decide(snapshot(TokenState(current="s-old", current_accepted_at=1.0), "s-old")).plan.config
    state = edited.states[SIG]
    late = decide(
        snapshot(state, grace=300, config=rendered, pods=(serving(rendered), serving(before, "q"))), NOW + 3600
    )
    assert late.states[SIG] == state
    # Every counted pod serves the entry carrying s-new: accepted now, and s-old verifies for the grace period.
    acked = decide(snapshot(state, grace=300, config=rendered, pods=(serving(rendered),)), NOW + 10)
    assert acked.states[SIG].current_accepted_at == NOW + 10
    assert strategy(acked.plan)["signature"]["secrets"] == ["s-new", "s-old"]
    assert acked.next_check_s is not None
    assert acked.next_check_s <= 300
    state = acked.states[SIG]
    waiting = decide(snapshot(state, grace=300, config=rendered, pods=(serving(rendered),)), NOW + 309)
    assert strategy(waiting.plan)["signature"]["secrets"] == ["s-new", "s-old"]
    # The grace period has passed: left out of the configuration, kept until every pod serves one without it.
    due = decide(snapshot(state, grace=300, config=rendered, pods=(serving(rendered),)), NOW + 310)
    assert strategy(due.plan)["signature"]["secrets"] == ["s-new"]
    assert [r.retired_at for r in due.states[SIG].retiring] == [NOW + 310]
    state, rendered = due.states[SIG], due.plan.config
    dropped = decide(snapshot(state, grace=300, config=rendered, pods=(serving(rendered),)), NOW + 311)
    assert dropped.states[SIG] == TokenState(current="s-new", current_accepted_at=NOW + 10)
    assert [e.reason for e in dropped.events if e.reason == "TokenRetired"] == ["TokenRetired"]
    # The routing token went through none of it.
    assert {d.states[ROUTE] for d in (edited, late, acked, due, dropped)} == {ROUTING}


def test_acceptance_of_a_signing_secret_counts_only_entries_carrying_it_as_a_signing_secret() -> None:
    # An entry carries a value in one role: the routing token is not a signing secret there, nor the reverse.
    snap = snapshot(MID_ROTATION)
    plan = decide(snap).plan
    assert acceptance.entries_carrying(plan, "s-new", "signature") == list(render.entry_digests(plan.config).values())
    assert acceptance.entries_carrying(plan, "s-new", "token") == []
    assert acceptance.entries_carrying(plan, "route-token", "signature") == []


# --- role separation: a lost state is rebuilt from its own role's values ----------------------------------------

CARRIED = TokenState(current="route-token", retiring=(Retiring("route-old", 1.0),))
"""The routing token mid-rotation too, so the configuration carries two values of each role."""


def carried() -> dict[str, Any]:
    return decide(snapshot(MID_ROTATION, route_state=CARRIED)).plan.config


def test_a_lost_signing_state_is_rebuilt_from_the_signing_secrets_only() -> None:
    config = carried()
    assert render.rendered_values(config, "token") == {"route-token", "route-old"}
    assert render.rendered_values(config, "signature") == {"s-new", "s-old"}
    decided = decide(snapshot(MID_ROTATION, route_state=CARRIED, config=config, lost=(SIG,)))
    assert decided.states[SIG] == TokenState(current="s-new", retiring=(Retiring("s-old", NOW),))
    assert decided.states[ROUTE] == CARRIED
    assert [e.reason for e in decided.events if e.about.name == SIG and e.reason == "RotationStateLost"]


def test_a_lost_routing_state_is_rebuilt_from_the_routing_tokens_only() -> None:
    config = carried()
    decided = decide(snapshot(MID_ROTATION, route_state=CARRIED, config=config, lost=(ROUTE,)))
    assert decided.states[ROUTE] == TokenState(current="route-token", retiring=(Retiring("route-old", NOW),))
    assert decided.states[SIG] == MID_ROTATION


def test_what_a_webhook_token_may_accept_is_of_the_role_a_watch_refers_to_it_by() -> None:
    config = carried()
    snap = snapshot(MID_ROTATION, route_state=CARRIED, config=config)
    by_role = acceptance.pods_may_accept(snap, config)
    assert acceptance.may_accept(snap, SIG, "signature", by_role) == {"s-new", "s-old"}
    assert acceptance.may_accept(snap, ROUTE, "token", by_role) == {"route-token", "route-old"}
    assert acceptance.may_accept(snap, SIG, "token", by_role) == frozenset()  # no watch routes with it
    assert [rw.name for rw in acceptance.users(snap, SIG, "signature")] == ["hook"]


# --- what users see: which secrets, by digest, and never a value ------------------------------------------------


def test_statuses_name_the_secret_of_each_role_and_show_signing_secrets_by_digest_only() -> None:
    config = carried()
    decided = decide(snapshot(MID_ROTATION, route_state=CARRIED, config=config, pods=(serving(config),)))
    found = by_plural(decided)
    hook = found["resourcewatches"]["hook"]
    assert (hook["webhookTokenSecret"], hook["signatureSecret"]) == ("route-secret/token", "sig-secret/secret")
    sig, route = found["webhooktokens"][SIG], found["webhooktokens"][ROUTE]
    assert sig["currentDigest"] == render.token_digest("s-new")
    assert [r["digest"] for r in sig["retiring"]] == [render.token_digest("s-old")]
    assert (sig["webhookPath"], route["webhookPath"]) == (None, statuses.WEBHOOK_PATH)
    assert "signing secret" in condition(sig, "TokenAccepted")["message"]
    models.ResourceWatchStatus.model_validate(hook)
    models.WebhookTokenStatus.model_validate(sig)


def test_no_signing_secret_reaches_a_status_condition_or_event_through_a_rotation() -> None:
    values = ["s-new", "s-old", "route-token", "route-old"]
    config = carried()
    passes = [
        decide(snapshot(TokenState(current="s-old", current_accepted_at=1.0), route_state=CARRIED)),
        decide(snapshot(MID_ROTATION, route_state=CARRIED, config=config, pods=(serving(config),))),
        decide(snapshot(MID_ROTATION, route_state=CARRIED, config=config, lost=(SIG, ROUTE))),
        decide(snapshot(MID_ROTATION, None, CARRIED)),  # the Secret deleted: revoked
    ]
    for decided in passes:
        said = json.dumps([*decided.statuses.values(), *(x.body for x in decided.writes if isinstance(x, w.PostEvent))])
        assert not [v for v in values if v in said]


# --- the example, through the reconcile against the in-memory API -----------------------------------------------

EXAMPLE = Path(__file__).parents[3] / "examples" / "manifests" / "signed-webhook.yaml"


def written(kube: FakeKube) -> str:
    """Every status and Event the operator wrote, and every status on the objects now, as one text."""
    bodies = [c.body for c in kube.writes if c.body and (c.path.endswith("/status") or "/events/" in c.path)]
    live = [o.get("status") for p, o in kube.objects.items() if p.startswith("/apis/mcpg.dev/")]
    return json.dumps([*bodies, *live])


async def test_the_signed_webhook_example_is_served_and_rotates_its_secret_without_showing_it(
    kube: FakeKube, clock: Clock
) -> None:
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        kube.put({**doc, "metadata": {**doc["metadata"], "namespace": NS}})
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "reports-signed") == ("True", "Served")
    old = kube.secret_value(NS, "reports-signing", "secret")
    assert old is not None
    assert signing.whsec_key(old) is not None  # generated in the scheme's format
    assert config_signature(kube)["secrets"] == [old]
    new = secret_of("standard-webhooks", 5)
    kube.edit_secret(NS, "reports-signing", secret=new)
    await settle(kube, clock)  # every pod applies each configuration: accepted, and within the grace period
    assert config_signature(kube)["secrets"] == [new, old]
    assert ready(kube, "webhooktokens", "reports-signing") == ("True", "RetiringOldTokens")
    clock.now += 300
    await settle(kube, clock)
    assert config_signature(kube)["secrets"] == [new]
    route = kube.secret_value(NS, "reports-route", "token")
    said = written(kube)
    assert [
        v for v in (old, new, route) if v is None or v in said or base64.b64encode(v.encode()).decode() in said
    ] == []


def config_signature(kube: FakeKube) -> dict[str, Any]:
    [entry] = kube.template_config(NS)["mcp"]["capabilities"]["resources"]
    found: dict[str, Any] = entry["watch"]["strategy"]["signature"]
    return found
