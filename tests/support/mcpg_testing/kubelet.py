"""A local kubelet: runs the pods of the images in `runtimes.IMAGES` as real processes on the fake node.

kwok plays the kubelet of the fake node for every other pod (its pod stages exclude these images, see
`components.kwok_stages`: the first container's image decides). For ours, this process does what a kubelet does,
on loopback, for each container of the pod (`spec.containers`; init containers are not supported):

- starts the container's program from its image's runtime (`runtimes`: the gateway from its image env, the
  NATS server from the test venv), with its command and args, its environment (values, Secret/ConfigMap keys,
  field references) and its Secret, ConfigMap and emptyDir volumes written under the pod's directory, one
  directory per volume shared by every container that mounts it; Service names (cluster DNS), mount paths and
  ports are mapped as `podspec` documents, and a container that names a Service not served yet waits in
  CreateContainerConfigError until it is. A container whose image no runtime runs waits in ErrImagePull. Every
  process shares the host's PID namespace (so `shareProcessNamespace: true` holds for every pod), and a
  container's args and env are mapped with its own containerPorts only, not its sibling containers';
- reports the pod's status: Running with a pod IP, `Ready` once every container is ready (from its real
  readiness probe, or running if it has none), and each container's state, last state and `restartCount`;
- restarts a container when it exits or fails its liveness probe, with a growing back-off (immediately, then
  10 s, 20 s, ... up to 300 s), as a kubelet's CrashLoopBackOff does; the pod's other containers run on;
- rewrites the files of a mounted Secret or ConfigMap volume in a running pod when that object changes (each
  changed file replaced whole), as a kubelet does; environment variables taken from it stay as the container
  started with them, as in Kubernetes;
- on deletion runs every container's preStop hook, sends SIGTERM, waits out the grace period, then SIGKILL (all
  containers at once), reports the exits, and removes the pod once every container has stopped;
- stands in for kube-proxy (`serviceproxy`): every Service gets loopback listeners that reach Ready endpoints.

Files in the state directory: `pods.json` (each pod's IP, directory and, for its first container, host ports,
PID, log and the Service addresses its launch mapped; under `containers`, every container's PID, host ports and
log), `services.json` (each Service port's loopback port, by port name and number), `logs/mcpg-kubelet.log`,
`logs/pods/<namespace>_<pod>.log` (the first container's output), `logs/pods/<namespace>_<pod>_<container>.log`
(every other container's) and `logs/service-connections.jsonl`.

    python -m mcpg_testing.kubelet --kubeconfig FILE --state DIR --node NODE
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import ipaddress
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
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
TEMP_PREFIX = ".."
"""Temporary files of `write_file` start with this: no Secret or ConfigMap key, nor an item's path, may."""

