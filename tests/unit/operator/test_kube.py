"""The operator's API client and the leader's fence: no write leaves a replica past its renew deadline.

The client is given a stand-in for kubernetes_asyncio's `ApiClient` that records each request it is asked to
send, so a test sees exactly what would have gone out. That the elector's own client carries no fence (it must
write to take the Lease) is the e2e tier's to show: there the replicas elect a leader through `Kube`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from mcpg_operator import leader, metrics
from mcpg_operator.kube import Kube, NotLeading, environment_read_once

RENEW_S = 10.0
LEASE = "ops/mcpg-operator"
SECRETS = "/api/v1/namespaces/shop/secrets"
WRITES: dict[str, Callable[[Kube], Awaitable[Any]]] = {
    "create": lambda kube: kube.create(SECRETS, {"metadata": {"name": "s"}}),
    "apply": lambda kube: kube.apply(f"{SECRETS}/s", {"metadata": {"name": "s"}}),
    "merge_patch": lambda kube: kube.merge_patch(f"{SECRETS}/s", {"data": {}}),
    "delete": lambda kube: kube.delete(f"{SECRETS}/s"),
    "status patch": lambda kube: kube.merge_patch(
        "/apis/mcpg.dev/v1alpha1/namespaces/shop/resourcewatches/w/status", {"status": {}}
    ),
    "Event post": lambda kube: kube.create("/api/v1/namespaces/shop/events", {"reason": "TokenPromoted"}),
}


class Sent:
    """Stands in for `ApiClient`: records every request the client sends, and answers each with an empty object."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    async def call_api(self, path: str, method: str, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path))
        return {"items": []}

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def recorder() -> metrics.Metrics:
    return metrics.Metrics(CollectorRegistry())


def fenced(recorder: metrics.Metrics, clock: Clock) -> tuple[Kube, Sent, leader.Fence]:
    sent, fence = Sent(), leader.Fence(RENEW_S, LEASE, clock, recorder)
    return Kube(cast(Any, sent), fence), sent, fence


async def test_a_write_after_the_renew_deadline_passed_without_renewal_is_refused_before_any_request_is_sent(
    recorder: metrics.Metrics, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    kube, sent, fence = fenced(recorder, clock)
    fence.renewed(clock.now)
    for write in WRITES.values():
        await write(kube)
    assert len(sent.requests) == len(WRITES), "every write goes out while the Lease is held"
    sent.requests.clear()
    clock.now += RENEW_S  # the renew deadline passes, and no renewal came
    for name, write in WRITES.items():
        with pytest.raises(NotLeading):
            await write(kube)
        assert sent.requests == [], f"{name} was sent"
    assert recorder.registry.get_sample_value("mcpg_operator_fenced_writes_total") == len(WRITES)
    refusals = [r for r in caplog.records if r.name == leader.__name__ and r.levelno == logging.ERROR]
    assert len(refusals) == 1, "logged once, not once per write"
    assert LEASE in refusals[0].getMessage()


async def test_reads_are_not_fenced_only_writes(recorder: metrics.Metrics) -> None:
    kube, sent, _ = fenced(recorder, Clock())  # never renewed: this replica does not lead
    await kube.get(f"{SECRETS}/s")
    await kube.list(SECRETS)
    assert sent.requests == [("GET", f"{SECRETS}/s"), ("GET", SECRETS)]
    with pytest.raises(NotLeading):
        await kube.delete(f"{SECRETS}/s")
    assert len(sent.requests) == 2


async def test_a_write_is_refused_at_once_when_the_lease_is_seen_lost_before_its_deadline(
    recorder: metrics.Metrics,
) -> None:
    clock = Clock()
    kube, sent, fence = fenced(recorder, clock)
    fence.renewed(clock.now)
    fence.close()  # the elector saw another holder
    with pytest.raises(NotLeading):
        await kube.apply(f"{SECRETS}/s", {})
    assert sent.requests == []


def test_refused_writes_are_no_failure_any_isolation_boundary_catches() -> None:
    # `except Exception` guards each namespace's pass and each best-effort status report: neither may take the
    # fence for a failure to retry or to report on the objects.
    assert not issubclass(NotLeading, Exception)


def api_client(host: str) -> Any:
    from kubernetes_asyncio import client

    cfg = client.Configuration()
    cfg.host = host
    return client.ApiClient(configuration=cfg)


async def test_the_environments_proxy_is_read_once_at_connect_not_before_every_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    api = environment_read_once(api_client("https://10.96.0.1:443"))
    try:
        assert api.rest_client.proxy == "http://proxy.example:3128"
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()


async def test_no_proxy_still_keeps_the_api_server_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.96.0.1")
    api = environment_read_once(api_client("https://10.96.0.1:443"))
    try:
        assert not api.rest_client.proxy
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()
