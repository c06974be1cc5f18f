"""The operator installed as a user installs it: `helm install` of `charts/mcpg`, its pods on the real node.

`OperatorRelease` installs the chart (its CRDs, RBAC, Deployment of two replicas with leader election, from the
operator image built from its Dockerfile) with a values file, waits for the Deployment to be Available and one
replica to lead, and gives a test what it needs of the replicas: which one leads (the Lease), each one's
/metrics (at its pod IP), every replica's log, and `kill_leader()`, which SIGKILLs the leading container's
process (no clean stop, no Lease released: as an OOM kill ends it) and deletes its pod at once, so the
ReplicaSet's replacement, not a restart of the same pod, stands in for it. `arm_kill()` finds that process
ahead of time, for a test that must kill it within a short window.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcpg_testing import installation
from mcpg_testing.controlplane import ControlPlane, ControlPlaneError
from mcpg_testing.processes import WaitTimeout, wait_until
from mcpg_testing.programs import LEADER, RUNNING, ProgramError, _text

RELEASE = "mcpg"
LEASE = "mcpg-operator"  # the chart's `mcpg.name`: the Lease the replicas contend for
SELECTOR = "app.kubernetes.io/name=mcpg-operator"
DEPLOYMENT = "mcpg-operator"
REPLICAS = 2
"""The chart's default `replicas`, when the values leave it out."""
METRICS_PORT = 8080
INSTALL_TIMEOUT = "300s"
START_S = 180.0


@dataclass(frozen=True, slots=True)
class OperatorPod:
    """One replica, as a test sees it: its pod's name (its Lease identity) and address."""

    pod_name: str
    ip: str

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Its /metrics now: sample name -> (labels, value) of each sample; empty if it does not answer."""
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(_text(f"http://{self.ip}:{METRICS_PORT}/metrics") or ""):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out

    def leading(self) -> bool:
        """It holds the Lease and runs the reconciler (every Lease gauge 1, the reconciler gauge 1)."""
        found = self.metrics()
        leader = [v for _, v in found.get(LEADER, [])]
        return [v for _, v in found.get(RUNNING, [])] == [1.0] and all(v == 1.0 for v in leader)


@dataclass
class ArmedKill:
    """A leading replica's process, found ahead of time (`OperatorRelease.arm_kill`): `fire` SIGKILLs it at once, from
    any thread (no request to make first, so a test can kill within a window of a fraction of a second); `finish`
    then keeps what it logged and deletes its pod, so the ReplicaSet's replacement stands in for it."""

    release: OperatorRelease
    pod: OperatorPod
    pid: int
    killed_at: float | None = None
    """When `fire` sent the signal (monotonic); None until then."""

    def fire(self) -> float:
        """SIGKILL the process (once); the time of the kill."""
        if self.killed_at is None:
            os.kill(self.pid, signal.SIGKILL)
            self.killed_at = time.monotonic()
        return self.killed_at

    def finish(self) -> None:
        """After `fire`: its log kept (its pod's logs go with the pod), its pod deleted without waiting."""
        assert self.killed_at is not None, "finish() before fire()"
        self.release._finish_kill(self.pod)


