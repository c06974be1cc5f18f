"""The read rules hold as shipped: a ResourceWatch's `maxResponseBytes` passes through the CRD and the operator into
the gateway pods, and a caller reaching them through the Service cannot step a variable out of its segment nor
respell a URI past the gateway. The upstream is a real HTTP server on the node's address, which the pods reach
from their own network namespaces over the node's bridge.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from mcp.shared.exceptions import MCPError

from mcpg_gateway import errors
from mcpg_testing import upstream as upstreams
from mcpg_testing.clients import connected
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.nodeconfig import NODE_IP
from mcpg_testing.pods import apply
from mcpg_testing.release import OperatorRelease
from mcpg_testing.upstream import Upstream

CLIENT_TOKEN = "safety-client-" + "s" * 24
HEADERS = {"authorization": f"Bearer {CLIENT_TOKEN}"}
CAP = 64


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    """The shared upstream, but on the node's address: a pod's loopback is its own."""
    async with upstreams.serve(NODE_IP) as served:
        yield served


def manifests(upstream: str) -> list[dict[str, Any]]:
    digest = hashlib.sha256(CLIENT_TOKEN.encode()).hexdigest()
    auth = {"principals": [{"token_sha256": digest, "principal_id": "caller"}]}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mcpg-gateway-auth"},
            "stringData": {"auth.yaml": yaml.safe_dump(auth)},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "ResourceWatch",
            "metadata": {"name": "docs"},
            "spec": {
                "uriTemplate": "doc://{id}",
                "backend": {"http": {"url": f"{upstream}/docs/{{id}}", "maxResponseBytes": CAP}},
            },
        },
    ]


async def read_error(url: str, uri: str) -> MCPError:
    async with connected(url, "listen", HEADERS) as client:
        with pytest.raises(MCPError) as e:
            await client.read_resource(uri)
    return e.value


async def test_the_read_rules_hold_on_the_gateway_pods(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str, upstream: Upstream
) -> None:
    upstream.set("/docs/small", '{"ok": true}')
    upstream.set("/docs/big", '{"pad": "' + "x" * 4 * CAP + '"}')
    upstream.set("/", '{"index": "every document"}')
    apply(control_plane, namespace, *manifests(upstream.url))
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/docs", "--timeout=150s")
    control_plane.kubectl("-n", namespace, "rollout", "status", "deployment/mcpg-gateway", "--timeout=150s")
    mcp_url = f"{control_plane.service_url(namespace, 'mcpg-gateway')}/mcp"

    async with connected(mcp_url, "listen", HEADERS) as client:
        small = await client.read_resource("doc://small")
    assert small.contents[0].text == '{"ok": true}'  # type: ignore[union-attr]

    too_large = await read_error(mcp_url, "doc://big")
    assert too_large.message == f"doc://big: upstream response is larger than max_response_bytes ({CAP})"

    asked_before = dict(upstream.hits)
    for uri, says in [
        ("doc://..", "`.` or `..` path segment"),
        ("doc://%2E%2E", "canonically it is 'doc://..'"),
        ("doc://%73mall", "canonically it is 'doc://small'"),
    ]:
        refused = await read_error(mcp_url, uri)
        assert refused.code == errors.INVALID_PARAMS
        assert says in refused.message
    assert upstream.hits == asked_before  # refused before any read
