"""Bench-side Kubernetes I/O at scale, with the admin token: objects created in parallel, a namespace's in order;
a collection followed by a watch, to time when every expected object first met a condition (no list of thousands
of objects polled); a request retried after a connection error.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import yaml

APPLY_WORKERS = 8
PLURALS = {
    "Namespace": ("/api/v1", "namespaces"),
    "ResourceWatch": ("/apis/mcpg.dev/v1alpha1", "resourcewatches"),
    "Secret": ("/api/v1", "secrets"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Service": ("/api/v1", "services"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "Deployment": ("/apis/apps/v1", "deployments"),
}
Key = tuple[str, str]


class Tracker:
    """A watch of a collection (every namespace) on a thread: when every expected object first satisfied `done`."""

    def __init__(self, kubeconfig: Path, path: str, keys: set[Key], done: Callable[[dict[str, Any]], bool]) -> None:
        self.keys, self.done = keys, done
        self.satisfied: set[Key] = set()
        self.at: float | None = None
        self.complete = threading.Event()
        self._http = client(kubeconfig)
        self._closed = False
        self._thread = threading.Thread(target=self._follow, args=(path,), daemon=True)
        self._thread.start()

    def _follow(self, path: str) -> None:
        sep = "&" if "?" in path else "?"
        while not self._closed:
            try:
                with self._http.stream("GET", f"{path}{sep}watch=1", timeout=None) as response:
                    for line in response.iter_lines():
                        if line:
                            self._event(json.loads(line))
            except (httpx2.HTTPError, RuntimeError):
                if self._closed:
                    return
            time.sleep(0.5)  # a back-off before the next watch (it lists afresh), not a wait for a condition

    def _event(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if key not in self.keys or event.get("type") not in ("ADDED", "MODIFIED"):
            return
        (self.satisfied.add if self.done(obj) else self.satisfied.discard)(key)
        if self.at is None and len(self.satisfied) == len(self.keys):
            self.at = time.monotonic()
            self.complete.set()

    def wait(self, bound_s: float, what: str) -> float:
        if not self.complete.wait(bound_s):
            raise TimeoutError(f"{what}: {len(self.satisfied)} of {len(self.keys)} within {bound_s}s")
        assert self.at is not None
        return self.at

    def close(self) -> None:
        self._closed = True
        self._http.close()


def client(kubeconfig: Path) -> httpx2.Client:
    cfg = yaml.safe_load(kubeconfig.read_text())
    headers = {"authorization": f"Bearer {cfg['users'][0]['user']['token']}"}
    return httpx2.Client(base_url=cfg["clusters"][0]["cluster"]["server"], headers=headers, verify=False)


def create_all(kubeconfig: Path, by_namespace: list[list[dict[str, Any]]]) -> None:
    """POST every object, `APPLY_WORKERS` at once, each group (a namespace's objects) in its order."""
    local = threading.local()

    def create(group: list[dict[str, Any]]) -> None:
        if not hasattr(local, "http"):
            local.http = client(kubeconfig)
        for obj in group:
            prefix, plural = PLURALS[obj["kind"]]
            ns = obj["metadata"].get("namespace")
            path = f"{prefix}/namespaces/{ns}/{plural}" if ns and obj["kind"] != "Namespace" else f"{prefix}/{plural}"
            local.http.post(path, json=obj, timeout=30).raise_for_status()

    with ThreadPoolExecutor(APPLY_WORKERS) as pool:
        list(pool.map(create, by_namespace))


def grouped(docs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["metadata"]["namespace"], []).append(d)
    return list(out.values())


def retrying(http: httpx2.Client, method: str, path: str, tries: int = 5) -> None:
    """One request, again after a connection error (seen here twice, mid-run, from an API server busy collecting);
    a DELETE of what is gone already (the garbage collector was first) is done."""
    for attempt in range(tries):
        try:
            response = http.request(method, path, timeout=60)
            if not (method == "DELETE" and response.status_code == 404):
                response.raise_for_status()
            return
        except httpx2.TransportError:
            if attempt == tries - 1:
                raise
            time.sleep(1.0)  # a back-off before trying again, not a wait for a condition
