"""`make demo`: mcpg end to end on a local cluster, narrated for a newcomer, then torn down.

Cluster up (the control plane and a real node, the images built from their Dockerfiles and imported into it), mcpg
installed with `helm install` of `charts/mcpg` as the README's local Install path does (CRDs, RBAC, the operator's
Deployment of two replicas from its image), a WebhookToken and two ResourceWatches (webhook and poll) applied, the
gateway Deployment the operator rendered (3 replicas, sharing the NATS bus the operator runs) rolled out as real
pods, an MCP client subscribed through the gateway's Service (its ClusterIP), a webhook posted to each pod in turn
(at its pod IP) and a poll change made (the client re-reads each resource it is told about and prints the new
content), then a token rotated by editing its Secret, applied in place on the same pods (no restart, the client's
stream kept), its phase shown as the operator writes it (Rolling, Retiring, Ready) and the old and new tokens
posted through the Service at each stage. It ends with the operator's
Events in time order and `kubectl get resourcewatches,webhooktokens`.

The operator's log (every replica's) goes to `.demo/operator.log` (`--log-dir`), kept after the demo, with the
values file helm was given; the cluster's component logs stay in `.cluster/logs` (the pods' logs go with them).

The operator and the gateway run from their images; `mcpg-subscribe` runs on the host from the gateway image's
environment (`.venv-gateway`: `mcpg_testing.images`), so the demo shows what the images ship, not the dev venv.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import yaml

from mcpg_testing import images, installation, oci, release
from mcpg_testing.controlplane import ControlPlane, ControlPlaneError
from mcpg_testing.images import ImageEnv, ImageEnvError
from mcpg_testing.kubewatch import KubectlWatch
from mcpg_testing.nodeconfig import NODE_IP
from mcpg_testing.pods import gateway_pods
from mcpg_testing.processes import free_ports
from mcpg_testing.programs import Program, ProgramError
from mcpg_testing.release import OperatorRelease

ROOT = images.REPO
STATE = ROOT / ".cluster"
LOG_DIR = ROOT / ".demo"
NS = "demo"
WAIT_S = 90.0
"""Bound on each thing the demo waits for (a rollout of real pods on 2 busy cores takes seconds)."""
READY = '{.status.conditions[?(@.type=="Ready")]'
WATCH_COLUMNS = "{.metadata.name} ready=" + READY + ".status} reason=" + READY + ".reason} " + READY + ".message}"
TOKEN_COLUMNS = (
    "{.metadata.name} phase={.status.phase} current={.status.currentDigest} retiring={.status.retiringCount} "
    'accepted={.status.conditions[?(@.type=="TokenAccepted")].status} reason=' + READY + ".reason}"
)


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def show(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """Run kubectl as the admin and print what it printed, as if typed at a terminal."""
    print(f"$ kubectl {' '.join(args)}", flush=True)
    out = plane.kubectl(*args, stdin=stdin).stdout.rstrip()
    print(out, flush=True)
    return out


def image_values(reference: str) -> dict[str, str]:
    """The chart's `image` block for an image imported into the node: never pulled (no registry is reachable)."""
    repository, _, tag = reference.rpartition(":")
    return {"repository": repository, "tag": tag, "pullPolicy": "Never"}


VALUES: dict[str, Any] = {
    "image": image_values(oci.OPERATOR_IMAGE),
    "resyncSeconds": 5,
    # Three gateway replicas: the operator runs a NATS bus for them, so a webhook any pod receives reaches the
    # subscribers of every pod.
    "gateway": {"image": image_values(oci.GATEWAY_IMAGE), "replicas": 3},
}
"""The values the demo's `helm install` takes: the chart's defaults but for the local images and the replicas."""


def install(plane: ControlPlane, operator: OperatorRelease) -> None:
    say("Installing mcpg with helm, as a user does: the CRDs, the RBAC, the operator's Deployment from its image.")
    values = operator.workdir / "values.yaml"
    print(f"$ cat {values}\n{yaml.safe_dump(VALUES, sort_keys=False).rstrip()}", flush=True)
    print(
        f"$ helm install {release.RELEASE} charts/mcpg --namespace {installation.OPERATOR_NAMESPACE} "
        f"--create-namespace --values {values} --wait",
        flush=True,
    )
    operator.install()  # then waits for the Deployment to be Available and one replica to lead
    plane.kubectl("wait", "--for=condition=Established", *installation.CRD_NAMES)
    show(plane, "-n", installation.OPERATOR_NAMESPACE, "get", "deployments,pods", "-l", release.SELECTOR)
    print(f"    the replica leading (the Lease {release.LEASE}): {operator.leader().pod_name}", flush=True)


