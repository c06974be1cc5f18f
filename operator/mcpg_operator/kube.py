"""A thin async Kubernetes client over kubernetes_asyncio's transport: plain dicts in and out.

Objects are written with server-side apply (one field manager), so re-applying the same desired object is a
no-op and fields that others own (the Deployment controller's status, a user's labels) are left alone.
`Client` is the interface the reconcile's read and write phases use; tests pass an in-memory fake of it.
A client may be given a `Fence` (the leader's): every write then asks it first, so no write leaves a replica
that no longer holds the Lease, whatever the caller is doing (the API server cannot tell a stale leader apart).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from typing import Any, Protocol
from urllib.parse import urlsplit

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

FIELD_MANAGER = "mcpg-operator"
_OBJECT = {200: "object", 201: "object"}


class Refused(Exception):
    """The API server refused a write as invalid or forbidden (400, 403, 422): sending it again will not help.

    `message` is the API server's own, which names the object and the field.
    """

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


class NamespaceTerminating(Refused):
    """The namespace is being deleted: nothing can be created in it, and nothing needs to be."""


REFUSED_STATUSES = frozenset({400, 403, 422})


class NotLeading(BaseException):
    """A write was not sent: this replica does not hold the Lease (or can no longer be sure it does).

    A BaseException, as `asyncio.CancelledError` is, and for the same reason: it ends the work that met it, and no
    isolation boundary (`except Exception`) may take it for a failure to report on a status or to retry.
    """


class Fence(Protocol):
    """What a client asks before each write (`leader.Fence`): whether this replica still holds the Lease."""

    def admit(self, method: str, path: str) -> None:
        """Raise `NotLeading` unless this replica may write now; asked before every write, nothing awaited between."""


class Client(Protocol):
    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`; None if there is none."""

    async def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The items of the collection at `path`, filtered by `label_selector`."""

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create `body` in the collection at `path`; None if it already exists."""

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply `body` to the object at `path`, as this operator's field manager."""

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """JSON merge patch of the object (or subresource) at `path`; None if there is none."""

    async def delete(self, path: str) -> None:
        """Delete the object at `path`; a missing one is already deleted."""


class Kube:
    def __init__(self, api: client.ApiClient, fence: Fence | None = None) -> None:
        """`fence`: asked before every write (None: every write is sent, as by the elector, which must write to
        acquire the Lease)."""
        self.api = api
        self._fence = fence

    @classmethod
    async def connect(cls, fence: Fence | None = None) -> Kube:
        """In a pod, the mounted ServiceAccount; elsewhere $KUBECONFIG (read now, not at import time).

        The client's HTTP session belongs to the event loop this is awaited in: each loop connects its own."""
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()  # type: ignore[no-untyped-call]  # the library ships no annotation
            return cls(environment_read_once(client.ApiClient()), fence)
        cfg = client.Configuration()
        await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=cfg)
        return cls(environment_read_once(client.ApiClient(configuration=cfg)), fence)

    async def close(self) -> None:
        await self.api.close()

    @property
    def server(self) -> str:
        """The API server's URL this client talks to (no credential is in it)."""
        return str(self.api.configuration.host)

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        ctype: str | None = None,
    ) -> Any:
        if method != "GET" and self._fence is not None:
            self._fence.admit(method, path)  # the last step before the request is handed to the transport
        headers = {"Accept": "application/json"}
        if ctype:
            headers["Content-Type"] = ctype
        try:
            return await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                response_types_map=_OBJECT,
                _return_http_data_only=True,
            )
        except ApiException as e:
            if e.status in REFUSED_STATUSES:
                raise refusal(e.status, e.body) from None  # the API's message says it all; no traceback
            raise

    async def get(self, path: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call("GET", path)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return result

    async def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        result = await self._call("GET", path, query=query)
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create; None if it already exists."""
        try:
            result: dict[str, Any] = await self._call("POST", path, body)
        except ApiException as e:
            if e.status == 409:
                return None
            raise
        return result

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        result: dict[str, Any] = await self._call("PATCH", path, body, query, ctype="application/apply-patch+yaml")
        return result

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call("PATCH", path, body, ctype="application/merge-patch+json")
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return result

    async def delete(self, path: str) -> None:
        try:
            await self._call("DELETE", path)
        except ApiException as e:
            if e.status != 404:
                raise


def environment_read_once(api: client.ApiClient) -> client.ApiClient:
    """`api` with its proxy taken from the environment once, now, rather than before every request.

    kubernetes_asyncio's HTTP session trusts the environment, so before every request aiohttp looks for a netrc
    file and reads the proxy variables, in a worker thread: a fifth of the operator's busy CPU at 500 namespaces
    (bench 5b's profile). The proxy the environment names for the API server (HTTPS_PROXY unless NO_PROXY covers
    it) is set here instead, as a kubeconfig's `proxy-url` is; a netrc entry never applied (the client sends its
    own Authorization header, which aiohttp refuses to combine with one).
    """
    cfg, rest = api.configuration, api.rest_client
    where = urlsplit(str(cfg.host))
    proxy = urllib.request.getproxies().get(where.scheme)  # the environment's (on Linux, nothing else)
    if not cfg.proxy and proxy and not urllib.request.proxy_bypass(where.hostname or ""):
        cfg.proxy = rest.proxy = proxy  # the session reads `rest.proxy` (copied when it was made) per request
    rest.pool_manager._trust_env = False  # aiohttp's ClientSession takes it only when created, by the library
    return api


def refusal(status: int, body: Any) -> Refused:
    """The `Refused` an API server's Status body describes (body as bytes, text or None)."""
    try:
        parsed = json.loads(body) if body else {}
    except (TypeError, ValueError):
        parsed = {}
    if not isinstance(parsed, dict):
        parsed = {}
    reason, message = str(parsed.get("reason", "")), str(parsed.get("message", "")) or str(body or "")[:500]
    causes = (parsed.get("details") or {}).get("causes") or []
    if any(isinstance(x, dict) and x.get("reason") == "NamespaceTerminating" for x in causes):
        return NamespaceTerminating(status, reason, message)
    return Refused(status, reason, message)


