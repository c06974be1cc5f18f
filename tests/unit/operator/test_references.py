"""Which Secrets a pass reads and labels (`references`): only those its namespace's objects name, and its own.

A namespace may hold any number of Secrets of any size that are none of the operator's business: the read phase
lists the operator's own by label and GETs each named one, so no other Secret's data ever reaches the process
(the fake API records what every read answered). Each needed Secret carries the label the operator's Secret watch
selects on the API server; a named one that does not exist yet is looked for again, sooner the younger its wait.
That the API server applies the watch's selector (and RBAC) is the end-to-end tier's to prove.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

from mcpg_operator import objects, tokens
from mcpg_operator.reconcile import read, references
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, ready, resourcewatch, run, settle, webhooktoken

SECRETS = f"/api/v1/namespaces/{NS}/secrets"
AUTH = {"auth.yaml": "anonymous: {enabled: true}\n"}
LABELLED = {"metadata": {"labels": {references.LABEL: "true"}}}
UNRELATED_BYTES = 512 * 1024
UNRELATED = 16


def secret_path(name: str) -> str:
    return f"{SECRETS}/{name}"


def labels(kube: FakeKube, name: str) -> dict[str, str]:
    found: dict[str, str] = kube.objects[secret_path(name)]["metadata"].get("labels") or {}
    return found


def with_header(name: str = "hook", secret: str = "upstream-auth") -> dict[str, Any]:
    """A webhook watch whose upstream request carries a header from `secret`."""
    rw = resourcewatch(name)
    header = {"name": "Authorization", "secretKeyRef": {"name": secret, "key": "value"}}
    rw["spec"]["backend"]["http"]["headers"] = [header]
    return rw


def unrelated(kube: FakeKube) -> set[str]:
    """Large Secrets of the namespace that nothing of mcpg names (one Helm's, one a tenant labelled for the
    operator's watch, which a pass reads no more than the others): their paths."""
    value = "x" * UNRELATED_BYTES
    for i in range(UNRELATED):
        kube.set_secret(NS, f"unrelated-{i}", blob=value)
    kube.objects[secret_path("unrelated-0")]["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    kube.objects[secret_path("unrelated-1")]["metadata"]["labels"] = {references.LABEL: "true"}
    return {secret_path(f"unrelated-{i}") for i in range(UNRELATED)}


def served_namespace(kube: FakeKube) -> None:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="t0ken")
    kube.set_secret(NS, "upstream-auth", value="Bearer upstream")
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(with_header())


# --- what the namespace's objects name -----------------------------------------------------------------------


def test_every_secret_a_resourcewatch_or_webhooktoken_names_is_referenced_and_nothing_else() -> None:
    specs = [
        with_header(secret="header-secret")["spec"],
        {**resourcewatch("n", token=None)["spec"], "watch": {"natsTopic": {"subject": "s", **_ref("nats-url")}}},
        {
            **resourcewatch("p", token=None)["spec"],
            "watch": {"postgresListenNotify": {"channel": "c", **_ref("db-url")}},
        },
        {**resourcewatch("q", token=None)["spec"], "watch": {"sqlPolling": {"query": "select 1", **_ref("sql-url")}}},
        # invalid: names none
        {"uri": "x://invalid", "backend": {"http": {"url": "http://u", "headers": [{"name": "H"}]}}},
    ]
    token_specs = [webhooktoken()["spec"], {"secretRef": {}}]  # the second is invalid
    assert references.referenced(specs, token_specs) == sorted(
        ["header-secret", "nats-url", "db-url", "sql-url", "tok-secret", "mcpg-gateway-auth", "mcpg-gateway-bus"]
    )


def test_a_namespace_without_a_resourcewatch_names_no_gateway_secret() -> None:
    assert references.referenced([], [webhooktoken()["spec"]]) == ["tok-secret"]


def _ref(name: str) -> dict[str, Any]:
    return {"urlSecretRef": {"name": name, "key": "url"}}


# --- what a pass reads ---------------------------------------------------------------------------------------


async def test_a_pass_reads_no_secret_its_namespaces_objects_do_not_name(kube: FakeKube, clock: Clock) -> None:
    served_namespace(kube)
    others = unrelated(kube)
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "hook") == ("True", "Served")  # the named ones were read
    assert kube.secrets_read() & others == set()
    # Every list of Secrets asked the API server for the operator's own only.
    assert {r.label_selector for r in kube.reads if r.method == "list" and r.path == SECRETS} == {
        references.OWN_SELECTOR
    }


