"""A local kubelet: runs the pods of the images in `runtimes.IMAGES` as real processes on the fake node.

kwok plays the kubelet of the fake node for every other pod (its pod stages exclude these images, see
`components.kwok_stages`). For ours, this process does what a kubelet does, on loopback:

- starts the container's program from its image's runtime (`runtimes`: the gateway from its image env, the
  NATS server from the test venv), with its command and args, its environment (values, Secret/ConfigMap keys,
  field references) and its Secret, ConfigMap and emptyDir volumes written under a per-pod directory; Service
  names (cluster DNS), mount paths and ports are mapped as `podspec` documents, and a container that names a
  Service not served yet waits in CreateContainerConfigError until it is;
- reports the pod's status: Running with a pod IP, `Ready` from the real readiness probe, the container's
  state, last state and `restartCount`;
- restarts the container when it exits or fails its liveness probe, with a growing back-off (immediately, then
  10 s, 20 s, ... up to 300 s), as a kubelet's CrashLoopBackOff does;
- on deletion runs the preStop hook, sends SIGTERM, waits out the grace period, then SIGKILL, reports the exit,
  and removes the pod;
- stands in for kube-proxy (`serviceproxy`): every Service gets loopback listeners that reach Ready endpoints.

Files in the state directory: `pods.json` (each pod's host ports, IP, PID, directory and the Service addresses
its launch mapped), `services.json` (each Service port's loopback port, by port name and number),
`logs/mcpg-kubelet.log`, `logs/pods/<namespace>_<pod>.log` (container output) and
`logs/service-connections.jsonl`.

    python -m mcpg_testing.kubelet --kubeconfig FILE --state DIR --node NODE
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import ipaddress
import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from mcpg_testing import podspec, runtimes
from mcpg_testing.apiclient import ApiClient
from mcpg_testing.podspec import ConfigError, Launch
from mcpg_testing.processes import die_with_parent_hook, free_ports
from mcpg_testing.runtimes import Runtime
from mcpg_testing.serviceproxy import ServiceProxy

logger = logging.getLogger("mcpg-kubelet")

BACKOFF_S = (0.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0)
BACKOFF_RESET_S = 600.0
"""A container that ran this long starts its back-off over, as the kubelet's does."""
CONFIG_RETRY_S = 2.0
"""How soon a container whose Secret, key or Service is missing (CreateContainerConfigError) is tried again."""
POD_IPS = ipaddress.ip_network("10.1.0.0/16")
"""Pod IPs for EndpointSlices (kwok's pods use 10.0.0.0/24); nothing connects to them, the proxy maps pods."""
READY_FILE = "kubelet.ready"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodWorker:
    """One pod's single container: its process, probes and status, from start to removal."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any], runtime: Runtime, ip: str) -> None:
        self.kubelet, self.pod, self.runtime, self.ip = kubelet, pod, runtime, ip
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.spec = podspec.container(pod)
        self.dir = kubelet.state / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.log_path = kubelet.state / "logs" / "pods" / f"{self.namespace}_{self.name}.log"
        declared = [int(p["containerPort"]) for p in self.spec.get("ports", [])]
        self.host_ports = dict(zip(declared, free_ports(len(declared)), strict=True))
        """containerPort -> host port, kept across restarts of the container (a pod keeps its IP)."""
        self.launch: Launch | None = None
        self.argv: list[str] = []
        """What the container execs, program resolved: set with `launch` by each `_prepare`."""
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = False
        self.restarts = 0
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.started = now()
        self.transitions: dict[str, tuple[bool, str]] = {}
        self.deleting = asyncio.Event()
        self.unhealthy = asyncio.Event()
        self._reported: dict[str, Any] | None = None
        self.task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    # -- lifecycle ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._lifecycle()
            await self.deleting.wait()  # a container that will not restart keeps its pod until it is deleted
            await self._remove()
        except Exception:
            logger.exception("pod %s: the local kubelet failed", self.key)

    async def _lifecycle(self) -> None:
        attempt = 0
        while not self.deleting.is_set():
            try:
                self.launch = await self._prepare()
            except ConfigError as e:
                logger.warning("pod %s: CreateContainerConfigError: %s", self.key, e)
                self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
                await self.report()
                await self._pause(CONFIG_RETRY_S)
                continue
            ran_s = await self._run_container(self.launch)
            if self.deleting.is_set() or self.pod["spec"].get("restartPolicy", "Always") == "Never":
                return
            self.restarts += 1
            attempt = 0 if ran_s >= BACKOFF_RESET_S else attempt + 1
            delay = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)] if attempt else 0.0
            if delay:
                message = f"back-off {delay:.0f}s restarting failed container"
                self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
                logger.info("pod %s: %s", self.key, message)
            await self.report()
            await self._pause(delay)

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if the pod is deleted meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.deleting.wait(), seconds)

    async def _prepare(self) -> Launch:
        lookups = {
            ref: await self.kubelet.lookup(self.namespace, *ref) for ref in podspec.references(self.pod, self.spec)
        }
        launch = podspec.build(
            self.pod,
            self.spec,
            self.dir,
            self.host_ports,
            lambda kind, name: lookups.get((kind, name)),
            list(self.runtime.cmd),
            self.kubelet.proxy.port_table,  # the Services served now; an unknown one is retried with the config
        )
        self.argv = self._argv(launch)
        self.dir.mkdir(parents=True, exist_ok=True)  # the container's working directory, volumes or not
        for path in launch.dirs:
            path.mkdir(parents=True, exist_ok=True)
        for path, (content, mode) in launch.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
        return launch

    def _argv(self, launch: Launch) -> list[str]:
        """The runtime's argv for the launch, its program from the runtime's bin dir if it is there."""
        program, *rest = self.runtime.argv(launch.command, launch.uses_image_entrypoint)
        local = self.runtime.bin_dir / program
        return [str(local) if local.exists() else program, *rest]

    def _environ(self, launch: Launch) -> dict[str, str]:
        base = {"PATH": f"{self.runtime.bin_dir}:/usr/local/bin:/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
        return base | self.runtime.env | launch.env

    async def _run_container(self, launch: Launch) -> float:
        """Run the container once; return how long it ran. Ends on exit, liveness failure or deletion."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"--- {now()} container start (restart {self.restarts}) ---\n".encode())
            out.flush()
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    env=self._environ(launch),
                    cwd=self.dir,
                    start_new_session=True,
                    preexec_fn=die_with_parent_hook(),
                )
            except OSError as e:
                logger.warning("pod %s: RunContainerError: %s", self.key, e)
                self.state = {"waiting": {"reason": "RunContainerError", "message": str(e)}}
                await self.report()
                return 0.0
        started = time.monotonic()
        self.unhealthy.clear()
        self.state = {"running": {"startedAt": now()}}
        logger.info("pod %s: started pid %d: %s", self.key, self.proc.pid, " ".join(self.argv))
        self.kubelet.write_pods()
        await self.report()
        probes = [asyncio.create_task(self._readiness(launch)), asyncio.create_task(self._liveness(launch))]
        exited = asyncio.create_task(self.proc.wait())
        deleted = asyncio.create_task(self.deleting.wait())
        unhealthy = asyncio.create_task(self.unhealthy.wait())
        await asyncio.wait([exited, deleted, unhealthy], return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            why = "deleted" if deleted.done() else "failed its liveness probe"
            await self._stop(why)
        for task in (*probes, deleted, unhealthy):
            task.cancel()
        code = await self.proc.wait()
        self.ready = False
        reason = "Completed" if code == 0 else ("Error" if code > 0 else "Killed")
        self.last_state = {"terminated": {"exitCode": code if code >= 0 else 128 - code, "reason": reason}}
        self.state = {"terminated": self.last_state["terminated"] | {"finishedAt": now()}}
        logger.info("pod %s: container exited (%d) after %.1fs", self.key, code, time.monotonic() - started)
        await self.report()
        return time.monotonic() - started

    async def _stop(self, why: str) -> None:
        """preStop, SIGTERM, then SIGKILL once the grace period is spent."""
        assert self.proc is not None
        grace = self._grace_s()
        deadline = time.monotonic() + grace
        logger.info("pod %s: %s; stopping with %.0fs grace", self.key, why, grace)
        self.ready = False
        await self.report()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._pre_stop(), grace)
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            logger.info("pod %s: grace period over; SIGKILL", self.key)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def _grace_s(self) -> float:
        meta_grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if self.deleting.is_set() and meta_grace is not None:
            return float(meta_grace)
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    async def _pre_stop(self) -> None:
        hook = self.spec.get("lifecycle", {}).get("preStop")
        if not hook:
            return
        if "sleep" in hook:
            await asyncio.sleep(float(hook["sleep"]["seconds"]))
        elif "httpGet" in hook and self.launch is not None:
            await self.kubelet.http_get(hook["httpGet"], self.launch, timeout=30)
        else:
            logger.warning("pod %s: preStop %s is not supported by the local kubelet; skipped", self.key, sorted(hook))

    async def _remove(self) -> None:
        """The container has stopped for good: remove the pod object (uid-guarded) and its files."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
        status = await self.kubelet.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{self.name}", body)
        logger.info("pod %s: removed (%d)", self.key, status)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- probes -------------------------------------------------------------------------------------

    async def _readiness(self, launch: Launch) -> None:
        probe = self.spec.get("readinessProbe")
        if probe is None:
            self.ready = True
            await self.report()
            return
        async for ok in self._probing(probe, launch):
            if ok != self.ready:
                self.ready = ok
                logger.info("pod %s: %s", self.key, "Ready" if ok else "readiness probe failed: not Ready")
                await self.report()

    async def _liveness(self, launch: Launch) -> None:
        probe = self.spec.get("livenessProbe")
        if probe is None:
            return
        async for ok in self._probing(probe, launch):
            if not ok:
                self.unhealthy.set()
                return

    async def _probing(self, probe: dict[str, Any], launch: Launch) -> Any:
        """Yield the probe's verdict after each result that reaches its success or failure threshold."""
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        successes = failures = 0
        while True:
            ok = await self.kubelet.probe(probe, launch)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if ok and successes >= int(probe.get("successThreshold", 1)):
                yield True
            elif not ok and failures >= int(probe.get("failureThreshold", 3)):
                yield False
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))

    # -- status -------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        container = {
            "name": self.spec["name"],
            "image": self.spec["image"],
            "imageID": f"local://{self.runtime.component}",
            "ready": self.ready,
            "started": running,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.proc is not None:
            container["containerID"] = f"local://{self.proc.pid}"
        conditions = [
            self._condition("PodScheduled", True),
            self._condition("Initialized", True),
            self._condition("ContainersReady", self.ready),
            self._condition("Ready", self.ready),
        ]
        return {
            "phase": "Running" if self.proc is not None else "Pending",
            "conditions": conditions,
            "containerStatuses": [container],
            "hostIP": self.kubelet.node_ip,
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.started,
        }

    def _condition(self, type_: str, value: bool) -> dict[str, Any]:
        previous = self.transitions.get(type_)
        if previous is None or previous[0] != value:
            self.transitions[type_] = (value, now())
        return {"type": type_, "status": str(value), "lastTransitionTime": self.transitions[type_][1]}

    async def report(self) -> None:
        """Patch the pod's status if it changed since the last report."""
        status = self.status()
        if status == self._reported:
            return
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status"
        code = await self.kubelet.api.patch(path, {"status": status})
        if code == 200:
            self._reported = status
        elif code != 404:
            logger.warning("pod %s: status patch answered %d", self.key, code)


