"""Which pod kube-proxy sent each connection to a Service to: the kernel's connection tracking, polled.

kube-proxy's iptables rules DNAT a connection to a ClusterIP onto one of the Service's Ready pods, and conntrack
keeps both directions of it: the original tuple (client -> ClusterIP:port) and the reply tuple, whose source is
the pod that answered. `ServiceConnections` polls `conntrack -L` (Debian's conntrack) on a thread every POLL_S
while a test runs and keeps client `ip:port` -> pod IP. An entry outlives its connection: 120 s in TIME_WAIT
(a client that read to the end), 10 s in CLOSE (one reset), the kernel's defaults; a poll every half second
misses none.

`client_addresses` gives a test more source addresses than the node's own: kube-proxy's ClientIP affinity
sends every connection from one address to the same pod, so one source would only ever reach one pod.
`pinned_sources` tells, by one connection from each, which pod each source address is sent to.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from mcpg_testing.nodeconfig import BRIDGE, POD_CIDR

POLL_S = 0.5
COMMAND_TIMEOUT_S = 10.0
TUPLE_KEYS = ("src", "dst", "sport", "dport")


class ConntrackError(Exception):
    """conntrack could not be run, or could not list the table."""


@dataclass(frozen=True, slots=True)
class Flow:
    """One tracked TCP connection: where the client sent it, and who answered."""

    client: str
    """The original source, `ip:port`."""
    target: str
    """The original destination, `ip:port`: the ClusterIP and Service port."""
    answered_by: str
    """The reply's source IP: the pod the connection was translated to (the target's IP if it was not)."""

    @property
    def translated(self) -> bool:
        """kube-proxy's DNAT chose a pod for it (a connection no endpoint took keeps its original target)."""
        return self.answered_by != self.target.rsplit(":", 1)[0]


def parse_line(line: str) -> Flow | None:
    """One line of `conntrack -L -o extended` as a Flow; None for a summary line or one without both tuples.

    A line reads `ipv4 2 tcp 6 <timeout> <state> src= dst= sport= dport= [flags] src= dst= sport= dport= ...`:
    the first four keys are the original direction, the next four the reply.
    """
    values: dict[str, list[str]] = {key: [] for key in TUPLE_KEYS}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep and key in values:
            values[key].append(value)
    if any(len(found) < 2 for found in values.values()):
        return None
    (src, reply_src), (dst, _), (sport, _), (dport, _) = (values[k][:2] for k in TUPLE_KEYS)
    return Flow(client=f"{src}:{sport}", target=f"{dst}:{dport}", answered_by=reply_src)


def list_command(ip: str, port: int) -> list[str]:
    """conntrack's listing of the TCP connections whose original destination is `ip:port`."""
    return ["conntrack", "-L", "-p", "tcp", "-d", ip, "--dport", str(port), "-o", "extended"]


def list_flows(ip: str, port: int) -> list[Flow]:
    try:
        result = subprocess.run(
            list_command(ip, port), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConntrackError(f"conntrack could not be run: {e}") from None
    if result.returncode != 0:
        raise ConntrackError(f"conntrack -L failed ({result.returncode}): {result.stderr.strip()}")
    return [flow for flow in map(parse_line, result.stdout.splitlines()) if flow is not None]


class ServiceConnections:
    """While entered, the pods kube-proxy sent each connection to `ip:port` to, read from conntrack."""

    def __init__(self, ip: str, port: int) -> None:
        self.ip, self.port = ip, port
        self._seen: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: ConntrackError | None = None
        self._thread = threading.Thread(target=self._run, name=f"conntrack {ip}:{port}", daemon=True)

    def poll(self) -> None:
        """Read the table once and keep what it shows."""
        flows = list_flows(self.ip, self.port)
        with self._lock:
            self._seen.update({f.client: f.answered_by for f in flows if f.translated})

    def _run(self) -> None:
        # Paced polling: each entry stays in the table for seconds after its connection closes.
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except ConntrackError as e:
                self._error = e
                return

    def answered_by(self) -> dict[str, str]:
        """Client `ip:port` -> the pod IP its connection reached, for every connection seen so far."""
        if self._error is not None:
            raise self._error
        with self._lock:
            return dict(self._seen)

    def __enter__(self) -> ServiceConnections:
        self.poll()  # fails now if conntrack cannot list the table
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=COMMAND_TIMEOUT_S + POLL_S)
        if self._error is None:
            self.poll()  # the connections of the last half second


# -- client addresses ----------------------------------------------------------------------------------------


def spare_addresses(count: int) -> list[str]:
    """`count` addresses at the top of the pod range, far from those host-local hands out from its bottom."""
    network = ipaddress.ip_network(POD_CIDR)
    top = int(network.broadcast_address) - 1
    return [str(ipaddress.ip_address(top - n)) for n in range(count)]


@contextlib.contextmanager
def client_addresses(count: int) -> Iterator[list[str]]:
    """`count` more addresses of the node's, on its bridge, for a client to connect from; removed afterwards (and
    with the bridge, should the test not get that far)."""
    addresses = spare_addresses(count)
    added: list[str] = []
    try:
        for address in addresses:
            _ip("addr", "add", f"{address}/32", "dev", BRIDGE)
            added.append(address)
        yield addresses
    finally:
        for address in added:
            _ip("addr", "del", f"{address}/32", "dev", BRIDGE, check=False)


def _ip(*args: str, check: bool = True) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    if check and result.returncode != 0:
        raise ConntrackError(f"ip {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")


def pinned_sources(ip: str, port: int, sources: list[str]) -> dict[str, list[str]]:
    """Pod IP -> the source addresses kube-proxy sends to it, learnt by one TCP connection to `ip:port` from each
    (ClientIP affinity keeps every later connection from a source on the same pod)."""
    for source in sources:
        with socket.create_connection((ip, port), timeout=COMMAND_TIMEOUT_S, source_address=(source, 0)):
            pass
    by_client = {f.client.rsplit(":", 1)[0]: f.answered_by for f in list_flows(ip, port) if f.translated}
    out: dict[str, list[str]] = {}
    for source in sources:
        if source not in by_client:
            raise ConntrackError(f"no tracked connection from {source} to {ip}:{port}")
        out.setdefault(by_client[source], []).append(source)
    return out