async def test_the_read_phase_holds_no_more_memory_however_many_large_unrelated_secrets_there_are(
    kube: FakeKube, clock: Clock
) -> None:
    served_namespace(kube)
    await settle(kube, clock)
    unrelated(kube)  # 8 MiB of data (base64 in the API's objects), none of it named
    tracemalloc.start()
    try:
        snapshot = await read.read(kube, NS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert {s.name for s in snapshot.secrets} >= {"tok-secret", "upstream-auth", "mcpg-gateway-auth"}
    assert peak < UNRELATED_BYTES, f"the read allocated {peak} bytes at its peak"


# --- the label the Secret watch selects ----------------------------------------------------------------------


async def test_a_named_secret_is_labelled_for_the_watch_by_a_patch_of_its_labels_alone(
    kube: FakeKube, clock: Clock
) -> None:
    served_namespace(kube)
    before = {name: kube.objects[secret_path(name)]["data"] for name in ("tok-secret", "upstream-auth")}
    await settle(kube, clock)
    for name in ("tok-secret", "upstream-auth", "mcpg-gateway-auth"):
        assert labels(kube, name)[references.LABEL] == "true", name
        [patch] = [c for c in kube.writes if c.path == secret_path(name)]
        assert (patch.method, patch.body) == ("merge_patch", LABELLED)
    assert {name: kube.objects[secret_path(name)]["data"] for name in before} == before
    kube.writes.clear()
    await run(kube, clock)
    assert kube.writes == []  # labelled once


async def test_the_operators_own_inputs_carry_the_watch_label_from_their_creation(kube: FakeKube, clock: Clock) -> None:
    kube.put(webhooktoken(generate=True))
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(resourcewatch())
    await settle(kube, clock)
    created = {c.path: c for c in kube.writes if c.method in ("create", "apply") and "/secrets/" in c.path}
    generated = created[secret_path("tok-secret")]
    state = created[secret_path(tokens.state_secret_name("tok"))]
    for call in (generated, state):
        assert call.body is not None
        assert call.body["metadata"]["labels"][references.LABEL] == "true", call.path
    # The configuration Secret is the operator's output (read on every pass): no watch needs it.
    config = created[secret_path(objects.CONFIG_SECRET)].body
    assert config is not None
    assert references.LABEL not in config["metadata"]["labels"]


async def test_a_secret_of_the_operators_from_before_the_label_is_labelled(kube: FakeKube, clock: Clock) -> None:
    served_namespace(kube)
    await settle(kube, clock)
    state = secret_path(tokens.state_secret_name("tok"))
    del kube.objects[state]["metadata"]["labels"][references.LABEL]  # as an earlier release wrote it
    kube.writes.clear()
    await run(kube, clock)
    assert [(c.method, c.path, c.body) for c in kube.writes] == [("merge_patch", state, LABELLED)]


# --- a named Secret that does not exist yet ------------------------------------------------------------------


async def test_a_secret_named_before_it_exists_is_looked_for_again_after_as_long_as_it_was_awaited(
    kube: FakeKube, clock: Clock
) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(webhooktoken())
    kube.put(resourcewatch())
    assert (await run(kube, clock)).next_check_s == references.MIN_RECHECK_S
    assert ready(kube, "webhooktokens", "tok") == ("False", "SecretNotFound")
    clock.now += 4
    assert (await run(kube, clock)).next_check_s == 4
    clock.now += 12
    assert (await run(kube, clock)).next_check_s == 16
    clock.now += 16  # waited 32 s: the resync looks for it from now on
    assert (await run(kube, clock)).next_check_s is None


async def test_a_secret_created_after_its_webhooktoken_is_used_and_labelled_at_the_next_check(
    kube: FakeKube, clock: Clock
) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(webhooktoken())
    kube.put(resourcewatch())
    outcome = await run(kube, clock)
    assert outcome.next_check_s is not None
    kube.set_secret(NS, "tok-secret", token="t0ken")  # no watch event: it carries no label yet
    clock.now += outcome.next_check_s
    await settle(kube, clock)
    assert labels(kube, "tok-secret")[references.LABEL] == "true"
    assert ready(kube, "webhooktokens", "tok") == ("True", "RolledOut")
    assert ready(kube, "resourcewatches", "hook") == ("True", "Served")
    assert (await run(kube, clock)).next_check_s is None
