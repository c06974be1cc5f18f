"""The Helm chart as a user meets it: lint, template, a typo refused, install, and uninstall.

The session's operator is the chart installed on the real node (`fixtures.operators`); the second release
installed here, with the chart's defaults (an image this machine cannot pull), runs its pods on kwok's fake node
(`installation.on_kwok`): what is tested is what helm creates and removes, not a second operator.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_operator import settings
from mcpg_testing import installation
from mcpg_testing.controlplane import ControlPlane

CHART = Path(__file__).parents[2] / "charts" / "mcpg"


def helm(plane: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(plane.binary("helm")), "--kubeconfig", str(plane.kubeconfig), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=180)


def test_the_chart_lints_clean(control_plane: ControlPlane) -> None:
    result = helm(control_plane, "lint", str(CHART), "--strict")
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_a_typo_in_values_fails_with_a_message_naming_it(control_plane: ControlPlane) -> None:
    result = helm(control_plane, "template", "t", str(CHART), "--set", "gateway.replica=2", check=False)
    assert result.returncode != 0
    assert "additional properties 'replica' not allowed" in result.stderr


@pytest.mark.parametrize("port", ["httpNodePort", "adminNodePort"])
def test_a_node_port_with_a_cluster_ip_service_fails_with_a_message_naming_it(
    control_plane: ControlPlane, port: str
) -> None:
    result = helm(control_plane, "template", "t", str(CHART), "--set", f"gateway.service.{port}=30080", check=False)
    assert result.returncode != 0
    assert f"at '/gateway/service/{port}': got number, want null" in result.stderr
    as_node_port = ("--set", "gateway.service.type=NodePort", "--set", f"gateway.service.{port}=30080")
    assert helm(control_plane, "template", "t", str(CHART), *as_node_port).returncode == 0


def test_watching_a_list_of_namespaces_binds_the_role_in_each_and_nowhere_else(control_plane: ControlPlane) -> None:
    out = helm(control_plane, "template", "t", str(CHART), "--set", "watchNamespaces={shop,mail}").stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert [d for d in bindings if d["roleRef"]["kind"] == "ClusterRole"] == []  # nothing cluster-wide
    # The operator's Role in each watched namespace; the leader-election Lease and the managed bus in the
    # release's own namespace only.
    assert sorted((d["metadata"]["name"], d["metadata"]["namespace"]) for d in bindings) == [
        ("t-operator", "mail"),
        ("t-operator", "shop"),
        ("t-operator-bus", "default"),
        ("t-operator-leader-election", "default"),
    ]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MCPG_WATCH_NAMESPACES"] == "shop,mail"


EXTERNAL_BUS = (
    *("--set", "gateway.replicas=3", "--set", "gateway.bus.mode=external"),
    *("--set", "gateway.bus.url=tls://nats.example:4222", "--set", "gateway.bus.credentialsSecret=nats-creds"),
)


@pytest.mark.parametrize(
    ("values", "kinds"),
    [
        ((), []),
        (("--set", "gateway.pluginKinds={udp_datagram}"), ["udp_datagram"]),
        (("--set", "gateway.replicas=3"), []),
        (EXTERNAL_BUS, []),
    ],
)
def test_the_environment_the_chart_renders_is_one_the_operator_accepts(
    control_plane: ControlPlane, values: tuple[str, ...], kinds: list[str]
) -> None:
    out = helm(control_plane, "template", "t", str(CHART), "--namespace", "ops", *values).stdout
    [deployment] = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    pod = {"metadata.name": "t-operator-5d8f7c-x2x4k", "metadata.namespace": "ops"}  # what the downward API gives
    env = {
        e["name"]: e["value"] if "value" in e else pod[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    loaded = settings.load(env)  # raises SettingsError naming any variable the operator could not use
    assert loaded.gateway.plugin_kinds == kinds
    election = loaded.leader_election
    assert (election.enabled, election.namespace, election.identity) == (True, "ops", pod["metadata.name"])
    assert (election.lease_name, election.lease_s, election.renew_s, election.retry_s) == ("t-operator", 15, 10, 2)


def test_two_replicas_by_default_rolled_without_downtime_and_never_drained_together(
    control_plane: ControlPlane,
) -> None:
    docs = [d for d in yaml.safe_load_all(helm(control_plane, "template", "t", str(CHART)).stdout) if d]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    probes = {k: (v["httpGet"]["path"], v["httpGet"]["port"]) for k, v in container.items() if k.endswith("Probe")}
    assert probes == {"livenessProbe": ("/healthz", "metrics"), "readinessProbe": ("/readyz", "metrics")}
    [pdb] = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
    [role] = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "t-operator-leader-election"]
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]}
    ]
    one = [
        d
        for d in yaml.safe_load_all(helm(control_plane, "template", "t", str(CHART), "--set", "replicas=1").stdout)
        if d
    ]
    assert not [d for d in one if d["kind"] == "PodDisruptionBudget"]


def test_more_than_one_replica_without_leader_election_is_refused(control_plane: ControlPlane) -> None:
    values = ("--set", "replicas=2", "--set", "leaderElection.enabled=false")
    result = helm(control_plane, "template", "t", str(CHART), *values, check=False)
    assert result.returncode != 0
    assert "replicas above 1 need leaderElection.enabled" in result.stderr
    single = ("--set", "replicas=1", "--set", "leaderElection.enabled=false")
    docs = [d for d in yaml.safe_load_all(helm(control_plane, "template", "t", str(CHART), *single).stdout) if d]
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget" or d["metadata"]["name"].endswith("-election")]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not settings.load({k: v for k, v in env.items() if v is not None}).leader_election.enabled


def test_helm_install_creates_every_object_and_uninstall_removes_them(
    control_plane: ControlPlane, namespace: str
) -> None:
    release = "chart-e2e"
    installation.on_kwok(control_plane, namespace)
    helm(control_plane, "install", release, str(CHART), "--namespace", namespace, "--wait=false")
    expected = {
        ("Deployment", f"{release}-operator"),
        ("ServiceAccount", f"{release}-operator"),
        ("Service", f"{release}-operator"),
        ("ClusterRole", f"{release}-operator"),
        ("ClusterRoleBinding", f"{release}-operator"),
        ("Role", f"{release}-operator-leader-election"),
        ("RoleBinding", f"{release}-operator-leader-election"),
        ("Role", f"{release}-operator-bus"),
        ("RoleBinding", f"{release}-operator-bus"),
        ("PodDisruptionBudget", f"{release}-operator"),
    }
    manifest = helm(control_plane, "get", "manifest", release, "--namespace", namespace).stdout
    assert {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(manifest) if d} == expected
    for kind, name in expected:
        ns = [] if kind.startswith("Cluster") else ["-n", namespace]
        control_plane.kubectl(*ns, "get", kind.lower(), name)  # kubectl takes a kind's lowercase name
    control_plane.kubectl("-n", namespace, "rollout", "status", f"deployment/{release}-operator", "--timeout=90s")
    assert "Next:" in helm(control_plane, "status", release, "--namespace", namespace).stdout  # NOTES.txt
    helm(control_plane, "uninstall", release, "--namespace", namespace, "--wait")
    for kind, name in expected:
        ns = [] if kind.startswith("Cluster") else ["-n", namespace]
        assert control_plane.kubectl(*ns, "get", kind.lower(), name, check=False).returncode != 0, (kind, name)
    crds = json.loads(control_plane.kubectl("get", "crd", "-o", "json").stdout)["items"]
    assert {"resourcewatches.mcpg.dev", "webhooktokens.mcpg.dev"} <= {c["metadata"]["name"] for c in crds}


@pytest.mark.parametrize(
    "values", [{}, {"watchNamespaces": ["a"], "gateway": {"service": {"type": "NodePort", "httpNodePort": 30080}}}]
)
def test_every_rendered_object_passes_server_side_validation(
    control_plane: ControlPlane, namespace: str, values: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    out = helm(control_plane, "template", "t", str(CHART), "--namespace", namespace, "--values", str(path)).stdout
    # The Role and RoleBinding of each watched namespace go to a namespace that does not exist here.
    watched = set(values.get("watchNamespaces", []))
    docs = [d for d in yaml.safe_load_all(out) if d and d["metadata"].get("namespace") not in watched]
    result = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs), check=False)
    assert result.returncode == 0, result.stderr


def test_the_bus_settings_reach_the_operator_and_its_role_reaches_only_the_bus_objects(
    control_plane: ControlPlane,
) -> None:
    out = helm(control_plane, "template", "t", str(CHART), "--namespace", "ops", *EXTERNAL_BUS).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["MCPG_GATEWAY_REPLICAS"], env["MCPG_BUS_MODE"]) == ("3", "external")
    assert (env["MCPG_BUS_URL"], env["MCPG_BUS_CREDENTIALS_SECRET"]) == ("tls://nats.example:4222", "nats-creds")
    assert not [d for d in docs if d["metadata"]["name"] == "t-operator-bus"]  # external: the operator runs no NATS
    managed = [d for d in yaml.safe_load_all(helm(control_plane, "template", "t", str(CHART)).stdout) if d]
    [role] = [d for d in managed if d["kind"] == "Role" and d["metadata"]["name"] == "t-operator-bus"]
    named = [r for r in role["rules"] if "resourceNames" in r]
    assert {n for r in named for n in r["resourceNames"]} == {"mcpg-bus", "mcpg-bus-config", "mcpg-bus-key"}
    assert all(r["verbs"] == ["create"] for r in role["rules"] if "resourceNames" not in r)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (("--set", "gateway.bus.mode=external"), "at '/gateway/bus/url': minLength"),
        (
            (
                "--set",
                "gateway.bus.mode=external",
                "--set",
                "gateway.bus.credentialsSecret=c",
                "--set",
                "gateway.bus.url=nats://gw:hunter2@nats.example:4222",
            ),
            "gateway.bus.url must not carry credentials",
        ),
        (
            (
                "--set",
                "gateway.bus.mode=external",
                "--set",
                "gateway.bus.credentialsSecret=c",
                "--set",
                "gateway.bus.url=http://hunter2.example",
            ),
            "expected nats://host:port or tls://host:port",
        ),
        (("--set", "gateway.bus.url=nats://nats.example:4222"), "only used with gateway.bus.mode=external"),
    ],
)
def test_a_bad_bus_value_is_refused_without_echoing_the_url(
    control_plane: ControlPlane, values: tuple[str, ...], message: str
) -> None:
    result = helm(control_plane, "template", "t", str(CHART), *values, check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert "hunter2" not in result.stderr


def test_the_dashboard_and_the_alerts_render_when_enabled_and_only_then(control_plane: ControlPlane) -> None:
    values = ["--set", "dashboards.enabled=true", "--set", "prometheusRule.enabled=true"]
    values += ["--set", "dashboards.namespace=monitoring", "--set", "prometheusRule.labels.release=prom"]
    out = helm(control_plane, "template", "t", str(CHART), "--namespace", "ops", *values).stdout
    docs = {d["kind"]: d for d in yaml.safe_load_all(out) if d and d["kind"] in {"ConfigMap", "PrometheusRule"}}
    dashboard = docs["ConfigMap"]
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # what Grafana's sidecar looks for
    shipped = json.loads((CHART / "dashboards" / "mcpg.json").read_text())
    assert json.loads(dashboard["data"]["mcpg.json"]) == shipped
    rule = docs["PrometheusRule"]
    assert (rule["metadata"]["namespace"], rule["metadata"]["labels"]["release"]) == ("ops", "prom")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == {"McpgPollFailuresRising", "McpgWatchSourceDown", "McpgGatewayUnavailable",
                           "McpgReconcileErrors", "McpgTokenRotationStuck"}  # fmt: skip
    for alert in alerts.values():
        assert {"summary", "description", "runbook"} <= set(alert["annotations"]), alert["alert"]
    assert alerts["McpgTokenRotationStuck"]["for"] == "30m"
    # Prometheus' own template syntax survives Helm's: the summary still names the alert's labels.
    assert "{{ $labels.namespace }}" in alerts["McpgGatewayUnavailable"]["annotations"]["summary"]
    result = control_plane.kubectl("apply", "--dry-run=client", "-f", "-", stdin=yaml.safe_dump(dashboard), check=False)
    assert result.returncode == 0, result.stderr
    default = helm(control_plane, "template", "t", str(CHART)).stdout
    assert not {"ConfigMap", "PrometheusRule"} & {d["kind"] for d in yaml.safe_load_all(default) if d}
