"""What the real node's parts run with: containerd's, the kubelet's, kube-proxy's, CNI's and CoreDNS's configs.

Pure builders over a `NodeLayout` (where the node's files live) and the control plane's address, so `node.py`
only sets up the host, starts, waits for and stops processes. The node is one per machine (iptables, cgroups
and sysctls are host-wide): its network is fixed, not picked.

- Pods get addresses on the bridge `mcpg0` (10.244.0.0/16); the bridge's own address is the node IP, where the
  API server, the kubelet and CoreDNS listen, so pods can route to each of them. Not 10.88.0.0/16: buildah's
  default network for a RUN step takes that range, and an image may be built while the node is up.
- Services get ClusterIPs from 10.0.0.0/24, programmed by kube-proxy's iptables rules; the range is routed
  onto the bridge, so nothing addressed to it leaves by the host's external interface.
- CoreDNS answers for `cluster.local` only: a pod here reaches nothing outside the cluster anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NODE_NAME = "mcpg-node"
NODE_ROOT = Path("/var/lib/mcpg-node")
"""Where the node's files live, whichever cluster holds it (there is one node per machine): a short path, since
the kubelet and containerd put unix sockets below it (107 bytes at most), and a test's tmp dir can be long."""
BRIDGE = "mcpg0"
NODE_IP = "10.244.0.1"
POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.0.0.0/24"
CLUSTER_DOMAIN = "cluster.local"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
"""The sandbox image: built here from the kubernetes module's pause.c (`oci.py`), since none can be pulled."""
CRI_NAMESPACE = "k8s.io"
"""containerd's namespace for the CRI plugin's images and containers (what `ctr -n` takes)."""
SYNC_FREQUENCY = "10s"
"""How often the kubelet resyncs pods: a Secret edit reaches a mounted file within about this (1m by default)."""
MAX_PODS = 250
"""Above the default 110: namespaces of terminating gateway pods pile up while a test run goes on."""


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """Where the node's files live: everything under `root` (`NODE_ROOT` for the machine's node)."""

    root: Path

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd-state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni-ipam"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's --root-dir: pod volumes (Secret tmpfs mounts among them) and its serving certificate."""
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def pod_logs(self) -> Path:
        """Container logs, `<namespace>_<pod>_<uid>/<container>/<restart>.log` in the CRI log format."""
        return self.root / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        """The upstream resolver file pods with dnsPolicy Default get: empty, no host resolver leaks in."""
        return self.root / "resolv.conf"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"

    @property
    def corefile(self) -> Path:
        return self.root / "Corefile"

    @property
    def crictl_config(self) -> Path:
        return self.root / "crictl.yaml"

    @property
    def saved_host(self) -> Path:
        """What the host had before the node changed it (sysctls, iptables), restored on the way down."""
        return self.root / "host.json"


def containerd_toml(layout: NodeLayout) -> str:
    """containerd 1.6's config (version 2): its own root, state and socket, CRI with runc and the bridge CNI."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f'root = "{layout.containerd_root}"',
        f'state = "{layout.containerd_state}"',
        "[grpc]",
        f'  address = "{layout.containerd_socket}"',
        "[metrics]",
        '  address = ""',
        f"[{cri}]",
        f'  sandbox_image = "{PAUSE_IMAGE}"',
        # Root here lacks CAP_SYS_RESOURCE: runc cannot set the negative oom_score_adj sandboxes ask for, and every
        # sandbox then fails to start. This clamps it to what the caller may set (the kubelet's own score).
        "  restrict_oom_score_adj = true",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",  # the kubelet's cgroupDriver: cgroupfs
        f"[{cri}.cni]",
        f'  bin_dir = "{CNI_BIN_DIR}"',
        f'  conf_dir = "{layout.cni_conf_dir}"',
        "  max_conf_num = 1",
    ]
    return "\n".join(lines) + "\n"


def cni_conflist(layout: NodeLayout) -> dict[str, Any]:
    """The pod network: one bridge, host-local addresses, portmap for hostPort; no masquerading (pods reach only
    the node and each other)."""
    bridge = {
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,  # a pod reaching itself through its own Service
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(layout.cni_ipam_dir),
        },
    }
    plugins = [bridge, {"type": "portmap", "capabilities": {"portMappings": True}}]
    return {"cniVersion": "1.0.0", "name": "mcpg", "plugins": plugins}


def kubelet_config(layout: NodeLayout) -> dict[str, Any]:
    """The KubeletConfiguration: cgroupfs on this host's cgroup v1, cluster DNS on the node IP, no eviction or
    image garbage collection that could take the imported images (nothing can pull them back)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "readOnlyPort": 0,
        "healthzPort": 0,
        # The API server reaches the kubelet (logs, exec) without a client certificate; only the node's own
        # address serves it.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",  # containerd 1.6 cannot report it; 1.36 removes this fallback
        "failCgroupV1": False,  # this host runs cgroup v1 (hybrid)
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "clusterDNS": [NODE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(layout.resolv_conf),
        "podLogsDir": str(layout.pod_logs),
        "syncFrequency": SYNC_FREQUENCY,
        "maxPods": MAX_PODS,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "evictionPressureTransitionPeriod": "10s",
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "volumePluginDir": str(layout.root / "volume-plugins"),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }


def kubelet_flags(layout: NodeLayout, kubeconfig: Path) -> list[str]:
    return [
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.kubelet_root / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_IP}",  # the bridge's address: the kubelet refuses a loopback node IP
        "--v=1",
    ]


def kube_proxy_config(kubeconfig: Path) -> dict[str, Any]:
    """kube-proxy in iptables mode, touching no host setting it need not: conntrack limits and timeouts stay the
    host's, NodePorts open only on the node IP (not on loopback: no route_localnet)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "",
        "metricsBindAddress": "",
        "clusterCIDR": POD_CIDR,
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(kubeconfig: Path, ready_port: int) -> str:
    """CoreDNS on the node IP, answering cluster.local from the API; `/ready` on loopback once it has synced.

    No cache: a test resolves a Service it has just created, and a cached NXDOMAIN would hide it for seconds.
    """
    return (
        f".:53 {{\n"
        f"    bind {NODE_IP}\n"
        f"    errors\n"
        f"    ready 127.0.0.1:{ready_port}\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n"
        f"        pods insecure\n"
        f"        fallthrough in-addr.arpa ip6.arpa\n"
        f"    }}\n"
        f"}}\n"
    )


def crictl_yaml(layout: NodeLayout) -> str:
    endpoint = f"unix://{layout.containerd_socket}"
    return yaml.safe_dump({"runtime-endpoint": endpoint, "image-endpoint": endpoint, "timeout": 10})


def write_configs(layout: NodeLayout, kubeconfig: Path, ready_port: int) -> None:
    """Every config file the node's processes read, under `layout.root`."""
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    layout.pod_logs.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(containerd_toml(layout))
    (layout.cni_conf_dir / "10-mcpg.conflist").write_text(json.dumps(cni_conflist(layout), indent=2) + "\n")
    layout.kubelet_config.write_text(yaml.safe_dump(kubelet_config(layout), sort_keys=False))
    layout.kube_proxy_config.write_text(yaml.safe_dump(kube_proxy_config(kubeconfig), sort_keys=False))
    layout.corefile.write_text(corefile(kubeconfig, ready_port))
    layout.crictl_config.write_text(crictl_yaml(layout))
    layout.resolv_conf.write_text("")
