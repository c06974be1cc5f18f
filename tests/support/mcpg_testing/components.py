"""What each cluster component runs with: its flags, the files it reads, and the credentials it trusts.

Pure builders over a `Layout` (where one cluster's files live) and its `Endpoints` (free ports), so
`controlplane.py` only starts, waits for and stops processes. The control plane listens on the real node's
address (`nodeconfig.NODE_IP`): pods reach the API server there, through the `kubernetes` Service. The
apiserver authenticates static tokens
(no client certificates: Python needs no cert tooling), one for an admin and one mapped to the Helm chart's
operator ServiceAccount, so the operator runs under exactly the RBAC the chart grants.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mcpg_testing.nodeconfig import NODE_IP, NODE_ROOT, SERVICE_CIDR, NodeLayout, kubelet_flags
from mcpg_testing.processes import free_ports

NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy", "coredns")
"""The real node, after the control plane it joins."""
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", *NODE_COMPONENTS)
"""In start order: each needs the ones before it."""
HOST_BINARIES = frozenset({"containerd"})
"""From the host's packages (Debian's containerd, with runc and the CNI plugins); the others `make binaries` builds."""
KWOK_STAGES = "kwok-stages.yaml"  # written next to the binaries by hack/build-control-plane.sh
KWOK_NODE = "kwok-node-0"
"""kwok's fake node, for scale scenarios: tainted, so only a pod that tolerates the taint is scheduled there."""
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
OPERATOR_USER = "system:serviceaccount:mcpg-system:mcpg-operator"
OPERATOR_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:mcpg-system")
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    # EndpointSlices from pod readiness: what kube-proxy programs.
    "endpointslice-controller",
    # Each namespace's `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap: what a pod's projected
    # service account volume needs (the operator's pods talk to the API with it).
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The ports of one cluster: etcd and CoreDNS's readiness on loopback, the API server on the node IP."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    dns_ready: int

    @classmethod
    def pick(cls) -> Endpoints:
        client, peer, apiserver, dns_ready = free_ports(4)
        return cls(client, peer, apiserver, dns_ready)

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_client}"

    @property
    def server(self) -> str:
        return f"https://{NODE_IP}:{self.apiserver}"


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
    def node(self) -> NodeLayout:
        """The real node's files (containerd's root, the kubelet's, the pods' logs): the machine's one node's."""
        return NodeLayout(NODE_ROOT)


def argv(component: str, layout: Layout, endpoints: Endpoints) -> list[str]:
    """The command line of `component` (one of COMPONENTS)."""
    binary = component if component in HOST_BINARIES else str(layout.bin_dir / component)
    builders = {
        "etcd": _etcd_flags,
        "kube-apiserver": _apiserver_flags,
        "kube-controller-manager": _controller_manager_flags,
        "kube-scheduler": _scheduler_flags,
        "kwok": _kwok_flags,
        "containerd": _containerd_flags,
        "kubelet": _kubelet_flags,
        "kube-proxy": _kube_proxy_flags,
        "coredns": _coredns_flags,
    }
    return [binary, *builders[component](layout, endpoints)]


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
        f"--bind-address={NODE_IP}",
        # The `kubernetes` Service's endpoint: how the operator's pods reach the API.
        f"--advertise-address={NODE_IP}",
        f"--secure-port={endpoints.apiserver}",
        "--kubelet-preferred-address-types=InternalIP",  # the node's name resolves nowhere: `kubectl logs`, exec
        # No --tls-cert-file: a self-signed one is generated there, for the node IP and the Service's names.
        f"--cert-dir={pki / 'serving'}",
        f"--token-auth-file={pki / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={endpoints.server}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        # TaintNodesByCondition: its not-ready taint on new nodes is only lifted by the node-lifecycle controller,
        # not run here.
        "--disable-admission-plugins=TaintNodesByCondition",
        # A namespace may put its pods on kwok's fake node (`installation.on_kwok`): the node selector and the
        # toleration of kwok's taint come from its annotations, so no rendered workload needs changing.
        "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
        "--profiling=false",
    ]


def _controller_manager_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
        f"--controllers={','.join(CONTROLLERS)}",
        # What pods trust the API server by (kube-root-ca.crt): its self-signed certificate, CA included.
        f"--root-ca-file={layout.pki / 'serving' / 'apiserver.crt'}",
    ]


def _scheduler_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [f"--kubeconfig={layout.kubeconfig}", "--leader-elect=false", "--secure-port=0"]


def _kwok_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        # the default stages kwokctl would pass (Ready node, Running/Ready pods, deletion);
        # also keeps the user's ~/.kwok/kwok.yaml out
        f"--config={layout.bin_dir / KWOK_STAGES}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--manage-nodes-with-label-selector=",
        "--manage-single-node=",
        "--cidr=10.245.0.0/16",  # fake addresses, apart from the real node's pods and the Services
        "--node-ip=10.245.0.1",
        "--node-lease-duration-seconds=40",
    ]


def _containerd_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [f"--config={layout.node.containerd_config}", "--log-level=warn"]


def _kubelet_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return kubelet_flags(layout.node, layout.kubeconfig)


def _kube_proxy_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return [f"--config={layout.node.kube_proxy_config}", "--v=1"]


def _coredns_flags(layout: Layout, endpoints: Endpoints) -> list[str]:
    return ["-conf", str(layout.node.corefile)]


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
        "spec": {"taints": [KWOK_TAINT]},
        "metadata": {
            "name": KWOK_NODE,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": KWOK_NODE, "kubernetes.io/os": "linux", "type": "kwok"},
        },
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
    }
