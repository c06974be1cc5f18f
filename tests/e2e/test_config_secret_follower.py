"""The configuration Secret follower against the local cluster's API server, under a gateway's least privilege.

A ServiceAccount whose Role allows get, list and watch on secrets named `mcpg-gateway-config` and nothing else, as
the operator grants a gateway (issue 34): its token (from `kubectl create token`, as the kubelet would project one) and
the cluster's CA (the namespace's `kube-root-ca.crt`, what a pod mounts as `ca.crt`) are all the follower is given. It
runs in the test process, not in a pod: what is under test is the API server's answers (RBAC on resourceNames with a
field selector, watch events, TLS), which are the same from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import yaml

from mcpg_gateway import config_secret
from mcpg_gateway.config_secret import ApiAccess, SecretFollower
from mcpg_testing import BOUND_S
from mcpg_testing.controlplane import ControlPlane

NAME, OTHER, KEY = "mcpg-gateway-config", "someone-elses", "gateway.yaml"
ACCOUNT = "gateway"

RBAC = f"""
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {ACCOUNT}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {ACCOUNT}-config}}
rules:
  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [{NAME}]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {ACCOUNT}-config}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {ACCOUNT}-config}}
subjects: [{{kind: ServiceAccount, name: {ACCOUNT}}}]
"""


def secret(name: str, text: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {KEY: text}})


@dataclass
class Gateway:
    """What a gateway pod of the namespace would have: its API access, under its ServiceAccount."""

    plane: ControlPlane
    namespace: str
    access: ApiAccess

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """As the admin, off the event loop: the follower keeps reading meanwhile."""
        result = await asyncio.to_thread(self.plane.kubectl, *args, "-n", self.namespace, stdin=stdin)
        return result.stdout

    async def put(self, name: str, text: str) -> None:
        await self.kubectl("apply", "-f", "-", stdin=secret(name, text))

    async def version(self, name: str) -> str:
        return await self.kubectl("get", "secret", name, "-o", "jsonpath={.metadata.resourceVersion}")


@dataclass
class Offers:
    queue: asyncio.Queue[tuple[str, str]] = field(default_factory=asyncio.Queue)

    async def offer(self, text: str, version: str) -> None:
        self.queue.put_nowait((text, version))

    async def next(self) -> tuple[str, str]:
        async with asyncio.timeout(BOUND_S):
            return await self.queue.get()


@pytest.fixture
def gateway(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Gateway:
    """The namespace with the gateway's ServiceAccount, Role and binding, its config Secret and another one."""
    ns = ("-n", namespace)
    control_plane.kubectl("apply", *ns, "-f", "-", stdin=RBAC)
    control_plane.kubectl("apply", *ns, "-f", "-", stdin=secret(NAME, "version: 1\n"))
    control_plane.kubectl("apply", *ns, "-f", "-", stdin=secret(OTHER, "not: yours\n"))
    token = control_plane.kubectl("create", "token", ACCOUNT, *ns, "--duration=1h").stdout.strip()
    # Published into each namespace by the root-CA publisher, shortly after the namespace is created.
    control_plane.kubectl("wait", "--for=create", "configmap/kube-root-ca.crt", *ns, "--timeout=60s")
    ca = control_plane.kubectl("get", "configmap", "kube-root-ca.crt", *ns, "-o", r"jsonpath={.data.ca\.crt}").stdout
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_text(ca)
    server = yaml.safe_load(control_plane.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return Gateway(control_plane, namespace, ApiAccess(server, namespace, tmp_path / "token", tmp_path / "ca.crt"))


@contextlib.asynccontextmanager
async def following(gateway: Gateway) -> AsyncIterator[tuple[SecretFollower, Offers]]:
    offers = Offers()
    follower = SecretFollower(NAME, KEY, offers.offer, gateway.access)
    task = asyncio.create_task(follower.run())
    try:
        yield follower, offers
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_follower_offers_the_secrets_text_then_an_edit_and_never_another_secrets_edit(
    gateway: Gateway,
) -> None:
    async with following(gateway) as (follower, offers):
        assert await offers.next() == ("version: 1\n", await gateway.version(NAME))
        assert follower.synced.is_set()

        await gateway.put(OTHER, "version: 666\n")  # same key, so the follower would offer it had it seen it
        await gateway.put(NAME, "version: 2\n")
        # Events come in resourceVersion order: the other Secret's edit would have been offered first.
        assert await offers.next() == ("version: 2\n", await gateway.version(NAME))


async def test_a_deleted_and_recreated_secret_offers_the_new_content(gateway: Gateway) -> None:
    async with following(gateway) as (_, offers):
        await offers.next()
        await gateway.kubectl("delete", "secret", NAME)
        await gateway.put(NAME, "version: recreated\n")

        assert await offers.next() == ("version: recreated\n", await gateway.version(NAME))


async def test_the_gateways_token_reads_its_own_secret_and_no_other_and_writes_nothing(gateway: Gateway) -> None:
    access = gateway.access
    base = f"{access.server}/api/v1/namespaces/{gateway.namespace}/secrets"
    tls = ssl.create_default_context(cafile=str(access.ca_file))  # verified: the follower's own trust
    headers = {"Authorization": f"Bearer {access.token_file.read_text()}"}
    async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=BOUND_S)) as http:

        async def status(method: str, url: str, body: str | None = None) -> int:
            patch = {"Content-Type": "application/merge-patch+json"}
            async with http.request(method, url, ssl=tls, data=body, headers=patch) as resp:
                return resp.status

        assert await status("GET", f"{base}/{NAME}") == 200
        assert await status("GET", config_secret.list_url(access, NAME)) == 200
        assert await status("GET", f"{base}/{OTHER}") == 403
        assert await status("GET", config_secret.list_url(access, OTHER)) == 403
        assert await status("GET", base) == 403  # a list not narrowed to the name is not covered by resourceNames
        assert await status("PATCH", f"{base}/{NAME}", json.dumps({"stringData": {KEY: "x"}})) == 403
