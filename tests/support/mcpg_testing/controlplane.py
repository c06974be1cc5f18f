"""A real local Kubernetes cluster, started from the binaries `make binaries` caches.

etcd, kube-apiserver (RBAC, static tokens), kube-controller-manager, kube-scheduler, kwok (one fake Node, for
scale scenarios) and a real node: containerd (runc, CNI), the kubelet, kube-proxy and CoreDNS. The images the
node runs are built from the Dockerfiles (`oci.py`) and imported into its runtime. The node is the machine's
only one (`node.py` claims it), so a test run and a `make cluster-up` cluster take turns. PIDs live in the state
directory; `down` stops exactly those PIDs. What each component is given is in `components.py` and
`nodeconfig.py`; this module starts, waits for and stops them.

`real_node=False` starts the control plane and kwok alone, for scale scenarios whose pods all go to kwok: the
machine's node is neither claimed nor touched (a test run may hold it meanwhile), the API server listens on
loopback, kwok gives its pods loopback addresses (so one local process can answer for every pod) and the API
server keeps an audit log of the operator's writes (`audit_log`).

    python -m mcpg_testing.controlplane up|down|status --state DIR    (or hack/controlplane.py)
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypedDict

from mcpg_testing import components, node, oci
from mcpg_testing.components import (
    COMPONENTS,
    HOST_BINARIES,
    KWOK_NODE,
    KWOK_STAGES,
    NODE_COMPONENTS,
    OPERATOR_USER,
    Endpoints,
    Layout,
)
from mcpg_testing.nodeconfig import NODE_NAME
from mcpg_testing.processes import WaitTimeout, die_with_parent_hook, pid_alive, send_signal, tail, wait_until

logger = logging.getLogger(__name__)

READY_TIMEOUT = 90.0  # per wait; a cold start on 2 cores takes a few seconds per component
STOP_TIMEOUT = 10.0  # SIGTERM grace before SIGKILL
KUBECTL_TIMEOUT = 180.0
LOOPBACK = "127.0.0.1"
KWOK_LOOPBACK_CIDR = "127.245.0.0/16"
"""kwok's pod addresses without the real node: on loopback (all of 127/8 is local), so a process listening on
every address answers for every kwok pod (a gateway's admin port, say) with no route added to the host."""
LOOPBACK_SERVICE_CIDR = "10.96.0.0/16"
"""The Service range without the real node (no kube-proxy programs it): room for a Service in each of thousands of
namespaces, where the real node's /24 holds 254."""
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],  # one event per request, once it is answered
    "rules": [
        {"level": "Metadata", "users": [OPERATOR_USER], "verbs": list(WRITE_VERBS)},
        {"level": "None"},
    ],
}
"""Without the real node: every write request the operator's identity makes, answered, with its verb, object and
response code (no bodies); nothing else, so the log stays small at any scale."""


class ControlPlaneError(Exception):
    """A component is missing, failed to start, or did not become ready in time."""


class Recorded(TypedDict):
    """One started component, as `plane.json` records it."""

    pid: int
    argv0: str


def default_bin_dir() -> Path:
    """`$MCPG_CACHE/bin`, where hack/build-control-plane.sh puts the binaries."""
    return Path(os.environ.get("MCPG_CACHE", Path.home() / ".cache" / "mcpg")) / "bin"


