"""The real node's host side: claiming the machine's one node, its network, its images, and leaving no trace.

containerd, the kubelet, kube-proxy and CoreDNS are components the control plane starts like the others
(`components.py` gives their command lines, `nodeconfig.py` their configs). What they need of the host, and what
they leave on it, is here:

- **Claim**: one node per machine (iptables, the kubepods cgroups, sysctls and the CNI bridge are host-wide), so
  a record in /run names the state directory holding it. A second control plane fails at once, naming it; a
  record whose processes are gone is cleaned up first.
- **Network**: the bridge and its address (the node IP, where the API server must already listen), the Service
  range routed onto the bridge, and a firewall chain of our own: nothing forwarded between the pods and the host's
  other interfaces, and no pod reaching the kubelet's port. The sysctls the kubelet and the bridge plugin change
  and the iptables tables are saved first and put back last.
- **Images**: the archives `oci.py` builds, imported into the runtime (nothing can be pulled here).
- **Down**: every pod sandbox removed through the CRI (so CNI releases its addresses and network namespaces),
  stray shims killed, the mounts the kubelet made under the state directory (Secret tmpfs volumes) unmounted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from mcpg_testing import nodeconfig
from mcpg_testing.nodeconfig import BRIDGE, CRI_NAMESPACE, NODE_IP, POD_CIDR, SERVICE_CIDR, NodeLayout
from mcpg_testing.processes import pid_alive

logger = logging.getLogger(__name__)

CLAIM = Path("/run/mcpg-node.json")
"""Which state directory holds this machine's node, and the PIDs that prove it still runs."""
CHAIN = "MCPG-NODE"
BRIDGE_MAC = "02:6d:63:70:67:01"
"""Locally administered (the 02 bit), so it can belong to no real interface."""
KUBELET_PORT = 10250
HOST_SYSCTLS = (
    "net.ipv4.ip_forward",  # the bridge plugin turns it on (a gateway bridge)
    "vm.overcommit_memory",  # the kubelet sets these, as it does on any node
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
)
TABLES = ("filter", "nat", "mangle")
COMMAND_TIMEOUT = 60.0


class NodeError(Exception):
    """The node could not be claimed, set up or taken down."""


def run(*argv: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip() or result.stdout}")
    return result


# -- the claim -----------------------------------------------------------------------------------------------


def claim(layout: NodeLayout, owner: Path) -> None:
    """Take the machine's node for the cluster in `owner` (its state directory), cleaning up after a holder that
    died; NodeError if another cluster's node runs."""
    if os.geteuid() != 0:
        raise NodeError("the real node needs root (the kubelet, containerd and iptables)")
    holder = _holder()
    if held_by_other(owner):
        raise NodeError(f"this machine's one node is held by the cluster in {holder and holder['owner']}: stop it "
                        "first (make cluster-down, or end the test run holding it)")  # fmt: skip
    if holder is not None:
        logger.info("cleaning up the node left by the cluster in %s", holder["owner"])
        _clean(layout)
    layout.root.mkdir(parents=True, exist_ok=True)
    _save_host(layout)
    record_pids(owner, {})
    _network_up()


class Holder(TypedDict):
    """The claim's record: the state directory of the cluster holding the node, and its processes (name -> pid
    and argv0)."""

    owner: str
    pids: dict[str, dict[str, int | str]]


def record_pids(owner: Path, pids: dict[str, dict[str, int | str]]) -> None:
    """Name the node's running processes in the claim, so a later claim can tell a live holder from a dead one."""
    CLAIM.write_text(json.dumps(Holder(owner=str(owner), pids=pids)) + "\n")


