"""An in-memory Kubernetes API for the operator's unit tests: the small client of `mcpg_operator.kube`.

Objects are stored by REST path; every write the operator makes is recorded, in order, in `writes`. What other
actors do (a user editing a Secret, the Deployment controller rolling pods) goes through the helpers below and
is never recorded, so a test can assert exactly what the operator wrote. Server-side apply is simplified to
"the operator's field manager owns every field it sends": enough for one operator. A list answers as the API
server does: a namespace's collection (`/api/v1/namespaces/shop/secrets`) or every namespace's
(`/api/v1/secrets`), in the order of the API server's storage keys, filtered by an equality-based label selector.
"""

from __future__ import annotations

import base64
import builtins
import copy
import hashlib
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from mcpg_operator.kube import Refused

GATEWAY = "mcpg-gateway"


@dataclass(frozen=True, slots=True)
class Call:
    """One write request: create, apply, merge_patch or delete, on an object path (a create's new object)."""

    method: str
    path: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Read:
    """One read request: a get, or a list with its label selector; `returned`: the path of every object answered."""

    method: str
    path: str
    returned: tuple[str, ...]
    label_selector: str | None = None


SECRET_LIMIT = 1024 * 1024
"""The API server refuses a Secret whose decoded data adds up to more than this."""


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[Call] = []
        self.reads: list[Read] = []
        """Every get and list the operator made, in order, with what each answered (never a body)."""
        self._serial = itertools.count(1)
        self._refusals: dict[str, Exception] = {}
        self._refused_reads: dict[str, Exception] = {}

    def refuse(self, path: str, error: Exception, *, reads: bool = False) -> None:
        """From now on, the API server refuses every write to `path` (an object) with `error` (a `Refused`, or
        any failure: an `ApiException` of a 5xx, a dropped connection); `reads`: every `get` of it too (as RBAC
        does to a role without that verb)."""
        self._refusals[path] = error
        if reads:
            self._refused_reads[path] = error

    def allow(self, path: str) -> None:
        """Undo `refuse`: writes to `path` succeed again."""
        self._refusals.pop(path, None)
        self._refused_reads.pop(path, None)

    def _admit(self, path: str, body: dict[str, Any] | None) -> None:
        """What the API server checks before any write: refusals set by a test, and the Secret size limit."""
        if path in self._refusals:
            raise self._refusals[path]
        if body is not None and body.get("kind") == "Secret":
            size = sum(len(base64.b64decode(v)) for v in (body.get("data") or {}).values())
            if size > SECRET_LIMIT:
                name = path.rsplit("/", 1)[-1]
                raise Refused(
                    422,
                    "Invalid",
                    f'Secret "{name}" is invalid: data: Too long: must have at most {SECRET_LIMIT} bytes',
                )

    # --- the client interface (what the operator calls) ----------------------------------------------------

    async def get(self, path: str) -> dict[str, Any] | None:
        if path in self._refused_reads:
            raise self._refused_reads[path]
        obj = self.objects.get(path)
        self.reads.append(Read("get", path, (path,) if obj is not None else ()))
        return copy.deepcopy(obj) if obj is not None else None

    async def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The items of a namespace's collection, or of every namespace's (`/api/v1/secrets`), in the API
        server's order: bytewise by its storage key `<namespace>/<name>`, which the paths sort the same as."""
        inside = _collection(path)
        requirements = _selector(label_selector)
        found = [
            (key, obj)
            for key, obj in sorted(self.objects.items())
            if inside(key.rsplit("/", 1)[0]) and _matches(obj, requirements)
        ]
        self.reads.append(Read("list", path, tuple(key for key, _ in found), label_selector))
        return [copy.deepcopy(obj) for _, obj in found]

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        meta = body.get("metadata", {})
        name = meta.get("name") or f"{meta['generateName']}{next(self._serial)}"
        target = f"{path}/{name}"
        self.writes.append(Call("create", target, copy.deepcopy(body)))
        self._admit(target, body)
        if target in self.objects:
            return None
        return copy.deepcopy(self._store(target, {**body, "metadata": {**meta, "name": name}}))

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(Call("apply", path, copy.deepcopy(body)))
        self._admit(path, body)
        old = self.objects.get(path)
        if old is None:
            return copy.deepcopy(self._store(path, body))
        new = {**copy.deepcopy(body), "status": old.get("status", {})}
        server = {k: old["metadata"][k] for k in ("uid", "creationTimestamp", "generation") if k in old["metadata"]}
        new["metadata"] = {**copy.deepcopy(body["metadata"]), **server}
        if body.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = str(next(self._serial))
        self.objects[path] = new
        return copy.deepcopy(new)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        self.writes.append(Call("merge_patch", path, copy.deepcopy(body)))
        target = path.removesuffix("/status")
        self._admit(target, None)
        obj = self.objects.get(target)
        if obj is None:
            return None
        if path.endswith("/status"):
            obj["status"] = _merge(obj.get("status", {}), body.get("status", {}))
        else:
            self.objects[target] = obj = _merge(obj, body)
        obj["metadata"]["resourceVersion"] = str(next(self._serial))
        return copy.deepcopy(obj)

    async def delete(self, path: str) -> None:
        self.writes.append(Call("delete", path))
        self._admit(path, None)
        self.objects.pop(path, None)

    async def close(self) -> None:
        """As `kube.Kube.close`: the operator's cleanup closes its client."""

    # --- what users and other controllers do (not recorded) -----------------------------------------------

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace `obj` as a user would (`kubectl apply`); the generation moves when the spec does."""
        path = object_path(obj)
        old = self.objects.get(path)
        stored = self._store(path, obj)
        if old is not None:
            stored["metadata"]["uid"] = old["metadata"]["uid"]
            stored["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            moved = old.get("spec") != obj.get("spec")
            stored["metadata"]["generation"] = old["metadata"].get("generation", 1) + int(moved)
            stored["status"] = old.get("status", {})
        return copy.deepcopy(stored)

    def remove(self, path: str) -> None:
        self.objects.pop(path, None)

    def set_secret(self, namespace: str, name: str, **values: str) -> None:
        data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
        self.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": data}
        )

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        secret = self.objects.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if secret is None or key not in secret.get("data", {}):
            return None
        return base64.b64decode(secret["data"][key]).decode()

    def secrets_read(self) -> builtins.set[str]:
        """The path of every Secret whose body some get or list answered the operator with."""
        return {p for r in self.reads for p in r.returned if "/secrets/" in p}

    def deployment(self, namespace: str) -> dict[str, Any] | None:
        return self.objects.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{GATEWAY}")

    def template_config(self, namespace: str) -> dict[str, Any]:
        """The gateway configuration the Deployment's pod template names now."""
        deployment = self.deployment(namespace)
        assert deployment is not None, "no gateway Deployment"
        return self.config(namespace, config_secret(deployment["spec"]["template"]))

    def config(self, namespace: str, secret_name: str) -> dict[str, Any]:
        text = self.secret_value(namespace, secret_name, "gateway.yaml")
        assert text is not None, f"no configuration Secret {secret_name}"
        loaded: dict[str, Any] = yaml.safe_load(text)
        return loaded

    def replicasets(self, namespace: str) -> builtins.list[dict[str, Any]]:  # `list` is a method here
        prefix = f"/apis/apps/v1/namespaces/{namespace}/replicasets/"
        return [obj for path, obj in sorted(self.objects.items()) if path.startswith(prefix)]

    def complete_rollout(self, namespace: str) -> None:
        """The Deployment controller finished: every replica runs the current template, and is available."""
        deployment = self._rolling(namespace)
        replicas = deployment["spec"].get("replicas", 1)
        current = replicaset_name(deployment["spec"]["template"])
        for rs in self.replicasets(namespace):
            self.set_available(rs, replicas if rs["metadata"]["name"] == current else 0)
        deployment["status"] = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
        }

    def stall_rollout(self, namespace: str, deadline_exceeded: bool = False) -> None:
        """The controller started rolling the current template (its ReplicaSet exists) but a new pod is not Ready.

        The pods of the ReplicaSets before it stay available. `deadline_exceeded`: the controller gave up
        (`Progressing=False`, `ProgressDeadlineExceeded`), as it does after `progressDeadlineSeconds`.
        """
        deployment = self._rolling(namespace)
        replicas = deployment["spec"].get("replicas", 1)
        self.set_available(self._replicaset(namespace, deployment["spec"]["template"]), 0)
        deployment["status"] = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas + 1,
            "updatedReplicas": 1,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
        }
        if deadline_exceeded:
            message = f'ReplicaSet "{replicaset_name(deployment["spec"]["template"])}" has timed out progressing.'
            progressing = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
            deployment["status"]["conditions"] = [{**progressing, "message": message}]

    def set_available(self, replicaset: dict[str, Any], available: int) -> None:
        """The ReplicaSet controller's count of the ReplicaSet's available pods."""
        replicaset.setdefault("status", {})["availableReplicas"] = available
        replicaset["status"]["replicas"] = available

    def prune_replicasets(self, namespace: str) -> None:
        """Old ReplicaSets go (revisionHistoryLimit): only the one running the current template is left."""
        deployment = self.deployment(namespace)
        assert deployment is not None
        current = replicaset_name(deployment["spec"]["template"])
        for rs in self.replicasets(namespace):
            if rs["metadata"]["name"] != current:
                self.objects.pop(object_path(rs))

    def _rolling(self, namespace: str) -> dict[str, Any]:
        deployment = self.deployment(namespace)
        assert deployment is not None, "no gateway Deployment to roll"
        template = deployment["spec"]["template"]
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": replicaset_name(template),
                "namespace": namespace,
                "labels": template["metadata"]["labels"],
            },
            "spec": {"replicas": deployment["spec"].get("replicas", 1), "template": copy.deepcopy(template)},
        }
        if object_path(rs) not in self.objects:
            self._store(object_path(rs), rs)
        return deployment

    def current_replicaset(self, namespace: str) -> dict[str, Any]:
        """The ReplicaSet of the Deployment's current template (the controller creates it if it is missing)."""
        deployment = self._rolling(namespace)
        return self._replicaset(namespace, deployment["spec"]["template"])

    def _replicaset(self, namespace: str, template: dict[str, Any]) -> dict[str, Any]:
        return self.objects[f"/apis/apps/v1/namespaces/{namespace}/replicasets/{replicaset_name(template)}"]

    def _store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        n = next(self._serial)
        meta.setdefault("uid", f"uid-{n}")
        meta.setdefault("creationTimestamp", f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(n)
        self.objects[path] = stored
        return stored


def object_path(obj: dict[str, Any]) -> str:
    api = obj["apiVersion"]
    prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
    meta = obj["metadata"]
    return f"{prefix}/namespaces/{meta['namespace']}/{plural(obj['kind'])}/{meta['name']}"


def plural(kind: str) -> str:
    lower = kind.lower()
    return lower + ("es" if lower.endswith(("s", "ch", "sh", "x")) else "s")


def config_secret(template: dict[str, Any]) -> str:
    [volume] = [v for v in template["spec"]["volumes"] if v["name"] == "config"]
    return str(volume["secret"]["secretName"])


def replicaset_name(template: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return f"{GATEWAY}-{digest[:10]}"


def _collection(path: str) -> Callable[[str], bool]:
    """Whether an object's parent path is in the collection at `path`: that namespace's, or every namespace's.

    `/api/v1/secrets` (or `/apis/apps/v1/deployments`) is the cluster-wide list of a namespaced resource: the
    objects under `/api/v1/namespaces/<any>/secrets`.
    """
    api, _, plural = path.rpartition("/")
    everywhere = re.compile(rf"{re.escape(api)}/namespaces/[^/]+/{re.escape(plural)}")
    return lambda parent: parent == path or everywhere.fullmatch(parent) is not None


Requirement = tuple[str, str, str | None]
"""(key, operator, value): `=` and `!=` compare the value, `exists` and `!` test the key."""


def _selector(selector: str | None) -> list[Requirement]:
    """An equality-based label selector (`k=v`, `k==v`, `k!=v`, `k`, `!k`), as the API server reads it.

    Set-based terms (`k in (a,b)`) are refused rather than misread: nothing the operator sends uses them.
    """
    out: list[Requirement] = []
    for term in (t.strip() for t in (selector or "").split(",") if t.strip()):
        if "(" in term or ")" in term or " " in term:
            raise ValueError(f"label selector term not supported by the fake: {term!r}")
        if term.startswith("!"):
            out.append((term[1:], "!", None))
            continue
        for op in ("!=", "==", "="):
            key, found, value = term.partition(op)
            if found:
                out.append((key, "!=" if op == "!=" else "=", value))
                break
        else:
            out.append((term, "exists", None))
    return out


def _matches(obj: dict[str, Any], requirements: list[Requirement]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for key, op, value in requirements:
        if op == "!" and key in labels:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and key in labels and labels[key] == value:  # a missing key matches `!=`
            return False
    return True


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out