def watches(upstream_port: int) -> str:
    return f"""
apiVersion: mcpg.dev/v1alpha1
kind: WebhookToken
metadata: {{name: report-token, namespace: {NS}}}
spec: {{secretRef: {{name: report-webhook}}, generate: true, gracePeriodSeconds: 5}}
---
apiVersion: mcpg.dev/v1alpha1
kind: ResourceWatch
metadata: {{name: daily-report, namespace: {NS}}}
spec:
  uri: report://daily
  mimeType: application/json
  backend: {{http: {{url: "http://{NODE_IP}:{upstream_port}/report.json"}}}}
  watch: {{webhook: {{tokenRef: {{name: report-token}}}}}}
---
apiVersion: mcpg.dev/v1alpha1
kind: ResourceWatch
metadata: {{name: service-status, namespace: {NS}}}
spec:
  uri: status://service
  mimeType: application/json
  backend: {{http: {{url: "http://{NODE_IP}:{upstream_port}/status.json"}}}}
  watch: {{poll: {{intervalMs: 10000}}}}
"""


def auth_secret(client_token: str) -> str:
    digest = hashlib.sha256(client_token.encode()).hexdigest()
    auth = {"principals": [{"token_sha256": digest, "principal_id": "demo-user", "trust_level": "verified"}]}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "mcpg-gateway-auth", "namespace": NS},
        "stringData": {"auth.yaml": yaml.safe_dump(auth)},
    }
    return yaml.safe_dump(secret)


def token(plane: ControlPlane) -> str:
    secret = json.loads(plane.kubectl("-n", NS, "get", "secret", "report-webhook", "-o", "json").stdout)
    return base64.b64decode(secret["data"]["token"]).decode()


def post(base: str, tok: str) -> int:
    return httpx2.post(f"{base}/webhooks/resource-updated/{tok}", timeout=10).status_code


def demo(plane: ControlPlane, gateway: ImageEnv, logs: Path) -> None:
    operator = OperatorRelease(plane, VALUES, logs)
    # Checked before anything is installed: the demo uninstalls what it installed, and must not take over a release
    # a user installed on a `make cluster-up` cluster.
    if release.RELEASE in operator.helm("list", "-n", installation.OPERATOR_NAMESPACE, "-q").split():
        raise ControlPlaneError(
            f"a release {release.RELEASE} is already installed in {installation.OPERATOR_NAMESPACE}: the demo installs "
            f"its own (helm uninstall {release.RELEASE} -n {installation.OPERATOR_NAMESPACE} first)"
        )
    try:
        install(plane, operator)
        walk_through(plane, gateway, logs)
    finally:
        with contextlib.suppress(ControlPlaneError, OSError):
            print(f"    the operator's log (every replica's): {operator.log}", flush=True)  # written now
        operator.uninstall()


