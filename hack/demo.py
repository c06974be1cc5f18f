"""`make demo`: mcpg end to end on a local control plane, narrated for a newcomer, then torn down.

Control plane up, CRDs and the chart's RBAC installed, the operator running under that identity, a WebhookToken
and two ResourceWatches (webhook and poll) applied, the gateway Deployment the operator rendered (3 replicas,
sharing the NATS bus the operator runs) run as real pods by the local kubelet, an MCP client subscribed through
the gateway's Service, a webhook posted to each pod in turn and a poll change made (the client re-reads each
resource it is told about and prints the new content), then a token rotated by editing its Secret, its phase shown
as the operator writes it (Rolling, Retiring, Ready) and the old and new tokens posted through the Service at each
stage. It ends with the operator's Events in time order and `kubectl get resourcewatches,webhooktokens`.

The operator's log goes to `.demo/operator.log` (`--log-dir`), kept after the demo; the control plane's component
and pod logs stay in `.cluster/logs`.

The operator, the gateway pods and `mcpg-subscribe` run from their images' environments (`.venv-operator`,
`.venv-gateway`: `mcpg_testing.images`), so the demo shows what the images ship, not the dev venv.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml

from mcpg_testing import images, installation, runtimes
from mcpg_testing.controlplane import ControlPlane, ControlPlaneError
from mcpg_testing.images import ImageEnv, ImageEnvError
from mcpg_testing.kubewatch import KubectlWatch
from mcpg_testing.processes import free_ports
from mcpg_testing.programs import OperatorProcess, Program, ProgramError

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


@dataclass(frozen=True, slots=True)
class Images:
    """Where each shipped program runs from."""

    operator: ImageEnv
    gateway: ImageEnv


def install(plane: ControlPlane) -> None:
    say("Installing the CRDs and the Helm chart's RBAC (helm template | kubectl apply).")
    show(plane, "apply", "-f", str(installation.CRDS))
    plane.kubectl("wait", "--for=condition=Established", *installation.CRD_NAMES)
    print("$ helm template mcpg charts/mcpg | kubectl apply -f -   # its ServiceAccount, ClusterRole and binding")
    print(installation.install_chart_rbac(plane).rstrip(), flush=True)


def watches(upstream_port: int) -> str:
    return f"""
apiVersion: mcpg.dev/v1alpha1
kind: WebhookToken
metadata: {{name: report-token, namespace: {NS}}}
spec: {{secretRef: {{name: report-webhook}}, generate: true}}
---
apiVersion: mcpg.dev/v1alpha1
kind: ResourceWatch
metadata: {{name: daily-report, namespace: {NS}}}
spec:
  uri: report://daily
  mimeType: application/json
  backend: {{http: {{url: "http://127.0.0.1:{upstream_port}/report.json"}}}}
  watch: {{webhook: {{tokenRef: {{name: report-token}}}}}}
---
apiVersion: mcpg.dev/v1alpha1
kind: ResourceWatch
metadata: {{name: service-status, namespace: {NS}}}
spec:
  uri: status://service
  mimeType: application/json
  backend: {{http: {{url: "http://127.0.0.1:{upstream_port}/status.json"}}}}
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