class OperatorRelease:
    def __init__(self, plane: ControlPlane, values: Mapping[str, Any], workdir: Path) -> None:
        self.plane, self.values, self.workdir = plane, dict(values), workdir
        self.killed_logs: list[str] = []
        """What the containers `kill_leader` and `stop` ended had printed: their pods' logs go with the pods."""

    # -- install ---------------------------------------------------------------------------------------------

    def install(self) -> None:
        """`helm install` (or upgrade) the chart, wait for its Deployment to be Available and a replica to lead."""
        values_file = self.workdir / "values.yaml"
        values_file.write_text(yaml.safe_dump(self.values, sort_keys=False))
        self.helm(
            "upgrade", "--install", RELEASE, str(installation.CHART),
            "--namespace", installation.OPERATOR_NAMESPACE, "--create-namespace",
            "--values", str(values_file), "--wait", f"--timeout={INSTALL_TIMEOUT}",
        )  # fmt: skip
        self.plane.kubectl(
            "-n", installation.OPERATOR_NAMESPACE, "wait", "deployment", "-l", SELECTOR,
            "--for=condition=Available", f"--timeout={INSTALL_TIMEOUT}",
        )  # fmt: skip
        self.leader()

    def uninstall(self) -> None:
        self.helm("uninstall", RELEASE, "--namespace", installation.OPERATOR_NAMESPACE, "--wait", check=False)

    def helm(self, *args: str, check: bool = True) -> str:
        env = {"KUBECONFIG": str(self.plane.kubeconfig), "HELM_CACHE_HOME": str(self.workdir / "helm-cache")}
        env |= {"HELM_CONFIG_HOME": str(self.workdir / "helm-config"), "PATH": os.environ.get("PATH", "")}
        env["HOME"] = str(self.workdir)  # client-go's discovery cache goes to $HOME/.kube, else to the cwd
        result = subprocess.run(
            [str(self.plane.binary("helm")), *args], capture_output=True, text=True, env=env, timeout=600, check=False
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result.stdout

    # -- the replicas ----------------------------------------------------------------------------------------

    def pods(self) -> list[dict[str, Any]]:
        """The release's operator pods that are not being deleted."""
        listed = self.plane.kubectl("-n", installation.OPERATOR_NAMESPACE, "get", "pods", "-l", SELECTOR, "-o", "json")
        items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
        return [p for p in items if p["metadata"].get("deletionTimestamp") is None]

    @property
    def processes(self) -> list[OperatorPod]:
        """Every running replica, by its pod."""
        return [
            OperatorPod(p["metadata"]["name"], p["status"]["podIP"]) for p in self.pods() if p["status"].get("podIP")
        ]

    def leader(self, timeout: float = START_S) -> OperatorPod:
        """The replica that leads and runs the reconciler, once exactly one does."""
        found: list[OperatorPod] = []

        def led() -> bool:
            found[:] = [p for p in self.processes if p.leading()]
            return len(found) == 1

        try:
            wait_until(led, timeout, "one mcpg-operator replica to lead", interval=0.2)
        except WaitTimeout as e:
            raise ProgramError(f"{e}\n{self.describe()}") from None
        return found[0]

    def stop(self) -> None:
        """Scale the operator's Deployment to nothing and wait until no replica's pod is left (nor its log)."""
        self.killed_logs.append(self.plane.pod_log(installation.OPERATOR_NAMESPACE, "mcpg-operator-*", "operator"))
        self._scale(0)
        gone = "the mcpg-operator pods to be gone"
        wait_until(lambda: not self._all_pods(), START_S, gone, interval=0.2)

    def start(self) -> OperatorPod:
        """Scale the Deployment back to the values' replicas; the replica that leads, once one does."""
        self._scale(int(self.values.get("replicas", REPLICAS)))
        return self.leader()

    @contextlib.contextmanager
    def paused(self, before_start: Callable[[], object] = lambda: None) -> Iterator[None]:
        """The release's replicas stopped for the block, for a test that runs an operator of its own on a namespace
        (every replica watches every namespace); started again afterwards, once `before_start` has run (removing
        what they should not find)."""
        self.stop()
        try:
            yield
        finally:
            try:
                before_start()
            finally:
                self.start()

    def _scale(self, replicas: int) -> None:
        self.plane.kubectl(
            "-n", installation.OPERATOR_NAMESPACE, "scale", "deployment", DEPLOYMENT, f"--replicas={replicas}"
        )

    def _all_pods(self) -> list[dict[str, Any]]:
        """The release's operator pods, those being deleted included."""
        listed = self.plane.kubectl("-n", installation.OPERATOR_NAMESPACE, "get", "pods", "-l", SELECTOR, "-o", "json")
        items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
        return items

    def kill_leader(self) -> float:
        """SIGKILL the leading container's process and delete its pod at once; return the time of the kill."""
        armed = self.arm_kill()
        killed = armed.fire()
        armed.finish()
        return killed

    def arm_kill(self) -> ArmedKill:
        """The leading replica's process, found now so that a test can SIGKILL it later at an exact moment."""
        leader = self.leader()
        return ArmedKill(self, leader, self._container_pid(leader.pod_name))

    def _finish_kill(self, pod: OperatorPod) -> None:
        self.killed_logs.append(self.plane.pod_log(installation.OPERATOR_NAMESPACE, pod.pod_name))
        self.plane.kubectl(
            "-n", installation.OPERATOR_NAMESPACE, "delete", "pod", pod.pod_name,
            "--grace-period=0", "--force", "--wait=false",
        )  # fmt: skip

    def _container_pid(self, pod: str) -> int:
        """The host PID of the pod's operator container, as the runtime reports it."""
        listed = self.plane.crictl("ps", "-q", "--label", f"io.kubernetes.pod.name={pod}", "--name", "operator")
        [container] = listed.stdout.split()
        info = json.loads(self.plane.crictl("inspect", container).stdout)
        return int(info["info"]["pid"])

    @property
    def log(self) -> Path:
        """Every replica's log so far (the killed ones' included) as one file, written now."""
        path = self.workdir / "operator.log"
        texts = [*self.killed_logs, self.plane.pod_log(installation.OPERATOR_NAMESPACE, "mcpg-operator-*", "operator")]
        path.write_text("\n".join(texts))
        return path

    def describe(self) -> str:
        return self.plane.kubectl("-n", installation.OPERATOR_NAMESPACE, "get", "pods,lease", "-o", "wide").stdout

    def __enter__(self) -> OperatorRelease:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
