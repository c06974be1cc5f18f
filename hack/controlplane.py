"""A real local Kubernetes control plane, started from the binaries `make binaries` caches.

etcd, kube-apiserver (RBAC, static tokens), kube-controller-manager, kube-scheduler and kwok (one
fake Node) run as plain processes on free loopback ports, so a test run and a `make cluster-up`
cluster coexist. PIDs live in the state directory; `down` stops exactly those PIDs.

    python hack/controlplane.py up|down|status --state DIR
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import http.client
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

logger = logging.getLogger(__name__)

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KWOK_STAGES = "kwok-stages.yaml"  # written next to the binaries by hack/build-control-plane.sh
NODE_NAME = "kwok-node-0"
OPERATOR_USER = "system:serviceaccount:mcpg-system:mcpg-operator"
OPERATOR_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:mcpg-system")
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
)
READY_TIMEOUT = 90.0  # per wait; a cold start on 2 cores takes a few seconds per component
STOP_TIMEOUT = 10.0  # SIGTERM grace before SIGKILL


class ControlPlaneError(Exception):
    """A component is missing, failed to start, or did not become ready in time."""


class WaitTimeout(ControlPlaneError):
    """A bounded wait ran out."""


def default_bin_dir() -> Path:
    """`$MCPG_CACHE/bin`, where hack/build-control-plane.sh puts the binaries."""
    return Path(os.environ.get("MCPG_CACHE", Path.home() / ".cache" / "mcpg")) / "bin"


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that are free now (all held open while the kernel picks)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll `check` until it returns True; raise ControlPlaneError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int, argv0: str) -> bool:
    """True if `pid` runs and is still the binary we started (guards against PID reuse)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z" and cmdline.split(b"\0", 1)[0].decode() == argv0


def tail(path: Path, lines: int = 25) -> str:
    """The last `lines` lines of a log file, or a note that it is missing."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def _die_with_parent_hook() -> Callable[[], None]:
    """A preexec_fn that makes the child get SIGKILL when this process dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: dlopen is unsafe in the child
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The loopback ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int

    @classmethod
    def pick(cls) -> Endpoints:
        return cls(*free_ports(3))

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_client}"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver}"


