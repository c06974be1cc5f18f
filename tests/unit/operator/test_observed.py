"""The views the read phase builds: only what a decision needs, objects being deleted left out."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from mcpg_gateway.contract.acknowledgement import Acknowledgement, Serving
from mcpg_operator import objects, observed, rotation, tokens
from mcpg_operator.rotation import Retiring, TokenState
from mcpg_operator.settings import GatewayDefaults

HASH = "c" * 64


def cr(kind: str, name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": kind,
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            **meta,
        },
        "spec": {"secretRef": {"name": "s"}},
    }


def secret(name: str, **values: str | bytes) -> dict[str, Any]:
    data = {k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode() for k, v in values.items()}
    return {"metadata": {"name": name, "labels": {"a": "b"}, "ownerReferences": [{"uid": "u1"}]}, "data": data}


def test_objects_being_deleted_are_left_out() -> None:
    gone = cr("ResourceWatch", "gone", deletionTimestamp="2026-01-02T00:00:00Z")
    snap = observed.snapshot("ns", watches=[cr("ResourceWatch", "kept"), gone], webhook_tokens=[], secrets=[])
    assert [w.name for w in snap.watches] == ["kept"]
    assert snap.watches[0].id == observed.Identity(
        "mcpg.dev/v1alpha1", "ResourceWatch", "kept", "uid-kept", 3, "2026-01-01T00:00:00Z"
    )


def test_a_token_view_carries_the_rotation_state_saved_for_it() -> None:
    state = TokenState(current="b", current_accepted_at=2.0, retiring=(Retiring("a", 1.0, 2.0),))
    saved = secret(tokens.state_secret_name("t"), **{tokens.STATE_KEY: json.dumps(rotation.to_json(state))})
    snap = observed.snapshot(
        "ns", watches=[], webhook_tokens=[cr("WebhookToken", "t"), cr("WebhookToken", "u")], secrets=[saved]
    )
    assert [t.state for t in snap.tokens] == [state, TokenState()]


def test_binary_secret_values_are_left_out_and_owners_kept_by_uid() -> None:
    view = observed.secret(secret("s", text="ok", blob=b"\xff\xfe"))
    assert (view.data, view.labels, view.owner_uids) == ({"text": "ok"}, {"a": "b"}, frozenset({"u1"}))


def test_the_deployment_view_names_its_restart_digest_its_configuration_and_whether_its_rollout_completed() -> None:
    body = objects.deployment("ns", HASH, GatewayDefaults(replicas=2), [])
    body["metadata"]["generation"] = 4
    body["status"] = {"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
    view = observed.gateway_deployment(body)
    assert (view.restart_digest, view.config_secret, view.rollout_complete) == (HASH, objects.CONFIG_SECRET, True)
    body["status"]["availableReplicas"] = 1
    assert not observed.gateway_deployment(body).rollout_complete


def test_an_applied_object_covers_the_fields_it_already_holds_and_nothing_else() -> None:
    desired = objects.service("ns", [])
    live = json.loads(json.dumps(desired))
    live["metadata"]["uid"] = "u"  # fields the server or others own do not matter
    live["spec"]["clusterIP"] = "10.0.0.1"
    assert observed.Applied(live).covers(desired)
    live["spec"]["ports"][0]["port"] = 81
    assert not observed.Applied(live).covers(desired)
    del live["spec"]["ports"][1]
    assert not observed.Applied(live).covers(objects.service("ns", []))


def test_a_replicaset_view_lists_every_secret_its_pods_mount() -> None:
    template = objects.deployment("ns", HASH, GatewayDefaults(), [])["spec"]["template"]
    view = observed.replicaset({"metadata": {"name": "rs"}, "spec": {"template": template}})
    assert view.secrets == {objects.CONFIG_SECRET}


def pod(name: str, ready: bool = True, ip: str | None = "10.0.0.1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


ACK = Acknowledgement(instance="p", serving=Serving(digest="d" * 64, entries=["e" * 16], since=1.0, source="secret"))


@pytest.mark.parametrize(
    ("obj", "answer", "asked", "counted"),
    [
        pytest.param(pod("p"), ACK, True, True, id="Ready with an IP"),
        pytest.param(pod("p"), "TimeoutError", True, True, id="Ready and silent: counted, serving nothing known"),
        pytest.param(pod("p", ready=False), ACK, True, False, id="not Ready: heard, never counted"),
        pytest.param(pod("p", ip=None), None, False, False, id="no IP"),
        pytest.param(pod("p", deleting=True), ACK, True, True, id="being deleted and answering"),
        pytest.param(pod("p", deleting=True), "ClientConnectorError", True, False, id="being deleted and silent"),
        pytest.param(pod("p", ready=False, deleting=True), None, False, False, id="being deleted, never Ready"),
    ],
)
def test_a_pod_counts_once_ready_with_an_ip_and_while_being_deleted_only_as_long_as_it_answers(
    obj: dict[str, Any], answer: Acknowledgement | str | None, asked: bool, counted: bool
) -> None:
    view = observed.pod(obj, answer)
    assert (view.asked, view.counted) == (asked, counted)
    if isinstance(answer, str):
        assert (view.acknowledgement, view.missing, view.entries) == (None, answer, frozenset())
    if isinstance(answer, Acknowledgement):
        assert (view.serving_digest, view.entries) == ("d" * 64, frozenset({"e" * 16}))


def test_the_configuration_secret_view_keeps_its_text_digest_and_when_it_was_written() -> None:
    body = objects.config_secret("ns", {"mcp": {}}, [], "2026-01-01T00:00:10Z")
    body["metadata"]["resourceVersion"] = "42"
    snap = observed.snapshot("ns", watches=[], webhook_tokens=[], secrets=[body])
    found = snap.config
    assert found is not None
    assert (found.digest, found.updated_at, found.secret.resource_version) == (
        body["metadata"]["annotations"]["mcpg.dev/config-digest"],
        1767225610.0,
        "42",
    )
    assert found.text == "mcp: {}\n"
    assert snap.secret_versions() == {"mcpg-gateway-config": "42"}


def test_a_snapshot_names_each_watched_object_it_read_at_its_version() -> None:
    deployment = objects.deployment("ns", HASH, GatewayDefaults(), [])
    deployment["metadata"]["resourceVersion"] = "9"
    read = secret("s")
    read["metadata"]["resourceVersion"] = "4"
    snap = observed.snapshot(
        "ns",
        watches=[cr("ResourceWatch", "w", resourceVersion="7")],
        webhook_tokens=[cr("WebhookToken", "t", resourceVersion="8")],
        secrets=[read],
        deployment=deployment,
    )
    assert snap.versions() == {
        "ResourceWatch/w@7",
        "WebhookToken/t@8",
        "Secret/s@4",
        f"Deployment/{objects.NAME}@9",
    }
