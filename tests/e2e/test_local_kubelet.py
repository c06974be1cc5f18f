"""The local kubelet runs gateway-image pods as a kubelet would: probes decide Ready, failures restart with a
back-off, deletion stops gracefully, and the Service stand-in reaches only Ready pods. kwok leaves them alone.
A pod's containers share its volumes and its readiness, and a Secret edited under a running pod reaches the files
its containers read, without a restart.

Pods here are written by hand (not by the operator), so each kubelet behaviour is tested on its own; "not yet"
is never waited out with a sleep: a control pod that differs in one field proves enough time has passed.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from mcpg_testing import configs, runtimes
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.pods import apply, get_pod, is_ready
from mcpg_testing.processes import pid_alive, wait_until

BOUND_S = 60.0
CONFIG = configs.gateway_config()
NATS_IMAGE = "nats:2.11-alpine"


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


def container_status(p: dict[str, Any]) -> dict[str, Any]:
    statuses = p.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def wait_ready(plane: ControlPlane, ns: str, *names: str) -> None:
    plane.kubectl("-n", ns, "wait", "--for=condition=Ready", *(f"pod/{n}" for n in names), f"--timeout={BOUND_S:.0f}s")


def statuses(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each container's status by name."""
    return {c["name"]: c for c in p.get("status", {}).get("containerStatuses") or []}


