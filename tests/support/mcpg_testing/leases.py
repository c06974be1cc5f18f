"""An in-memory Lease API with the API server's optimistic concurrency, for the elector (`leader.Store`).

A create of an existing Lease answers None, a patch naming a stale resourceVersion 409, as the API server does.
Safe across threads: `candidacy.Candidacy` runs the elector on a thread of its own while the test, from its own
loop, looks on or plays another candidate; each call is one step under one lock, as the API server's storage is.
"""

from __future__ import annotations

import copy
import itertools
import threading
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException


class Leases:
    """Lease objects by path; `down` makes every call fail as an unreachable API server does."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.down = False
        self.writes = 0
        """Successful creates and patches: acquisitions, renewals, releases."""
        self.closed = False
        self.read = threading.Event()
        """Set by every read: a candidate on another thread has looked at the Lease."""
        self._versions = itertools.count(1)
        self._lock = threading.RLock()

    def _reachable(self) -> None:
        if self.down:
            raise ConnectionError("connection refused")

    async def get(self, path: str) -> dict[str, Any] | None:
        with self._lock:
            self._reachable()
            self.read.set()
            return copy.deepcopy(self.objects.get(path))

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            self._reachable()
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                return None
            self.writes += 1
            return self.store(target, body)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            self._reachable()
            old = self.objects.get(path)
            if old is None:
                return None
            if body["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise ApiException(status=409, reason="Conflict")
            spec = {k: v for k, v in {**old["spec"], **body["spec"]}.items() if v is not None}  # null removes it
            self.writes += 1
            return self.store(path, {**old, "spec": spec})

    async def close(self) -> None:
        """As `kube.Kube.close`: the elector's own client is closed when it ends."""
        self.closed = True

    def store(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Store `body` at `path` with a new resourceVersion, as any writer would."""
        with self._lock:
            stored = copy.deepcopy(body)
            stored["metadata"] = {**stored["metadata"], "resourceVersion": str(next(self._versions))}
            self.objects[path] = stored
            return copy.deepcopy(stored)

    def spec(self) -> dict[str, Any]:
        """The spec of the one Lease stored."""
        with self._lock:
            [lease] = self.objects.values()
            spec: dict[str, Any] = copy.deepcopy(lease["spec"])
            return spec

    def take(self, holder: str) -> None:
        """Another candidate takes the one Lease stored (as after waiting out its duration)."""
        with self._lock:
            [(path, lease)] = self.objects.items()
            self.store(path, {**lease, "spec": {**lease["spec"], "holderIdentity": holder}})
