"""`make demo`: mcpg end to end on a local control plane, narrated for a newcomer, then torn down.

Control plane up, CRDs and the chart's RBAC installed, the operator running under that identity, a WebhookToken
and two ResourceWatches (webhook and poll) applied, the gateway Deployment the operator rendered (3 replicas,
sharing the NATS bus the operator runs) run as real pods by the local kubelet, an MCP client subscribed through
the gateway's Service, a webhook posted to each pod in turn and a poll change made, then a token rotated by
editing its Secret, with the old and new tokens posted through the Service at each stage of the rotation.

The operator, the gateway pods and `mcpg-subscribe` run from their images' environments (`.venv-operator`,
`.venv-gateway`: `mcpg_testing.images`), so the demo shows what the images ship, not the dev venv.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
import yaml

from mcpg_testing import images, installation, runtimes
from mcpg_testing.controlplane import ControlPlane, ControlPlaneError
from mcpg_testing.images import ImageEnv, ImageEnvError
from mcpg_testing.processes import free_ports
from mcpg_testing.programs import OperatorProcess, Program, ProgramError

ROOT = images.REPO
STATE = ROOT / ".cluster"
NS = "demo"


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


def demo(plane: ControlPlane, envs: Images, work: Path) -> None:
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
    with contextlib.ExitStack() as stack:
        operator = OperatorProcess(envs.operator, plane.operator_kubeconfig, work / "operator.log", settings)
        stack.enter_context(operator).wait_ready()
        plane.kubectl("create", "namespace", NS, check=False)
        site = work / "site"
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
        plane.kubectl(
            "-n",
            NS,
            "wait",
            "--for=condition=Ready",
            "resourcewatch/daily-report",
            "resourcewatch/service-status",
            "--timeout=90s",
        )
        say(
            "The operator rendered the gateway: a Deployment of 3 replicas, its configuration in a Secret, a Service "
            "(sessionAffinity ClientIP), and the namespace's bus credentials. The local kubelet runs each pod as a "
            "real process, Ready once its readiness probe passes."
        )
        plane.kubectl("-n", NS, "rollout", "status", "deployment/mcpg-gateway", "--timeout=90s")
        show(plane, "-n", NS, "get", "resourcewatches,webhooktokens,deployments,pods,services,secrets")
        say("The bus the gateways share: one NATS server (JetStream) beside the operator, an account per namespace.")
        plane.kubectl(
            "-n", installation.OPERATOR_NAMESPACE, "rollout", "status", "deployment/mcpg-bus", "--timeout=90s"
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
        say("An MCP client subscribes to both resources (protocol 2026-07-28, subscriptions/listen):")
        argv = envs.gateway.command("mcpg-subscribe", f"{base}/mcp", "report://daily", "status://service")
        client = stack.enter_context(Program([*argv, "--token", client_token], envs.gateway.environ()))
        print("    " + client.wait_for("listening", 30), flush=True)
        tok = token(plane)
        say("The report's upstream posts the webhook to each pod in turn (as a load balancer spreads senders):")
        for pod, pod_base in pods(plane).items():
            print(f"    POST {pod} /webhooks/resource-updated/<token> -> HTTP {post(pod_base, tok)}", flush=True)
            print("    client: " + client.wait_for("report://daily", 10), flush=True)
        say("The status changes upstream; the poll (every 10 s, the floor) notices the new SHA-256:")
        (site / "status.json").write_text('{"status": "amber"}\n')
        print("    client: " + client.wait_for("status://service", 25), flush=True)
        rotate(plane, base, tok)


def rotate(plane: ControlPlane, base: str, old: str) -> None:
    say("Rotating the token by editing its Secret:")
    new = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    patch = json.dumps({"stringData": {"token": new}})
    print(f'$ kubectl -n {NS} patch secret report-webhook --type merge -p \'{{"stringData":{{"token":"<new>"}}}}\'')
    print(plane.kubectl("-n", NS, "patch", "secret", "report-webhook", "--type", "merge", "-p", patch).stdout.rstrip())
    both_tokens(base, old, new, "right after the edit")
    # Wait for this token, not just any Ready: the old token's Ready status is still there right after the edit.
    digest = hashlib.sha256(new.encode()).hexdigest()[:12]
    accepted = f"jsonpath={{.status.currentDigest}}={digest}"
    plane.kubectl("-n", NS, "wait", f"--for={accepted}", "webhooktoken/report-token", "--timeout=90s")
    plane.kubectl("-n", NS, "wait", "--for=condition=TokenAccepted", "webhooktoken/report-token", "--timeout=90s")
    both_tokens(base, old, new, "once the WebhookToken reports the new token accepted")
    retired = "--for=jsonpath={.status.phase}=Ready"
    plane.kubectl("-n", NS, "wait", retired, "webhooktoken/report-token", "--timeout=90s")
    plane.kubectl("-n", NS, "rollout", "status", "deployment/mcpg-gateway", "--timeout=90s")
    say("Done: the new token is accepted everywhere and the old one is retired.")
    show(plane, "-n", NS, "get", "webhooktokens")
    both_tokens(base, old, new, "after the retirement rollout")
    columns = "custom-columns=REASON:.reason,MESSAGE:.message"
    show(plane, "-n", NS, "get", "events", "--field-selector", "involvedObject.kind=WebhookToken", "-o", columns)


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


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="    %(message)s", stream=sys.stdout)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # its request log would print webhook tokens
    started = time.monotonic()
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
        with tempfile.TemporaryDirectory(prefix="mcpg-demo-") as tmp:
            demo(plane, envs, Path(tmp))
    except (ControlPlaneError, ProgramError) as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        return 1
    finally:
        if reuse:
            plane.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        else:
            plane.stop()
            say(f"Stopped every process the demo started (component logs kept in {plane.logs_dir}).")
    say(f"Demo finished in {time.monotonic() - started:.0f}s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
