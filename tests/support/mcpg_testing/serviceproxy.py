"""A stand-in for kube-proxy on loopback: one listener per Service port, forwarding to the Ready endpoints.

Each Service with a selector gets, per port, a loopback listener on a free port (recorded in `services.json`
in the state directory under the port's name and its number, read by `controlplane.ControlPlane.service_port`;
the local kubelet's cluster DNS maps `<service>.<namespace>.svc:<port>` to it, see `port_table` and
`podspec`). A connection is forwarded, as bytes, to
one endpoint that its EndpointSlices list as ready and whose pod the local kubelet runs: at random, as
kube-proxy's iptables mode does, or to the client's previous endpoint while it stays ready when the Service sets
`sessionAffinity: ClientIP`. Established connections are left alone when their endpoint stops being ready,
as conntrack leaves them. A connection with no ready endpoint is closed at once (kube-proxy rejects it).

Every forwarded connection is logged to `service-connections.jsonl` (time, Service, port, client address, pod),
so a test can tell which pod answered a request it sent through the Service.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger(__name__)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
DEFAULT_AFFINITY_S = 10800
PIPE_CHUNK = 64 * 1024
PodPort = Callable[[str, str, int], int | None]
"""(namespace, pod name, containerPort) -> the host port the local kubelet gave it, or None."""


@dataclass
class ServicePort:
    name: str
    port: int
    server: asyncio.Server
    local_port: int


@dataclass
class ServiceState:
    namespace: str
    name: str
    affinity_s: float | None = None
    ports: dict[str, ServicePort] = field(default_factory=dict)
    sticky: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Client IP -> (pod, last used) under ClientIP affinity."""


def port_key(port: dict[str, Any]) -> str:
    """A Service port's key in the record: its name, or its number when unnamed (a one-port Service)."""
    return str(port.get("name") or port["port"])