class ControlPlane:
    """One control plane whose files live in `state_dir`; usable as a context manager."""

    def __init__(
        self,
        state_dir: Path,
        bin_dir: Path | None = None,
        *,
        die_with_parent: bool = False,
        images: Sequence[str] = oci.ALL,
        real_node: bool = True,
    ) -> None:
        """`die_with_parent`: the components get SIGKILL when this process (thread) dies; for tests. `images`:
        the images (`oci.REFERENCES` names) built and imported into the node's runtime. `real_node`: False for
        the control plane and kwok alone (see the module docstring); no image is built then."""
        self.layout = Layout(state_dir.resolve(), (bin_dir or default_bin_dir()).resolve())
        self.die_with_parent = die_with_parent
        self.real_node = real_node
        self.images = tuple(images) if real_node else ()
        self.components = COMPONENTS if real_node else tuple(c for c in COMPONENTS if c not in NODE_COMPONENTS)
        """What this control plane starts, in order."""
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def state_dir(self) -> Path:
        return self.layout.state_dir

    @property
    def bin_dir(self) -> Path:
        return self.layout.bin_dir

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (group system:masters)."""
        return self.layout.kubeconfig

    @property
    def operator_kubeconfig(self) -> Path:
        """The chart's operator ServiceAccount's kubeconfig, under RBAC."""
        return self.layout.operator_kubeconfig

    @property
    def logs_dir(self) -> Path:
        """One log per component; kept by `stop()`."""
        return self.layout.logs_dir

    @property
    def audit_log(self) -> Path:
        """Without the real node: the API server's audit log of the operator's writes (`AUDIT_POLICY`), one JSON
        event per line; kept by `stop()`."""
        return self.logs_dir / "audit.log"

    def binary(self, name: str) -> Path:
        """The cached binary (or kwok stages file) `name`; a clear error if it was not built."""
        if name in HOST_BINARIES:
            found = shutil.which(name)
            if found is None:
                raise ControlPlaneError(f"{name} is not installed: run `make node-packages`")
            return Path(found)
        path = self.bin_dir / name
        if not os.access(path, os.R_OK if name == KWOK_STAGES else os.X_OK):
            raise ControlPlaneError(f"{path} is missing: run `make binaries` to build the control plane")
        return path

    def log(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    def log_tails(self, lines: int = 25, pods: int = 4) -> str:
        """The tail of every component's log and of the `pods` most recently written container logs, for a
        report."""
        logs = [self.log(c) for c in self.components]
        pod_logs = sorted(self.pod_logs(), key=lambda p: p.stat().st_mtime)[-pods:]
        return "\n".join(f"--- {path} ---\n{tail(path, lines)}" for path in logs + pod_logs)

    def pod_logs(self, namespace: str = "*", pod: str = "*", container: str = "*") -> list[Path]:
        """The kubelet's container log files (every restart's) of the pods matching these glob patterns."""
        root = self.layout.node.pod_logs
        return sorted(root.glob(f"{namespace}_{pod}_*/{container}/*.log"))

    def pod_log(self, namespace: str, pod: str, container: str = "*") -> str:
        """What a pod's container (any, if not named) printed over all its restarts, without the CRI prefix."""
        lines = []
        for path in self.pod_logs(namespace, pod, container):
            # `<time> <stream> <F|P> <text>`: the kubelet's CRI log format
            lines += [line.split(" ", 3)[3] for line in path.read_text().splitlines() if line.count(" ") >= 3]
        return "\n".join(lines)

    def crictl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The node's runtime, as `crictl` on a node sees it."""
        argv = [str(self.binary("crictl")), f"--config={self.layout.node.crictl_config}", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(f"crictl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    # -- Services ------------------------------------------------------------------------------

    def service_address(
        self, namespace: str, name: str, port: str | int = "http", timeout: float = READY_TIMEOUT
    ) -> tuple[str, int]:
        """Service `namespace/name`'s ClusterIP and `port` (by name or number), once a ready endpoint backs it:
        kube-proxy's rules take a connection there to one of its Ready pods."""
        found: list[tuple[str, int]] = []

        def backed() -> bool:
            service = self._get_json("-n", namespace, "service", name)
            if service is None:
                return False
            ports = service["spec"].get("ports", [])
            matching = [p for p in ports if str(port) in (p.get("name"), str(p["port"]))]
            slices = self._get_json("-n", namespace, "endpointslices", "-l", f"kubernetes.io/service-name={name}")
            ready = [
                e
                for s in (slices or {}).get("items", [])
                for e in s.get("endpoints") or []
                if e.get("conditions", {}).get("ready")
            ]
            found[:] = [(service["spec"]["clusterIP"], int(matching[0]["port"]))] if matching and ready else []
            return bool(found) and _connects(*found[0])  # kube-proxy's rules follow the slices within a second

        wait_until(backed, timeout, f"a ready endpoint behind service {namespace}/{name} port {port}", interval=0.2)
        return found[0]

    def service_url(self, namespace: str, name: str, port: str | int = "http", scheme: str = "http") -> str:
        """`scheme://<ClusterIP>:<port>`: e.g. the bus as `service_url(ns, "mcpg-bus", 4222, "nats")`."""
        host, number = self.service_address(namespace, name, port)
        return f"{scheme}://{host}:{number}"

    def _get_json(self, *args: str) -> Any:
        result = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    # -- state ---------------------------------------------------------------------------------

    def processes(self) -> dict[str, Recorded]:
        """Component name -> its PID and binary, as recorded by the last `start()`."""
        try:
            data = json.loads(self.layout.record.read_text())
        except (OSError, ValueError):
            return {}
        return {name: Recorded(pid=int(p["pid"]), argv0=str(p["argv0"])) for name, p in data["processes"].items()}

    def alive(self) -> dict[str, bool]:
        return {name: pid_alive(p["pid"], p["argv0"]) for name, p in self.processes().items()}

    def is_running(self) -> bool:
        """True if every component recorded by `start()` still runs."""
        state = self.alive()
        return set(state) == set(self.components) and all(state.values())

    def _save(self, endpoints: Endpoints, processes: dict[str, Recorded]) -> None:
        record = {"server": endpoints.server, "processes": processes}
        self.layout.record.write_text(json.dumps(record, indent=2) + "\n")
        if self.real_node:
            pids: dict[str, dict[str, int | str]] = {
                n: {"pid": p["pid"], "argv0": p["argv0"]} for n, p in processes.items()
            }
            node.record_pids(self.state_dir, pids)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start every component and return once both nodes are Ready and cluster DNS answers (without the real
        node: once kwok's is Ready); clean up on failure."""
        tools = ("kubectl", "crictl") if self.real_node else ("kubectl",)
        for name in (*self.components, *tools, KWOK_STAGES):
            self.binary(name)  # a clear error now if `make binaries` was not run
        if self.processes():
            logger.info("stopping what is left of a previous control plane in %s", self.state_dir)
            self.stop()
        started = time.monotonic()
        archives = oci.ensure(self.images)  # before anything runs: a cold build takes minutes
        try:
            self._start(list(archives.values()))
        except BaseException:
            logger.error("control plane failed to start; stopping what was started")
            self.stop()
            raise
        logger.info("control plane ready in %.1fs (kubeconfig %s)", time.monotonic() - started, self.kubeconfig)

    def _start(self, archives: list[Path]) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if self.real_node:
            try:
                node.claim(self.layout.node, self.state_dir)  # the bridge first: the API server listens on it
            except node.NodeError as e:
                raise ControlPlaneError(str(e)) from None
        self.layout.pki.mkdir(mode=0o700)  # keys and tokens
        self.layout.etcd_data.mkdir(mode=0o700)
        endpoints = Endpoints.pick() if self.real_node else LoopbackEndpoints.pick()
        admin_token = components.write_credentials(self.layout, endpoints)
        if self.real_node:
            node.write_configs(self.layout.node, self.kubeconfig, endpoints.dns_ready)
        processes: dict[str, Recorded] = {}
        for name in self.components:
            argv = components.argv(name, self.layout, endpoints)
            if not self.real_node:
                argv = self._off_node(name, argv)
            processes[name] = Recorded(pid=self._spawn(name, argv), argv0=argv[0])
            self._save(endpoints, processes)  # recorded at once, so `down` can clean up a failed `up`
            if name == "etcd":
                self._await(name, lambda: b'"health":"true"' in _request(endpoints.etcd_url, "GET", "/health")[1])
            elif name == "kube-apiserver":
                self._await(name, lambda: _request(endpoints.server, "GET", "/readyz", admin_token)[0] == 200)
            elif name == "kwok":
                self._create_node(endpoints, admin_token)
                self._await("kwok", lambda: _node_ready(endpoints, admin_token, KWOK_NODE), f"node {KWOK_NODE} Ready")
            elif name == "containerd":
                self._await(name, self._runtime_answers, "containerd to answer")
                node.import_images(self.layout.node, archives, oci.ALIASES)
            elif name == "kubelet":
                self._await(name, lambda: _node_ready(endpoints, admin_token, NODE_NAME), f"node {NODE_NAME} Ready")
            elif name == "kube-proxy":
                self._await(name, _service_rules_programmed, "kube-proxy to program the kubernetes Service")
            elif name == "coredns":
                self._await(name, lambda: _dns_ready(endpoints), "CoreDNS to sync")

    def _off_node(self, component: str, argv: list[str]) -> list[str]:
        """`argv` as it runs without the real node: no bridge address to listen on, kwok's pods on loopback, a
        Service range for thousands of namespaces, and the API server's audit log of the operator's writes."""
        swapped = {
            "--bind-address=": LOOPBACK,
            "--advertise-address=": LOOPBACK,
            "--cidr=": KWOK_LOOPBACK_CIDR,
            "--service-cluster-ip-range=": LOOPBACK_SERVICE_CIDR,
        }
        out = []
        for arg in argv:
            prefix = next((p for p in swapped if arg.startswith(p)), None)
            out.append(arg if prefix is None else prefix + swapped[prefix])
        if component == "kube-apiserver":
            policy = self.state_dir / "audit-policy.json"
            policy.write_text(json.dumps(AUDIT_POLICY))
            out += [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json"]
        return out

    def _runtime_answers(self) -> bool:
        return self.crictl("version", check=False).returncode == 0

    def _spawn(self, name: str, argv: list[str]) -> int:
        with self.log(name).open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,  # Ctrl-C in the shell that ran `up` must not reach it
                preexec_fn=die_with_parent_hook() if self.die_with_parent else None,
            )
        self._children[name] = proc
        logger.info("started %s (pid %d)", name, proc.pid)
        return proc.pid

    def _await(self, component: str, check: Callable[[], bool], what: str = "") -> None:
        """Wait for `check`; fail fast, with the component's log tail, if it exits or times out."""
        what = what or f"{component} to become ready"

        def ready() -> bool:
            proc = self._children[component]
            if proc.poll() is not None:
                raise ControlPlaneError(self._failure(component, f"{component} exited ({proc.returncode})"))
            return check()

        try:
            wait_until(ready, READY_TIMEOUT, what, interval=0.2)
        except WaitTimeout as e:
            raise ControlPlaneError(self._failure(component, str(e))) from None
        logger.info("%s ready", component)

    def _failure(self, component: str, message: str) -> str:
        return f"{message}\nlast lines of {self.log(component)}:\n{tail(self.log(component))}"

    def _create_node(self, endpoints: Endpoints, token: str) -> None:
        status, body = _request(endpoints.server, "POST", "/api/v1/nodes", token, components.fake_node())
        if status != 201:
            raise ControlPlaneError(f"creating node {KWOK_NODE} failed ({status}): {body[:500]!r}")

    def stop(self) -> None:
        """Stop the kubelet, remove every pod through the runtime, stop the other components (SIGTERM, SIGKILL
        after STOP_TIMEOUT), put the host back as the node found it, then remove the data."""
        processes = self.processes()
        if not self.real_node:  # the machine's node was never ours: only our processes and data go
            self._stop_processes(processes)
            self._remove_data(())
            return
        ours = not node.held_by_other(self.state_dir)  # else the node is another cluster's: leave it be
        self._stop_processes({n: p for n, p in processes.items() if n == "kubelet"})
        if ours and self.alive().get("containerd"):
            node.remove_pods(self.layout.node, self.binary("crictl"))  # nothing recreates them now
        self._stop_processes(processes)
        node.release(self.layout.node, self.state_dir)
        self._remove_data((self.layout.node.root,) if ours else ())

    def _remove_data(self, owned: tuple[Path, ...]) -> None:
        for path in (self.layout.etcd_data, self.layout.pki, self.layout.kubectl_cache, *owned):
            shutil.rmtree(path, ignore_errors=True)
        for path in (self.kubeconfig, self.operator_kubeconfig, self.layout.record):
            path.unlink(missing_ok=True)

    def _stop_processes(self, processes: dict[str, Recorded]) -> None:
        live = {n: p for n, p in processes.items() if pid_alive(p["pid"], p["argv0"])}
        for name, p in live.items():
            logger.info("stopping %s (pid %d)", name, p["pid"])
            send_signal(p["pid"], signal.SIGTERM)
        if not self._await_exit(live, STOP_TIMEOUT):
            for p in live.values():
                send_signal(p["pid"], signal.SIGKILL)
            if not self._await_exit(live, STOP_TIMEOUT):
                raise ControlPlaneError(f"processes survived SIGKILL: {sorted(self._still_alive(live))}")
        for name in live:
            if name in self._children:
                self._children.pop(name).wait(timeout=STOP_TIMEOUT)  # reap our own children

    def _still_alive(self, processes: dict[str, Recorded]) -> list[str]:
        for proc in self._children.values():
            proc.poll()  # reap, so an exited child of ours does not linger as a zombie
        return [n for n, p in processes.items() if pid_alive(p["pid"], p["argv0"])]

    def _await_exit(self, processes: dict[str, Recorded], timeout: float) -> bool:
        try:
            wait_until(lambda: not self._still_alive(processes), timeout, "processes to exit")
        except WaitTimeout:
            return False
        return True

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- clients -------------------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = KUBECTL_TIMEOUT,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl (admin identity unless `kubeconfig` is given); raise on failure if `check`."""
        argv = [
            str(self.binary("kubectl")),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self.layout.kubectl_cache}",  # not ~/.kube/cache: one dir per free port there
            *args,
        ]
        result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr or result.stdout}"
            )
        return result

    def set_secret_token(self, namespace: str, secret: str, token: str) -> str:
        """Write `token` into the Secret's `token` key as a user rotating it would (a merge patch by kubectl);
        the Secret's new resourceVersion, which a WebhookToken's `status.accepted` names once it is accepted."""
        patch = json.dumps({"stringData": {"token": token}})
        jsonpath = "jsonpath={.metadata.resourceVersion}"
        args = ("-n", namespace, "patch", "secret", secret, "--type", "merge", "-p", patch, "-o", jsonpath)
        return self.kubectl(*args).stdout.strip()


class LoopbackEndpoints(Endpoints):
    """The API server on loopback: without the real node there is no bridge address to listen on."""

    __slots__ = ()

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver}"


def _request(base: str, method: str, path: str, token: str = "", body: object = None) -> tuple[int, bytes]:
    """One HTTP(S) call to etcd or the apiserver; (0, error) when nothing answers yet."""
    scheme, _, hostport = base.partition("://")
    host, port = hostport.rsplit(":", 1)
    conn: http.client.HTTPConnection
    if scheme == "https":
        # the apiserver's self-signed loopback cert; the kubeconfigs skip verification too
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, int(port), timeout=5, context=context)
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as e:  # not listening yet, or restarting
        return 0, str(e).encode()
    finally:
        conn.close()


def _node_ready(endpoints: Endpoints, token: str, name: str) -> bool:
    status, body = _request(endpoints.server, "GET", f"/api/v1/nodes/{name}", token)
    if status != 200:
        return False
    conditions = json.loads(body).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _connects(host: str, port: int) -> bool:
    """A TCP connection to `host:port` is accepted (a ClusterIP without programmed endpoints rejects it)."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def _dns_ready(endpoints: Endpoints) -> bool:
    return _request(f"http://127.0.0.1:{endpoints.dns_ready}", "GET", "/ready")[0] == 200


def _service_rules_programmed() -> bool:
    """kube-proxy's nat rules hold the `kubernetes` Service (the first address of the Service range)."""
    result = subprocess.run(["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], capture_output=True, text=True)
    return result.returncode == 0 and "default/kubernetes:https" in result.stdout


# -- command line ------------------------------------------------------------------------------


def _up(plane: ControlPlane) -> int:
    if plane.is_running():
        print(f"control plane already up in {plane.state_dir}; kubeconfig {plane.kubeconfig}")
        return 0
    plane.start()
    print(f"export KUBECONFIG={plane.kubeconfig}   # kubectl is {plane.bin_dir / 'kubectl'}")
    return 0


def _down(plane: ControlPlane) -> int:
    if not plane.processes():
        print(f"no control plane recorded in {plane.state_dir}")
        return 0
    plane.stop()
    print(f"control plane in {plane.state_dir} stopped; logs kept in {plane.logs_dir}")
    return 0


def _status(plane: ControlPlane) -> int:
    processes, alive = plane.processes(), plane.alive()
    for name in COMPONENTS:
        pid = processes[name]["pid"] if name in processes else "-"
        print(f"{name:<24} pid {pid!s:<8} {'running' if alive.get(name) else 'stopped'}")
    return 0 if plane.is_running() else 1


def main(argv: list[str] | None = None) -> int:
    """`up|down|status --state DIR`: what `make cluster-up` and `make cluster-down` run."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state", type=Path, default=Path(".cluster"), help="state directory (.cluster)")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    helps = {"up": "start, unless already up", "down": "stop and remove data", "status": "show processes"}
    for name, help_text in helps.items():
        commands.add_parser(name, parents=[common], help=help_text)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    plane = ControlPlane(args.state)
    actions: dict[str, Callable[[ControlPlane], int]] = {"up": _up, "down": _down, "status": _status}
    try:
        return actions[args.command](plane)
    except ControlPlaneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