def condition(p: dict[str, Any], type_: str) -> str | None:
    return next((c["status"] for c in p.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def wait_for_pod(
    plane: ControlPlane, ns: str, name: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """The pod as first seen passing `check`: one snapshot, so what else it says held at the same time."""
    seen: dict[str, Any] = {}

    def passes() -> bool:
        seen.clear()
        seen.update(get_pod(plane, ns, name))
        return check(seen)

    wait_until(passes, BOUND_S, what)
    return seen


def argv0(pid: int) -> str:
    """What `pid` runs now, for `pid_alive` to tell it from a later process given the same PID."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()


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


def greeting_pair(name: str, awaited: str) -> dict[str, Any]:
    """A gateway container that writes a greeting into an emptyDir before it execs the gateway, beside a NATS-image
    container that waits for the file `awaited` in that emptyDir, prints it, then execs a nats-server whose port
    its readiness probe knocks on: ready only once the other container has written that file."""
    p = pod(name)
    gateway = p["spec"]["containers"][0]
    script = 'echo "hello from $HOSTNAME" > "$1" && shift && exec mcpg-gateway "$@"'
    gateway["command"] = ["sh", "-c", script, "gateway", "/shared/greeting"]  # then pod()'s args, as "$@"
    gateway["volumeMounts"].append({"name": "shared", "mountPath": "/shared"})
    script = 'until [ -e "$1" ]; do sleep 0.1; done; cat "$1"; exec nats-server --port "$2"'
    sidecar = {
        "name": "sidecar",
        "image": NATS_IMAGE,
        "command": ["sh", "-c", script, "sidecar", f"/shared/{awaited}", "4222"],
        "ports": [{"name": "client", "containerPort": 4222}],
        "readinessProbe": {"tcpSocket": {"port": "client"}, "periodSeconds": 1, "failureThreshold": 1},
        "volumeMounts": [{"name": "shared", "mountPath": "/shared", "readOnly": True}],
    }
    p["spec"]["containers"].append(sidecar)
    p["spec"]["volumes"].append({"name": "shared", "emptyDir": {}})
    return p


def test_a_pods_containers_share_its_volumes_and_it_is_ready_only_once_every_container_is(
    control_plane: ControlPlane, namespace: str
) -> None:
    apply(control_plane, namespace, config_secret(), greeting_pair("pair", "greeting"), greeting_pair("half", "none"))
    wait_ready(control_plane, namespace, "pair")
    pair = get_pod(control_plane, namespace, "pair")
    assert [c["name"] for c in pair["status"]["containerStatuses"]] == ["gateway", "sidecar"]  # in spec order
    assert all(c["ready"] and "running" in c["state"] for c in pair["status"]["containerStatuses"])
    record = control_plane.local_pods()[f"{namespace}/pair"]
    sidecar = record["containers"]["sidecar"]
    assert Path(sidecar["log"]).name == f"{namespace}_pair_sidecar.log"
    # the sidecar read what the gateway container wrote into their emptyDir (it was Ready only after that)
    assert "hello from pair" in Path(sidecar["log"]).read_text()
    assert (record["pid"], record["log"]) == (
        record["containers"]["gateway"]["pid"],
        record["containers"]["gateway"]["log"],
    )
    assert httpx2.get(f"http://127.0.0.1:{record['ports']['8080']}/readyz").status_code == 200

    # "half"'s sidecar waits for a file nobody writes: its gateway alone is ready, and so the pod is not
    half = gateway_ready(control_plane, namespace, "half")
    assert statuses(half)["sidecar"]["ready"] is False
    assert "running" in statuses(half)["sidecar"]["state"]
    assert (condition(half, "ContainersReady"), condition(half, "Ready")) == ("False", "False")

    pids = {name: (c["pid"], argv0(c["pid"])) for name, c in record["containers"].items()}
    control_plane.kubectl("-n", namespace, "delete", "pod", "pair", f"--timeout={BOUND_S:.0f}s")
    # the pod object goes only once both containers' processes have exited and been reaped
    assert {name: pid_alive(*pid) for name, pid in pids.items()} == {"gateway": False, "sidecar": False}
    assert "gateway stopped" in Path(record["log"]).read_text()  # SIGTERM reached the gateway through `exec`


def gateway_ready(plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """The pod once its `gateway` container is ready, whatever its other containers are doing."""
    return wait_for_pod(
        plane, ns, name, lambda p: statuses(p).get("gateway", {}).get("ready") is True, f"{name}'s gateway to be ready"
    )


def test_a_container_whose_image_no_runtime_runs_waits_in_err_image_pull_and_keeps_its_pod_unready(
    control_plane: ControlPlane, namespace: str
) -> None:
    mixed = pod("mixed")
    mixed["spec"]["containers"].append({"name": "box", "image": "busybox:1.36", "command": ["sleep", "1000"]})
    apply(control_plane, namespace, config_secret(), mixed)
    seen = gateway_ready(control_plane, namespace, "mixed")
    waiting = statuses(seen)["box"]["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull"
    assert "'busybox:1.36'" in waiting["message"]
    assert condition(seen, "Ready") == "False"
    control_plane.kubectl("-n", namespace, "delete", "pod", "mixed", f"--timeout={BOUND_S:.0f}s")


NATS_USER = "mcpg"
RELOADER = (
    'last=$(sha256sum "$1"); echo "watching $1"; '
    "while sleep 1; do "
    'now=$(sha256sum "$1"); '
    'if [ "$now" != "$last" ]; then '
    'echo "config changed: reloading"; nats-server --signal "reload=$2" && last=$now; '
    "fi; done"
)
"""The managed bus's config reloader, in the operator's shape: when the config file's hash changes, signal the
server (by the PID file in the volume the two containers share) to reload it."""


def bus_config(password: str) -> dict[str, Any]:
    conf = f'authorization {{ user: {NATS_USER}, password: "{password}" }}\n'
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bus-config"}, "stringData": {"nats.conf": conf}}


def reloading_bus() -> dict[str, Any]:
    """A nats-server with its config from a Secret volume, and a config-reloader container beside it."""
    config = {"name": "config", "mountPath": "/etc/nats"}
    run = {"name": "run", "mountPath": "/var/run/nats"}
    files = ["--config", "/etc/nats/nats.conf", "--pid", "/var/run/nats/nats.pid"]
    server = {
        "name": "nats",
        "image": NATS_IMAGE,
        "command": ["nats-server"],
        "args": [*files, "--port", "4222", "--http_port", "8222"],
        "ports": [{"name": "client", "containerPort": 4222}, {"name": "monitor", "containerPort": 8222}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "monitor"}, "periodSeconds": 1},
        "volumeMounts": [config, run],
    }
    reloader = {
        "name": "config-reloader",
        "image": NATS_IMAGE,
        "command": ["sh", "-c", RELOADER, "config-reloader", "/etc/nats/nats.conf", "/var/run/nats/nats.pid"],
        "volumeMounts": [config | {"readOnly": True}, run],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bus"},
        "spec": {
            "shareProcessNamespace": True,
            "containers": [server, reloader],
            "volumes": [{"name": "config", "secret": {"secretName": "bus-config"}}, {"name": "run", "emptyDir": {}}],
            "terminationGracePeriodSeconds": 10,
        },
    }


def nats_login(port: int, password: str) -> str:
    """The server's answer to a CONNECT as NATS_USER with `password` and a PING: `PONG`, or its `-ERR` line."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        answers = sock.makefile("rb")
        answers.readline()  # INFO
        connect = json.dumps({"user": NATS_USER, "pass": password, "verbose": False, "pedantic": False})
        sock.sendall(f"CONNECT {connect}\r\nPING\r\n".encode())
        return answers.readline().decode().strip()


def test_an_edited_secret_reaches_the_files_a_running_pod_reads_without_restarting_it(
    control_plane: ControlPlane, namespace: str
) -> None:
    first, second = secrets.token_hex(8), secrets.token_hex(8)
    apply(control_plane, namespace, bus_config(first), reloading_bus())
    wait_ready(control_plane, namespace, "bus")
    record = control_plane.local_pods()[f"{namespace}/bus"]
    reloader_log = Path(record["containers"]["config-reloader"]["log"])
    wait_until(lambda: "watching" in reloader_log.read_text(), BOUND_S, "the reloader to hash the config file")
    port = record["ports"]["4222"]
    assert nats_login(port, first) == "PONG"

    apply(control_plane, namespace, bus_config(second))

    conf = Path(record["dir"]) / "volumes" / "config" / "nats.conf"
    wait_until(lambda: second in conf.read_text(), BOUND_S, "the kubelet to rewrite the Secret's file")
    # the running server itself sees it: its reloader noticed the new file and had it reloaded
    wait_until(lambda: nats_login(port, second) == "PONG", BOUND_S, "nats-server to reload the new password")
    assert nats_login(port, first) == "-ERR 'Authorization Violation'"
    assert "config changed: reloading" in reloader_log.read_text()
    bus = get_pod(control_plane, namespace, "bus")
    assert [(c["name"], c["restartCount"]) for c in bus["status"]["containerStatuses"]] == [
        ("nats", 0),
        ("config-reloader", 0),
    ]
    assert control_plane.local_pods()[f"{namespace}/bus"]["containers"] == record["containers"]  # the same PIDs
    log = control_plane.log("mcpg-kubelet").read_text()
    assert f"pod {namespace}/bus: volume config updated from Secret bus-config" in log
