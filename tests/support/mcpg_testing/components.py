"""What each control plane component runs with: its flags, the files it reads, and the credentials it trusts.

Pure builders over a `Layout` (where one control plane's files live) and its `Endpoints` (free loopback ports),
so `controlplane.py` only starts, waits for and stops processes. The apiserver authenticates static tokens
(no client certificates: Python needs no cert tooling), one for an admin and one mapped to the Helm chart's
operator ServiceAccount, so the operator runs under exactly the RBAC the chart grants.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mcpg_testing import runtimes
from mcpg_testing.processes import free_ports

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "mcpg-kubelet")
"""In start order: each needs the ones before it. All but the last are binaries `make binaries` builds."""
KUBELET = "mcpg-kubelet"
"""The local kubelet (`kubelet.py`): runs the pods of `runtimes.IMAGES` for real, on kwok's node."""
KWOK_STAGES = "kwok-stages.yaml"  # written next to the binaries by hack/build-control-plane.sh
NODE_NAME = "kwok-node-0"
OPERATOR_USER = "system:serviceaccount:mcpg-system:mcpg-operator"
OPERATOR_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:mcpg-system")
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    # EndpointSlices from pod readiness: what the local kubelet's Service stand-in forwards to.
    "endpointslice-controller",
)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The loopback ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int

    @classmethod
    def pick(cls) -> Endpoints:
        client, peer, apiserver = free_ports(3)
        return cls(client, peer, apiserver)

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_client}"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver}"


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one control plane's files live: everything under `state_dir`, the binaries in `bin_dir`."""

    state_dir: Path
    bin_dir: Path

    @property
    def kubeconfig(self) -> Path:
        """The admin's (group system:masters)."""
        return self.state_dir / "kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        """The chart's operator ServiceAccount's, under RBAC."""
        return self.state_dir / "operator.kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def record(self) -> Path:
        """Ports and PIDs of the running components."""
        return self.state_dir / "plane.json"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def kubectl_cache(self) -> Path:
        return self.state_dir / "kubectl-cache"

    @property
    def kwok_stages(self) -> Path:
        """kwok's stages as `kwok_stages` rewrites them (the cached defaults, minus the local images' pods)."""
        return self.state_dir / KWOK_STAGES

    @property
    def services(self) -> Path:
        """The local kubelet's record of each Service port's loopback port, by port name and by number."""
        return self.state_dir / "services.json"

    @property
    def pods(self) -> Path:
        """The local kubelet's record of the pods it runs: host ports, pod IP, PID, log file, pod directory, and
        the Service addresses each launch mapped."""
        return self.state_dir / "pods.json"

    @property
    def pod_dirs(self) -> Path:
        """Where the local kubelet writes each pod's volumes (Secret data included); removed with the data."""
        return self.state_dir / "pods"

    @property
    def kubelet_ready(self) -> Path:
        return self.state_dir / "kubelet.ready"


def argv(component: str, layout: Layout, endpoints: Endpoints) -> list[str]:
    """The command line of `component` (one of COMPONENTS)."""
    if component == KUBELET:
        state = ["--state", str(layout.state_dir), "--node", NODE_NAME]
        return [sys.executable, "-m", "mcpg_testing.kubelet", "--kubeconfig", str(layout.kubeconfig), *state]
    return [str(layout.bin_dir / component), *flags(component, layout, endpoints)]


def flags(component: str, layout: Layout, endpoints: Endpoints) -> list[str]:
    """The command-line flags of `component` (one of the binaries in COMPONENTS)."""
    builders = {
        "etcd": _etcd_flags,
        "kube-apiserver": _apiserver_flags,
        "kube-controller-manager": _controller_manager_flags,
        "kube-scheduler": _scheduler_flags,
        "kwok": _kwok_flags,
    }
    return builders[component](layout, endpoints)


def _etcd_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    peer = f"http://127.0.0.1:{endpoints.etcd_peer}"
    return [
        "--name=mcpg",
        f"--data-dir={layout.etcd_data}",
        "--unsafe-no-fsync",  # throwaway data: fsync only costs time
        "--log-level=warn",
        f"--listen-client-urls={endpoints.etcd_url}",
        f"--advertise-client-urls={endpoints.etcd_url}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=mcpg={peer}",
    ]


def _apiserver_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    pki = layout.pki
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


def _controller_manager_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
        f"--controllers={','.join(CONTROLLERS)}",
    ]


def _scheduler_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [f"--kubeconfig={layout.kubeconfig}", "--leader-elect=false", "--secure-port=0"]


def _kwok_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        # the default stages kwokctl would pass (Ready node, Running/Ready pods, deletion);
        # also keeps the user's ~/.kwok/kwok.yaml out
        f"--config={layout.kwok_stages}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--manage-nodes-with-label-selector=",
        "--manage-single-node=",
        "--cidr=10.0.0.0/24",
        "--node-ip=10.0.0.1",
        "--node-lease-duration-seconds=40",
    ]


IMAGE_QUERY = ".spec.containers.[0].image"
"""The image kwok's stages test: the first container's, the one the local kubelet decides by."""


def kwok_stages(defaults: str, local_images: Sequence[str], local_repositories: Sequence[str] = ()) -> str:
    """kwok's default stages with every Pod stage limited to pods whose image the local kubelet does not run:
    neither one of `local_images` (exact references) nor any tag of `local_repositories` (`runtimes.repository`
    rules, written in jq: kwok's selector keys are jq expressions).

    kwok would otherwise mark those pods Running and Ready (and delete them) as well: two kubelets for one pod.
    """
    excluded = [(IMAGE_QUERY, list(local_images)), (runtimes.repository_query(IMAGE_QUERY), list(local_repositories))]
    docs = [d for d in yaml.safe_load_all(defaults) if d]
    for stage in docs:
        if stage["spec"]["resourceRef"]["kind"] == "Pod":
            expressions = stage["spec"].setdefault("selector", {}).setdefault("matchExpressions", [])
            # kwok refuses NotIn with no values; an empty list excludes nothing anyway
            expressions += [{"key": key, "operator": "NotIn", "values": values} for key, values in excluded if values]
    return yaml.safe_dump_all(docs, sort_keys=False)


def write_credentials(layout: Layout, endpoints: Endpoints) -> str:
    """Write the SA key pair, the token file and both kubeconfigs into `layout`; return the admin token."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (layout.pki / "sa.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    (layout.pki / "sa.pub").write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    admin, operator = secrets.token_hex(16), secrets.token_hex(16)
    # token,user,uid,"group1,group2"; the apiserver adds system:authenticated itself
    (layout.pki / "tokens.csv").write_text(
        f'{admin},admin,admin,"system:masters"\n'
        f'{operator},{OPERATOR_USER},mcpg-operator,"{",".join(OPERATOR_GROUPS)}"\n'
    )
    write_kubeconfig(layout.kubeconfig, endpoints.server, "admin", admin)
    write_kubeconfig(layout.operator_kubeconfig, endpoints.server, "mcpg-operator", operator)
    return admin


def write_kubeconfig(path: Path, server: str, user: str, token: str) -> None:
    """A token kubeconfig for `server`, readable by its owner only."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        # the apiserver's self-signed loopback certificate
        "clusters": [{"name": "mcpg", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "mcpg", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def fake_node() -> dict[str, Any]:
    """The one Node kwok plays the kubelet of (it manages nodes carrying this annotation)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "type": "kwok"},
        },
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
    }
