"""Scenarios 5 and 6 on the local control plane (`mcpg_testing.controlplane`), with the operator run as tests/e2e
runs it: from the operator image's environment, as the chart's ServiceAccount.

5. N ResourceWatches across M namespaces applied at once: time until every one is Ready (reason Served: in its
   namespace's rendered configuration, and the rollout carrying it complete), each namespace's rendered config
   then checked to hold all of its URIs. Reference: `kubectl apply` of the same objects into namespaces the
   operator does not watch, timed the same way (before the operator starts, so nothing competes).
6. Rotation with 3 gateway replicas and no grace period: from the Secret edit to TokenAccepted on the new digest,
   and to the old token retired (retiringCount 0, phase Ready). Reference: one `kubectl rollout restart` of a
   plain 3-replica Deployment (maxUnavailable 0) until `kubectl rollout status` returns: a rotation is two such
   rollouts, so this is its floor.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import procs
import yaml

from mcpg_testing import installation
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.programs import OperatorProcess

ROOT = procs.HERE.parent
BOUND_S = 180.0
StartOperator = Callable[[], OperatorProcess]


class Api:
    """Fast reads with the admin token (kubectl would spend ~100 ms of CPU per poll)."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        user = cfg["users"][0]["user"]["token"]
        server = cfg["clusters"][0]["cluster"]["server"]
        self.http = httpx2.Client(base_url=server, headers={"authorization": f"Bearer {user}"}, verify=False)

    def get(self, path: str) -> Any:
        resp = self.http.get(path, timeout=10)
        resp.raise_for_status()
        return resp.json()


@contextlib.contextmanager
def cluster(workdir: Path, watch_namespaces: list[str]) -> Iterator[tuple[ControlPlane, Api, StartOperator]]:
    """A control plane with the CRDs and the chart's RBAC; the operator (3 gateway replicas) starts on demand."""
    operator_env = procs.operator_env()
    settings = {
        "MCPG_GATEWAY_IMAGE": "mcpg/gateway:bench",
        "MCPG_GATEWAY_REPLICAS": "3",
        "MCPG_WATCH_NAMESPACES": ",".join(watch_namespaces),
    }
    plane_dir = Path(tempfile.mkdtemp(dir=workdir, prefix="plane-"))
    with ControlPlane(plane_dir, die_with_parent=True) as plane, contextlib.ExitStack() as running:
        installation.install_crds(plane)
        installation.install_chart_rbac(plane)
        for ns in watch_namespaces:
            plane.kubectl("create", "namespace", ns)

        def start_operator() -> OperatorProcess:
            """Started and live (kopf's liveness endpoint answers); stopped when the cluster goes."""
            operator = OperatorProcess(operator_env, plane.operator_kubeconfig, workdir / "operator.log", settings)
            running.enter_context(operator).wait_ready()
            return operator

        yield plane, Api(plane.kubeconfig), start_operator


def watches(namespaces: list[str], per_ns: int) -> str:
    docs = []
    for ns in namespaces:
        for i in range(per_ns):
            spec = {"name": f"w{i}", "uri": f"bench://{ns}/{i}", "backend": {"http": {"url": f"http://up.invalid/{i}"}}}
            spec["watch"] = {"poll": {"intervalMs": 10000}}
            meta = {"name": f"w{i}", "namespace": ns}
            docs.append({"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": meta, "spec": spec})
    return yaml.safe_dump_all(docs)


def ready(obj: dict[str, Any], type_: str = "Ready") -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def rendered_uris(api: Api, ns: str) -> set[str]:
    dep = api.get(f"/apis/apps/v1/namespaces/{ns}/deployments/mcpg-gateway")
    [vol] = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    secret = api.get(f"/api/v1/namespaces/{ns}/secrets/{vol['secret']['secretName']}")
    config = yaml.safe_load(base64.b64decode(secret["data"]["gateway.yaml"]))
    return {r["uri"] for r in config["mcp"]["capabilities"]["resources"]}


def converged(api: Api, namespaces: list[str], per_ns: int) -> bool:
    items = api.get("/apis/mcpg.dev/v1alpha1/resourcewatches")["items"]
    mine = [o for o in items if o["metadata"]["namespace"] in namespaces]
    if len(mine) < len(namespaces) * per_ns or not all(ready(o) for o in mine):
        return False
    try:
        return all(rendered_uris(api, ns) == {f"bench://{ns}/{i}" for i in range(per_ns)} for ns in namespaces)
    except (httpx2.HTTPError, KeyError, ValueError):
        return False


