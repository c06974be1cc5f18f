"""A failure only the operator's log used to show, shown where users look, on a real API server.

An admission policy (a ValidatingAdmissionPolicy: CEL run by the API server itself, as a platform team's policy
would be) refuses the namespace's gateway Service. Every ResourceWatch of the namespace must then say so in
`kubectl get` (READY False, REASON ApplyFailed, the API server's message) and in `kubectl describe` (a Warning
Event), be Stalled, and recover by itself once the policy is lifted; served then, each says that no MCP client
can use the gateway of a namespace without an `mcpg-gateway-auth` Secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.manifests import polled, refusing_gateway_services
from mcpg_testing.processes import wait_until
from mcpg_testing.release import OperatorRelease

BOUND = "90s"
POLICY_MESSAGE = "the platform team must approve gateway Services in this namespace"


@pytest.fixture
def refusing_policy(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """A policy refusing the gateway Service in `namespace` only, in force when this returns; removed after."""
    name = f"deny-gateway-{namespace}"
    text = "\n---\n".join(yaml.safe_dump(d) for d in refusing_gateway_services(name, namespace, POLICY_MESSAGE))
    control_plane.kubectl("apply", "-f", "-", stdin=text)
    probe = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "mcpg-gateway"},
        "spec": {"ports": [{"port": 1}]},
    }

    def in_force() -> bool:  # the API server loads policies asynchronously: ask it until it refuses
        dry_run = ("-n", namespace, "create", "--dry-run=server", "-f", "-")
        result = control_plane.kubectl(*dry_run, stdin=json.dumps(probe), check=False)
        return result.returncode != 0 and POLICY_MESSAGE in result.stderr

    wait_until(in_force, 60, "the admission policy to be in force")
    yield name
    control_plane.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, check=False)


def _get(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("-n", namespace, "get", *what, "-o", "json").stdout)


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def _wait_reason(plane: ControlPlane, namespace: str, name: str, reason: str) -> None:
    path = '{.status.conditions[?(@.type=="Ready")].reason}'
    plane.kubectl(
        "-n", namespace, "wait", f"--for=jsonpath={path}={reason}", f"resourcewatch/{name}", f"--timeout={BOUND}"
    )


def test_an_admission_refusal_of_the_gateway_reaches_every_watch_and_clears_once_lifted(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str, refusing_policy: str
) -> None:
    docs = "\n---\n".join(yaml.safe_dump(polled(n)) for n in ("first", "second"))
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=docs)
    for name in ("first", "second"):
        _wait_reason(control_plane, namespace, name, "ApplyFailed")
        rw = _get(control_plane, namespace, "resourcewatch", name)
        ready = _condition(rw, "Ready")
        assert ready["status"] == "False"
        assert ready["message"].startswith(f"{POLICY_MESSAGE} (policy deny-gateway-"), ready["message"]
        assert POLICY_MESSAGE in ready["message"]
        assert _condition(rw, "Stalled")["status"] == "True"
        assert (rw["status"]["strategy"], rw["status"]["uri"]) == ("poll", f"x://{name}")
    # What a plain `kubectl get` shows: the reason and the API server's words, not blank columns.
    table = control_plane.kubectl("-n", namespace, "get", "resourcewatches").stdout
    assert "ApplyFailed" in table
    assert POLICY_MESSAGE in table
    events = _get(control_plane, namespace, "events", "--field-selector", "reason=ApplyFailed")["items"]
    assert sorted(e["involvedObject"]["name"] for e in events) == ["first", "second"]
    assert all(e["type"] == "Warning" and POLICY_MESSAGE in e["message"] for e in events)

    control_plane.kubectl("delete", "validatingadmissionpolicybinding", refusing_policy)
    # The operator retries with backoff (30 s at most): no edit is needed for the namespace to recover.
    for name in ("first", "second"):
        _wait_reason(control_plane, namespace, name, "Served")
    rw = _get(control_plane, namespace, "resourcewatch", "first")
    assert _condition(rw, "Ready")["status"] == "True"
    assert "Stalled" not in {c["type"] for c in rw["status"]["conditions"]}
    assert rw["status"]["gateway"]["url"] == f"http://mcpg-gateway.{namespace}.svc:8080/mcp"
    # This namespace has no mcpg-gateway-auth Secret: served, and saying that no MCP client can use it.
    assert _condition(rw, "ClientsAuthorized")["status"] == "False"
    said = _condition(rw, "Ready")["message"]
    assert said.endswith(", but every MCP client gets 401 (see ClientsAuthorized)")
    assert "create Secret mcpg-gateway-auth" in _condition(rw, "ClientsAuthorized")["message"]
    warned = _get(control_plane, namespace, "events", "--field-selector", "reason=NoPrincipals")["items"]
    assert sorted(e["involvedObject"]["name"] for e in warned) == ["first", "second"]
    served = _get(control_plane, namespace, "events", "--field-selector", "reason=Served")["items"]
    assert sorted(e["involvedObject"]["name"] for e in served) == ["first", "second"]