class Kubelet:
    def __init__(self, api: ApiClient, state: Path, node: str, node_ip: str = "10.0.0.1") -> None:
        self.api, self.state, self.node, self.node_ip = api, state, node, node_ip
        self.workers: dict[str, PodWorker] = {}
        """By pod uid."""
        self._ips = (str(ip) for ip in POD_IPS.hosts())
        self.proxy = ServiceProxy(self.pod_port, state / "services.json", state / "logs" / "service-connections.jsonl")
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))

    async def close(self) -> None:
        for worker in self.workers.values():
            worker.task.cancel()
            if worker.proc is not None and worker.proc.returncode is None:
                worker.proc.kill()
        await self.proxy.close()
        await self.http.close()

    async def run(self) -> None:
        """Follow pods on the node, Services and EndpointSlices; say so in READY_FILE once each was listed."""
        pods = f"fieldSelector=spec.nodeName%3D{self.node}"
        listed = [asyncio.Event() for _ in range(3)]
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._follow("/api/v1/pods", pods, self._pod_list, self._pod_event, listed[0]))
            services = self.proxy.service_list, self.proxy.service_event
            tasks.create_task(self._follow("/api/v1/services", "", *services, listed[1]))
            slices = "/apis/discovery.k8s.io/v1/endpointslices"
            tasks.create_task(self._follow(slices, "", self._slice_list, self._slice_event, listed[2]))
            for event in listed:
                await event.wait()
            (self.state / READY_FILE).write_text(str(os.getpid()))
            logger.info("following pods on node %s, Services and EndpointSlices", self.node)

    async def _follow(self, path: str, query: str, on_list: Any, on_event: Any, listed: asyncio.Event) -> None:
        async for kind, obj in self.api.watch(path, query):
            if kind == "LIST":
                await on_list(obj)
                listed.set()
            else:
                await on_event(kind, obj)

    async def _slice_list(self, listed: dict[str, Any]) -> None:
        self.proxy.slice_list(listed)

    async def _slice_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.proxy.slice_event(kind, obj)

    # -- pods ---------------------------------------------------------------------------------------

    async def _pod_list(self, listed: dict[str, Any]) -> None:
        present = {p["metadata"]["uid"] for p in listed["items"]}
        for uid in set(self.workers) - present:
            await self._pod_event("DELETED", self.workers[uid].pod)
        for pod in listed["items"]:
            await self._pod_event("ADDED", pod)

    async def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        runtime = runtimes.runtime(podspec.container(pod)["image"])
        if runtime is None:
            return  # kwok's
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                self.workers.pop(uid)
                worker.deleting.set()  # force-deleted, or removed by us: nothing left to report to
            self.write_pods()
            return
        if worker is None:
            if pod["metadata"].get("deletionTimestamp"):
                return
            worker = self.workers[uid] = PodWorker(self, pod, runtime, next(self._ips))
            logger.info("pod %s/%s: accepted (%s)", worker.namespace, worker.name, runtime.component)
        worker.pod = pod
        if pod["metadata"].get("deletionTimestamp") and not worker.deleting.is_set():
            logger.info("pod %s: deletion requested", worker.key)
            worker.deleting.set()

    def pod_port(self, namespace: str, name: str, container_port: int) -> int | None:
        for worker in self.workers.values():
            if (worker.namespace, worker.name) == (namespace, name):
                return worker.host_ports.get(container_port)
        return None

    def write_pods(self) -> None:
        record = {
            w.key: {
                "uid": w.uid,
                "ip": w.ip,
                "pid": w.proc.pid if w.proc else None,
                "ports": {str(k): v for k, v in w.host_ports.items()},
                "log": str(w.log_path),
                "dir": str(w.dir),
                "services": w.launch.services if w.launch else {},
            }
            for w in self.workers.values()
        }
        tmp = self.state / "pods.json.tmp"
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.state / "pods.json")

    async def lookup(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        plural = {"Secret": "secrets", "ConfigMap": "configmaps"}[kind]
        return await self.api.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")

    # -- probes -------------------------------------------------------------------------------------

    async def probe(self, probe: dict[str, Any], launch: Launch) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                return await self.http_get(probe["httpGet"], launch, timeout)
            if "tcpSocket" in probe:
                port = podspec.resolve_port(probe["tcpSocket"]["port"], launch)
                _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
                writer.close()
                return True
        except (OSError, TimeoutError, ConfigError):
            return False
        logger.warning("probe %s is not supported by the local kubelet; counted as failed", sorted(probe))
        return False

    async def http_get(self, action: dict[str, Any], launch: Launch, timeout: float) -> bool:
        port = podspec.resolve_port(action["port"], launch)
        url = f"http://127.0.0.1:{port}{action.get('path', '/')}"
        headers = {h["name"]: h["value"] for h in action.get("httpHeaders", [])}
        try:
            async with self.http.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                return 200 <= resp.status < 400
        except (aiohttp.ClientError, TimeoutError):
            return False


async def serve(kubeconfig: Path, state: Path, node: str) -> None:
    (state / "logs" / "pods").mkdir(parents=True, exist_ok=True)
    api = ApiClient(kubeconfig)
    kubelet = Kubelet(api, state, node)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = asyncio.create_task(kubelet.run())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    await kubelet.close()
    await api.close()
    if stopping.done():
        logger.info("stopped")
    else:
        stopping.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--state", type=Path, required=True, help="the control plane's state directory")
    parser.add_argument("--node", required=True, help="the node whose pods of local images this runs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args.kubeconfig, args.state, args.node))
    return 0


if __name__ == "__main__":
    sys.exit(main())