OnList = Callable[[dict[str, Any]], Awaitable[None]]
"""What a followed resource's LIST goes to: the whole list."""
OnEvent = Callable[[str, dict[str, Any]], Awaitable[None]]
"""What a followed resource's watch events go to: (ADDED | MODIFIED | DELETED, the object)."""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_file(path: Path, content: bytes, mode: int) -> bool:
    """Make `path` hold `content` with `mode`; False if it did already.

    Replaced whole (a temporary file beside it, then a rename), as a kubelet swaps a volume's files: a container
    reading it meanwhile (another container of the pod, or this one after a Secret update) sees the old file or
    the new, never a part of one, and a read-only mode (`defaultMode: 0400`) does not stop the next write.
    """
    with contextlib.suppress(OSError):  # missing, or unreadable: write it
        if path.read_bytes() == content and stat.S_IMODE(path.stat().st_mode) == mode:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def kill_group(pid: int) -> None:
    """SIGKILL the process group a container's main process leads (it starts a new session): what a container
    runtime does to whatever is left in a container once its PID 1 has exited, so the children of a `sh -c`
    script do not outlive their container."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class PodWorker:
    """One pod: its directory, IP, status and removal, and a `ContainerWorker` for each of its containers."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any], ip: str) -> None:
        self.kubelet, self.pod, self.ip = kubelet, pod, ip
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = kubelet.state / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.containers = self._containers(pod["spec"]["containers"])
        self.started = now()
        self.transitions: dict[str, tuple[bool, str]] = {}
        self.deleting = asyncio.Event()
        self.volumes = asyncio.Lock()
        """Held while volume files are looked up and written, by a container's start or a Secret update: the one
        that writes last looked up last, so the files left are the newest object's."""
        self._reporting = asyncio.Lock()
        """Status patches in turn, each computed when its turn comes: none overwrites a newer one."""
        self._reported: dict[str, Any] | None = None
        self.task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")

    def _containers(self, specs: list[dict[str, Any]]) -> list[ContainerWorker]:
        """A worker per container, each with free loopback ports for its declared containerPorts (a pod's
        ports are unique across its containers) and its own log: the first container's at the path a
        single-container pod's has."""
        logs = self.kubelet.state / "logs" / "pods"
        ports = iter(free_ports(sum(len(spec.get("ports", [])) for spec in specs)))
        workers = []
        for i, spec in enumerate(specs):
            suffix = "" if i == 0 else f"_{spec['name']}"
            log = logs / f"{self.namespace}_{self.name}{suffix}.log"
            host_ports = {int(p["containerPort"]): next(ports) for p in spec.get("ports", [])}
            workers.append(ContainerWorker(self, spec, log, host_ports))
        return workers

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def host_ports(self) -> dict[int, int]:
        """containerPort -> host port, over every container of the pod."""
        return {port: host for c in self.containers for port, host in c.host_ports.items()}

    # -- lifecycle ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await asyncio.gather(*(c.run() for c in self.containers))
            await self.deleting.wait()  # containers that will not restart keep their pod until it is deleted
            await self._remove()
        except Exception:
            logger.exception("pod %s: the local kubelet failed", self.key)

    async def _remove(self) -> None:
        """Every container has stopped for good: remove the pod object (uid-guarded) and its files."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
        status = await self.kubelet.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{self.name}", body)
        logger.info("pod %s: removed (%d)", self.key, status)
        shutil.rmtree(self.dir, ignore_errors=True)

    def grace_s(self) -> float:
        meta_grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if self.deleting.is_set() and meta_grace is not None:
            return float(meta_grace)
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    def kill(self) -> None:
        """SIGKILL every container's processes now (the kubelet itself is stopping)."""
        for container in self.containers:
            container.kill()

    # -- Secret and ConfigMap updates ---------------------------------------------------------------

    async def update_volumes(self, kind: str, obj: dict[str, Any]) -> None:
        """Rewrite the changed files of every volume projecting `obj` (a Secret or ConfigMap of the pod's
        namespace, `kind`), as a kubelet does for a running pod. The containers run on: a program that should
        act on the change watches its files (as the NATS bus's config reloader does)."""
        volumes = podspec.projecting(self.pod, kind, obj["metadata"]["name"])
        if not volumes:
            return
        async with self.volumes:
            for volume in volumes:
                self._update_volume(volume, kind, obj)

    def _update_volume(self, volume: str, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if not podspec.volume_dir(self.dir, volume).is_dir():
            return  # not written yet, or the pod is gone: a container's next start writes the newest files
        try:
            files = podspec.volume_files(self.pod, volume, self.dir, lambda _kind, _name: obj)
        except ConfigError as e:  # a key its `items` names is gone: a kubelet keeps the volume as it was
            logger.warning("pod %s: volume %s not updated from %s %s: %s", self.key, volume, kind, name, e)
            return
        changed = [path for path, (content, mode) in files.items() if write_file(path, content, mode)]
        if changed:
            logger.info("pod %s: volume %s updated from %s %s", self.key, volume, kind, name)

    # -- status -------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        ready = all(c.ready for c in self.containers)
        conditions = [
            self._condition("PodScheduled", True),
            self._condition("Initialized", True),
            self._condition("ContainersReady", ready),
            self._condition("Ready", ready),
        ]
        return {
            "phase": "Running" if any(c.proc is not None for c in self.containers) else "Pending",
            "conditions": conditions,
            "containerStatuses": [c.status() for c in self.containers],
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
        async with self._reporting:
            status = self.status()
            if status == self._reported:
                return
            path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status"
            code = await self.kubelet.api.patch(path, {"status": status})
            if code == 200:
                self._reported = status
            elif code != 404:
                logger.warning("pod %s: status patch answered %d", self.key, code)

    def record(self) -> dict[str, Any]:
        """The pod's entry in pods.json: the keys a single-container pod had, for its first container, and
        every container's under `containers`."""
        first = self.containers[0]
        return {
            "uid": self.uid,
            "ip": self.ip,
            "dir": str(self.dir),
            **first.record(),
            "services": first.launch.services if first.launch else {},
            "containers": {c.name: c.record() for c in self.containers},
        }


class ContainerWorker:
    """One container of a pod: its process, probes, restarts and status, from the pod's start to its removal."""

    def __init__(self, pod: PodWorker, spec: dict[str, Any], log_path: Path, host_ports: dict[int, int]) -> None:
        self.pod, self.spec, self.log_path = pod, spec, log_path
        self.name: str = spec["name"]
        self.runtime = runtimes.runtime(spec["image"])
        self.host_ports = host_ports
        """containerPort -> host port, kept across restarts of the container (a pod keeps its IP)."""
        self.launch: Launch | None = None
        self.argv: list[str] = []
        """What the container execs, program resolved: set with `launch` and `environ` by each `_prepare`."""
        self.environ: dict[str, str] = {}
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = False
        self.restarts = 0
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.unhealthy = asyncio.Event()

    @property
    def key(self) -> str:
        return f"{self.pod.key} ({self.name})"

    @property
    def kubelet(self) -> Kubelet:
        return self.pod.kubelet

    @property
    def deleting(self) -> asyncio.Event:
        return self.pod.deleting

    # -- lifecycle ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """The container's life: ends once it will not be started again (its pod is being deleted, or it
        exited under restartPolicy Never, or no runtime runs its image), its process reaped."""
        try:
            if self.runtime is None:
                await self._unrunnable()
            else:
                await self._lifecycle(self.runtime)
        except Exception:
            logger.exception("pod %s: the local kubelet failed", self.key)
            if self.proc is not None and self.proc.returncode is None:
                self.kill()
                await self.proc.wait()

    async def _unrunnable(self) -> None:
        """Not ours to run, in a pod that is (its first container is): wait in ErrImagePull, as a node that
        cannot pull the image would."""
        message = f"the local kubelet cannot run image {self.spec['image']!r}: no runtime for it in runtimes.IMAGES"
        logger.warning("pod %s: ErrImagePull: %s", self.key, message)
        self.state = {"waiting": {"reason": "ErrImagePull", "message": message}}
        await self.pod.report()

    async def _lifecycle(self, runtime: Runtime) -> None:
        attempt = 0
        while not self.deleting.is_set():
            try:
                self.launch = await self._prepare(runtime)
            except ConfigError as e:
                logger.warning("pod %s: CreateContainerConfigError: %s", self.key, e)
                self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
                await self.pod.report()
                await self._pause(CONFIG_RETRY_S)
                continue
            ran_s = await self._run_container(self.launch)
            if self.deleting.is_set() or self.pod.pod["spec"].get("restartPolicy", "Always") == "Never":
                return
            self.restarts += 1
            attempt = 0 if ran_s >= BACKOFF_RESET_S else attempt + 1
            delay = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)] if attempt else 0.0
            if delay:
                message = f"back-off {delay:.0f}s restarting failed container"
                self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
                logger.info("pod %s: %s", self.key, message)
            await self.pod.report()
            await self._pause(delay)

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if the pod is deleted meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.deleting.wait(), seconds)

    async def _prepare(self, runtime: Runtime) -> Launch:
        """Build the launch from the objects as they are now and write its volumes (shared with the pod's other
        containers: each file replaced whole, see `write_file`)."""
        pod, namespace = self.pod.pod, self.pod.namespace
        async with self.pod.volumes:
            lookups = {ref: await self.kubelet.lookup(namespace, *ref) for ref in podspec.references(pod, self.spec)}
            launch = podspec.build(
                pod,
                self.spec,
                self.pod.dir,
                self.host_ports,
                lambda kind, name: lookups.get((kind, name)),
                list(runtime.cmd),
                self.kubelet.proxy.port_table,  # the Services served now; an unknown one is retried with the config
            )
            self.argv = self._argv(runtime, launch)
            self.environ = self._environ(runtime, launch)
            self.pod.dir.mkdir(parents=True, exist_ok=True)  # the container's working directory, volumes or not
            for path in launch.dirs:
                path.mkdir(parents=True, exist_ok=True)
            for path, (content, mode) in launch.files.items():
                write_file(path, content, mode)
        return launch

    @staticmethod
    def _argv(runtime: Runtime, launch: Launch) -> list[str]:
        """The runtime's argv for the launch, its program from the runtime's bin dir if it is there."""
        program, *rest = runtime.argv(launch.command, launch.uses_image_entrypoint)
        local = runtime.bin_dir / program
        return [str(local) if local.exists() else program, *rest]

    @staticmethod
    def _environ(runtime: Runtime, launch: Launch) -> dict[str, str]:
        base = {"PATH": f"{runtime.bin_dir}:/usr/local/bin:/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
        return base | runtime.env | launch.env

    async def _run_container(self, launch: Launch) -> float:
        """Run the container once; return how long it ran. Ends on exit, liveness failure or deletion."""
        proc = await self._start()
        if proc is None:
            return 0.0
        self.proc = proc  # the last one stays for the status (its containerID) until the next starts
        started = time.monotonic()
        self.unhealthy.clear()
        self.state = {"running": {"startedAt": now()}}
        logger.info("pod %s: started pid %d: %s", self.key, self.proc.pid, " ".join(self.argv))
        self.kubelet.write_pods()
        await self.pod.report()
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
        kill_group(self.proc.pid)  # its group outlives it while a member runs, so its PID is not reused meanwhile
        self.ready = False
        reason = "Completed" if code == 0 else ("Error" if code > 0 else "Killed")
        self.last_state = {"terminated": {"exitCode": code if code >= 0 else 128 - code, "reason": reason}}
        self.state = {"terminated": self.last_state["terminated"] | {"finishedAt": now()}}
        logger.info("pod %s: container exited (%d) after %.1fs", self.key, code, time.monotonic() - started)
        await self.pod.report()
        return time.monotonic() - started

    async def _start(self) -> asyncio.subprocess.Process | None:
        """The container's process, its output appended to its log; None (RunContainerError) if it cannot be."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"--- {now()} container start (restart {self.restarts}) ---\n".encode())
            out.flush()
            try:
                return await asyncio.create_subprocess_exec(
                    *self.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    env=self.environ,
                    cwd=self.pod.dir,
                    start_new_session=True,
                    preexec_fn=die_with_parent_hook(),
                )
            except OSError as e:
                logger.warning("pod %s: RunContainerError: %s", self.key, e)
                self.state = {"waiting": {"reason": "RunContainerError", "message": str(e)}}
                await self.pod.report()
                return None

    async def _stop(self, why: str) -> None:
        """preStop, SIGTERM, then SIGKILL once the grace period is spent."""
        assert self.proc is not None
        grace = self.pod.grace_s()
        deadline = time.monotonic() + grace
        logger.info("pod %s: %s; stopping with %.0fs grace", self.key, why, grace)
        self.ready = False
        await self.pod.report()
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

    def kill(self) -> None:
        """SIGKILL the container's process and whatever it started, if it runs."""
        if self.proc is not None and self.proc.returncode is None:
            kill_group(self.proc.pid)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    # -- probes -------------------------------------------------------------------------------------

    async def _readiness(self, launch: Launch) -> None:
        probe = self.spec.get("readinessProbe")
        if probe is None:
            self.ready = True
            await self.pod.report()
            return
        async for ok in self._probing(probe, launch):
            if ok != self.ready:
                self.ready = ok
                logger.info("pod %s: %s", self.key, "Ready" if ok else "readiness probe failed: not Ready")
                await self.pod.report()

    async def _liveness(self, launch: Launch) -> None:
        probe = self.spec.get("livenessProbe")
        if probe is None:
            return
        async for ok in self._probing(probe, launch):
            if not ok:
                self.unhealthy.set()
                return

    async def _probing(self, probe: dict[str, Any], launch: Launch) -> AsyncIterator[bool]:
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
        """The container's entry in the pod's `containerStatuses`."""
        status = {
            "name": self.name,
            "image": self.spec["image"],
            "imageID": f"local://{self.runtime.component}" if self.runtime else "",
            "ready": self.ready,
            "started": "running" in self.state,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.proc is not None:
            status["containerID"] = f"local://{self.proc.pid}"
        return status

    def record(self) -> dict[str, Any]:
        """The container's entry in pods.json."""
        return {
            "pid": self.proc.pid if self.proc else None,
            "ports": {str(k): v for k, v in self.host_ports.items()},
            "log": str(self.log_path),
        }


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
            worker.kill()
        await self.proxy.close()
        await self.http.close()

    async def run(self) -> None:
        """Follow pods on the node, Services, EndpointSlices, Secrets and ConfigMaps; say so in READY_FILE once
        each was listed."""
        slices = "/apis/discovery.k8s.io/v1/endpointslices"
        secrets, configmaps = self._source_handlers("Secret"), self._source_handlers("ConfigMap")
        follows: list[tuple[str, str, OnList, OnEvent]] = [
            ("/api/v1/pods", f"fieldSelector=spec.nodeName%3D{self.node}", self._pod_list, self._pod_event),
            ("/api/v1/services", "", self.proxy.service_list, self.proxy.service_event),
            (slices, "", self._slice_list, self._slice_event),
            ("/api/v1/secrets", "", *secrets),
            ("/api/v1/configmaps", "", *configmaps),
        ]
        listed = [asyncio.Event() for _ in follows]
        async with asyncio.TaskGroup() as tasks:
            for (path, query, on_list, on_event), event in zip(follows, listed, strict=True):
                tasks.create_task(self._follow(path, query, on_list, on_event, event))
            for event in listed:
                await event.wait()
            (self.state / READY_FILE).write_text(str(os.getpid()))
            logger.info("following pods on node %s, Services, EndpointSlices, Secrets and ConfigMaps", self.node)

    async def _follow(self, path: str, query: str, on_list: OnList, on_event: OnEvent, listed: asyncio.Event) -> None:
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

    # -- Secrets and ConfigMaps ---------------------------------------------------------------------

    def _source_handlers(self, kind: str) -> tuple[OnList, OnEvent]:
        return functools.partial(self._source_list, kind), functools.partial(self._source_event, kind)

    async def _source_list(self, kind: str, listed: dict[str, Any]) -> None:
        """A (re)list may carry changes a broken watch missed: each object as if MODIFIED (unchanged files are
        left alone)."""
        for obj in listed["items"]:
            await self._source_event(kind, "MODIFIED", obj)

    async def _source_event(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """A Secret or ConfigMap (`kind`) changed: the running pods of its namespace that mount it get its new
        files. A deleted one changes nothing: a kubelet leaves the files of a running pod as they were."""
        if event == "DELETED":
            return
        for worker in list(self.workers.values()):
            if worker.namespace == obj["metadata"]["namespace"]:
                await worker.update_volumes(kind, obj)

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
            return  # kwok's: its stages test the first container's image, as here
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
            worker = self.workers[uid] = PodWorker(self, pod, next(self._ips))
            components = ", ".join(c.runtime.component if c.runtime else "none" for c in worker.containers)
            logger.info("pod %s: accepted (%s)", worker.key, components)
        worker.pod = pod
        if pod["metadata"].get("deletionTimestamp") and not worker.deleting.is_set():
            logger.info("pod %s: deletion requested", worker.key)
            worker.deleting.set()

    def pod_port(self, namespace: str, name: str, container_port: int) -> int | None:
        """The host port of a containerPort of any container of the pod."""
        for worker in self.workers.values():
            if (worker.namespace, worker.name) == (namespace, name):
                return worker.host_ports.get(container_port)
        return None

    def write_pods(self) -> None:
        record = {w.key: w.record() for w in self.workers.values()}
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
