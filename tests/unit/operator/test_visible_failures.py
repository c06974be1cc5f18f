"""What users see in `kubectl get` and `kubectl describe` when the namespace's gateway cannot be written or used.

Every ResourceWatch and WebhookToken of a namespace depends on its gateway's objects: when the API server refuses
one (a node port already allocated, a quota, an admission webhook) or the write fails on the way, each reports it
as Ready=False with the API server's message and one Warning Event, and a refusal is Stalled. A gateway no MCP
client may use (no `mcpg-gateway-auth` Secret) is said so on each served watch.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from mcpg_operator.kube import Refused
from mcpg_operator.reconcile import write
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, condition, event_reasons, ready, resourcewatch, run, settle, webhooktoken

SERVICE = f"/api/v1/namespaces/{NS}/services/mcpg-gateway"
PORT_TAKEN = (
    'Service "mcpg-gateway" is invalid: spec.ports[0].nodePort: Invalid value: 30080: '
    "provided port is already allocated"
)
GOOD_AUTH = "principals:\n  - {token_sha256: " + "a" * 64 + ", principal_id: alice}\n"


def _status(kube: FakeKube, plural: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/{plural}/{name}"]["status"]
    return status


def _message(kube: FakeKube, plural: str, name: str, type_: str = "Ready") -> str:
    found = next(c for c in _status(kube, plural, name)["conditions"] if c["type"] == type_)
    return str(found["message"])


def _types(kube: FakeKube, plural: str, name: str) -> set[str]:
    return {c["type"] for c in _status(kube, plural, name)["conditions"]}


@pytest.fixture
def namespace(kube: FakeKube) -> FakeKube:
    """A served webhook watch with its token, a polled watch, and an invalid one, all served once."""
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="t0ken")
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": GOOD_AUTH})
    kube.put(resourcewatch("hook"))
    kube.put(resourcewatch("polled", token=None))
    kube.put(resourcewatch("broken", token=None, backend={"http": {"url": ""}}))
    return kube


async def test_a_refused_service_reaches_every_watch_and_token_as_stalled_with_the_api_servers_message(
    namespace: FakeKube, clock: Clock
) -> None:
    kube = namespace
    kube.refuse(SERVICE, Refused(422, "Invalid", PORT_TAKEN))
    with pytest.raises(write.ApplyFailed) as raised:  # raised, so the scheduler retries with backoff
        await run(kube, clock)
    assert raised.value.failure.permanent
    for plural, name in (("resourcewatches", "hook"), ("resourcewatches", "polled"), ("webhooktokens", "tok")):
        assert ready(kube, plural, name) == ("False", "ApplyFailed")
        assert condition(kube, plural, name, "Stalled") == ("True", "ApplyFailed")
        said = _message(kube, plural, name)  # the cause first: the field and why, then what was refused
        assert said.startswith("spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated")
        assert said.endswith("(refused: apply Service mcpg-gateway)")
        assert len(said) < 120
    # Each Event has the API server's message whole.
    assert f"the API server refused to apply Service mcpg-gateway: {PORT_TAKEN}" in str(kube.writes)
    # A watch failing for a reason of its own keeps it: the gateway's objects are not what it waits for.
    assert ready(kube, "resourcewatches", "broken") == ("False", "InvalidSpec")
    assert sorted(event_reasons(kube.writes)).count("ApplyFailed") == 3
    # The strategy and URI columns are filled even though the gateway could not be written.
    assert _status(kube, "resourcewatches", "hook")["strategy"] == "webhook"
    assert _status(kube, "resourcewatches", "hook")["uri"] == "x://hook"


async def test_a_failure_that_repeats_is_reported_once_and_the_next_success_clears_it(
    namespace: FakeKube, clock: Clock
) -> None:
    kube = namespace
    kube.refuse(SERVICE, Refused(422, "Invalid", PORT_TAKEN))
    for _ in range(2):  # the first labels the token Secret for the watch: a version of it its status then names
        with pytest.raises(write.ApplyFailed):
            await run(kube, clock)
    kube.writes.clear()
    for _ in range(3):
        with pytest.raises(write.ApplyFailed):
            await run(kube, clock)
    assert [c for c in kube.writes if c.path.endswith("/status") or "/events/" in c.path] == []
    kube.allow(SERVICE)
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "hook") == ("True", "Served")
    assert ready(kube, "webhooktokens", "tok")[0] == "True"
    assert "Stalled" not in _types(kube, "resourcewatches", "hook")


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (ApiException(status=500, reason="Internal Server Error"), "(500)"),
        (aiohttp.ServerDisconnectedError(), "(ServerDisconnectedError)"),
    ],
)
async def test_a_transient_failure_is_reconciling_not_stalled_and_says_it_is_retried(
    namespace: FakeKube, clock: Clock, error: Exception, said: str
) -> None:
    kube = namespace
    kube.refuse(SERVICE, error)
    with pytest.raises(write.ApplyFailed) as raised:
        await run(kube, clock)
    assert not raised.value.failure.permanent
    assert raised.value.expected  # logged in one line, without a traceback
    assert ready(kube, "resourcewatches", "polled") == ("False", "ApplyFailed")
    assert condition(kube, "resourcewatches", "polled", "Reconciling") == ("True", "ApplyFailed")
    assert "Stalled" not in _types(kube, "resourcewatches", "polled")
    message = _message(kube, "resourcewatches", "polled")
    assert message.startswith(f"could not apply Service mcpg-gateway {said}")
    assert message.endswith("retrying")


async def test_without_an_auth_secret_each_served_watch_says_no_client_can_use_it(kube: FakeKube, clock: Clock) -> None:
    kube.put(resourcewatch("polled", token=None))
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "polled") == ("True", "Served")  # served: webhooks and watches work
    assert condition(kube, "resourcewatches", "polled", "ClientsAuthorized") == ("False", "NoPrincipals")
    said = _message(kube, "resourcewatches", "polled")
    assert said.endswith(", but every MCP client gets 401 (see ClientsAuthorized)")
    clients = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/resourcewatches/polled"]["status"]["conditions"]
    assert "create Secret mcpg-gateway-auth key auth.yaml" in str(clients)
    assert event_reasons(kube.writes).count("NoPrincipals") == 1
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": GOOD_AUTH})
    await settle(kube, clock)
    assert condition(kube, "resourcewatches", "polled", "ClientsAuthorized") == ("True", "PrincipalsDefined")
    assert "principal" not in _message(kube, "resourcewatches", "polled")


async def test_an_auth_secret_naming_nobody_is_no_better_than_none(kube: FakeKube, clock: Clock) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": "principals: []\n"})
    kube.put(resourcewatch("polled", token=None))
    await settle(kube, clock)
    assert condition(kube, "resourcewatches", "polled", "ClientsAuthorized") == ("False", "NoPrincipals")
    clients = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/resourcewatches/polled"]["status"]["conditions"]
    assert "Secret mcpg-gateway-auth lists none, anonymous access is off" in str(clients)


async def test_status_says_where_the_gateway_is_and_the_path_a_sender_uses_without_the_token(
    namespace: FakeKube, clock: Clock
) -> None:
    kube = namespace
    await settle(kube, clock)
    hook = _status(kube, "resourcewatches", "hook")
    assert hook["gateway"] == {
        "service": f"mcpg-gateway.{NS}.svc",
        "url": f"http://mcpg-gateway.{NS}.svc:8080/mcp",
        "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9090}],
    }
    assert hook["webhookPath"] == "/webhooks/resource-updated/{token}"
    assert hook["webhookTokenSecret"] == "tok-secret/token"
    token = _status(kube, "webhooktokens", "tok")
    assert token["webhookPath"] == "/webhooks/resource-updated/{token}"
    assert token["gateway"] == hook["gateway"]
    polled = _status(kube, "resourcewatches", "polled")
    assert polled.get("webhookPath") is None
    assert polled["gateway"] == hook["gateway"]
    assert _status(kube, "resourcewatches", "broken").get("gateway") is None  # not served: not there
    assert all("t0ken" not in str(c.body) for c in kube.writes if c.path.endswith("/status") or "/events/" in c.path)


async def test_a_served_watch_reports_its_rollout_as_a_normal_event_once(namespace: FakeKube, clock: Clock) -> None:
    kube = namespace
    await settle(kube, clock)
    await settle(kube, clock)
    assert event_reasons(kube.writes).count("Served") == 2  # hook and polled, once each


async def test_a_poll_interval_under_the_floor_is_served_and_the_status_says_what_is_used(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch("fast", token=None, watch={"poll": {"intervalMs": 1000}}))
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "fast") == ("True", "Served")
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": GOOD_AUTH})  # nothing else to say: the floor shows
    await settle(kube, clock)
    assert "spec.watch.poll.intervalMs 1000 is below the floor: read every 10 s" in _message(
        kube, "resourcewatches", "fast"
    )


async def test_the_operator_logs_each_change_it_makes_naming_the_object_and_never_a_secret_value(
    namespace: FakeKube, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpg_operator.reconcile.write")
    await settle(namespace, clock)
    lines = [r.getMessage() for r in caplog.records]
    assert f"namespace {NS}: applied Deployment mcpg-gateway" in lines
    assert f"namespace {NS}: applied Service mcpg-gateway" in lines
    assert f"namespace {NS}: applied Secret mcpg-gateway-config" in lines
    assert f"namespace {NS}: applied Role mcpg-gateway" in lines
    assert f"namespace {NS}: status of ResourceWatch hook: Ready=True (Served), Reconciling=False (Served), " in [
        line[: line.index("ClientsAuthorized")] for line in lines if "ClientsAuthorized" in line
    ]
    assert f"namespace {NS}: Normal Served: Event about ResourceWatch hook" not in lines  # DEBUG: the status said it
    assert not any("t0ken" in line for line in lines)


async def test_the_namespaces_mcpgateway_reports_the_failure_too(namespace: FakeKube, clock: Clock) -> None:
    kube = namespace
    mcp_gateway = {"name": "mcpg-gateway", "namespace": NS}
    kube.put({"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": mcp_gateway, "spec": {}})
    await settle(kube, clock)
    assert ready(kube, "mcpgateways", "mcpg-gateway") == ("True", "Applied")
    kube.refuse(SERVICE, Refused(422, "Invalid", PORT_TAKEN))
    kube.put(resourcewatch("third", token=None))  # a new owner of the gateway's objects: the Service write fails
    with pytest.raises(write.ApplyFailed):
        await run(kube, clock)
    assert ready(kube, "mcpgateways", "mcpg-gateway") == ("False", "ApplyFailed")
    assert condition(kube, "mcpgateways", "mcpg-gateway", "Stalled") == ("True", "ApplyFailed")


async def test_a_first_pass_that_fails_still_warns_that_no_principal_can_use_the_gateway(
    kube: FakeKube, clock: Clock
) -> None:
    # The condition is written with the failure; were its Event dropped, no later pass would post it.
    kube.put(resourcewatch("polled", token=None))
    kube.refuse(SERVICE, Refused(422, "Invalid", PORT_TAKEN))
    with pytest.raises(write.ApplyFailed):
        await run(kube, clock)
    assert condition(kube, "resourcewatches", "polled", "ClientsAuthorized") == ("False", "NoPrincipals")
    assert sorted(event_reasons(kube.writes)) == ["ApplyFailed", "NoPrincipals"]
    kube.allow(SERVICE)
    await settle(kube, clock)
    assert sorted(event_reasons(kube.writes)) == ["ApplyFailed", "NoPrincipals", "Served"]


@pytest.mark.parametrize(
    ("said", "brief"),
    [
        (
            "services \"mcpg-gateway\" is forbidden: ValidatingAdmissionPolicy 'platform' with binding "
            "'platform-binding' denied request: the platform team must approve gateway Services",
            "the platform team must approve gateway Services (policy platform)",
        ),
        (
            'admission webhook "policy.example.com" denied the request: no NodePort Services here',
            "no NodePort Services here (webhook policy.example.com)",
        ),
        (PORT_TAKEN, "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"),
        ("exceeded quota: compute, requested: secrets=1", "exceeded quota: compute, requested: secrets=1"),
    ],
    ids=["policy", "webhook", "field", "other"],
)
def test_a_refusal_in_brief_puts_its_cause_first(said: str, brief: str) -> None:
    assert write.in_brief(said) == brief
