"""The operator's RBAC as the chart renders it (`helm template`): no more than the operator needs, where it needs it.

With `watchNamespaces` (the production setup), a Role and its RoleBinding in each watched namespace and no
cluster-wide grant at all; by default, the same rules in one ClusterRole. Objects the operator writes by a fixed
name are granted by that name, every request a namespace's passes make (recorded by the in-memory API, the
gateway pods' listing included) is one the rendered rules allow, in both modes, and the operator holds every
permission of the Role it gives the gateway (so the API server lets it create that Role). That the API server
enforces them as evaluated here is the end-to-end tier's to prove (it runs the operator under these roles).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mcpg_operator import objects
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.settings import BusSettings, GatewayDefaults
from mcpg_testing.controlplane import default_bin_dir
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, resourcewatch, webhooktoken

CHART = Path(__file__).parents[3] / "charts" / "mcpg"
TEMPLATE = CHART / "templates" / "rbac.yaml"
WATCHED = ("shop", "mail")
KOPF_WATCHES = (
    ("mcpg.dev", "resourcewatches"),
    ("mcpg.dev", "webhooktokens"),
    ("mcpg.dev", "mcpgateways"),
    ("", "secrets"),
    ("apps", "deployments"),
)
"""What kopf lists and watches (handlers.py), besides the requests a pass makes."""
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)(?:/(?P<rest>.+))?$"
)


def helm(*values: str) -> list[dict[str, Any]]:
    """The chart rendered with these `--set` values: every document."""
    binary = default_bin_dir() / "helm"
    assert binary.exists(), f"{binary} is missing: run `make binaries` (helm renders the chart)"
    args = [str(binary), "template", "t", str(CHART), "--namespace", "mcpg-system"]
    args += [x for value in values for x in ("--set", value)]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def operator_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The roles rbac.yaml renders (named `<release>-operator`; the leader-election and bus Roles are apart)."""
    return [d for d in docs if d["kind"] in ("Role", "ClusterRole") and d["metadata"]["name"] == "t-operator"]


# --- where the operator is granted anything -------------------------------------------------------------------