def poll_until(check: Any, bound_s: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        if check():
            return time.monotonic()
        time.sleep(0.1)
    raise TimeoutError(f"{what} not reached within {bound_s}s")


def run_convergence(
    plane: ControlPlane, api: Api, start_operator: StartOperator, namespaces: int, per_ns: int
) -> dict[str, Any]:
    ref_ns = [f"ref-{i}" for i in range(namespaces)]
    bench_ns = [f"bench-{i}" for i in range(namespaces)]
    for ns in ref_ns:
        plane.kubectl("create", "namespace", ns)
    t0 = time.monotonic()
    plane.kubectl("apply", "-f", "-", stdin=watches(ref_ns, per_ns))
    reference = time.monotonic() - t0
    start_operator()  # live: kopf has started
    time.sleep(3.0)  # its watch streams connect and list (empty namespaces) before the clock starts
    t0 = time.monotonic()
    plane.kubectl("apply", "-f", "-", stdin=watches(bench_ns, per_ns))
    applied = time.monotonic() - t0
    done = poll_until(lambda: converged(api, bench_ns, per_ns), BOUND_S, "convergence")
    total = done - t0
    return {
        "watches": namespaces * per_ns,
        "namespaces": namespaces,
        "reference": {"kubectl_apply_s": round(reference, 2)},
        "gateway": {"converged_s": round(total, 2), "apply_s": round(applied, 2)},
        "ratio": round(total / reference, 2),
        "bar": "converged within 5x of kubectl apply",
        "met": total / reference <= 5,
    }


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def rotation_reference(plane: ControlPlane, ns: str, reps: int) -> list[float]:
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ref", "namespace": ns},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "ref"}},
            "strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "ref"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(dep))
    plane.kubectl("-n", ns, "rollout", "status", "deployment/ref", "--timeout=90s")
    out = []
    for _ in range(reps):
        t0 = time.monotonic()
        plane.kubectl("-n", ns, "rollout", "restart", "deployment/ref")
        plane.kubectl("-n", ns, "rollout", "status", "deployment/ref", "--timeout=90s")
        out.append(time.monotonic() - t0)
    return out


def run_rotation(plane: ControlPlane, api: Api, ns: str, reps: int) -> dict[str, Any]:
    manifests = ROOT / "examples" / "manifests"
    text = (manifests / "webhooktoken.yaml").read_text() + "\n---\n" + (manifests / "webhook.yaml").read_text()
    plane.kubectl("-n", ns, "apply", "-f", "-", stdin=text)
    plane.kubectl("-n", ns, "wait", "--for=condition=Ready", "resourcewatch/reports-folder", "--timeout=120s")
    plane.kubectl("-n", ns, "wait", "--for=condition=TokenAccepted", "webhooktoken/reports-token", "--timeout=120s")
    wt_path = f"/apis/mcpg.dev/v1alpha1/namespaces/{ns}/webhooktokens/reports-token"
    accepted, retired = [], []
    for _ in range(reps):
        new = secrets.token_urlsafe(32)
        patch = json.dumps({"stringData": {"token": new}})
        t0 = time.monotonic()
        plane.kubectl("-n", ns, "patch", "secret", "reports-webhook", "--type", "merge", "-p", patch)

        def status() -> dict[str, Any]:
            wt = api.get(wt_path)
            return {**wt.get("status", {}), "_accepted": ready(wt, "TokenAccepted")}

        def is_accepted(new: str = new) -> bool:
            s = status()
            return bool(s.get("currentDigest") == digest(new) and s["_accepted"])

        def is_retired(new: str = new) -> bool:
            s = status()
            return s.get("currentDigest") == digest(new) and s.get("retiringCount") == 0 and s.get("phase") == "Ready"

        accepted.append(poll_until(is_accepted, 60, "TokenAccepted") - t0)
        retired.append(poll_until(is_retired, 60, "old token retired") - t0)
    reference = rotation_reference(plane, ns, reps)
    ref_median = statistics.median(reference)
    return {
        "replicas": 3,
        "repeats": reps,
        "reference": {"rollout_median_s": round(ref_median, 2), "rollout_max_s": round(max(reference), 2)},
        "gateway": {
            "accepted_median_s": round(statistics.median(accepted), 2),
            "accepted_max_s": round(max(accepted), 2),
            "retired_median_s": round(statistics.median(retired), 2),
            "retired_max_s": round(max(retired), 2),
        },
        "ratio": round(statistics.median(retired) / ref_median, 2),
        "bar": "accepted and retired each < 10 s",
        "met": max(accepted) < 10 and max(retired) < 10,
    }


def run(workdir: Path, namespaces: int, per_ns: int, reps: int) -> dict[str, dict[str, Any]]:
    watched = [f"bench-{i}" for i in range(namespaces)] + ["rotation"]
    with cluster(workdir, watched) as (plane, api, start_operator):
        conv = run_convergence(plane, api, start_operator, namespaces, per_ns)
        rot = run_rotation(plane, api, "rotation", reps)
    return {"convergence": conv, "rotation": rot}