def walk_through(plane: ControlPlane, gateway: ImageEnv, logs: Path) -> None:
    with contextlib.ExitStack() as stack:
        plane.kubectl("create", "namespace", NS, check=False)
        site = logs / "site"
        site.mkdir()
        (site / "report.json").write_text('{"report": "daily", "rows": 42}\n')
        (site / "status.json").write_text('{"status": "green"}\n')
        [port] = free_ports(1)
        # The upstream is a stand-in for the user's service, not mcpg: the dev venv's interpreter runs it, on the
        # node's address, where the pods reach the host.
        upstream = [sys.executable, "-m", "http.server", str(port), "--bind", NODE_IP, "--directory", str(site)]
        stack.enter_context(Program(upstream, os.environ))
        client_token = base64.urlsafe_b64encode(os.urandom(24)).decode()
        say(
            "Who may use the gateway: one principal, kept as the SHA-256 of its bearer token "
            "(Secret mcpg-gateway-auth)."
        )
        show(plane, "-n", NS, "apply", "-f", "-", stdin=auth_secret(client_token))
        say(
            f"An upstream on {NODE_IP}:{port} (the node's address) serves report.json and status.json. "
            "Applying a WebhookToken and two watches:"
        )
        show(plane, "apply", "-f", "-", stdin=watches(port))
        served(plane)
        say(
            "The operator rendered the gateway: a Deployment of 3 replicas, its configuration in a Secret, a Service "
            "(sessionAffinity ClientIP), and the namespace's bus credentials. The node runs each pod's container from "
            "the gateway image, Ready once its readiness probe passes."
        )
        plane.kubectl("-n", NS, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={WAIT_S:.0f}s")
        show(plane, "-n", NS, "get", "resourcewatches,webhooktokens,deployments,pods,services,secrets")
        print("$ crictl ps   # on the node: the containers of the operator, the gateways and the bus", flush=True)
        print(plane.crictl("ps").stdout.rstrip(), flush=True)
        say("The bus the gateways share: one NATS server (JetStream) beside the operator, an account per namespace.")
        plane.kubectl(
            "-n",
            installation.OPERATOR_NAMESPACE,
            "rollout",
            "status",
            "deployment/mcpg-bus",
            f"--timeout={WAIT_S:.0f}s",
        )
        show(
            plane,
            "-n",
            installation.OPERATOR_NAMESPACE,
            "get",
            "deployments,services,secrets",
            "-l",
            "app.kubernetes.io/name=mcpg-bus",
        )
        base = plane.service_url(NS, "mcpg-gateway")
        print(f"    the Service mcpg-gateway (port http) is {base}: its ClusterIP, kube-proxy's rules", flush=True)
        say(
            "An MCP client subscribes to both resources (protocol 2026-07-28, subscriptions/listen) and, told of a "
            "change, re-reads the resource (resources/read):"
        )
        argv = gateway.command("mcpg-subscribe", f"{base}/mcp", "report://daily", "status://service", "--read")
        print(f"$ mcpg-subscribe {base}/mcp report://daily status://service --read --token <client token>")
        client = stack.enter_context(Program([*argv, "--token", client_token], gateway.environ()))
        print("    " + client.wait_for("listening", 30), flush=True)
        tok = token(plane)
        say(
            "The report changes; its upstream posts the webhook to each pod in turn (as a load balancer spreads "
            "senders):"
        )
        for rows, (pod, pod_base) in enumerate(pods(plane).items(), start=43):
            (site / "report.json").write_text(f'{{"report": "daily", "rows": {rows}}}\n')
            print(f"    report.json now has rows={rows}", flush=True)
            print(f"    POST {pod} /webhooks/resource-updated/<token> -> HTTP {post(pod_base, tok)}", flush=True)
            told(client, "report://daily", 10)
        say("The status changes upstream; the poll (every 10 s, the floor) notices the new SHA-256:")
        (site / "status.json").write_text('{"status": "amber"}\n')
        told(client, "status://service", 25)
        rotate(plane, base, tok, client)
        events(plane)
        say("Where everything stands: each watch's READY and REASON (and MESSAGE), each token's phase.")
        show(plane, "-n", NS, "get", "resourcewatches,webhooktokens")


def served(plane: ControlPlane) -> None:
    """Show each ResourceWatch's Ready condition as the operator writes it, until both are Served."""
    print(f"$ kubectl -n {NS} get resourcewatches --watch   # Ready's status, reason and message, as written")
    names = {"daily-report", "service-status"}
    reasons: dict[str, str] = {}

    def done(fields: dict[str, str]) -> bool:
        reasons[fields["name"]] = fields.get("reason", "")
        return all(reasons.get(name) == "Served" for name in names)

    with KubectlWatch(plane, "-n", NS, "resourcewatches", template=WATCH_COLUMNS) as watch:
        watch.until(done, WAIT_S, stamped(time.monotonic()))


def told(client: Program, uri: str, timeout: float) -> None:
    """Print the client's notification for `uri` and the content it then read."""
    print("    client: " + client.wait_for(uri, timeout).strip(), flush=True)
    print("    client:   " + client.wait_for("read:", timeout).strip(), flush=True)


def stamped(start: float) -> Callable[[str], None]:
    """A printer that prefixes each line with the seconds since `start`, so the reader sees when it happened."""
    return lambda line: print(f"    +{time.monotonic() - start:4.1f}s  {line}", flush=True)


def rotate(plane: ControlPlane, base: str, old: str, client: Program) -> None:
    say(
        "Rotating the token by editing its Secret. No pod restarts: each gateway pod follows its configuration "
        "Secret through the API and swaps the new one in place; the WebhookToken's status as the operator writes it:"
    )
    new = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    digest = hashlib.sha256(new.encode()).hexdigest()[:12]
    pods_before = pods(plane)
    print(f"$ kubectl -n {NS} get webhooktoken report-token --watch   # phase, digests, TokenAccepted, Ready's reason")
    with KubectlWatch(plane, "-n", NS, "webhooktoken", "report-token", template=TOKEN_COLUMNS) as watch:
        start = time.monotonic()
        printer = stamped(start)
        watch.until(lambda f: bool(f.get("phase")), WAIT_S, printer)  # the state before the edit
        print(f'$ kubectl -n {NS} patch secret report-webhook --type merge -p \'{{"stringData":{{"token":"<new>"}}}}\'')
        version = plane.set_secret_token(NS, "report-webhook", new)
        printer(f"secret/report-webhook patched (resourceVersion {version})")
        both_tokens(base, old, new, "right after the edit")
        # This token's acceptance, not just any: the old token's status is still there right after the edit.
        watch.until(lambda f: f.get("current") == digest and f.get("accepted") == "True", WAIT_S, printer)
        both_tokens(base, old, new, "once the WebhookToken reports the new token accepted")
        watch.until(lambda f: f.get("current") == digest and f.get("phase") == "Ready", WAIT_S, printer)
    print(
        f"$ kubectl -n {NS} wait webhooktoken/report-token "
        f"--for=jsonpath='{{.status.accepted.secretResourceVersion}}'={version}   # what automation waits for"
    )
    plane.kubectl(
        "-n",
        NS,
        "wait",
        "webhooktoken/report-token",
        f"--for=jsonpath={{.status.accepted.secretResourceVersion}}={version}",
        f"--timeout={WAIT_S:.0f}s",
    )
    say("Done: the new token is accepted on every pod and the old one is retired, on the same pods as before:")
    both_tokens(base, old, new, "after retirement")
    after = pods(plane)
    print(f"    gateway pods before: {sorted(pods_before)}; after: {sorted(after)}", flush=True)
    say("The client's listen stream was not interrupted: it was told of each webhook posted during the rotation:")
    for _ in range(3):  # the posts with the old token before retirement, and with the new one from acceptance on
        told(client, "report://daily", 10)


def events(plane: ControlPlane) -> None:
    """The operator's Events about the demo's objects, oldest first.

    `kubectl get events --sort-by=.lastTimestamp` cannot order Events stamped within one second (its sort is not
    stable), so they are sorted here by time, then by resourceVersion (the API server's write order)."""
    say("The operator's Events, oldest first:")
    print(f"$ kubectl -n {NS} get events -o json   # WebhookToken and ResourceWatch Events, sorted by time")
    listed = json.loads(plane.kubectl("-n", NS, "get", "events", "-o", "json").stdout)["items"]
    ours = [e for e in listed if e.get("involvedObject", {}).get("kind") in ("WebhookToken", "ResourceWatch")]
    print(f"    {'TIME':<21} {'OBJECT':<29} {'REASON':<17} MESSAGE", flush=True)
    for event in sorted(ours, key=_event_order):
        obj = event["involvedObject"]
        about = f"{obj['kind'].lower()}/{obj['name']}"
        print(f"    {_event_time(event):<21} {about:<29} {event.get('reason', ''):<17} {event.get('message', '')}")


def _event_time(event: dict[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or event["metadata"]["creationTimestamp"])


def _event_order(event: dict[str, Any]) -> tuple[str, int]:
    return _event_time(event), int(event["metadata"].get("resourceVersion", "0"))


def pods(plane: ControlPlane) -> dict[str, str]:
    """The demo's Ready gateway pods, by name -> each one's own address (its pod IP, reached over the node's
    bridge)."""
    return dict(sorted(gateway_pods(plane, NS).items()))


def both_tokens(base: str, old: str, new: str, when: str) -> None:
    """POST the webhook through the Service with each token."""
    print(f"    {when}: old token -> HTTP {post(base, old)}, new token -> HTTP {post(base, new)}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    summary, _, details = (__doc__ or "").partition("\n\n")
    parser = argparse.ArgumentParser(
        prog="hack/demo.py",
        description=summary.replace("`", ""),
        epilog=details,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=LOG_DIR,
        help="where the operator's log (operator.log) and the upstream's files (site/) go, replacing the last run's "
        "(default: .demo)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="    %(message)s", stream=sys.stdout)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # its request log would print webhook tokens
    started = time.monotonic()
    logs: Path = args.log_dir.resolve()
    # This run's files only: a stale log would mislead a reader. Only the demo's own names, whatever the directory.
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "operator.log").unlink(missing_ok=True)
    shutil.rmtree(logs / "site", ignore_errors=True)
    plane = ControlPlane(STATE)
    try:
        gateway = images.ensure("gateway")  # mcpg-subscribe's; a no-op after `make image-envs`
    except ImageEnvError as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        return 1
    reuse = plane.is_running()
    if reuse:
        say(f"Using the control plane already running in {STATE} (make cluster-up); it stays up afterwards.")
    try:
        if not reuse:
            say("Starting a local Kubernetes cluster: etcd, kube-apiserver, controller-manager, scheduler, kwok")
            print(
                "    (a fake node for scale scenarios) and a real node: containerd, the kubelet, kube-proxy and",
                flush=True,
            )
            print("    CoreDNS, with the images built from their Dockerfiles. No Docker, no VM.", flush=True)
            plane.start()
        demo(plane, gateway, logs)
    except (ControlPlaneError, ProgramError) as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        print(f"the operator's log: {logs / 'operator.log'}", file=sys.stderr)
        print(f"the cluster's component logs: {plane.logs_dir}", file=sys.stderr)
        return 1
    finally:
        if reuse:
            plane.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        else:
            plane.stop()
            say(f"Stopped every process the demo started (component logs kept in {plane.logs_dir}).")
    say(f"Demo finished in {time.monotonic() - started:.0f}s. The operator's log: {logs / 'operator.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