def test_namespaced_operation_renders_a_role_in_each_watched_namespace_and_no_cluster_wide_grant() -> None:
    docs = helm("watchNamespaces={shop,mail}")
    assert [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")] == []
    roles = operator_roles(docs)
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in roles) == [("Role", "mail"), ("Role", "shop")]
    bindings = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "t-operator"]
    assert sorted(d["metadata"]["namespace"] for d in bindings) == sorted(WATCHED)
    assert all(
        d["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "t-operator"}
        for d in bindings
    )
    # Everything else the chart grants (the leader-election Lease, the managed bus) is in its own namespace.
    others = [d for d in docs if d["kind"] in ("Role", "RoleBinding") and d not in roles and d not in bindings]
    assert {d["metadata"]["namespace"] for d in others} == {"mcpg-system"}


def test_the_gateways_objects_are_read_patched_and_deleted_only_by_their_name() -> None:
    [role] = operator_roles(helm())
    by_name = {"get", "patch", "delete"}
    for group, plural in (
        ("", "serviceaccounts"),
        ("", "services"),
        ("apps", "deployments"),
        ("policy", "poddisruptionbudgets"),
        ("networking.k8s.io", "networkpolicies"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
    ):
        for rule in role["rules"]:
            if group in rule["apiGroups"] and plural in rule["resources"] and by_name & set(rule["verbs"]):
                assert rule.get("resourceNames") == [objects.NAME], (plural, rule)


def test_the_gateways_pods_are_only_listed_and_nothing_else_of_a_pod_is_granted() -> None:
    [role] = operator_roles(helm())
    pods = [rule for rule in role["rules"] if "pods" in rule["resources"]]
    assert pods == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]


def test_the_operator_holds_everything_it_grants_the_gateway_so_the_api_server_lets_it_grant_it() -> None:
    # Kubernetes refuses a Role granting what its creator does not hold (unless it may `escalate`, which it may not).
    gateway = objects.role(NS, [])
    for values in ((), ("watchNamespaces={shop,mail}",)):
        roles = operator_roles(helm(*values))
        role = next(r for r in roles if r["metadata"].get("namespace", NS) == NS)
        assert not any("escalate" in rule["verbs"] or "bind" in rule["verbs"] for rule in role["rules"])
        for rule in gateway["rules"]:
            for verb in rule["verbs"]:
                request = Request(verb, "", "secrets", rule["resourceNames"][0])
                assert _allows(role["rules"], request), (values, request)


def test_every_rule_says_why_it_is_there() -> None:
    # A rule opens with a comment, or continues the grant of the rule before it (the same resources, by name).
    lines = TEMPLATE.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    resources = [lines[i + 1].strip() for i in starts]
    for n, i in enumerate(starts):
        commented = lines[i - 1].strip().startswith("#")
        continued = n > 0 and resources[n] == resources[n - 1]
        assert commented or continued, f"rbac.yaml line {i + 1}: a rule without a comment saying why"


# --- what the rules must allow ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    name: str | None


async def test_every_request_of_a_namespaces_passes_is_granted_in_both_modes() -> None:
    requests = {*await _namespace_requests(), *_kopf_requests()}
    for values in ((), ("watchNamespaces={shop,mail}",)):
        roles = operator_roles(helm(*values))
        role = next(r for r in roles if r["metadata"].get("namespace", NS) == NS)
        refused = sorted(str(r) for r in requests if not _allows(role["rules"], r))
        assert refused == [], f"with {values or 'the defaults'} the chart refuses: {refused}"


async def _namespace_requests() -> set[Request]:
    """Every request the passes of a busy namespace make in it: generated and named tokens, a header Secret, the
    clients' auth, the managed bus's credentials, an McpGateway's budget and policy (then dropped), a configuration
    replaced in place, the gateway's Role and RoleBinding, its pods asked what they serve, and a Secret labelled for
    the watch."""
    kube, clock = FakeKube(), Clock()
    kube.put(webhooktoken(generate=True))
    kube.put(webhooktoken("named"))
    kube.set_secret(NS, "named-secret", token="n4med")
    kube.set_secret(NS, "upstream-auth", value="Bearer upstream")
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": "anonymous: {enabled: true}\n"})
    hook = resourcewatch()
    hook["spec"]["backend"]["http"]["headers"] = [
        {"name": "A", "secretKeyRef": {"name": "upstream-auth", "key": "value"}}
    ]
    kube.put(hook)
    kube.put(resourcewatch("named-hook", token="named"))
    gateway = {"podDisruptionBudget": {"enabled": True}, "networkPolicy": {"enabled": True}}
    mcpgw = {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "spec": gateway}
    kube.put({**mcpgw, "metadata": {"name": "mcpg-gateway", "namespace": NS}})
    await _settle(kube, clock)
    kube.put(resourcewatch(description="changed"))
    kube.remove(f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/mcpgateways/mcpg-gateway")
    await _settle(kube, clock)
    kube.prune_replicasets(NS)
    await _settle(kube, clock)
    requests = set(_requests(kube))
    assert Request("list", "", "pods", None) in requests  # the gateway's pods were asked what they serve
    assert Request("patch", "rbac.authorization.k8s.io", "roles", objects.NAME) in requests
    return requests


async def _settle(kube: FakeKube, clock: Clock) -> None:
    defaults, bus = GatewayDefaults(replicas=2), BusSettings("managed", "mcpg-system")
    for _ in range(10):
        await reconcile.reconcile(
            kube, NS, defaults, clock, token=lambda: "g" * 43, bus_settings=bus, fetch=kube.acknowledgement
        )
        if kube.deployment(NS) is not None:
            kube.complete_rollout(NS)


def _requests(kube: FakeKube) -> Iterator[Request]:
    """The recorded reads and writes in the namespace as RBAC sees them (an apply may create: both verbs)."""
    calls = [(r.method, r.path) for r in kube.reads] + [(c.method, c.path) for c in kube.writes]
    for method, path in calls:
        match = _PATH.match(path)
        if match is None or match["ns"] != NS:
            continue  # the bus namespace's requests are the bus Role's (bus-rbac.yaml)
        group, plural, rest = match["group"] or "", match["plural"], match["rest"]
        name, _, sub = (rest or "").partition("/")
        resource = f"{plural}/{sub}" if sub else plural
        verbs = {"get": ["get"], "list": ["list"], "create": ["create"], "apply": ["patch", "create"]}
        for verb in verbs.get(method, ["patch" if method == "merge_patch" else method]):
            yield Request(verb, group, resource, None if verb in ("list", "create") else name)


def _kopf_requests() -> Iterator[Request]:
    for group, plural in KOPF_WATCHES:
        yield from (Request(verb, group, plural, None) for verb in ("list", "watch"))


def _allows(rules: list[dict[str, Any]], r: Request) -> bool:
    """RBAC's rule: the group, the resource and the verb listed, and the name listed if the rule lists names."""
    return any(
        r.group in rule["apiGroups"]
        and r.resource in rule["resources"]
        and r.verb in rule["verbs"]
        and ("resourceNames" not in rule or r.name in rule["resourceNames"])
        for rule in rules
    )