class ServiceProxy:
    def __init__(self, pod_port: PodPort, record: Path, connections: Path) -> None:
        self.pod_port = pod_port
        self.record = record
        self.services: dict[tuple[str, str], ServiceState] = {}
        self.slices: dict[tuple[str, str], dict[str, Any]] = {}
        """(namespace, slice name) -> EndpointSlice."""
        self._log: TextIO = connections.open("a", buffering=1)
        self._write_record()

    async def close(self) -> None:
        for key in list(self.services):
            await self._remove(key)
        self._log.close()

    # -- state from the API server -------------------------------------------------------------------

    async def service_event(self, kind: str, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if kind == "DELETED" or not obj["spec"].get("selector"):
            await self._remove(key)
        else:
            await self._apply(key, obj)
        self._write_record()

    async def service_list(self, listed: dict[str, Any]) -> None:
        keys = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed["items"]}
        for gone in set(self.services) - keys:
            await self._remove(gone)
        for obj in listed["items"]:
            await self.service_event("ADDED", obj)

    def port_table(self, namespace: str, name: str) -> dict[int, int] | None:
        """Service port -> its loopback listener's port, or None if the Service is not served (unknown, or
        without a selector): what cluster DNS and the Service's ClusterIP give a pod, on loopback."""
        state = self.services.get((namespace, name))
        return None if state is None else {p.port: p.local_port for p in state.ports.values()}

    def slice_event(self, kind: str, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if kind == "DELETED":
            self.slices.pop(key, None)
        else:
            self.slices[key] = obj

    def slice_list(self, listed: dict[str, Any]) -> None:
        self.slices = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in listed["items"]}

    async def _apply(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        state = self.services.setdefault(key, ServiceState(*key))
        spec = obj["spec"]
        config = spec.get("sessionAffinityConfig", {}).get("clientIP", {})
        affine = spec.get("sessionAffinity") == "ClientIP"
        state.affinity_s = float(config.get("timeoutSeconds", DEFAULT_AFFINITY_S)) if affine else None
        wanted = {port_key(p): int(p["port"]) for p in spec.get("ports", []) if p.get("protocol", "TCP") == "TCP"}
        for name in set(state.ports) - set(wanted):
            await self._close_port(state.ports.pop(name))
        for name, number in wanted.items():
            if name not in state.ports or state.ports[name].port != number:
                if name in state.ports:
                    await self._close_port(state.ports.pop(name))
                state.ports[name] = await self._listen(state, name, number)

    async def _listen(self, state: ServiceState, name: str, number: int) -> ServicePort:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._forward(state, name, reader, writer)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        local = int(server.sockets[0].getsockname()[1])
        logger.info("service %s/%s port %s (%d) on 127.0.0.1:%d", state.namespace, state.name, name, number, local)
        return ServicePort(name, number, server, local)

    async def _close_port(self, port: ServicePort) -> None:
        port.server.close()
        with contextlib.suppress(Exception):
            await port.server.wait_closed()

    async def _remove(self, key: tuple[str, str]) -> None:
        state = self.services.pop(key, None)
        for port in state.ports.values() if state else ():
            await self._close_port(port)

    def _write_record(self) -> None:
        # by name and by number: a test asks for the port it knows (a port name always holds a letter, so the
        # two never collide; an unnamed port's name is its number already)
        record = {
            f"{ns}/{name}": {key: p.local_port for p in state.ports.values() for key in (p.name, str(p.port))}
            for (ns, name), state in sorted(self.services.items())
        }
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(self.record)  # readers never see half a file

    # -- forwarding ----------------------------------------------------------------------------------

    def ready_endpoints(self, namespace: str, service: str, port_name: str) -> dict[str, int]:
        """Pod name -> host port, for each ready endpoint of the Service's port that the local kubelet runs."""
        out: dict[str, int] = {}
        for (ns, _), eps in self.slices.items():
            if ns != namespace or eps["metadata"].get("labels", {}).get(SERVICE_NAME_LABEL) != service:
                continue
            numbers = [p["port"] for p in eps.get("ports") or [] if port_key(p) == port_name or not p.get("name")]
            for endpoint in eps.get("endpoints") or []:
                ref = endpoint.get("targetRef") or {}
                if not endpoint.get("conditions", {}).get("ready") or ref.get("kind") != "Pod" or not numbers:
                    continue
                host = self.pod_port(namespace, ref["name"], int(numbers[0]))
                if host is not None:
                    out[ref["name"]] = host
        return out

    def _choose(self, state: ServiceState, port: str, client_ip: str) -> tuple[str, int] | None:
        ready = self.ready_endpoints(state.namespace, state.name, port)
        if not ready:
            return None
        now = time.monotonic()
        if state.affinity_s is not None:
            pod, used = state.sticky.get(client_ip, ("", 0.0))
            if pod in ready and now - used < state.affinity_s:
                state.sticky[client_ip] = (pod, now)
                return pod, ready[pod]
        pod = random.choice(sorted(ready))
        if state.affinity_s is not None:
            state.sticky[client_ip] = (pod, now)
        return pod, ready[pod]

    async def _forward(
        self, state: ServiceState, port: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        client_ip, client_port = writer.get_extra_info("peername")[:2]
        chosen = self._choose(state, port, client_ip)
        self._log_connection(state, port, f"{client_ip}:{client_port}", chosen[0] if chosen else None)
        if chosen is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", chosen[1])
        except OSError:
            writer.close()  # the process is between a crash and its restart: the client sees a reset
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for side in (writer, up_writer):
                side.close()

    def _log_connection(self, state: ServiceState, port: str, client: str, pod: str | None) -> None:
        entry = {"t": time.time(), "service": f"{state.namespace}/{state.name}", "port": port, "client": client}
        self._log.write(json.dumps(entry | {"pod": pod}) + "\n")


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until EOF or error, then half-close the other side so a response still in flight is delivered."""
    try:
        while data := await source.read(PIPE_CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:  # a reset on either side ends both directions
        sink.close()
