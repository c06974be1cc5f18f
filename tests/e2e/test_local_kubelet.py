"""The local kubelet runs gateway-image pods as a kubelet would: probes decide Ready, failures restart with a
back-off, deletion stops gracefully, and the Service stand-in reaches only Ready pods. kwok leaves them alone.

Pods here are written by hand (not by the operator), so each kubelet behaviour is tested on its own; "not yet"
is never waited out with a sleep: a control pod that differs in one field proves enough time has passed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from mcpg_testing import configs, runtimes
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.processes import wait_until

BOUND_S = 60.0
CONFIG = configs.gateway_config()


def config_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gw-config"},
        "stringData": {"gateway.yaml": yaml.safe_dump(CONFIG)},
    }


def pod(name: str, *, args: list[str] | None = None, ready_path: str = "/readyz", **extra: Any) -> dict[str, Any]:
    probe = {"periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1}
    container: dict[str, Any] = {
        "name": "gateway",
        "image": runtimes.GATEWAY_IMAGE,
        "args": args or ["--config", "/etc/mcpg/gateway.yaml", "--port", "8080", "--admin-port", "9090"],
        "ports": [{"name": "http", "containerPort": 8080}, {"name": "admin", "containerPort": 9090}],
        "readinessProbe": {"httpGet": {"path": ready_path, "port": "http"}, **probe},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/mcpg"}],
        **extra,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gw", "pod": name}},
        "spec": {
            "containers": [container],
            "volumes": [{"name": "config", "secret": {"secretName": "gw-config"}}],
            "terminationGracePeriodSeconds": 10,
        },
    }


def apply(plane: ControlPlane, ns: str, *docs: dict[str, Any]) -> None:
    plane.kubectl("-n", ns, "apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))


def get_pod(plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    result = plane.kubectl("-n", ns, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def container_status(p: dict[str, Any]) -> dict[str, Any]:
    statuses = p.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def is_ready(p: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))


def wait_ready(plane: ControlPlane, ns: str, *names: str) -> None:
    plane.kubectl("-n", ns, "wait", "--for=condition=Ready", *(f"pod/{n}" for n in names), f"--timeout={BOUND_S:.0f}s")


def test_a_pod_runs_its_program_with_its_mounted_config_and_becomes_ready_only_through_its_probe(
    control_plane: ControlPlane, namespace: str
) -> None:
    apply(control_plane, namespace, config_secret(), pod("good"), pod("unready", ready_path="/nowhere"))
    wait_ready(control_plane, namespace, "good")
    # "good" passed its 1 s probe, so "unready" has been probed by now too (same period, started together).
    unready = get_pod(control_plane, namespace, "unready")
    assert not is_ready(unready)
    assert container_status(unready)["started"] is True
    good = get_pod(control_plane, namespace, "good")
    assert good["status"]["podIP"].startswith("10.1.")
    record = control_plane.local_pods()[f"{namespace}/good"]
    resp = httpx2.get(f"http://127.0.0.1:{record['ports']['8080']}/readyz")
    assert resp.status_code == 200
    # kwok played no part: it would have made the unready pod Ready at once.
    assert f"{namespace}/unready" not in (control_plane.logs_dir / "kwok.log").read_text()


def test_a_broken_argument_crash_loops_with_a_growing_restart_count(
    control_plane: ControlPlane, namespace: str
) -> None:
    broken = pod("broken", args=["--conifg", "/etc/mcpg/gateway.yaml"])
    apply(control_plane, namespace, config_secret(), broken)

    def restarted_twice() -> bool:
        status = container_status(get_pod(control_plane, namespace, "broken"))
        return int(status.get("restartCount", 0)) >= 2

    wait_until(restarted_twice, BOUND_S, "two restarts of the crashing container")
    status = container_status(get_pod(control_plane, namespace, "broken"))
    assert status["lastState"]["terminated"]["exitCode"] == 2  # argparse's usage error
    assert status["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
    assert not is_ready(get_pod(control_plane, namespace, "broken"))


def test_a_failing_liveness_probe_restarts_the_container(control_plane: ControlPlane, namespace: str) -> None:
    liveness = {"httpGet": {"path": "/no-such-health", "port": "http"}, "periodSeconds": 1, "failureThreshold": 2}
    apply(control_plane, namespace, config_secret(), pod("sick", livenessProbe=liveness))

    def restarted() -> bool:
        return int(container_status(get_pod(control_plane, namespace, "sick")).get("restartCount", 0)) >= 1

    wait_until(restarted, BOUND_S, "a restart after the liveness probe failed")
    assert "failed its liveness probe" in (control_plane.log("mcpg-kubelet")).read_text()


def test_deletion_runs_the_pre_stop_hook_then_stops_the_program_gracefully(
    control_plane: ControlPlane, namespace: str
) -> None:
    pre_stop = {"preStop": {"sleep": {"seconds": 2}}}
    apply(control_plane, namespace, config_secret(), pod("leaving", lifecycle=pre_stop))
    wait_ready(control_plane, namespace, "leaving")
    log = control_plane.local_pods()[f"{namespace}/leaving"]["log"]
    started = time.monotonic()
    control_plane.kubectl("-n", namespace, "delete", "pod", "leaving", f"--timeout={BOUND_S:.0f}s")
    took = time.monotonic() - started
    assert took >= 2.0, "the pod went before its preStop sleep ended"
    assert "gateway stopped" in Path(log).read_text()  # SIGTERM: the gateway's own graceful stop, not a kill


@pytest.mark.parametrize("affinity", ["None", "ClientIP"])
def test_the_service_stand_in_reaches_only_ready_pods_and_honours_client_ip_affinity(
    control_plane: ControlPlane, namespace: str, affinity: str
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "gw"},
        "spec": {
            "selector": {"app": "gw"},
            "sessionAffinity": affinity,
            "ports": [{"name": "admin", "port": 9090, "targetPort": "admin"}],
        },
    }
    pods = [pod("a"), pod("b"), pod("c"), pod("never", ready_path="/nowhere")]
    apply(control_plane, namespace, config_secret(), service, *pods)
    wait_ready(control_plane, namespace, "a", "b", "c")
    url = f"{control_plane.service_url(namespace, 'gw', 'admin')}/metrics"

    def endpoints_ready() -> bool:
        slices = json.loads(control_plane.kubectl("-n", namespace, "get", "endpointslices", "-o", "json").stdout)
        ready = [e for s in slices["items"] for e in s.get("endpoints") or [] if e["conditions"].get("ready")]
        return len(ready) == 3

    wait_until(endpoints_ready, BOUND_S, "three ready endpoints")
    for _ in range(30):
        with httpx2.Client() as http:  # a new connection each time, as separate clients would open
            assert http.get(url).status_code == 200
    connections = [
        json.loads(line)
        for line in (control_plane.logs_dir / "service-connections.jsonl").read_text().splitlines()
        if f'"{namespace}/gw"' in line
    ]
    answered = {c["pod"] for c in connections}
    assert "never" not in answered
    assert answered == ({"a", "b", "c"} if affinity == "None" else {connections[0]["pod"]})