def demo(plane: ControlPlane, envs: Images, logs: Path) -> None:
    install(plane)
    say("Starting the operator as the chart's ServiceAccount (exactly the RBAC the chart grants).")
    # Three gateway replicas: the operator runs a NATS bus for them, so a webhook any pod receives reaches the
    # subscribers of every pod.
    settings = {
        "MCPG_RESYNC_SECONDS": "5",
        "MCPG_GATEWAY_REPLICAS": "3",
        "MCPG_GATEWAY_IMAGE": runtimes.GATEWAY_IMAGE,
        "POD_NAMESPACE": installation.OPERATOR_NAMESPACE,
        "POD_NAME": "mcpg-operator-demo",
    }
    print(f"    {envs.operator.bin_dir / 'mcpg-operator'}   (the operator image's install)", flush=True)
    print(f"    its log: {logs / 'operator.log'}", flush=True)
    with contextlib.ExitStack() as stack:
        operator = OperatorProcess(envs.operator, plane.operator_kubeconfig, logs / "operator.log", settings)
        stack.enter_context(operator).wait_ready()
        plane.kubectl("create", "namespace", NS, check=False)
        site = logs / "site"
        site.mkdir()
        (site / "report.json").write_text('{"report": "daily", "rows": 42}\n')
        (site / "status.json").write_text('{"status": "green"}\n')
        [port] = free_ports(1)
        # The upstream is a stand-in for the user's service, not mcpg: the dev venv's interpreter runs it.
        upstream = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)]
        stack.enter_context(Program(upstream, os.environ))
        client_token = base64.urlsafe_b64encode(os.urandom(24)).decode()
        say(
            "Who may use the gateway: one principal, kept as the SHA-256 of its bearer token "
            "(Secret mcpg-gateway-auth)."
        )
        show(plane, "-n", NS, "apply", "-f", "-", stdin=auth_secret(client_token))
        say(
            f"An upstream on 127.0.0.1:{port} serves report.json and status.json. "
            "Applying a WebhookToken and two watches:"
        )
        show(plane, "apply", "-f", "-", stdin=watches(port))
        served(plane)
        say(
            "The operator rendered the gateway: a Deployment of 3 replicas, its configuration in a Secret, a Service "
            "(sessionAffinity ClientIP), and the namespace's bus credentials. The local kubelet runs each pod as a "
            "real process, Ready once its readiness probe passes."
        )
        plane.kubectl("-n", NS, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={WAIT_S:.0f}s")
        show(plane, "-n", NS, "get", "resourcewatches,webhooktokens,deployments,pods,services,secrets")
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
        print(f"    the Service mcpg-gateway (port http) stands in on {base}", flush=True)
        say(
            "An MCP client subscribes to both resources (protocol 2026-07-28, subscriptions/listen) and, told of a "
            "change, re-reads the resource (resources/read):"
        )
        argv = envs.gateway.command("mcpg-subscribe", f"{base}/mcp", "report://daily", "status://service", "--read")
        print(f"$ mcpg-subscribe {base}/mcp report://daily status://service --read --token <client token>")
        client = stack.enter_context(Program([*argv, "--token", client_token], envs.gateway.environ()))
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
        rotate(plane, base, tok)
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


def rotate(plane: ControlPlane, base: str, old: str) -> None:
    say("Rotating the token by editing its Secret; the WebhookToken's status as the operator writes it:")
    new = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    digest = hashlib.sha256(new.encode()).hexdigest()[:12]
    patch = json.dumps({"stringData": {"token": new}})
    print(f"$ kubectl -n {NS} get webhooktoken report-token --watch   # phase, digests, TokenAccepted, Ready's reason")
    with KubectlWatch(plane, "-n", NS, "webhooktoken", "report-token", template=TOKEN_COLUMNS) as watch:
        start = time.monotonic()
        printer = stamped(start)
        watch.until(lambda f: bool(f.get("phase")), WAIT_S, printer)  # the state before the edit
        print(f'$ kubectl -n {NS} patch secret report-webhook --type merge -p \'{{"stringData":{{"token":"<new>"}}}}\'')
        printer(
            plane.kubectl("-n", NS, "patch", "secret", "report-webhook", "--type", "merge", "-p", patch).stdout.strip()
        )
        both_tokens(base, old, new, "right after the edit")
        # This token's acceptance, not just any: the old token's status is still there right after the edit.
        watch.until(lambda f: f.get("current") == digest and f.get("accepted") == "True", WAIT_S, printer)
        both_tokens(base, old, new, "once the WebhookToken reports the new token accepted")
        watch.until(lambda f: f.get("current") == digest and f.get("phase") == "Ready", WAIT_S, printer)
    plane.kubectl("-n", NS, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={WAIT_S:.0f}s")
    say("Done: the new token is accepted everywhere and the old one is retired.")
    both_tokens(base, old, new, "after the retirement rollout")
    say("Each rollout makes the watches RollingOut until the operator sees it complete; they are Served again:")
    served(plane)


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
    """The demo's running gateway pods -> each one's own address (the local kubelet's record of its host port)."""
    listed = json.loads(plane.kubectl("-n", NS, "get", "pods", "-o", "json").stdout)["items"]
    running = {p["metadata"]["name"] for p in listed if not p["metadata"].get("deletionTimestamp")}
    records = plane.local_pods()
    return {
        name: f"http://127.0.0.1:{records[f'{NS}/{name}']['ports']['8080']}"
        for name in sorted(running)
        if name.startswith("mcpg-gateway-") and f"{NS}/{name}" in records
    }


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
        envs = Images(images.ensure("operator"), images.ensure("gateway"))  # no-ops after `make image-envs`
    except ImageEnvError as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        return 1
    reuse = plane.is_running()
    if reuse:
        say(f"Using the control plane already running in {STATE} (make cluster-up); it stays up afterwards.")
    try:
        if not reuse:
            say("Starting a local Kubernetes control plane: etcd, kube-apiserver, controller-manager, scheduler,")
            print("    kwok for one fake node, and a local kubelet that runs the gateway's pods as real", flush=True)
            print("    processes and stands in for their Services. No Docker, no VM.", flush=True)
            plane.start()
        demo(plane, envs, logs)
    except (ControlPlaneError, ProgramError) as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        print(f"the operator's log: {logs / 'operator.log'}", file=sys.stderr)
        print(f"the control plane's and the pods' logs: {plane.logs_dir}", file=sys.stderr)
        return 1
    finally:
        if reuse:
            plane.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        else:
            plane.stop()
            say(f"Stopped every process the demo started (component and pod logs kept in {plane.logs_dir}).")
    say(f"Demo finished in {time.monotonic() - started:.0f}s. The operator's log: {logs / 'operator.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
