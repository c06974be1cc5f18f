"""Operator replicas on a real control plane, under the chart's RBAC: one leads through a Lease, a standby takes
over when the leader is killed or stopped, and /metrics is reached the way the chart's monitor reaches it.

Each test runs its own replicas with their own Lease (MCPG_LEADER_ELECTION_LEASE_NAME) watching only the test's
namespace, so they neither fight the session's operator (the chart's release, its pods on the real node) for the
chart's Lease nor reconcile its namespaces. The session's operator watches every namespace, this test's too: so
these replicas render the gateway with the session's gateway settings (`OPERATOR_SETTINGS`, what the release's
values set), and the two write the same objects rather than roll the gateway back and forth. They run as
processes beside the cluster, from the operator image's environment (`mcpg_testing.programs.OperatorProcess`),
under the chart's ServiceAccount: a test can kill, stop and time each one, and give it its own port.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcpg_operator import objects
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.fixtures import OPERATOR_SETTINGS
from mcpg_testing.images import ImageEnv
from mcpg_testing.installation import CHART, OPERATOR_NAMESPACE
from mcpg_testing.manifests import polled
from mcpg_testing.processes import free_ports, wait_until
from mcpg_testing.programs import OperatorProcess

LEASE_S, RENEW_S, RETRY_S = 4.0, 3.0, 1.0
"""Short timings so that a takeover after a kill takes seconds (the chart's are 15 / 10 / 2)."""
SLACK_S = 1.5
"""What a takeover may take beyond the algorithm's bound: a request or two to the API server, and this test's own
polling, on 2 busy cores."""
GATEWAY_SETTINGS = {k: v for k, v in OPERATOR_SETTINGS.items() if k.startswith("MCPG_GATEWAY_")}
BOUND = "120s"
DONE = ("success", "requeue", "requeue_after")
"""controller-runtime's results of a pass that did not fail."""


def timings(lease_s: float, renew_s: float, retry_s: float) -> dict[str, str]:
    return {
        "MCPG_LEADER_ELECTION_LEASE_DURATION_SECONDS": str(lease_s),
        "MCPG_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": str(renew_s),
        "MCPG_LEADER_ELECTION_RETRY_PERIOD_SECONDS": str(retry_s),
    }


def settings(namespace: str, lease: str, **extra: str) -> dict[str, str]:
    return {
        "MCPG_WATCH_NAMESPACES": namespace,
        "MCPG_LEADER_ELECTION_LEASE_NAME": lease,
        **GATEWAY_SETTINGS,
        "MCPG_RESYNC_SECONDS": "5",
        **timings(LEASE_S, RENEW_S, RETRY_S),
        **extra,
    }


@contextlib.contextmanager
def replicas(
    plane: ControlPlane, image: ImageEnv, logs: Path, env: dict[str, str], names: tuple[str, ...] = ("a", "b")
) -> Iterator[list[OperatorProcess]]:
    """Replicas started at once (one log each, named after the replica), stopped at the end of the block."""
    with contextlib.ExitStack() as stack:
        started = [
            stack.enter_context(
                OperatorProcess(image, plane.operator_kubeconfig, logs / f"{name}.log", env | {"POD_NAME": name})
            )
            for name in names
        ]
        yield started


def elected(processes: list[OperatorProcess]) -> tuple[OperatorProcess, OperatorProcess]:
    """(leader, standby) of two replicas, once one leads and the other stands by."""
    wait_until(lambda: any(p.leading() for p in processes), 60, "a replica to lead", interval=0.2)
    [leader] = [p for p in processes if p.leading()]
    [standby] = [p for p in processes if p is not leader]
    leader.wait_ready()
    standby.wait_standby()
    return leader, standby


def lease(plane: ControlPlane, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        plane.kubectl("-n", OPERATOR_NAMESPACE, "get", "lease", name, "-o", "json").stdout
    )["spec"]
    return spec


def micro_time(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()


def takeover_s(standby: OperatorProcess, since: float, bound_s: float) -> float:
    """Seconds from `since` (monotonic) until `standby` says it holds the Lease; fails after `bound_s`."""
    wait_until(lambda: _holds(standby), bound_s, f"{standby.pod_name} to hold the Lease", interval=0.05)
    return time.monotonic() - since


def _holds(process: OperatorProcess) -> bool:
    return any(v == 1.0 for _, v in process.metrics().get("leader_election_master_status", []))


def apply_and_wait_ready(plane: ControlPlane, namespace: str, name: str) -> None:
    plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(polled(name)))
    plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", f"resourcewatch/{name}", f"--timeout={BOUND}")


def served(process: OperatorProcess) -> float:
    found = process.metrics().get("mcpg_operator_resourcewatches", [])
    return sum(v for labels, v in found if labels == {"ready": "True", "reason": "Served"})


def successes(process: OperatorProcess) -> float:
    """Passes that ended without an error: `success`, or `requeue_after` (a pass that looks again soon, as one
    does while a Secret its watches name, such as the optional mcpg-gateway-auth, does not exist)."""
    found = process.metrics().get("controller_runtime_reconcile_total", [])
    return sum(v for labels, v in found if labels["controller"] == "gateway" and labels["result"] in DONE)


# --- a leader lost, a leader stopped -----------------------------------------------------------------------


def test_a_killed_leaders_standby_takes_the_lease_within_its_duration_and_reconciles(
    control_plane: ControlPlane, chart_rbac: None, operator_env: ImageEnv, namespace: str, tmp_path: Path
) -> None:
    name = f"ha-kill-{namespace}"
    with replicas(control_plane, operator_env, tmp_path, settings(namespace, name)) as processes:
        leader, standby = elected(processes)
        assert lease(control_plane, name)["holderIdentity"] == leader.pod_name
        assert successes(standby) == 0
        killed = time.monotonic()
        leader.kill()
        took = takeover_s(standby, killed, LEASE_S + RETRY_S + SLACK_S)
        print(f"takeover after SIGKILL: {took:.2f}s (lease {LEASE_S:g}s, retry {RETRY_S:g}s)")
        assert lease(control_plane, name)["holderIdentity"] == standby.pod_name
        standby.wait_ready()
        apply_and_wait_ready(control_plane, namespace, "after-the-kill")
        assert successes(standby) >= 1  # it reconciled (it watches this namespace alone)


def test_a_stopped_leader_releases_the_lease_and_the_standby_takes_it_at_once(
    control_plane: ControlPlane, chart_rbac: None, operator_env: ImageEnv, namespace: str, tmp_path: Path
) -> None:
    # The chart's own timings: without the release, the standby would wait out 15 s.
    name, lease_s = f"ha-stop-{namespace}", 15.0
    env = settings(namespace, name, **timings(lease_s, 10.0, RETRY_S))
    with replicas(control_plane, operator_env, tmp_path, env) as processes:
        leader, standby = elected(processes)
        before = lease(control_plane, name)
        asked, asked_wall = time.monotonic(), time.time()
        leader.stop()  # SIGTERM
        assert leader.proc.returncode == 0
        took = takeover_s(standby, asked, lease_s / 2)
        print(f"takeover after SIGTERM: {took:.2f}s (lease {lease_s:g}s, retry {RETRY_S:g}s)")
        after = lease(control_plane, name)
        assert (before["holderIdentity"], after["holderIdentity"]) == (leader.pod_name, standby.pod_name)
        assert after["leaseTransitions"] == before["leaseTransitions"] + 1
        assert micro_time(after["acquireTime"]) > micro_time(before["acquireTime"])
        assert 0 <= micro_time(after["acquireTime"]) - asked_wall < lease_s / 2
        assert micro_time(after["renewTime"]) >= micro_time(after["acquireTime"])
        standby.wait_ready()


def test_a_leader_that_finds_its_lease_taken_stops_at_once_and_exits_non_zero(
    control_plane: ControlPlane, chart_rbac: None, operator_env: ImageEnv, namespace: str, tmp_path: Path
) -> None:
    name = f"ha-lost-{namespace}"
    with replicas(control_plane, operator_env, tmp_path, settings(namespace, name), names=("a",)) as [leader]:
        leader.wait_ready()
        taken = {"spec": {"holderIdentity": "someone-else"}}  # as if it had missed its renewals for a lease
        control_plane.kubectl("-n", OPERATOR_NAMESPACE, "patch", "lease", name, "--type=merge", "-p", json.dumps(taken))
        # It sees the new holder at its next renewal, and stops without waiting for its renew deadline.
        assert leader.proc.wait(timeout=RETRY_S + SLACK_S + 5) == 1
        assert lease(control_plane, name)["holderIdentity"] == "someone-else"  # not released: not its own
    log = (tmp_path / "a.log").read_text()
    assert "lost Lease" in log
    assert "held by someone-else" in log


# --- /metrics, reached as the chart's monitors reach it --------------------------------------------------------


def helm_template(plane: ControlPlane, namespace: str, *values: str) -> list[dict[str, Any]]:
    argv = [str(plane.binary("helm")), "template", "t", str(CHART), "--namespace", namespace, *values]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def scraped_args(docs: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    """The operator container's args, the index of the one that binds the port the ServiceMonitor scrapes, and
    the path it scrapes: monitor endpoint port name -> Service port of that name -> its targetPort -> the
    container port of that name -> the argument that binds that port."""
    monitor = one(docs, "ServiceMonitor", "t-operator")
    [endpoint] = monitor["spec"]["endpoints"]
    service = one(docs, "Service", "t-operator")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [service_port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    [container] = one(docs, "Deployment", "t-operator")["spec"]["template"]["spec"]["containers"]
    [port] = [p for p in container["ports"] if p["name"] == service_port["targetPort"]]
    args = list(container["args"])
    [index] = [i for i, a in enumerate(args) if a.startswith("--") and a.endswith(f":{port['containerPort']}")]
    return args, index, endpoint["path"]


def test_metrics_are_prometheus_text_on_the_port_the_charts_service_monitor_scrapes(
    control_plane: ControlPlane, chart_rbac: None, operator_env: ImageEnv, namespace: str, tmp_path: Path
) -> None:
    docs = helm_template(control_plane, namespace, "--set", "metrics.serviceMonitor.enabled=true")
    args, index, path = scraped_args(docs)
    assert path == "/metrics"
    # The one remap: the rendered port (8080 in every pod) becomes a free one here; the flag and host stay.
    flag_and_host, _, _ = args[index].rpartition(":")
    [port] = free_ports(1)
    args[index] = f"{flag_and_host}:{port}"
    env = settings(namespace, f"ha-metrics-{namespace}", POD_NAME="metrics")
    with OperatorProcess(operator_env, control_plane.operator_kubeconfig, tmp_path / "operator.log", env, args) as op:
        assert op.metrics_url == f"http://127.0.0.1:{port}{path}"
        op.wait_ready()
        apply_and_wait_ready(control_plane, namespace, "counted")
        # Its own last pass saw it Served (the session's operator may have written the status first).
        wait_until(lambda: served(op) == 1, 60, "the watch counted as Served", interval=0.2)
        with urllib.request.urlopen(op.metrics_url, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = resp.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {
        "controller_runtime_reconcile",
        "controller_runtime_reconcile_errors",
        "controller_runtime_reconcile_time_seconds",
        "controller_runtime_active_workers",
        "leader_election_master_status",
        "mcpg_operator_resourcewatches",
        "mcpg_operator_gateway_configurations_written",
        "mcpg_operator_gateway_configurations_acknowledged",
        "mcpg_operator_gateway_acknowledgement_duration_seconds",
        "mcpg_operator_gateway_pods",
        "mcpg_operator_gateway_pods_acknowledged",
    } <= families.keys()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    reconciled = [
        samples.get(("controller_runtime_reconcile_total", (("controller", "gateway"), ("result", r))), 0.0)
        for r in DONE
    ]
    assert sum(reconciled) >= 1
    assert samples[("controller_runtime_reconcile_time_seconds_count", (("controller", "gateway"),))] >= 1
    assert samples[("leader_election_master_status", (("name", f"ha-metrics-{namespace}"),))] == 1
    assert samples[("mcpg_operator_resourcewatches", (("ready", "True"), ("reason", "Served")))] == 1
    # The pass that saw it Served counted the gateway's pods and their acknowledgements (whichever operator wrote the
    # configuration: the session's renders the same one, so this one may have had nothing to write).
    assert samples[("mcpg_operator_gateway_pods", ())] >= 1
    assert samples[("mcpg_operator_gateway_pods_acknowledged", ())] == samples[("mcpg_operator_gateway_pods", ())]


@pytest.mark.parametrize("watch", [[], ["shop", "mail"]], ids=["every namespace", "listed namespaces"])
def test_the_gateway_monitor_scrapes_the_admin_metrics_of_the_services_the_operator_renders(
    control_plane: ControlPlane, watch: list[str]
) -> None:
    values = ["--set", "gateway.serviceMonitor.enabled=true"]
    values += ["--set", f"watchNamespaces={{{','.join(watch)}}}"] if watch else []
    monitor = one(helm_template(control_plane, "ops", *values), "ServiceMonitor", "t-operator-gateways")
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("admin", "/metrics")
    rendered = objects.service("shop", [], GatewayDefaults())
    assert monitor["spec"]["selector"]["matchLabels"].items() <= rendered["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= {**objects.MANAGED, **objects.SELECTOR}.items()
    [admin] = [p for p in rendered["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert admin["port"] == objects.ADMIN_PORT
    assert monitor["spec"]["namespaceSelector"] == ({"matchNames": watch} if watch else {"any": True})


def test_no_monitor_is_rendered_unless_asked(control_plane: ControlPlane) -> None:
    assert not [d for d in helm_template(control_plane, "ops") if d["kind"] == "ServiceMonitor"]
