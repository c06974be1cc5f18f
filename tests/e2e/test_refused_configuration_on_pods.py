"""A configuration a gateway pod refuses, on a real pod: the pod keeps running (and keeps serving the one before,
if it had one), says why in its acknowledgement, and nothing is reported as served on the refused one.

The operator renders only what a gateway would start on, and learns the watch-strategy plugin kinds the pods have
from their acknowledgements: its `MCPG_GATEWAY_PLUGIN_KINDS` setting stands in only while no pod answers. So a pod
refuses a configuration only when the operator rendered it without an answer. Here the test's own operator claims
a plugin kind the gateway image lacks (`ghost`), in two moments:

- Before any pod has answered: the namespace's first configuration names the ghost. Its one pod starts on it,
  refuses it and stays up, unready, saying why in its acknowledgement; the operator hears it though it is not
  Ready, learns that `ghost` is not installed, and leaves the watch out (Stalled, InvalidSpec, naming the kind):
  the pod then serves the rest and becomes Ready. (Found here: the pod used to exit on such a configuration, a
  crash loop, and the operator asked only Ready pods, so the namespace waited for a Ready pod for ever.)
- In place: with the pod serving, its process is stopped (SIGSTOP: Ready for a few seconds more by its probes,
  silent on its admin port) while another watch naming the ghost is added. With no answer, the operator renders it
  from its settings; the process is let go (SIGCONT), reads the configuration Secret and refuses it: the
  configuration before keeps serving (the served watch's listen stream and webhook), the acknowledgement names the
  refused digest and the field, and the operator, hearing the pod again, leaves the watch out.

Neither ghost is ever reported Served, and the pod is never replaced or restarted. The session's operator (the
chart's release) is paused for the test: it watches every namespace, and would render this one without the claim.
A `ConfigRefused` status (a refusal the operator cannot foresee: a gateway image behind the operator's contract) is
the unit tier's to show (`tests/unit/operator/test_in_place.py`): the images built here refuse nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from mcpg_gateway.contract.acknowledgement import Acknowledgement
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.fixtures import OPERATOR_SETTINGS
from mcpg_testing.images import ImageEnv
from mcpg_testing.pods import GatewayPod, acknowledgement_of, container_pid, gateway_pods_now, serving_everywhere
from mcpg_testing.processes import wait_until
from mcpg_testing.programs import OperatorProcess
from mcpg_testing.release import OperatorRelease
from mcpg_testing.watching import watching

HOOK = "refusal://hook"
CLIENT_TOKEN = "refusal-client-" + "r" * 24
BOUND_S = 120.0
"""Bound on the namespace's gateway being served by its pod, from nothing."""
CHANGE_S = 30.0
"""Bound on one configuration reaching the Secret, or the operator deciding again: seconds, on 2 busy cores."""
KIND = "ghost"


def settings(namespace: str) -> dict[str, str]:
    """The session's gateway settings, but one replica and a plugin kind the gateway image does not install."""
    gateway = {k: v for k, v in OPERATOR_SETTINGS.items() if k.startswith("MCPG_GATEWAY_")}
    return {
        **gateway,
        "POD_NAMESPACE": OPERATOR_SETTINGS["POD_NAMESPACE"],
        "POD_NAME": "refusal",
        "MCPG_WATCH_NAMESPACES": namespace,
        "MCPG_LEADER_ELECTION_LEASE_NAME": f"refusal-{namespace}",
        "MCPG_GATEWAY_REPLICAS": "1",
        "MCPG_GATEWAY_PLUGIN_KINDS": json.dumps([KIND]),
        "MCPG_BUS_NAMESPACE": namespace,  # nothing of the session's managed bus is this test's to touch
        "MCPG_RESYNC_SECONDS": "5",
    }


def hook_watch() -> list[dict[str, Any]]:
    """A webhook watch, its WebhookToken, and a principal to listen as."""
    principal = {"token_sha256": hashlib.sha256(CLIENT_TOKEN.encode()).hexdigest(), "principal_id": "listener"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mcpg-gateway-auth"},
            "stringData": {"auth.yaml": yaml.safe_dump({"principals": [principal]})},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "WebhookToken",
            "metadata": {"name": "hook-token"},
            "spec": {"secretRef": {"name": "hook-webhook"}, "generate": True},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "ResourceWatch",
            "metadata": {"name": "hook"},
            "spec": {
                "uri": HOOK,
                "backend": {"http": {"url": "http://127.0.0.1:9/unused"}},
                "watch": {"webhook": {"tokenRef": {"name": "hook-token"}}},
            },
        },
    ]