def ns_path(namespace: str, plural: str, name: str | None = None, group: str | None = None) -> str:
    """The REST path of a namespaced collection (or object) in core, apps, policy, networking, RBAC, or a CRD
    group."""
    prefix = {
        None: "/api/v1",
        "apps": "/apis/apps/v1",
        "policy": "/apis/policy/v1",
        "networking.k8s.io": "/apis/networking.k8s.io/v1",
        "rbac.authorization.k8s.io": "/apis/rbac.authorization.k8s.io/v1",
        "mcpg.dev": "/apis/mcpg.dev/v1alpha1",
    }[group]
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


async def unreachable(timeout_s: float) -> str | None:
    """Why this process cannot reach the API server, in one line for a person, cause first; None once it answers.

    Asked once at start: an operator started with no kubeconfig, or pointed at a server that is not there, says so
    instead of failing in its first request with a traceback. `/version` is readable by any authenticated caller.
    """
    server = "the Kubernetes API"
    if (missing := _missing_kubeconfig()) is not None:
        return f"no Kubernetes configuration: {missing} does not exist (in a pod its ServiceAccount is used)"
    try:
        async with asyncio.timeout(timeout_s):
            kube = await Kube.connect()
            server = f"the Kubernetes API at {kube.server}"
            try:
                await kube.get("/version")
            finally:
                await kube.close()
    except TimeoutError:
        return f"{server} did not answer within {timeout_s:.0f} s"
    except config.ConfigException as e:
        return f"no Kubernetes configuration ({e}): in a pod its ServiceAccount is used; elsewhere set KUBECONFIG"
    except (ApiException, Refused) as e:
        return f"{server} refused this process's credentials ({e.status})"
    except OSError as e:  # a refused connection, an unknown host, a TLS failure (aiohttp's are OSErrors)
        return f"cannot reach {server}: {e.strerror or e}"
    return None


def _missing_kubeconfig() -> str | None:
    """Outside a pod, the kubeconfig the client would read, if no such file exists (said before the client warns
    about it in a log line of its own)."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    named = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    paths = [p for p in named.split(os.pathsep) if p]
    return None if any(os.path.isfile(p) for p in paths) else named