def _holder() -> Holder | None:
    try:
        holder: Holder = json.loads(CLAIM.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and "owner" in holder else None


def held_by_other(owner: Path) -> bool:
    """Another cluster's node runs: the claim names another state directory, and one of its processes lives."""
    holder = _holder()
    if holder is None or Path(holder["owner"]) == owner:
        return False
    return any(pid_alive(int(p["pid"]), str(p["argv0"])) for p in holder["pids"].values())


def release(layout: NodeLayout, owner: Path) -> None:
    """Everything the node left on the host, gone, and the saved sysctls and iptables tables put back; nothing
    if the node is another live cluster's."""
    if held_by_other(owner):
        return
    _clean(layout)
    CLAIM.unlink(missing_ok=True)


def _clean(layout: NodeLayout) -> None:
    _kill_shims(layout)
    _unmount_under(layout.root)
    _remove_network_namespaces()
    run("ip", "link", "del", BRIDGE, check=False)  # its routes go with it
    _restore_host(layout)


# -- the host's settings -------------------------------------------------------------------------------------


def _save_host(layout: NodeLayout) -> None:
    if layout.saved_host.exists():
        return  # a restarted node keeps what the host had before the first start
    sysctls = {name: _sysctl(name) for name in HOST_SYSCTLS}
    for table in TABLES:  # listing creates an absent table, so the save holds it and the restore empties it
        run("iptables", "-t", table, "-S", check=False)
    saved = {"sysctls": sysctls, "iptables": run("iptables-save").stdout, "ip6tables": _ip6tables_save()}
    layout.saved_host.write_text(json.dumps(saved) + "\n")


def _ip6tables_save() -> str:
    for table in TABLES:
        run("ip6tables", "-t", table, "-S", check=False)
    return run("ip6tables-save", check=False).stdout


def _restore_host(layout: NodeLayout) -> None:
    try:
        saved = json.loads(layout.saved_host.read_text())
    except (OSError, ValueError):
        return
    run("iptables-restore", stdin=saved["iptables"], check=False)
    if saved["ip6tables"]:
        run("ip6tables-restore", stdin=saved["ip6tables"], check=False)
    for name, value in saved["sysctls"].items():
        if value is not None:
            run("sysctl", "-q", "-w", f"{name}={value}", check=False)
    layout.saved_host.unlink()


def _sysctl(name: str) -> str | None:
    result = run("sysctl", "-n", name, check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def _network_up() -> None:
    """The bridge with the node IP (the API server binds it next), the Service range routed onto it, and the
    containment chain."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        # A fixed address: a bridge left to itself takes the lowest of its ports', so deleting that pod would
        # change the node's MAC under every other pod's ARP cache (seen: senders timing out for seconds after an
        # operator pod was deleted). An address set by hand stays.
        run("ip", "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge")
    run("ip", "addr", "replace", f"{NODE_IP}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    run("ip", "route", "replace", SERVICE_CIDR, "dev", BRIDGE, "src", NODE_IP)
    run("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1")  # bridged pod traffic meets kube-proxy's rules
    for hook, rules in containment_rules().items():
        chain = f"{CHAIN}-{hook}"
        run("iptables", "-N", chain, check=False)
        run("iptables", "-F", chain)
        for rule in rules:
            run("iptables", "-A", chain, *rule)
        if run("iptables", "-C", hook, "-j", chain, check=False).returncode != 0:
            run("iptables", "-I", hook, "1", "-j", chain)


def containment_rules() -> dict[str, list[list[str]]]:
    """Built-in chain -> the rules of our chain it jumps to first: pods talk to each other and to the node only."""
    return {
        "FORWARD": [["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"], ["!", "-i", BRIDGE, "-o", BRIDGE, "-j", "DROP"]],
        # The kubelet serves anonymous requests (the API server has no client certificate for it): not to pods.
        "INPUT": [["-i", BRIDGE, "-p", "tcp", "--dport", str(KUBELET_PORT), "-j", "DROP"]],
    }


# -- images --------------------------------------------------------------------------------------------------


def import_images(layout: NodeLayout, archives: Sequence[Path], aliases: Mapping[str, str] | None = None) -> None:
    """Load each docker-archive into the CRI's namespace, as `ctr images import` does on any node; then tag each
    image of `aliases` (reference -> another reference) under its other name too, as `ctr images tag` does."""
    ctr = ["ctr", f"--address={layout.containerd_socket}", "-n", CRI_NAMESPACE, "images"]
    for archive in archives:
        run(*ctr, "import", str(archive))
    for reference, alias in (aliases or {}).items():
        run(*ctr, "tag", "--force", qualified(reference), qualified(alias))


def qualified(reference: str) -> str:
    """`mcpg/gateway:local` as the runtime stores it (`docker.io/mcpg/gateway:local`), as the kubelet asks for it."""
    if "/" not in reference:
        return f"docker.io/library/{reference}"
    first = reference.split("/", 1)[0]
    return reference if "." in first or ":" in first or first == "localhost" else f"docker.io/{reference}"


# -- down ----------------------------------------------------------------------------------------------------


def remove_pods(layout: NodeLayout, crictl_binary: Path) -> None:
    """Stop and remove every pod sandbox through the CRI (the kubelet already stopped): CNI releases each pod's
    address and network namespace, and the containers' processes end."""
    crictl = [str(crictl_binary), f"--config={layout.crictl_config}"]
    for verb in ("stopp", "rmp"):
        ids = run(*crictl, "pods", "-q", check=False).stdout.split()
        if ids:
            run(*crictl, verb, *ids, check=False)


def _kill_shims(layout: NodeLayout) -> None:
    """Shims outlive a killed containerd: end those of this node's socket (their containers end with them)."""
    needle = str(layout.containerd_socket).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
                os.kill(int(proc.name), signal.SIGKILL)


def _unmount_under(root: Path) -> None:
    """Lazily unmount, deepest first, what is mounted under `root`: Secret tmpfs volumes, container rootfs."""
    with contextlib.suppress(OSError):
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        prefix = str(root.resolve())
        for point in sorted((m for m in mounts if m == prefix or m.startswith(prefix + "/")), reverse=True):
            run("umount", "-l", point, check=False)


def _remove_network_namespaces() -> None:
    """The CNI network namespaces containerd made (`cni-<uuid>` under /var/run/netns) that a lost node left."""
    netns = Path("/var/run/netns")
    for path in netns.glob("cni-*") if netns.is_dir() else ():
        run("umount", "-l", str(path), check=False)
        path.unlink(missing_ok=True)


def write_configs(layout: NodeLayout, kubeconfig: Path, ready_port: int) -> None:
    nodeconfig.write_configs(layout, kubeconfig, ready_port)
