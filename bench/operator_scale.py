"""Scenario 5b, the operator at scale: N ResourceWatches over M namespaces whose gateway pods are kwok's.

The control plane runs without the real node (`ControlPlane(real_node=False)`): every namespace is annotated so
that its pods go to kwok's fake nodes (`installation.kwok_annotations`), Running and Ready at once, nothing run, so
what is measured is the operator and the control plane, not hundreds of gateway processes on 2 cores. kwok runs
no container, so `kwok_acks.py` answers each gateway pod's acknowledgement as a gateway serving its namespace's
configuration Secret would (the operator's Served is then the same rule as in scenario 5). The operator runs
cluster-wide, as the chart installs it, under the chart's RBAC. Each namespace holds its gateway's auth Secret (one
principal) before anything is timed, as one whose gateway MCP clients can use does.

1. Convergence: the ResourceWatches created in one parallel pass (one POST each, a worker per namespace at a
   time, `kubeio.APPLY_WORKERS` at once), timed until every one is Ready (reason Served) at its generation, every
   namespace's Deployment has rolled out, and (checked then) every configuration Secret holds its namespace's
   URIs. Two watches (`kubeio.Tracker`) time it to the event, so no list of thousands of objects is polled.
   Reference: what the operator rendered, read back after convergence, re-targeted to fresh namespaces
   (`convergence.retarget`), created the same way (the same workers, a namespace's objects in order) with the
   operator stopped, until every Deployment has rolled out. The operator's peak RSS (VmHWM) and CPU seconds, its
   passes, and every write it sent (the API server's audit log), over the convergence.
2. Resync with nothing to do: the operator restarted against the converged cluster (kopf lists everything and
   every namespace gets a pass, the path a restart or a failover takes), timed from the moment it leads until
   every namespace has had a pass and it is idle (its /metrics: `mcpg_operator_namespaces`, the work queue, the
   active workers, and no pass ending for `QUIET_S`: the end is the last pass's). Its writes are counted from the
   audit log (bar: none; the Lease's renewals are the election's, counted apart). At two sizes: all namespaces,
   then half (the other half's ResourceWatches and gateway Deployments deleted first: `shrink`). Bar: linear or
   better, the duration ratio at most 1.25x the size ratio.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import convergence
import httpx2
import kubeio
import procs
import yaml

from mcpg_operator import objects
from mcpg_operator.rollout import rollout_complete
from mcpg_testing import components, installation
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.programs import OperatorProcess, Program

BOUND_S = 900.0
"""Bound on a convergence, a rollout or a resync at full size."""
POLL_S = 0.1
QUIET_S = 3.0
"""A resync is over once no pass has ended for this long (the operator's settle time is 0.5 s)."""
NODE_PODS = 110
"""Pods per kwok node (`components.fake_node`'s allocatable): enough nodes are added for both sides' pods."""
LINEAR_ALLOWANCE = 1.25
RESYNC_SETTING_S = "3600"
"""MCPG_RESYNC_SECONDS of the restarted operators: their periodic resync stays out of the window measured."""
LEASE = "leases"
CONFIG_PATH = f"/api/v1/secrets?fieldSelector=metadata.name={objects.CONFIG_SECRET}"
WATCHES = "/apis/mcpg.dev/v1alpha1/resourcewatches"
WATCHES_IN = "/apis/mcpg.dev/v1alpha1/namespaces/{ns}/resourcewatches"
DEPLOYMENTS = f"/apis/apps/v1/deployments?labelSelector={convergence.SELECTOR}"


def served(obj: dict[str, Any]) -> bool:
    """Ready (reason Served: every counted pod serves it) at its generation."""
    status = obj.get("status") or {}
    return convergence.ready(obj) and status.get("observedGeneration") == obj["metadata"].get("generation")


def namespace_docs(names: list[str]) -> list[list[dict[str, Any]]]:
    annotations = installation.kwok_annotations()  # their pods go to kwok's nodes
    meta = [{"name": ns, "annotations": annotations, "labels": {"mcpg.dev/bench": "scale"}} for ns in names]
    return [[{"apiVersion": "v1", "kind": "Namespace", "metadata": m}] for m in meta]


def auth_secret(namespace: str) -> dict[str, Any]:
    """The namespace's `mcpg-gateway-auth` with one principal (`convergence.auth_secret`), as a namespace whose
    gateway MCP clients can use has: without it every watch warns that none can, and its namespace is looked at
    again and again for the Secret to appear (`references.recheck_s`)."""
    secret: dict[str, Any] = yaml.safe_load(convergence.auth_secret())
    secret["metadata"]["namespace"] = namespace
    return secret


def kwok_nodes(kubeconfig: Path, pods: int) -> None:
    """Enough fake nodes beside kwok's first for `pods` pods (the scheduler honours each one's pod capacity)."""
    nodes = []
    for i in range(1, math.ceil(pods / NODE_PODS) + 1):
        node = components.fake_node()
        node["metadata"]["name"] = f"{components.KWOK_NODE[:-2]}-{i}"
        node["metadata"]["labels"]["kubernetes.io/hostname"] = node["metadata"]["name"]
        nodes.append([node])
    with kubeio.client(kubeconfig) as http:
        for [node] in nodes:
            http.post("/api/v1/nodes", json=node, timeout=30).raise_for_status()


class Operator:
    """The operator process, its figures from /proc, and the API writes its identity sent (the audit log)."""

    def __init__(self, plane: ControlPlane, workdir: Path, resync_s: str | None = None) -> None:
        settings = {
            "MCPG_GATEWAY_IMAGE": convergence.GATEWAY_IMAGE,
            "MCPG_GATEWAY_IMAGE_PULL_POLICY": "Never",
            "MCPG_GATEWAY_REPLICAS": "1",
            "POD_NAMESPACE": installation.OPERATOR_NAMESPACE,
            **({"MCPG_RESYNC_SECONDS": resync_s} if resync_s else {}),
        }
        self.audit_from = audit_size(plane)
        self.process = OperatorProcess(
            procs.operator_env(), plane.operator_kubeconfig, workdir / "operator.log", settings
        )
        self.process.wait_ready(timeout=120)
        self.ready_at = time.monotonic()
        self.pid = self.process.proc.pid

    def cpu_s(self) -> float:
        return procs.cpu_seconds(self.pid)

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
        raise RuntimeError(f"no VmHWM for pid {self.pid}")

    def figures(self) -> dict[str, float]:
        """reconcile total (gateway controller), namespaces known, queue depth, active passes, from /metrics."""
        found = self.process.metrics()

        def total(sample: str, **labels: str) -> float:
            return sum(v for lab, v in found.get(sample, []) if labels.items() <= lab.items())

        return {
            "passes": total("controller_runtime_reconcile_total", controller="gateway"),
            "namespaces": total("mcpg_operator_namespaces"),
            "queued": total("workqueue_depth", name="gateway"),
            "active": total("controller_runtime_active_workers", controller="gateway"),
        }

    def stop(self) -> None:
        self.process.stop()


def audit_size(plane: ControlPlane) -> int:
    return plane.audit_log.stat().st_size if plane.audit_log.exists() else 0


def writes_since(plane: ControlPlane, offset: int) -> Counter[str]:
    """`verb resource[/subresource]` -> how many the operator's identity sent after byte `offset` of the log."""
    with plane.audit_log.open("rb") as log:
        log.seek(offset)
        events = [json.loads(line) for line in log if line.strip()]
    out: Counter[str] = Counter()
    for e in events:
        ref = e.get("objectRef") or {}
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        out[f"{e['verb']} {ref.get('resource', '?')}{sub}"] += 1
    return out


def split_lease(writes: Counter[str]) -> tuple[int, int]:
    """(writes other than the Lease's, the Lease's renewals)."""
    lease = sum(n for k, n in writes.items() if k.split(" ")[1] == LEASE)
    return sum(writes.values()) - lease, lease


def wait_idle(operator: Operator, namespaces: int) -> float:
    """When the last pass ended, once every namespace has had one and none has ended for QUIET_S."""
    started, last, last_passes = time.monotonic(), time.monotonic(), -1.0
    while time.monotonic() - started < BOUND_S:
        f = operator.figures()
        now = time.monotonic()
        if f["passes"] != last_passes:
            last, last_passes = now, f["passes"]
        elif f["namespaces"] >= namespaces and not f["queued"] and not f["active"] and now - last >= QUIET_S:
            return last
        time.sleep(POLL_S)
    raise TimeoutError(f"the operator was not idle with {namespaces} namespaces within {BOUND_S}s")


def resync(plane: ControlPlane, workdir: Path, namespaces: int) -> dict[str, Any]:
    """A restarted operator's first passes over a converged cluster: their duration and writes."""
    operator = Operator(plane, workdir, RESYNC_SETTING_S)
    cpu0 = operator.cpu_s()
    end = wait_idle(operator, namespaces)
    writes = writes_since(plane, operator.audit_from)
    others, lease = split_lease(writes)
    out = {
        "namespaces": namespaces,
        "duration_s": round(end - operator.ready_at, 2),
        "passes": int(operator.figures()["passes"]),
        "cpu_s": round(operator.cpu_s() - cpu0, 2),
        "writes": others,
        "lease_writes": lease,
        "writes_by_kind": {k: n for k, n in sorted(writes.items()) if k.split(" ")[1] != LEASE},
    }
    print(f"   resync of {namespaces} namespaces: {out}", file=sys.stderr, flush=True)
    return out | {"operator": operator}


def shrink(api: convergence.Api, operator: Operator, keep: list[str], drop: list[str]) -> None:
    """Delete the ResourceWatches of `drop`, and their gateway Deployments (the only rendered objects the operator
    watches: the garbage collector takes minutes over thousands of objects, and what it has not collected yet is
    seen by no watch of the operator's); wait until the operator knows only `keep` and is idle."""
    for ns in drop:
        kubeio.retrying(api.http, "DELETE", WATCHES_IN.format(ns=ns))
        kubeio.retrying(api.http, "DELETE", convergence.deployment_path(ns))
    dropped = set(drop)

    def gone() -> bool:
        try:
            left = [d for d in api.get(DEPLOYMENTS)["items"] if d["metadata"]["namespace"] in dropped]
        except httpx2.HTTPError:  # a busy API server (the collector at work): look again
            return False
        f = operator.figures()
        return not left and f["namespaces"] == len(keep) and not f["queued"] and not f["active"]

    convergence.poll_until(gone, BOUND_S, "dropped namespaces' watches and gateways gone")


@contextlib.contextmanager
def acknowledging(plane: ControlPlane, workdir: Path) -> Iterator[Program]:
    """`kwok_acks.py` answering for the gateway pods while the block runs."""
    argv = [procs.PY, str(procs.HERE / "kwok_acks.py"), str(plane.kubeconfig)]
    with Program(argv, dict(os.environ), cwd=workdir) as program:
        program.wait_for("answering for kwok's gateway pods")
        yield program


def converge(kubeconfig: Path, namespaces: list[str], per_ns: int) -> tuple[float, float]:
    """(create, create + convergence) seconds for `per_ns` watches in each of `namespaces` (see the docstring)."""
    keys = {(ns, f"w{i}") for ns in namespaces for i in range(per_ns)}
    ready = kubeio.Tracker(kubeconfig, WATCHES, keys, served)
    rolled = kubeio.Tracker(kubeconfig, DEPLOYMENTS, {(ns, convergence.GATEWAY) for ns in namespaces}, rollout_complete)
    try:
        t0 = time.monotonic()
        kubeio.create_all(kubeconfig, kubeio.grouped(convergence.watch_docs(namespaces, per_ns)))
        created = time.monotonic() - t0
        done = max(ready.wait(BOUND_S, "watches served"), rolled.wait(BOUND_S, "gateways rolled out"))
    finally:
        ready.close()
        rolled.close()
    print(f"   {len(keys)} watches served: {done - t0:.1f} s", file=sys.stderr, flush=True)
    return created, done - t0


def uris_rendered(api: convergence.Api, namespaces: list[str], per_ns: int) -> bool:
    """Every namespace's configuration Secret holds exactly its watches' URIs (one list of those Secrets)."""
    by_ns = {s["metadata"]["namespace"]: s for s in api.get(CONFIG_PATH)["items"]}
    for ns in namespaces:
        secret = by_ns.get(ns)
        if secret is None:
            return False
        config = yaml.load(base64.b64decode(secret["data"]["gateway.yaml"]), Loader=yaml.CSafeLoader)
        if {r["uri"] for r in config["mcp"]["capabilities"]["resources"]} != {
            f"bench://{ns}/{i}" for i in range(per_ns)
        }:
            return False
    return True


def rendered_groups(api: convergence.Api, pairs: list[tuple[str, str]]) -> list[list[dict[str, Any]]]:
    """Each (source, target) pair's rendered objects, re-targeted (`convergence.retarget`), in their order."""
    with ThreadPoolExecutor(kubeio.APPLY_WORKERS) as pool:
        read = list(pool.map(lambda pair: convergence.rendered_objects(api, pair[0]), pairs))
    return [[convergence.retarget(o, target) for o in objs] for (_, target), objs in zip(pairs, read, strict=True)]


def create_rendered(kubeconfig: Path, groups: list[list[dict[str, Any]]]) -> float:
    """Seconds from creating `groups` to every Deployment among them rolled out."""
    keys = {(g[-1]["metadata"]["namespace"], convergence.GATEWAY) for g in groups}
    rolled = kubeio.Tracker(kubeconfig, DEPLOYMENTS, keys, rollout_complete)
    try:
        t0 = time.monotonic()
        kubeio.create_all(kubeconfig, groups)
        done = rolled.wait(BOUND_S, "rendered objects rolled out")
    finally:
        rolled.close()
    print(f"   rendered objects rolled out: {done - t0:.1f} s", file=sys.stderr, flush=True)
    return done - t0


def run(workdir: Path, namespaces: int, per_ns: int) -> dict[str, Any]:
    """Scenario 5b (see the module docstring)."""
    plane_dir = Path(tempfile.mkdtemp(dir=workdir, prefix="plane-scale-"))
    with ControlPlane(plane_dir, die_with_parent=True, real_node=False) as plane:
        installation.install_crds(plane)
        installation.install_chart_rbac(plane)
        return measure(plane, workdir, namespaces, per_ns)


def measure(plane: ControlPlane, workdir: Path, namespaces: int, per_ns: int) -> dict[str, Any]:
    kubeconfig, api = plane.kubeconfig, convergence.Api(plane.kubeconfig)
    bench_ns = [f"scale-{i}" for i in range(namespaces)]
    rendered_ns = [f"scale-rendered-{i}" for i in range(namespaces)]
    warm, warm_rendered = "scale-warm", "scale-warm-rendered"
    kwok_nodes(kubeconfig, 2 * namespaces + 2)
    kubeio.create_all(kubeconfig, namespace_docs([*bench_ns, *rendered_ns, warm, warm_rendered]))
    kubeio.create_all(kubeconfig, [[auth_secret(ns)] for ns in [*bench_ns, warm]])
    with acknowledging(plane, workdir) as acker:
        operator = Operator(plane, workdir)
        converge(kubeconfig, [warm], per_ns)  # untimed: the operator's first pass, kwok's first pods
        cpu0, writes0, passes0 = operator.cpu_s(), audit_size(plane), operator.figures()["passes"]
        created, total = converge(kubeconfig, bench_ns, per_ns)
        side: dict[str, Any] = {
            "operator_passes": int(operator.figures()["passes"] - passes0),
            "converged_s": round(total, 2),
            "create_s": round(created, 2),
            "operator_cpu_s": round(operator.cpu_s() - cpu0, 2),
            "operator_peak_rss_mb": operator.peak_rss_mb(),
        }
        writes = writes_since(plane, writes0)
        side["operator_writes"] = split_lease(writes)[0]
        side["operator_writes_by_kind"] = {k: n for k, n in sorted(writes.items()) if k.split(" ")[1] != LEASE}
        convergence.poll_until(lambda: uris_rendered(api, bench_ns, per_ns), 60, "URIs rendered")
        groups = rendered_groups(api, [(warm, warm_rendered), *zip(bench_ns, rendered_ns, strict=True)])
        operator.stop()
        resyncs = resync_sizes(plane, workdir, api, [*bench_ns, warm])
        side["acknowledger_cpu_s"] = round(procs.cpu_seconds(acker.proc.pid), 2)
    create_rendered(kubeconfig, groups[:1])  # untimed warm-up, as the operator's
    reference = create_rendered(kubeconfig, groups[1:])
    return figures(namespaces, per_ns, side, reference, resyncs)


def resync_sizes(plane: ControlPlane, workdir: Path, api: convergence.Api, names: list[str]) -> dict[str, Any]:
    """A restart's resync over every namespace of `names`, then over the first half of them (the last one, the
    warm-up's, is always kept)."""
    full = resync(plane, workdir, len(names))
    operator = full.pop("operator")
    half_n = max(1, (len(names) - 1) // 2)
    keep = [*names[:half_n], names[-1]]
    shrink(api, operator, keep, names[half_n:-1])
    operator.stop()
    half = resync(plane, workdir, len(keep))
    half.pop("operator").stop()
    return {"full": full, "half": half}


def figures(
    namespaces: int, per_ns: int, side: dict[str, Any], reference: float, resyncs: dict[str, Any]
) -> dict[str, Any]:
    """The scenario's results: the convergence ratio, and the resync's writes and scaling, each against its bar."""
    ratio = round(side["converged_s"] / reference, 2)
    full, half = resyncs["full"], resyncs["half"]
    size_ratio = round(full["namespaces"] / half["namespaces"], 2)
    duration_ratio = round(full["duration_s"] / half["duration_s"], 2) if half["duration_s"] else None
    linear = duration_ratio is not None and duration_ratio <= round(LINEAR_ALLOWANCE * size_ratio, 2)
    return {
        "watches": namespaces * per_ns,
        "namespaces": namespaces,
        "gateway": side,
        "reference": {"rendered_rollout_s": round(reference, 2)},
        "ratio": ratio,
        "bar": "converged within 1.5x of creating the rendered objects and waiting for the same rollouts",
        "met": ratio <= 1.5,
        "resync": {**resyncs, "size_ratio": size_ratio, "duration_ratio": duration_ratio},
        "resync_bar": f"no write; duration ratio <= {LINEAR_ALLOWANCE}x the size ratio",
        "resync_met": full["writes"] == 0 and half["writes"] == 0 and linear,
    }
