"""An in-memory Kubernetes API for the operator's unit tests: the small client of `mcpg_operator.kube`.

Objects are stored by REST path; every write the operator makes is recorded, in order, in `writes`. What other
actors do (a user editing a Secret, the Deployment controller rolling pods) goes through the helpers below and
is never recorded, so a test can assert exactly what the operator wrote. Server-side apply is simplified to
"the operator's field manager owns every field it sends": enough for one operator. A list answers as the API
server does: a namespace's collection (`/api/v1/namespaces/shop/secrets`) or every namespace's
(`/api/v1/secrets`), in the order of the API server's storage keys, filtered by an equality-based label selector.

The gateway's pods are here too (`FakePod`): each applies the configuration Secret in place when the test (or a
simulation) says so, or refuses it, and answers the operator's question of what it serves from this table
(`acknowledgement`, the `acks.Fetch` the tests hand the reconcile), as a gateway's admin port would.
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

from mcpg_gateway.contract import digests
from mcpg_gateway.contract.acknowledgement import Acknowledgement, ProblemView, Refusal, Serving
from mcpg_operator.kube import Refused

GATEWAY = "mcpg-gateway"
CONFIG_SECRET = "mcpg-gateway-config"
SELECTOR = {"app.kubernetes.io/name": GATEWAY}


@dataclass
class FakePod:
    """A gateway pod as its kubelet and its gateway process have it: Ready or not, being deleted or not, and the
    configuration it applied in place from the configuration Secret (or refused: it keeps the one before)."""

    namespace: str
    name: str
    replicaset: str
    ip: str
    ready: bool = False
    deleting: bool = False
    answers: bool = True
    """False: the acknowledgement is asked for and never comes (a pod that hangs, a port a policy blocks)."""
    config: dict[str, Any] | None = None
    resource_version: str | None = None
    refused: Refusal | None = None
    plugins: tuple[str, ...] = ()
    since: float = 0.0

    @property
    def counted(self) -> bool:
        """As the operator counts it: Ready (with an IP), and if being deleted, still answering."""
        return self.ready and (not self.deleting or self.answers)

    def tokens(self) -> frozenset[str]:
        """Every webhook token the configuration it applied accepts."""
        return config_tokens(self.config) if self.config is not None else frozenset()

    def acknowledgement(self) -> Acknowledgement:
        serving = None
        if self.config is not None:
            entries = list(digests.entries(self.config).values())
            serving = Serving(
                digest=digests.document(self.config),
                entries=entries,
                since=self.since,
                source="secret",
                resource_version=self.resource_version,
            )
        return Acknowledgement(instance=self.name, serving=serving, refused=self.refused, plugins=list(self.plugins))


def config_tokens(config: dict[str, Any]) -> frozenset[str]:
    entries = [e for kind in (config.get("mcp") or {}).get("capabilities", {}).values() for e in kind]
    strategies = [(e.get("watch") or {}).get("strategy") or {} for e in entries]
    webhooks = [s for s in strategies if s.get("type") == "webhook"]
    return frozenset(t for s in webhooks for t in [s["token"], *s.get("previous_tokens", [])])


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
        self.pods: dict[str, FakePod] = {}
        """The gateway pods, by name (each also stored as a Pod object the operator lists)."""
        self.refusing: dict[str, list[tuple[str, str]]] = {}
        """Namespace -> the problems (path, message) its gateway pods refuse every new configuration with."""
        self.plugins: tuple[str, ...] = ()
        """The watch-strategy plugin kinds every gateway pod reports installed."""
        self._ips = itertools.count(2)

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

    def edit_secret(self, namespace: str, name: str, **values: str) -> str:
        """A user's edit of a Secret's data (`kubectl edit`): its labels and annotations stay. Its new
        resourceVersion."""
        secret = self.objects[f"/api/v1/namespaces/{namespace}/secrets/{name}"]
        secret["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
        secret["metadata"]["resourceVersion"] = str(next(self._serial))
        return str(secret["metadata"]["resourceVersion"])

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

    def complete_rollout(self, namespace: str) -> bool:
        """Everything caught up: every replica runs the current template and is Ready (the controller finished),
        and every gateway pod applied the configuration Secret as it is now (or refused it: `refusing`). Whether
        anything changed."""
        before = self._pods_as_they_are(namespace)
        deployment = self._rolling(namespace)
        replicas = deployment["spec"].get("replicas", 1)
        current = replicaset_name(deployment["spec"]["template"])
        for pod in self.gateway_pods(namespace):
            if pod.replicaset != current:
                self.remove_pod(pod)
        while len(self.gateway_pods(namespace)) < replicas:
            self.start_pod(namespace, current)
        for pod in self.gateway_pods(namespace):
            pod.ready = True
            self.apply_in_place(pod)
        for rs in self.replicasets(namespace):
            self.set_available(rs, replicas if rs["metadata"]["name"] == current else 0)
        status = deployment.get("status")
        deployment["status"] = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
        }
        return status != deployment["status"] or before != self._pods_as_they_are(namespace)

    def _pods_as_they_are(self, namespace: str) -> builtins.list[tuple[Any, ...]]:
        return [(p.name, p.ready, p.deleting, p.resource_version, p.refused) for p in self.gateway_pods(namespace)]

    # --- the gateway's pods -------------------------------------------------------------------------------

    def gateway_pods(self, namespace: str) -> builtins.list[FakePod]:
        return [p for p in self.pods.values() if p.namespace == namespace]

    def start_pod(self, namespace: str, replicaset: str) -> FakePod:
        """A new pod of `replicaset`, not Ready yet; it starts on the configuration Secret as it is now."""
        pod = FakePod(namespace, f"{replicaset}-{next(self._serial)}", replicaset, f"10.0.0.{next(self._ips)}")
        self.pods[pod.name] = pod
        self.apply_in_place(pod)
        return pod

    def apply_in_place(self, pod: FakePod, now: float = 0.0) -> None:
        """The pod reads the configuration Secret as it is now and applies it, or refuses it (`refusing`) and keeps
        serving the one it had; a configuration it serves already is not applied again."""
        text = self.secret_value(pod.namespace, CONFIG_SECRET, "gateway.yaml")
        secret = self.objects.get(f"/api/v1/namespaces/{pod.namespace}/secrets/{CONFIG_SECRET}")
        if text is not None and secret is not None:
            config: dict[str, Any] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            version = str(secret["metadata"]["resourceVersion"])
            digest = digests.document(config)
            served = digests.document(pod.config) if pod.config is not None else None
            problems = self.refusing.get(pod.namespace)
            if problems and digest != served:
                found = [ProblemView(path=path, message=message) for path, message in problems]
                pod.refused = Refusal(digest=digest, problems=found, at=now, resource_version=version)
            elif digest != served:
                pod.config, pod.resource_version, pod.refused, pod.since = config, version, None, now
        pod.plugins = self.plugins
        self.sync_pod(pod)

    def acknowledge(self, namespace: str) -> None:
        """Every gateway pod of `namespace` applies the configuration Secret as it is now (as `apply_in_place`)."""
        for pod in self.gateway_pods(namespace):
            self.apply_in_place(pod)

    def remove_pod(self, pod: FakePod) -> None:
        self.pods.pop(pod.name, None)
        self.objects.pop(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", None)

    def sync_pod(self, pod: FakePod) -> None:
        """Write the pod's object as the kubelet reports it (Ready, IP, being deleted)."""
        meta: dict[str, Any] = {
            "name": pod.name,
            "namespace": pod.namespace,
            "labels": {**SELECTOR, "pod-template-hash": pod.replicaset.rsplit("-", 1)[-1]},
        }
        if pod.deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        ready = {"type": "Ready", "status": "True" if pod.ready else "False"}
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {"podIP": pod.ip, "conditions": [ready]}}
        self._store(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", body)

    async def acknowledgement(self, ip: str) -> Acknowledgement:
        """What the pod at `ip` answers on its admin port (the `acks.Fetch` of the tests)."""
        pod = next((p for p in self.pods.values() if p.ip == ip), None)
        if pod is None or not pod.answers:
            raise ConnectionRefusedError(f"nothing answers at {ip}")
        return pod.acknowledgement()

    def served_tokens(self, namespace: str) -> builtins.list[frozenset[str]]:
        """The webhook tokens each counted gateway pod accepts."""
        return [p.tokens() for p in self.gateway_pods(namespace) if p.counted]

    def stall_rollout(self, namespace: str, deadline_exceeded: bool = False) -> None:
        """The controller started rolling the current template (its ReplicaSet exists) but a new pod is not Ready.

        The pods of the ReplicaSets before it stay available, serving what they served: none applies anything.
        `deadline_exceeded`: the controller gave up (`Progressing=False`, `ProgressDeadlineExceeded`), as it does
        after `progressDeadlineSeconds`.
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
