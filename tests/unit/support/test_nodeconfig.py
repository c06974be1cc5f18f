"""The real node's configs say what the node depends on: each fact here was a failure on these machines first."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from mcpg_testing import components, node, nodeconfig
from mcpg_testing.nodeconfig import NodeLayout


def layout(tmp_path: Path) -> NodeLayout:
    return NodeLayout(tmp_path / "node")


def test_containerd_clamps_the_oom_score_and_uses_its_own_root_socket_and_cni(tmp_path: Path) -> None:
    config = tomllib.loads(nodeconfig.containerd_toml(layout(tmp_path)))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    # without it, every sandbox fails: root here may not set a negative oom_score_adj
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == nodeconfig.PAUSE_IMAGE
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"] == str(layout(tmp_path).cni_conf_dir)
    assert config["grpc"]["address"] == str(layout(tmp_path).containerd_socket)
    assert config["root"].startswith(str(tmp_path))


def test_the_pod_network_never_masquerades_and_gateways_through_the_node_ip(tmp_path: Path) -> None:
    [bridge, portmap] = nodeconfig.cni_conflist(layout(tmp_path))["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["ipMasq"]) == ("bridge", nodeconfig.BRIDGE, False)
    assert bridge["ipam"]["ranges"] == [[{"subnet": nodeconfig.POD_CIDR, "gateway": nodeconfig.NODE_IP}]]
    assert portmap["type"] == "portmap"


def test_the_kubelet_keeps_imported_images_and_resolves_through_cluster_dns(tmp_path: Path) -> None:
    config = nodeconfig.kubelet_config(layout(tmp_path))
    assert config["imageGCHighThresholdPercent"] == 100  # nothing can pull an image back here
    assert config["clusterDNS"] == [nodeconfig.NODE_IP]
    assert (config["cgroupDriver"], config["failCgroupV1"]) == ("cgroupfs", False)
    assert config["address"] == nodeconfig.NODE_IP
    assert config["readOnlyPort"] == 0


def test_kube_proxy_leaves_host_conntrack_settings_and_loopback_alone() -> None:
    config = nodeconfig.kube_proxy_config(Path("/k"))
    assert config["mode"] == "iptables"
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["nodePortAddresses"] == [f"{nodeconfig.NODE_IP}/32"]


def test_coredns_binds_the_node_ip_and_serves_the_cluster_domain_only() -> None:
    corefile = nodeconfig.corefile(Path("/k"), 12345)
    assert f"bind {nodeconfig.NODE_IP}" in corefile
    assert f"kubernetes {nodeconfig.CLUSTER_DOMAIN} " in corefile
    assert "forward" not in corefile  # pods reach nothing outside the cluster
    assert "ready 127.0.0.1:12345" in corefile


def test_containment_drops_forwarding_off_the_bridge_and_pods_reaching_the_kubelet() -> None:
    rules = node.containment_rules()
    assert ["-i", nodeconfig.BRIDGE, "!", "-o", nodeconfig.BRIDGE, "-j", "DROP"] in rules["FORWARD"]
    assert ["!", "-i", nodeconfig.BRIDGE, "-o", nodeconfig.BRIDGE, "-j", "DROP"] in rules["FORWARD"]
    assert any(str(node.KUBELET_PORT) in rule for rule in rules["INPUT"])
    assert all("-o" not in rule for rule in rules["INPUT"])  # iptables refuses -o in INPUT


def test_the_node_lives_at_a_short_path_whatever_the_clusters_state_directory() -> None:
    # The kubelet binds sockets below its root dir (pod-resources/<10 digits>, plugins_registry/...); a test's tmp
    # dir is long enough to pass the 107-byte limit (seen: the kubelet exiting with "bind: invalid argument").
    layout = components.Layout(Path("/tmp/pytest-of-root/pytest-32/" + "t" * 60 + "/control-plane"), Path("/b"))
    assert layout.node.root == nodeconfig.NODE_ROOT
    longest = layout.node.kubelet_root / "plugins_registry" / ("x" * 40 + ".sock")
    assert len(str(longest)) < 108
    assert len(str(layout.node.containerd_socket)) + len(".ttrpc") < 108


# -- the claim on the machine's one node ------------------------------------------------------------------------


def claim_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: str, pid: int) -> Path:
    path = tmp_path / "claim.json"
    argv0 = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()
    path.write_text(json.dumps({"owner": owner, "pids": {"kubelet": {"pid": pid, "argv0": argv0}}}))
    monkeypatch.setattr(node, "CLAIM", path)
    return path


def test_a_live_cluster_elsewhere_holds_the_node_and_a_second_claim_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = claim_file(tmp_path, monkeypatch, "/srv/other-cluster", os.getpid())
    assert node.held_by_other(tmp_path / "ours")
    assert not node.held_by_other(Path("/srv/other-cluster"))
    if os.geteuid() == 0:  # the claim checks for root first; refused before anything of the host is touched
        with pytest.raises(node.NodeError, match="/srv/other-cluster"):
            node.claim(NodeLayout(tmp_path / "node"), tmp_path / "ours")
    node.release(NodeLayout(tmp_path / "node"), tmp_path / "ours")  # not ours: left alone
    assert path.exists()


def test_a_claim_whose_processes_are_gone_holds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    claim_file(tmp_path, monkeypatch, "/srv/crashed-cluster", dead.pid)
    assert not node.held_by_other(tmp_path / "ours")


def test_no_claim_holds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "CLAIM", tmp_path / "absent.json")
    assert not node.held_by_other(tmp_path / "ours")