class ControlPlane:
    """One control plane whose files live in `state_dir`; usable as a context manager."""

    def __init__(self, state_dir: Path, bin_dir: Path | None = None, *, die_with_parent: bool = False) -> None:
        """`die_with_parent`: the components get SIGKILL when this process (thread) dies; for tests."""
        self.state_dir = state_dir.resolve()
        self.bin_dir = (bin_dir or default_bin_dir()).resolve()
        self.die_with_parent = die_with_parent
        self.kubeconfig = self.state_dir / "kubeconfig"  # admin: group system:masters
        self.operator_kubeconfig = self.state_dir / "operator.kubeconfig"  # the operator's SA, under RBAC
        self.logs_dir = self.state_dir / "logs"  # kept by stop()
        self._record = self.state_dir / "plane.json"  # ports and PIDs
        self._pki = self.state_dir / "pki"
        self._etcd_data = self.state_dir / "etcd"
        self._kubectl_cache = self.state_dir / "kubectl-cache"
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def binary(self, name: str) -> Path:
        """The cached binary (or kwok stages file) `name`; a clear error if it was not built."""
        path = self.bin_dir / name
        if not os.access(path, os.R_OK if name == KWOK_STAGES else os.X_OK):
            raise ControlPlaneError(f"{path} is missing: run `make binaries` to build the control plane")
        return path

    def log(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    def log_tails(self, lines: int = 25) -> str:
        """The tail of every component's log, for a failure report."""
        return "\n".join(f"--- {c} ({self.log(c)}) ---\n{tail(self.log(c), lines)}" for c in COMPONENTS)

    # -- state ---------------------------------------------------------------------------------

    def processes(self) -> dict[str, dict[str, Any]]:
        """Component name -> {"pid", "argv0"} as recorded by the last `start()`."""
        try:
            data: dict[str, Any] = json.loads(self._record.read_text())
        except (OSError, ValueError):
            return {}
        return dict(data.get("processes", {}))

    def alive(self) -> dict[str, bool]:
        return {name: pid_alive(p["pid"], p["argv0"]) for name, p in self.processes().items()}

    def is_running(self) -> bool:
        """True if every component recorded by `start()` still runs."""
        state = self.alive()
        return set(state) == set(COMPONENTS) and all(state.values())

    def _save(self, endpoints: Endpoints, processes: dict[str, dict[str, Any]]) -> None:
        record = {"server": endpoints.server, "processes": processes}
        self._record.write_text(json.dumps(record, indent=2) + "\n")

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start every component and return once the fake node is Ready; clean up on failure."""
        binaries = {name: self.binary(name) for name in (*COMPONENTS, "kubectl", KWOK_STAGES)}
        if self.processes():
            logger.info("stopping what is left of a previous control plane in %s", self.state_dir)
            self.stop()
        started = time.monotonic()
        try:
            self._start(binaries)
        except BaseException:
            logger.error("control plane failed to start; stopping what was started")
            self.stop()
            raise
        logger.info("control plane ready in %.1fs (kubeconfig %s)", time.monotonic() - started, self.kubeconfig)

    def _start(self, binaries: dict[str, Path]) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._pki.mkdir(mode=0o700)  # keys and tokens
        self._etcd_data.mkdir(mode=0o700)
        endpoints = Endpoints.pick()
        admin_token = self._write_credentials(endpoints)
        processes: dict[str, dict[str, Any]] = {}
        for name in COMPONENTS:
            argv = [str(binaries[name]), *self._flags(name, endpoints)]
            processes[name] = {"pid": self._spawn(name, argv), "argv0": argv[0]}
            self._save(endpoints, processes)  # recorded at once, so `down` can clean up a failed `up`
            if name == "etcd":
                self._await(name, lambda: b'"health":"true"' in _get(endpoints.etcd_url, "/health")[1])
            elif name == "kube-apiserver":
                self._await(name, lambda: _get(endpoints.server, "/readyz", admin_token)[0] == 200)
        self._create_node(endpoints, admin_token)
        self._await("kwok", lambda: _node_ready(endpoints, admin_token), f"node {NODE_NAME} Ready")

    def _spawn(self, name: str, argv: list[str]) -> int:
        with self.log(name).open("wb") as out:
            proc = subprocess.Popen(  # noqa: S603 - argv built here from our own binaries and flags
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,  # Ctrl-C in the shell that ran `up` must not reach it
                preexec_fn=_die_with_parent_hook() if self.die_with_parent else None,
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

    def stop(self) -> None:
        """SIGTERM every recorded PID, SIGKILL what outlives STOP_TIMEOUT, then remove the data."""
        processes = self.processes()
        live = {n: p for n, p in processes.items() if pid_alive(p["pid"], p["argv0"])}
        for name, p in live.items():
            logger.info("stopping %s (pid %d)", name, p["pid"])
            _signal(p["pid"], signal.SIGTERM)
        if not self._await_exit(live, STOP_TIMEOUT):
            for p in live.values():
                _signal(p["pid"], signal.SIGKILL)
            if not self._await_exit(live, STOP_TIMEOUT):
                raise ControlPlaneError(f"processes survived SIGKILL: {sorted(self._still_alive(live))}")
        for proc in self._children.values():
            proc.wait(timeout=STOP_TIMEOUT)  # reap our own children
        self._children.clear()
        for path in (self._etcd_data, self._pki, self._kubectl_cache):
            shutil.rmtree(path, ignore_errors=True)
        for path in (self.kubeconfig, self.operator_kubeconfig, self._record):
            path.unlink(missing_ok=True)

    def _still_alive(self, processes: dict[str, dict[str, Any]]) -> list[str]:
        for proc in self._children.values():
            proc.poll()  # reap, so an exited child of ours does not linger as a zombie
        return [n for n, p in processes.items() if pid_alive(p["pid"], p["argv0"])]

    def _await_exit(self, processes: dict[str, dict[str, Any]], timeout: float) -> bool:
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
        timeout: float = 180.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl (admin identity unless `kubeconfig` is given); raise on failure if `check`."""
        argv = [
            str(self.binary("kubectl")),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self._kubectl_cache}",  # not ~/.kube/cache: one dir per free port there
            *args,
        ]
        result = subprocess.run(  # noqa: S603 - our kubectl, arguments from the caller
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr or result.stdout}"
            )
        return result

    # -- configuration -------------------------------------------------------------------------

    def _write_credentials(self, endpoints: Endpoints) -> str:
        """Write the SA key pair, the token file and both kubeconfigs; return the admin token."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self._pki / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        (self._pki / "sa.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        admin, operator = secrets.token_hex(16), secrets.token_hex(16)
        # token,user,uid,"group1,group2"; the apiserver adds system:authenticated itself
        (self._pki / "tokens.csv").write_text(
            f'{admin},admin,admin,"system:masters"\n'
            f'{operator},{OPERATOR_USER},mcpg-operator,"{",".join(OPERATOR_GROUPS)}"\n'
        )
        _write_kubeconfig(self.kubeconfig, endpoints.server, "admin", admin)
        _write_kubeconfig(self.operator_kubeconfig, endpoints.server, "mcpg-operator", operator)
        return admin

    def _flags(self, component: str, endpoints: Endpoints) -> list[str]:
        flags = {
            "etcd": self._etcd_flags,
            "kube-apiserver": self._apiserver_flags,
            "kube-controller-manager": self._controller_manager_flags,
            "kube-scheduler": self._scheduler_flags,
            "kwok": self._kwok_flags,
        }
        return flags[component](endpoints)

    def _etcd_flags(self, endpoints: Endpoints) -> list[str]:
        peer = f"http://127.0.0.1:{endpoints.etcd_peer}"
        return [
            "--name=mcpg",
            f"--data-dir={self._etcd_data}",
            "--unsafe-no-fsync",  # throwaway data: fsync only costs time
            "--log-level=warn",
            f"--listen-client-urls={endpoints.etcd_url}",
            f"--advertise-client-urls={endpoints.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=mcpg={peer}",
        ]

    def _apiserver_flags(self, endpoints: Endpoints) -> list[str]:
        pki = self._pki
        return [
            f"--etcd-servers={endpoints.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={endpoints.apiserver}",
            # Endpoints may not hold a loopback IP, and nothing in the cluster dials the API
            "--endpoint-reconciler-type=none",
            f"--cert-dir={pki / 'serving'}",  # no --tls-cert-file: a self-signed one is generated there
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={endpoints.server}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # ServiceAccount: pods need no SA object or token here. TaintNodesByCondition: its
            # not-ready taint on new nodes is only lifted by the node-lifecycle controller, not run here.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--profiling=false",
        ]

    def _controller_manager_flags(self, endpoints: Endpoints) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--controllers={','.join(CONTROLLERS)}",
        ]

    def _scheduler_flags(self, endpoints: Endpoints) -> list[str]:
        return [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--secure-port=0"]

    def _kwok_flags(self, endpoints: Endpoints) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            # the default stages kwokctl would pass (Ready node, Running/Ready pods, deletion);
            # also keeps the user's ~/.kwok/kwok.yaml out
            f"--config={self.bin_dir / KWOK_STAGES}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--manage-nodes-with-label-selector=",
            "--manage-single-node=",
            "--cidr=10.0.0.0/24",
            "--node-ip=10.0.0.1",
            "--node-lease-duration-seconds=40",
        ]

    def _create_node(self, endpoints: Endpoints, token: str) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE_NAME,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "type": "kwok"},
            },
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
        }
        status, body = _request(endpoints.server, "POST", "/api/v1/nodes", token, node)
        if status != 201:
            raise ControlPlaneError(f"creating node {NODE_NAME} failed ({status}): {body[:500]!r}")


def _write_kubeconfig(path: Path, server: str, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "mcpg", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "mcpg", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


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


def _get(base: str, path: str, token: str = "") -> tuple[int, bytes]:
    return _request(base, "GET", path, token)


def _node_ready(endpoints: Endpoints, token: str) -> bool:
    status, body = _get(endpoints.server, f"/api/v1/nodes/{NODE_NAME}", token)
    if status != 200:
        return False
    conditions = json.loads(body).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# -- CLI ---------------------------------------------------------------------------------------


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
        pid = processes.get(name, {}).get("pid", "-")
        print(f"{name:<24} pid {pid!s:<8} {'running' if alive.get(name) else 'stopped'}")
    return 0 if plane.is_running() else 1


def main(argv: list[str] | None = None) -> int:
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
