"""The controllers and kubelet that act on the gateway's Deployment, played over a `FakeKube`, one step at a time.

`GatewayPods` does what the Deployment controller, the ReplicaSet controller and the kubelet do for a
RollingUpdate with maxSurge 1 and maxUnavailable 0 (what the operator renders): start a pod of the current
template, make a starting pod available, or remove an old pod once enough are available without it. Which of
those happens next is the test's random choice, so a simulation covers the interleavings a real rollout can
take. After each step the ReplicaSets' and the Deployment's status say what the pods do, as the real
controllers would report it, and `available_tokens` says which webhook tokens each available pod accepts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml

from mcpg_testing.fake_kube import FakeKube, config_secret, replicaset_name


@dataclass
class Pod:
    replicaset: str
    tokens: frozenset[str]
    """What its configuration accepts, read when it started (the configuration Secret is immutable)."""
    available: bool = False


class GatewayPods:
    def __init__(self, kube: FakeKube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.pods: list[Pod] = []

    def step(self, rng: random.Random) -> str | None:
        """One controller or kubelet action, chosen by `rng` among those possible now; None if none is."""
        deployment = self.kube.deployment(self.namespace)
        if deployment is None:
            return None
        template, replicas = deployment["spec"]["template"], deployment["spec"].get("replicas", 1)
        current = replicaset_name(template)
        new = [p for p in self.pods if p.replicaset == current]
        old = [p for p in self.pods if p.replicaset != current]
        starting = [p for p in new if not p.available]
        available = sum(p.available for p in self.pods)
        choices = []
        if len(new) < replicas and len(self.pods) < replicas + 1:
            choices.append("start")
        if starting:
            choices.append("ready")
        removable = [p for p in old if not p.available or available - 1 >= replicas]  # maxUnavailable 0
        if removable:
            choices.append("remove_old")
        if not choices:
            self.sync()
            return None
        action = rng.choice(choices)
        if action == "start":
            self.pods.append(Pod(current, self._tokens(template)))
        elif action == "ready":
            rng.choice(starting).available = True
        else:
            self.pods.remove(rng.choice(removable))
        self.sync()
        return action

    def sync(self) -> None:
        """Write what the pods do into the ReplicaSets' and the Deployment's status."""
        deployment = self.kube.deployment(self.namespace)
        if deployment is None:
            return
        current = self.kube.current_replicaset(self.namespace)["metadata"]["name"]
        for rs in self.kube.replicasets(self.namespace):
            mine = [p for p in self.pods if p.replicaset == rs["metadata"]["name"]]
            self.kube.set_available(rs, sum(p.available for p in mine))
        updated = [p for p in self.pods if p.replicaset == current]
        deployment["status"] = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": len(self.pods),
            "updatedReplicas": len(updated),
            "readyReplicas": sum(p.available for p in self.pods),
            "availableReplicas": sum(p.available for p in self.pods),
        }

    def available_tokens(self) -> list[frozenset[str]]:
        return [p.tokens for p in self.pods if p.available]

    def _tokens(self, template: dict[str, Any]) -> frozenset[str]:
        text = self.kube.secret_value(self.namespace, config_secret(template), "gateway.yaml")
        assert text is not None, "a pod started with a configuration Secret that does not exist"
        config = yaml.load(text, Loader=yaml.CSafeLoader)
        entries = [e for kind in config["mcp"]["capabilities"].values() for e in kind]
        strategies = [e["watch"]["strategy"] for e in entries]
        return frozenset(t for s in strategies if s["type"] == "webhook" for t in [s["token"], *s["previous_tokens"]])