def ghost_watch(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": name},
        "spec": {
            "uri": f"refusal://{name}",
            "backend": {"http": {"url": "http://127.0.0.1:9/unused"}},
            "watch": {"plugin": {"kind": KIND, "config": {"haunts": "the attic"}}},
        },
    }


def get(plane: ControlPlane, ns: str, *what: str) -> Any:
    return json.loads(plane.kubectl("-n", ns, "get", *what, "-o", "json").stdout)


def apply(plane: ControlPlane, ns: str, *docs: dict[str, Any]) -> None:
    plane.kubectl("-n", ns, "apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))


def configured(plane: ControlPlane, ns: str) -> tuple[str, list[str]]:
    """The configuration Secret's digest and the names of the resources it holds."""
    secret = get(plane, ns, "secret", "mcpg-gateway-config")
    config = yaml.safe_load(base64.b64decode(secret["data"]["gateway.yaml"]))
    names = [r["name"] for r in config["mcp"]["capabilities"]["resources"]]
    return secret["metadata"]["annotations"]["mcpg.dev/config-digest"], names


def ready(obj: dict[str, Any]) -> tuple[str, str]:
    found = next(c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready")
    return found["status"], found["reason"]


@dataclass
class Acks:
    """The pod's acknowledgement, read at its IP on a thread every tenth of a second until stopped."""

    ip: str
    seen: list[tuple[float, Acknowledgement]] = field(default_factory=list)
    """(when it was read, what it said)."""
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx2.Client(timeout=2) as http:
            while not self._stop.wait(0.1):  # paced reads of a state only reachable by asking
                try:
                    self.seen.append((time.monotonic(), acknowledgement_of(self.ip, http)))
                except (httpx2.HTTPError, ValueError):
                    continue  # starting, or stopped: no answer within the timeout

    def between(self, start: float, end: float) -> list[Acknowledgement]:
        return [ack for t, ack in self.seen if start <= t < end]


def refused_kinds(acks: list[Acknowledgement], digest: str | None = None) -> list[tuple[str, str]]:
    """(path, message) of every problem of each refusal read (of `digest` only, if given)."""
    refusals = [a.refused for a in acks if a.refused is not None and digest in (None, a.refused.digest)]
    return [(problem.path, problem.message) for r in refusals if r is not None for problem in r.problems]


def first_pod(plane: ControlPlane, ns: str) -> GatewayPod:
    """The namespace's one gateway pod, once it has an address (Ready or not)."""
    found: list[GatewayPod] = []

    def addressed() -> bool:
        found[:] = [p for p in gateway_pods_now(plane, ns).values() if p.ip]
        return len(found) == 1

    wait_until(addressed, BOUND_S, "the gateway pod to have an address", 0.2)
    return found[0]


async def kubectl_wait(plane: ControlPlane, ns: str, condition: str, *what: str) -> None:
    await asyncio.to_thread(plane.kubectl, "-n", ns, "wait", condition, *what, f"--timeout={CHANGE_S:.0f}s")


STALLED = '--for=jsonpath={.status.conditions[?(@.type=="Stalled")].reason}=InvalidSpec'


@pytest.fixture
def session_operator_paused(operators: OperatorRelease, control_plane: ControlPlane, namespace: str) -> Iterator[None]:
    """The session's operator stopped for the test, and started again once the namespace's watches are gone."""
    delete = ("-n", namespace, "delete", "resourcewatches", "--all", "--wait=true", "--timeout=60s")
    with operators.paused(lambda: control_plane.kubectl(*delete)):
        yield


@pytest.mark.usefixtures("session_operator_paused")
async def test_a_refused_configuration_never_stops_the_pod_nor_what_it_served_and_nothing_is_served_on_it(
    control_plane: ControlPlane, chart_rbac: None, operator_env: ImageEnv, namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, namespace
    with OperatorProcess(operator_env, plane.operator_kubeconfig, tmp_path / "operator.log", settings(ns)) as op:
        op.wait_ready()
        # Before any pod has answered: the first configuration names the ghost.
        apply(plane, ns, *hook_watch(), ghost_watch("ghostly"))
        pod = await asyncio.to_thread(first_pod, plane, ns)
        assert pod.ip is not None
        acks = Acks(pod.ip)
        reader = threading.Thread(target=acks.run, name="acknowledgements", daemon=True)
        reader.start()
        await kubectl_wait(plane, ns, STALLED, "resourcewatch/ghostly")
        await asyncio.to_thread(
            plane.kubectl, "-n", ns, "wait", "--for=condition=Ready", "resourcewatch/hook", f"--timeout={BOUND_S:.0f}s"
        )
        await asyncio.to_thread(
            wait_until, lambda: serving_everywhere(plane, ns, 1) is not None, CHANGE_S, "the pod to serve it", 0.2
        )
        before, names = configured(plane, ns)
        assert names == ["hook"]
        at_start = acks.between(0, time.monotonic())

        # In place: a configuration naming the ghost again, rendered while the pod is silent.
        token = base64.b64decode(get(plane, ns, "secret", "hook-webhook")["data"]["token"]).decode()
        service = plane.service_url(ns, "mcpg-gateway")
        headers = {"authorization": f"Bearer {CLIENT_TOKEN}"}
        async with watching(f"{service}/mcp", "listen", [HOOK], headers) as listen:
            pid = container_pid(plane, ns, pod.name, "gateway")
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                apply(plane, ns, ghost_watch("phantom"))
                await asyncio.to_thread(
                    wait_until, lambda: "phantom" in configured(plane, ns)[1], CHANGE_S, "the ghost rendered", 0.1
                )
                refused, rendered = configured(plane, ns)
            finally:
                os.kill(pid, signal.SIGCONT)
            silent_s = time.monotonic() - stopped
            # The operator hears the pod again, learns what it has installed, and leaves the ghost out.
            await kubectl_wait(plane, ns, STALLED, "resourcewatch/phantom")
            await kubectl_wait(plane, ns, "--for=condition=Ready", "resourcewatch/hook")
            await asyncio.to_thread(
                wait_until, lambda: serving_everywhere(plane, ns, 1) is not None, CHANGE_S, "the pod to serve it", 0.2
            )
            # The configuration before kept serving: the same stream is told of the served watch's webhook.
            async with httpx2.AsyncClient(timeout=10) as http:
                assert (await http.post(f"{service}/webhooks/resource-updated/{token}")).status_code == 200
            assert (await listen.next()).uri == HOOK
            assert listen.open
        acks._stop.set()
        reader.join(timeout=10)
        in_place = acks.between(stopped, time.monotonic())
        ghosts = {name: get(plane, ns, "resourcewatch", name) for name in ("ghostly", "phantom")}
        events = get(plane, ns, "events", "--field-selector", "involvedObject.kind=ResourceWatch")["items"]
        after, names = configured(plane, ns)
        [pod_after] = gateway_pods_now(plane, ns).values()
    print(
        f"\nrefused configurations: at start, {len(at_start)} acknowledgements read, "
        f"{sum(a.serving is None for a in at_start)} serving nothing; in place, the pod silent {silent_s:.1f}s, "
        f"{len(in_place)} acknowledgements read from then on, "
        f"{sum(a.refused is not None and a.refused.digest == refused for a in in_place)} naming the refusal"
    )

    # At start: the pod served nothing, said why, and was not stopped by it.
    unready = [a for a in at_start if a.serving is None]
    assert unready, "the pod was never heard refusing the configuration it started on"
    problems = set(refused_kinds(unready))
    assert problems
    assert all(path.endswith(".watch.strategy.kind") and KIND in said for path, said in problems), problems
    # In place: the pod refused the configuration carrying the ghost, naming the field and the kind, and served
    # the one before all along: never the refused one.
    assert refused != before
    assert sorted(rendered) == ["ghostly", "hook", "phantom"]  # with no answer, both ghosts by the settings
    paths = {path for path, _ in refused_kinds(in_place, refused)}
    ghosts_at = [i for i, name in enumerate(rendered) if name != "hook"]
    assert paths == {f"mcp.capabilities.resources[{i}].watch.strategy.kind" for i in ghosts_at}
    assert {a.serving.digest if a.serving is not None else None for a in in_place} == {before}
    # The operator then left the ghosts out, saying why on each watch: the configuration is the one before.
    assert (after, names) == (before, ["hook"])
    for ghost in ghosts.values():
        assert ready(ghost) == ("False", "InvalidSpec")
        assert KIND in next(c for c in ghost["status"]["conditions"] if c["type"] == "Stalled")["message"]
    # Nothing was reported served on a refused configuration, and the pod was neither replaced nor restarted.
    served = {e["involvedObject"]["name"] for e in events if e["reason"] == "Served"}
    assert served == {"hook"}
    assert (pod_after.uid, pod_after.restarts) == (pod.uid, 0)
