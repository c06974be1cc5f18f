"""The mcpg demo, narrated: for now it shows the local control plane running a real rollout.

Starts the control plane in .cluster (or reuses one `make cluster-up` left running, and then leaves
it running), shows the fake node, rolls a 1-replica Deployment out to Ready pods, and tears down.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from controlplane import ControlPlane, ControlPlaneError

STATE = Path(".cluster")
NAMESPACE = "demo"
MANIFEST = """
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hello, namespace: demo}
spec:
  replicas: 1
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      containers: [{name: hello, image: registry.invalid/hello:1}]
"""


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def show(plane: ControlPlane, *args: str, stdin: str | None = None) -> None:
    """Run kubectl as the admin and print what it printed, as if typed at a terminal."""
    print(f"$ kubectl {' '.join(args)}", flush=True)
    print(plane.kubectl(*args, stdin=stdin).stdout.rstrip(), flush=True)


def start(plane: ControlPlane) -> bool:
    """Start the control plane unless it already runs; True if this demo started it."""
    if plane.is_running():
        say(f"A control plane is already running in {STATE}/ (make cluster-up): using it, leaving it up.")
        return False
    say("Starting a local Kubernetes control plane: etcd, kube-apiserver, controller-manager,")
    print("    scheduler, and kwok, which plays the kubelet of one fake node. No Docker, no VM.")
    plane.start()
    return True


def show_nodes(plane: ControlPlane) -> None:
    say("The cluster has one node. kwok fakes it: it reports Ready, and runs no containers.")
    show(plane, "get", "nodes", "-o", "wide")


def roll_out_deployment(plane: ControlPlane) -> None:
    say("Creating a Deployment with 1 replica. The controller-manager creates a ReplicaSet and a Pod,")
    print("    the scheduler binds the Pod to the fake node, and kwok marks it Running and Ready.")
    show(plane, "apply", "-f", "-", stdin=MANIFEST)
    show(plane, "-n", NAMESPACE, "rollout", "status", "deployment/hello", "--timeout=120s")
    show(plane, "-n", NAMESPACE, "get", "deployments,replicasets,pods", "-o", "wide")


def clean_up(plane: ControlPlane, started_here: bool) -> None:
    if started_here:
        plane.stop()  # first: even if printing fails (say, a closed pipe), nothing is left running
        say("Stopped every process the demo started and removed the cluster's data.")
        print(f"    component logs are kept in {plane.logs_dir}")
    elif plane.is_running():
        say(f"Removing the demo namespace; the control plane in {STATE}/ keeps running.")
        plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="    %(message)s", stream=sys.stdout)  # the control plane's progress
    plane = ControlPlane(STATE)
    started_here = False
    try:
        started_here = start(plane)
        show_nodes(plane)
        roll_out_deployment(plane)
    except ControlPlaneError as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        return 1
    finally:
        clean_up(plane, started_here)
    say("Done.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
