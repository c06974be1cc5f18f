"""Rendering a namespace's gateway configuration from ResourceWatches, WebhookTokens and Secrets."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_gateway.contract import check, config, digests, signing
from mcpg_operator import conditions as c
from mcpg_operator import observed, render, settings
from mcpg_operator import tokens as operator_tokens
from mcpg_operator.rotation import Retiring, TokenState
from mcpg_operator.settings import GatewayDefaults

MANIFESTS = Path(__file__).parents[3] / "examples" / "manifests"
DEFAULTS = GatewayDefaults(
    allowed_origins=["https://app.example"], nats_url="nats://nats:4222", plugin_kinds=["twilio_inbound"]
)
SECRETS = {"google-api": {"token": "Bearer g"}, "inventory-db": {"url": "postgres://u:p@db/app"}}


def watch(name: str, spec: dict[str, Any], created: str = "2026-01-01T00:00:00Z") -> observed.Watch:
    identity = observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", name, f"uid-{name}", 1, created)
    return observed.Watch(identity, spec, {})


def documents(kind: str, paths: list[Path] | None = None) -> list[dict[str, Any]]:
    """The objects of `kind` in the example manifests (a file may hold several objects)."""
    paths = paths if paths is not None else sorted(MANIFESTS.glob("*.yaml"))
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc["kind"] == kind]


def example(name: str) -> observed.Watch:
    [doc] = documents("ResourceWatch", [MANIFESTS / f"{name}.yaml"])
    return watch(doc["metadata"]["name"], doc["spec"])


def hook(name: str, token: str, created: str = "2026-01-01T00:00:00Z", uri: str | None = None) -> observed.Watch:
    spec = {
        "uri": uri or f"x://{name}",
        "backend": {"http": {"url": "http://u/"}},
        "watch": {"webhook": {"tokenRef": {"name": token}}},
    }
    return watch(name, spec, created)


def tokens(**states: TokenState) -> dict[str, TokenState]:
    return states


def signing_secret(scheme: signing.Scheme, fill: int = 7) -> str:
    return operator_tokens.signing_secret(scheme, bytes([fill]) * operator_tokens.signing_key_bytes(scheme))


def test_every_example_manifest_renders_into_a_configuration_the_gateway_accepts() -> None:
    examples = [watch(doc["metadata"]["name"], doc["spec"]) for doc in documents("ResourceWatch")]
    held = {doc["metadata"]["name"]: doc["spec"].get("signatureScheme") for doc in documents("WebhookToken")}
    # Each WebhookToken holds a value of its kind: a token of its own, or a signing secret in its scheme's format.
    states = {name: TokenState(current=f"tok-{name}" if s is None else signing_secret(s)) for name, s in held.items()}
    schemes = {name: scheme for name, scheme in held.items() if scheme is not None}
    plan = render.plan(examples, states, SECRETS, DEFAULTS, schemes=schemes)
    assert {name: v.reason for name, v in plan.verdicts.items() if not v.served} == {}
    cfg = check.load(plan.config, environ={})
    assert len(cfg.mcp.capabilities.resources) + len(cfg.mcp.capabilities.resource_templates) == len(examples)
    assert cfg.gateway.server.allowed_origins == ["https://app.example"]


def test_secret_references_are_resolved_into_the_rendered_configuration() -> None:
    plan = render.plan([example("poll"), example("postgres-listen-notify")], {}, SECRETS, DEFAULTS)
    by_name = {r["name"]: r for r in plan.config["mcp"]["capabilities"]["resources"]}
    poll, pg = by_name["reports.folder.poll"], by_name["inventory-pg"]
    assert poll["backend"]["headers"] == {"Authorization": "Bearer g"}
    assert pg["watch"]["strategy"] == {
        "type": "postgres_listen_notify",
        "url": "postgres://u:p@db/app",
        "channel": "inventory_changed",
    }


def test_a_tracking_query_renders_with_its_cadence_and_timeout() -> None:
    sql = example("sql-polling")
    sql.spec["watch"]["sqlPolling"]["timeoutMs"] = 5000
    plan = render.plan([sql], {}, SECRETS, DEFAULTS)
    strategy = plan.config["mcp"]["capabilities"]["resources"][0]["watch"]["strategy"]
    assert strategy == {
        "type": "sql_polling",
        "url": "postgres://u:p@db/app",
        "query": "SELECT max(updated_at) FROM orders",
        "interval_ms": 60000,
        "timeout_ms": 5000,
    }


def test_a_webhook_renders_the_current_token_and_every_retiring_one() -> None:
    state = TokenState(current="new", retiring=(Retiring("old", 1.0),))
    plan = render.plan([hook("a", "t")], tokens(t=state), {}, DEFAULTS)
    strategy = plan.config["mcp"]["capabilities"]["resources"][0]["watch"]["strategy"]
    assert strategy == {"type": "webhook", "token": "new", "previous_tokens": ["old"]}


def test_a_plugin_receives_its_config_as_the_rest_of_its_spec() -> None:
    plan = render.plan([example("plugin")], {}, {}, DEFAULTS)
    strategy = plan.config["mcp"]["capabilities"]["resources"][0]["watch"]["strategy"]
    assert strategy == {"type": "plugin", "kind": "twilio_inbound", "kinds": ["sms", "voice"]}


def test_no_strategy_means_poll_every_60_seconds() -> None:
    plan = render.plan([watch("w", {"uri": "x://w", "backend": {"http": {"url": "http://u/"}}})], {}, {}, DEFAULTS)
    assert plan.config["mcp"]["capabilities"]["resources"][0]["watch"]["strategy"] == {
        "type": "poll",
        "interval_ms": 60000,
    }
    assert plan.verdicts["w"].strategy == "poll"


def test_a_missing_secret_leaves_the_watch_out_and_says_which() -> None:
    plan = render.plan([example("poll")], {}, {}, DEFAULTS)
    verdict = plan.verdicts["reports-folder-poll"]
    assert (verdict.served, verdict.reason, verdict.stalled) == (False, c.SECRET_NOT_FOUND, False)
    assert verdict.message == "Secret google-api does not exist in this namespace"
    assert plan.config["mcp"]["capabilities"]["resources"] == []


def test_a_missing_or_empty_webhook_token_waits_for_it() -> None:
    missing = render.plan([hook("a", "nope")], {}, {}, DEFAULTS).verdicts["a"]
    pending = render.plan([hook("a", "t")], tokens(t=TokenState()), {}, DEFAULTS).verdicts["a"]
    assert (missing.reason, pending.reason) == (c.WEBHOOK_TOKEN_NOT_FOUND, c.TOKEN_PENDING)


def test_the_later_of_two_watches_sharing_a_token_is_refused_naming_the_other() -> None:
    early, late = hook("early", "t", "2026-01-01T00:00:00Z"), hook("late", "t", "2026-01-02T00:00:00Z")
    plan = render.plan([late, early], tokens(t=TokenState(current="s")), {}, DEFAULTS)
    assert plan.verdicts["early"].served
    assert plan.verdicts["late"].reason == c.TOKEN_CONFLICT
    assert "ResourceWatch early" in plan.verdicts["late"].message
    assert [r["name"] for r in plan.config["mcp"]["capabilities"]["resources"]] == ["early"]


def test_two_webhook_tokens_holding_the_same_value_conflict_too() -> None:
    plan = render.plan(
        [hook("a", "t1"), hook("b", "t2", "2026-01-02T00:00:00Z")],
        tokens(t1=TokenState(current="same"), t2=TokenState(current="other", retiring=(Retiring("same", 1),))),
        {},
        DEFAULTS,
    )
    assert plan.verdicts["b"].reason == c.TOKEN_CONFLICT


def test_the_later_of_two_watches_with_one_uri_is_refused() -> None:
    plan = render.plan(
        [hook("a", "t1", uri="x://same"), hook("b", "t2", "2026-02-01T00:00:00Z", uri="x://same")],
        tokens(t1=TokenState(current="1"), t2=TokenState(current="2")),
        {},
        DEFAULTS,
    )
    assert plan.verdicts["b"].reason == c.URI_CONFLICT
    assert "ResourceWatch a" in plan.verdicts["b"].message


def test_an_invalid_spec_is_stalled_with_a_message_naming_the_field() -> None:
    bad = watch("bad", {"uri": "x://b", "uriTemplate": "x://{y}", "backend": {"http": {"url": "http://u/"}}})
    verdict = render.plan([bad], {}, {}, DEFAULTS).verdicts["bad"]
    assert (verdict.served, verdict.reason, verdict.stalled) == (False, c.INVALID_SPEC, True)
    assert "set exactly one of uri" in verdict.message


def test_what_only_the_gateway_knows_is_invalid_is_caught_before_rendering() -> None:
    spec = {"uri": "x://e", "backend": {"http": {"url": "http://u/${env.SECRET}"}}}
    verdict = render.plan([watch("e", spec)], {}, {}, DEFAULTS).verdicts["e"]
    assert verdict.stalled
    assert "environment variable SECRET" in verdict.message


def test_the_digest_is_the_gateways_stable_and_moves_with_any_token() -> None:
    a = render.plan([hook("a", "t")], tokens(t=TokenState(current="x")), {}, DEFAULTS)
    b = render.plan([hook("a", "t")], tokens(t=TokenState(current="x")), {}, DEFAULTS)
    c2 = render.plan([hook("a", "t")], tokens(t=TokenState(current="x", retiring=(Retiring("y", 1),))), {}, DEFAULTS)
    assert a.digest == b.digest != c2.digest
    assert a.digest == digests.document(a.config)  # what each pod acknowledges serving
    assert render.entry_digests(a.config) == digests.entries(a.config)


def test_a_retired_token_is_left_out_of_the_configuration() -> None:
    retired = TokenState(current="x", retiring=(Retiring("y", 1, 2, 3), Retiring("z", 1)))
    plan = render.plan([hook("a", "t")], tokens(t=retired), {}, DEFAULTS)
    assert render.rendered_values(plan.config, "token") == {"x", "z"}


def test_a_problems_path_names_the_watch_that_rendered_that_entry() -> None:
    plan = render.plan(
        [hook("a", "t"), hook("b", "u")], tokens(t=TokenState(current="x"), u=TokenState(current="w")), {}, DEFAULTS
    )
    names = [e["name"] for e in plan.config["mcp"]["capabilities"]["resources"]]
    assert [plan.watch_at(f"mcp.capabilities.resources[{i}].watch.strategy") for i in range(2)] == names
    assert plan.watch_at("mcp.capabilities.resources[7]") is None
    assert plan.watch_at("gateway.auth") is None


def test_status_shows_a_short_digest_never_the_token() -> None:
    digest = render.token_digest("s3cret")
    assert digest == hashlib.sha256(b"s3cret").hexdigest()[:12]
    assert "s3cret" not in digest


def test_a_broken_cel_expression_stalls_its_watch_and_never_reaches_the_gateway() -> None:
    spec = {
        "uri": "x://f",
        "backend": {"http": {"url": "http://u/"}},
        "watch": {"notificationFilter": {"scope": "expression", "expression": "subscriber.trust_levl == 'verified'"}},
    }
    plan = render.plan([watch("f", spec)], {}, {}, DEFAULTS)
    verdict = plan.verdicts["f"]
    assert (verdict.served, verdict.reason, verdict.stalled) == (False, c.INVALID_SPEC, True)
    assert verdict.message.startswith("spec.watch.notificationFilter.expression: line 1, column 1")
    assert "undeclared reference to 'subscriber.trust_levl'" in verdict.message  # the cause fits: no entry name
    assert "trust_levl" in verdict.detail  # the whole problem, for the Event
    assert plan.config["mcp"]["capabilities"]["resources"] == []


def test_read_policy_and_subject_id_reach_the_gateway() -> None:
    spec = {
        "uri": "mail://inbox/alice",
        "subjectId": "alice",
        "readPolicy": "subscriber.principal_id == resource.subject_id",
        "backend": {"http": {"url": "http://u/"}},
        "watch": {"notificationFilter": {"scope": "subject_id"}},
    }
    plan = render.plan([watch("m", spec)], {}, {}, DEFAULTS)
    [entry] = plan.config["mcp"]["capabilities"]["resources"]
    assert (entry["subject_id"], entry["read_policy"]) == ("alice", "subscriber.principal_id == resource.subject_id")
    assert plan.verdicts["m"].served


def test_the_namespace_auth_secret_becomes_the_gateways_auth_block() -> None:
    auth = "principals:\n  - {token_sha256: " + "a" * 64 + ", principal_id: alice, groups: [finance]}\n"
    plan = render.plan(
        [hook("a", "t")], tokens(t=TokenState(current="x")), {"mcpg-gateway-auth": {"auth.yaml": auth}}, DEFAULTS
    )
    assert plan.config["gateway"]["auth"]["principals"][0]["principal_id"] == "alice"
    assert plan.verdicts["a"].served
    cfg = check.load(plan.config, environ={})
    assert cfg.gateway.auth.principals[0].groups == ["finance"]


def test_an_invalid_auth_secret_is_reported_on_every_watch_and_closes_the_gateway() -> None:
    bad = {"mcpg-gateway-auth": {"auth.yaml": "principals:\n  - {token_sha256: nothex, principal_id: alice}\n"}}
    plan = render.plan([hook("a", "t")], tokens(t=TokenState(current="x")), bad, DEFAULTS)
    verdict = plan.verdicts["a"]
    assert (verdict.served, verdict.reason, verdict.stalled) == (False, c.INVALID_AUTH, False)
    assert verdict.message.startswith("Secret mcpg-gateway-auth key auth.yaml: principals.0.token_sha256:")
    assert "auth" not in plan.config["gateway"]


# --- the gateway's start-up question, asked of the whole configuration ----------------------------------------


def refused_watches() -> list[observed.Watch]:
    """One watch for each way a configuration the gateway refuses to start on used to be rendered."""
    backend = {"http": {"url": "http://u/"}}
    return [
        watch("named", {"name": "inbox", "uri": "x://one", "backend": backend}, created="2026-01-01T00:00:01Z"),
        watch("same-name", {"name": "inbox", "uri": "x://two", "backend": backend}, created="2026-01-01T00:00:02Z"),
        watch("plugin", {"uri": "x://p", "backend": backend, "watch": {"plugin": {"kind": "not-installed"}}}),
        watch("nats", {"uri": "x://n", "backend": backend, "watch": {"natsTopic": {"subject": "s"}}}),
    ]


def test_every_watch_the_gateway_would_refuse_is_left_out_naming_the_field() -> None:
    plan = render.plan(refused_watches(), {}, {}, GatewayDefaults())  # no NATS server, no plugins installed
    reasons = {name: (v.served, v.reason) for name, v in plan.verdicts.items()}
    assert reasons == {
        "named": (True, c.SERVED),
        "same-name": (False, c.NAME_CONFLICT),
        "plugin": (False, c.INVALID_SPEC),
        "nats": (False, c.INVALID_SPEC),
    }
    assert "spec.name inbox is already used by ResourceWatch named" in plan.verdicts["same-name"].message
    assert "spec.watch.plugin.kind: no installed watch-strategy plugin has kind 'not-installed'" in (
        plan.verdicts["plugin"].message
    )
    assert (
        "spec.watch.natsTopic.urlSecretRef: no NATS server for this watch: set urlSecretRef or the chart's "
        "gateway.natsUrl" in plan.verdicts["nats"].message
    )
    check.load(plan.config, environ={}, plugin_kinds=[])  # what is rendered, the gateway starts on


def test_a_plugin_kind_the_image_installs_is_served() -> None:
    defaults = GatewayDefaults(plugin_kinds=["not-installed"])
    assert render.plan(refused_watches(), {}, {}, defaults).verdicts["plugin"].served


def test_a_problem_the_whole_configuration_check_finds_leaves_out_the_watch_whose_entry_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = {"http": {"url": "http://u/"}}
    watches = [
        watch(n, {"uri": f"x://{n}", "backend": backend}, created=f"2026-01-01T00:00:0{i}Z")
        for i, n in enumerate("abc")
    ]
    real = check.problems

    def second_entry_refused(raw: Any, **kwargs: Any) -> list[check.Problem]:
        entries = raw["mcp"]["capabilities"]["resources"]
        if len(entries) > 1 and entries[1]["name"] == "b":
            return [check.Problem("mcp.capabilities.resources[1].uri", "a rule only the whole file shows")]
        return real(raw, **kwargs)

    monkeypatch.setattr(check, "problems", second_entry_refused)
    plan = render.plan(watches, {}, {}, DEFAULTS)
    assert {n: v.served for n, v in plan.verdicts.items()} == {"a": True, "b": False, "c": True}
    assert plan.verdicts["b"].message == "spec.uri: a rule only the whole file shows"


def test_a_watch_the_renderer_fails_on_is_left_out_and_the_others_are_served(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    backend = {"http": {"url": "http://u/"}}
    real = render._entry

    def broken_for_b(name: str, *args: Any) -> dict[str, Any]:
        if name == "b":
            raise ZeroDivisionError("Bearer " + "s3" + "cret")  # split: the traceback quotes this line
        return real(name, *args)

    monkeypatch.setattr(render, "_entry", broken_for_b)
    plan = render.plan([watch(n, {"uri": f"x://{n}", "backend": backend}) for n in "ab"], {}, {}, DEFAULTS)
    assert plan.verdicts["a"].served
    assert (plan.verdicts["b"].served, plan.verdicts["b"].stalled) == (False, True)
    assert "ZeroDivisionError" in plan.verdicts["b"].message
    assert "ZeroDivisionError" in caplog.text  # logged, with where it happened...
    assert "broken_for_b" in caplog.text
    assert "s3cret" not in caplog.text + plan.verdicts["b"].message  # ...but never the text, which may hold a secret


def test_template_variables_the_gateway_refuses_leave_only_that_watch_out() -> None:
    read_policy = "subscriber.principal_id == resource.variables.a"
    repeated = {"uriTemplate": "x://{a}/{a}", "readPolicy": read_policy, "backend": {"http": {"url": "http://u/{a}"}}}
    undefined = {"uriTemplate": "x://{a}", "backend": {"http": {"url": "http://u/{a}/{b}"}}}
    fine = {"uri": "x://fine", "backend": {"http": {"url": "http://u/"}}}
    plan = render.plan(
        [watch("repeated", repeated), watch("undefined", undefined), watch("fine", fine)], {}, {}, DEFAULTS
    )
    assert {n: (v.served, v.reason) for n, v in plan.verdicts.items()} == {
        "repeated": (False, c.INVALID_SPEC),
        "undefined": (False, c.INVALID_SPEC),
        "fine": (True, c.SERVED),
    }
    assert plan.verdicts["repeated"].message.startswith("spec.uriTemplate: repeats {a}")
    assert plan.verdicts["undefined"].message.startswith("spec.backend.http.url: names {b}")


# --- the operator's settings for every gateway: limits, subscriptions, liveness, server card -----------------------


def test_the_gateway_settings_the_operator_was_given_reach_the_gateway_section_and_load() -> None:
    env = {
        "MCPG_LEADER_ELECTION_ENABLED": "false",
        "MCPG_GATEWAY_LIMITS": '{"watches_per_principal": 20, "header_timeout_s": 5}',
        "MCPG_GATEWAY_SUBSCRIPTIONS": '{"idle_after_s": 600, "slow_interval_ms": 120000}',
        "MCPG_GATEWAY_LIVENESS": '{"interval_s": 30}',
        "MCPG_GATEWAY_SERVER_CARD": "false",
    }
    plan = render.plan([hook("a", "t")], tokens(t=TokenState(current="x")), {}, settings.load(env).gateway)
    assert plan.verdicts["a"].served  # each entry's own check is asked with these settings too
    gateway = plan.config["gateway"]
    # Only the keys given: the others stay the gateway's defaults, not a copy of them taken today.
    assert gateway["limits"] == {"watches_per_principal": 20, "header_timeout_s": 5.0}
    assert gateway["subscriptions"] == {"idle_after_s": 600.0, "slow_interval_ms": 120000}
    assert gateway["liveness"] == {"interval_s": 30.0}
    assert gateway["server"] == {"allowed_origins": [], "server_card": False}
    loaded = check.load(plan.config, environ={}).gateway
    assert loaded.limits == config.LimitsConfig(watches_per_principal=20, header_timeout_s=5)
    assert loaded.subscriptions == config.SubscriptionsConfig(idle_after_s=600, slow_interval_ms=120_000)
    assert loaded.server.server_card is False
    assert loaded.liveness == config.LivenessConfig(interval_s=30)


@pytest.mark.parametrize("card", [True, False])
def test_a_server_card_setting_is_rendered_as_set(card: bool) -> None:
    plan = render.plan([], {}, {}, GatewayDefaults(server_card=card))
    assert plan.config["gateway"]["server"]["server_card"] is card
    assert check.load(plan.config, environ={}).gateway.server.server_card is card


def test_gateway_settings_nobody_set_render_nothing_and_the_gateway_keeps_its_defaults() -> None:
    # An operator given none of them renders what it rendered before they existed: no gateway is rolled for them.
    plan = render.plan([], {}, {}, settings.load({"MCPG_LEADER_ELECTION_ENABLED": "false"}).gateway)
    assert plan.config["gateway"] == {"server": {"allowed_origins": []}}
    loaded = check.load(plan.config, environ={}).gateway
    assert (loaded.limits, loaded.subscriptions) == (config.LimitsConfig(), config.SubscriptionsConfig())
    assert loaded.server.server_card is config.ServerConfig().server_card
