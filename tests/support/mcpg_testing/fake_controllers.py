"""The controllers, kubelet and gateway processes that act on the gateway's pods, played over a `FakeKube`, one step
at a time.

`GatewayPods` does what the Deployment controller, the ReplicaSet controller and the kubelet do for a
RollingUpdate with maxSurge 1 and maxUnavailable 0 (what the operator renders): start a pod of the current
template, make a starting pod Ready, start deleting an old pod once enough are Ready without it, or let a pod being
deleted go. And what each gateway process does on its own time: apply the configuration Secret as it is now, in
place. A pod starts on the configuration Secret as it is when it starts, and is Ready only once it has applied the
newest (the gateway is unready until it has read it through the API). Which of those happens next is the test's
random choice, so a simulation covers the interleavings a real cluster can take. After each step the ReplicaSets'
and the Deployment's status say what the pods do, as the real controllers would report it.
"""

from __future__ import annotations

import random

from mcpg_testing.fake_kube import FakeKube, FakePod, replicaset_name


class GatewayPods:
    def __init__(self, kube: FakeKube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace

    @property
    def pods(self) -> list[FakePod]:
        return self.kube.gateway_pods(self.namespace)

    def step(self, rng: random.Random, now: float = 0.0) -> str | None:
        """One controller, kubelet or gateway action, chosen by `rng` among those possible now; None if none is."""
        deployment = self.kube.deployment(self.namespace)
        if deployment is None:
            return None
        current = replicaset_name(deployment["spec"]["template"])
        choices = self._choices(current, deployment["spec"].get("replicas", 1))
        if not choices:
            self.sync()
            return None
        action, pod = rng.choice(choices)
        if pod is None:
            self.kube.start_pod(self.namespace, current)
        elif action == "ready":
            self.kube.apply_in_place(pod, now)  # Ready only once it has read the newest configuration
            pod.ready = True
        elif action == "delete":
            pod.deleting = True  # still Ready: it answers, and serves what reaches it, until its preStop pause ends
        elif action == "gone":
            self.kube.remove_pod(pod)
        else:
            self.kube.apply_in_place(pod, now)
        if pod is not None and action != "gone":
            self.kube.sync_pod(pod)
        self.sync()
        return action

    def _choices(self, current: str, replicas: int) -> list[tuple[str, FakePod | None]]:
        """(action, the pod it acts on); starting a pod acts on none yet."""
        pods = self.pods
        alive = [p for p in pods if not p.deleting]
        new = [p for p in alive if p.replicaset == current]
        ready = sum(p.ready for p in alive)
        out: list[tuple[str, FakePod | None]] = []
        if len(new) < replicas and len(alive) < replicas + 1:
            out.append(("start", None))
        out += [("ready", p) for p in new if not p.ready]
        # maxUnavailable 0: an old pod goes only once enough are Ready without it
        out += [("delete", p) for p in alive if p.replicaset != current and (not p.ready or ready - 1 >= replicas)]
        out += [("gone", p) for p in pods if p.deleting]
        out += [("apply", p) for p in pods]
        return out

    def sync(self) -> None:
        """Write what the pods do into the ReplicaSets' and the Deployment's status."""
        deployment = self.kube.deployment(self.namespace)
        if deployment is None:
            return
        current = self.kube.current_replicaset(self.namespace)["metadata"]["name"]
        alive = [p for p in self.pods if not p.deleting]
        for rs in self.kube.replicasets(self.namespace):
            mine = [p for p in alive if p.replicaset == rs["metadata"]["name"]]
            self.kube.set_available(rs, sum(p.ready for p in mine))
        updated = [p for p in alive if p.replicaset == current]
        deployment["status"] = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": len(alive),
            "updatedReplicas": len(updated),
            "readyReplicas": sum(p.ready for p in alive),
            "availableReplicas": sum(p.ready for p in alive),
        }

    def counted(self) -> list[FakePod]:
        """The pods the operator counts (Ready, and if being deleted, still answering)."""
        return [p for p in self.pods if p.counted]
