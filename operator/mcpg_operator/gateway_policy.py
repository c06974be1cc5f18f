"""The gateway's optional PodDisruptionBudget and NetworkPolicy (an McpGateway opts in to each), and their writes.

Pure. Both are named like the gateway (`objects.NAME`), select its pods, and are owned by its ResourceWatches like
the rest of its objects. One that is no longer wanted (disabled, or its McpGateway deleted) is deleted, and only
the operator's own: `observed.Snapshot` holds one only when it carries the operator's managed-by labels.

A NetworkPolicy cannot name hosts, so the egress it allows is by port, to any address: DNS (53, UDP and TCP),
the API server (`NetworkPolicySpec.api_server_ports`: the gateway follows its configuration Secret through the
API, and a policy cannot select the API server, which is no pod), and the port of every URL the rendered
configuration names (each backend, database, NATS server) and of the bus when the namespace's replicas share one.
A port the configuration does not state is the scheme's usual one; a URL whose port is a template variable, or
whose scheme has no usual port, cannot be allowed this way. Ingress limited to some peers still lets the
operator's namespace reach the admin port, where the operator asks each pod what it serves.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

from mcpg_operator import actions as w
from mcpg_operator import bus, objects, observed
from mcpg_operator.gateway_settings import DisruptionBudgetSpec, NetworkPolicySpec, Shape

NETWORKING = "networking.k8s.io"
DNS_PORT = 53
SCHEME_PORTS = {
    "http": 80,
    "https": 443,
    "nats": 4222,
    "tls": 4222,
    "postgres": 5432,
    "postgresql": 5432,
    "mysql": 3306,
    "mariadb": 3306,
    "mssql": 1433,
    "redis": 6379,
    "rediss": 6379,
}
"""The port a URL of each scheme reaches when it names none; a driver suffix (`postgresql+asyncpg`) is ignored."""


def _meta(namespace: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": objects.NAME,
        "namespace": namespace,
        "labels": {**objects.MANAGED, **objects.SELECTOR},
        "ownerReferences": owners,
    }


def disruption_budget(namespace: str, owners: list[dict[str, Any]], spec: DisruptionBudgetSpec) -> dict[str, Any]:
    budget: dict[str, Any] = {"selector": {"matchLabels": dict(objects.SELECTOR)}}
    if spec.min_available is not None:
        budget["minAvailable"] = spec.min_available
    else:  # one pod at a time by default: a drain proceeds, and the rest keep serving
        budget["maxUnavailable"] = 1 if spec.max_unavailable is None else spec.max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(namespace, owners),
        "spec": budget,
    }


def network_policy(
    namespace: str,
    owners: list[dict[str, Any]],
    spec: NetworkPolicySpec,
    config: dict[str, Any],
    wiring: bus.Wiring | None,
    operator_namespace: str | None = None,
) -> dict[str, Any]:
    """Ingress to the gateway's two ports only (and to the admin port from `operator_namespace`, when the policy
    names who may reach the gateway); egress to DNS, the API server and the ports the configuration needs."""
    ingress: list[dict[str, Any]] = [{"ports": [_tcp(objects.PUBLIC_PORT), _tcp(objects.ADMIN_PORT)]}]
    if spec.ingress_from:
        ingress[0]["from"] = [dict(peer) for peer in spec.ingress_from]
        if operator_namespace:
            ingress.append({"ports": [_tcp(objects.ADMIN_PORT)], "from": [_namespace(operator_namespace)]})
    egress = [{"ports": [{"port": DNS_PORT, "protocol": "UDP"}, _tcp(DNS_PORT)]}]
    egress.append({"ports": [_tcp(p) for p in sorted(set(spec.api_server_ports))]})
    ports = egress_ports(config, wiring)
    if ports:
        egress.append({"ports": [_tcp(p) for p in ports]})
    return {
        "apiVersion": f"{NETWORKING}/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(namespace, owners),
        "spec": {
            "podSelector": {"matchLabels": dict(objects.SELECTOR)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def _tcp(port: int) -> dict[str, Any]:
    return {"port": port, "protocol": "TCP"}


def _namespace(name: str) -> dict[str, Any]:
    """A peer: every pod of namespace `name` (the API server sets this label on every namespace)."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def egress_ports(config: dict[str, Any], wiring: bus.Wiring | None) -> list[int]:
    """Every TCP port the gateway connects to, sorted: each URL in the configuration, and the bus."""
    urls = [u for u in _urls(config) if not u.startswith("${")]  # `${env.X}`: the bus, taken from `wiring`
    if wiring is not None:
        urls.append(wiring.url)
    return sorted({p for p in map(url_port, urls) if p is not None})


def _urls(node: Any) -> Iterator[str]:
    """Every string under a `url` key, anywhere in the configuration (backends, strategies, `gateway.nats`)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "url" and isinstance(value, str):
                yield value
            else:
                yield from _urls(value)
    elif isinstance(node, list):
        for item in node:
            yield from _urls(item)


def url_port(url: str) -> int | None:
    """The port `url` connects to: the one it states, else its scheme's usual one; None if neither is known."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a template variable as the port (`{port}`): unknowable here
        return None
    return port if port is not None else SCHEME_PORTS.get(parts.scheme.split("+", 1)[0].lower())


def writes(
    snap: observed.Snapshot,
    shaped: Shape,
    owners: list[dict[str, Any]],
    config: dict[str, Any],
    wiring: bus.Wiring | None,
) -> list[w.Write]:
    """Apply what is wanted and differs; delete the operator's own one that is no longer wanted."""
    ns = snap.namespace
    budget = shaped.disruption_budget
    policy = shaped.network_policy
    wanted = (
        (
            snap.disruption_budget,
            w.Ref("poddisruptionbudgets", objects.NAME, "policy"),
            disruption_budget(ns, owners, budget) if budget else None,
        ),
        (
            snap.network_policy,
            w.Ref("networkpolicies", objects.NAME, NETWORKING),
            network_policy(ns, owners, policy, config, wiring, shaped.defaults.operator_namespace) if policy else None,
        ),
    )
    out: list[w.Write] = []
    for live, ref, body in wanted:
        if body is None:
            out += [w.DeleteObject(ref)] if live is not None else []
        elif live is None or not live.covers(body):
            out.append(w.ApplyObject(w.Stage.GATEWAY, ref, body))
    return out
