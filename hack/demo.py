"""`make demo`: mcpg end to end on a local control plane, narrated for a newcomer, then torn down.

Control plane up, CRDs and the chart's RBAC installed, the operator running under that identity, a WebhookToken
and two ResourceWatches (webhook and poll) applied, a gateway process started on the configuration the operator
rendered, an MCP client subscribed, a webhook posted and a poll change made, then a token rotated by editing its
Secret with the old and new tokens tried against each stage's configuration.

The operator, the gateway and `mcpg-subscribe` run from their images' environments (`.venv-operator`,
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import yaml

from mcpg_testing import images, installation
from mcpg_testing.controlplane import ControlPlane, ControlPlaneError
from mcpg_testing.images import ImageEnv, ImageEnvError
from mcpg_testing.processes import free_ports
from mcpg_testing.programs import OperatorProcess, Program, ProgramError, gateway

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


def rendered_configs(plane: ControlPlane) -> list[tuple[int, bytes]]:
    """Each ReplicaSet's configuration, oldest revision first."""
    rs = json.loads(plane.kubectl("-n", NS, "get", "replicasets", "-o", "json").stdout)["items"]
    out: list[tuple[int, bytes]] = []
    for item in rs:
        revision = int(item["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
        [vol] = [v for v in item["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
        secret = json.loads(plane.kubectl("-n", NS, "get", "secret", vol["secret"]["secretName"], "-o", "json").stdout)
        out.append((revision, base64.b64decode(secret["data"]["gateway.yaml"])))
    return sorted(out)


def current_config(plane: ControlPlane) -> bytes:
    dep = json.loads(plane.kubectl("-n", NS, "get", "deployment", "mcpg-gateway", "-o", "json").stdout)
    [vol] = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    secret = json.loads(plane.kubectl("-n", NS, "get", "secret", vol["secret"]["secretName"], "-o", "json").stdout)
    return base64.b64decode(secret["data"]["gateway.yaml"])


def token(plane: ControlPlane) -> str:
    secret = json.loads(plane.kubectl("-n", NS, "get", "secret", "report-webhook", "-o", "json").stdout)
    return base64.b64decode(secret["data"]["token"]).decode()


@contextlib.contextmanager
def serving(image: ImageEnv, config: bytes, workdir: Path) -> Iterator[str]:
    """A gateway from its image env on `config`; yields its base URL."""
    path = workdir / f"gateway-{time.monotonic_ns()}.yaml"
    path.write_bytes(config)
    with gateway(image, path) as gw:
        yield gw.base


def post(base: str, tok: str) -> int:
    return httpx2.post(f"{base}/webhooks/resource-updated/{tok}", timeout=10).status_code


def demo(plane: ControlPlane, envs: Images, work: Path) -> None:
    install(plane)
    say("Starting the operator as the chart's ServiceAccount (exactly the RBAC the chart grants).")
    settings = {"MCPG_RESYNC_SECONDS": "5", "MCPG_GATEWAY_REPLICAS": "2"}
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
            "The operator rendered the gateway: a Deployment rolled out on the fake node, "
            "its configuration in a Secret."
        )
        show(plane, "-n", NS, "get", "resourcewatches,webhooktokens,deployments,secrets")
        say(
            "kwok runs no containers, so a real gateway process starts on the exact configuration "
            "the operator rendered."
        )
        base = stack.enter_context(serving(envs.gateway, current_config(plane), work))
        print(f"    gateway at {base}", flush=True)
        say("An MCP client subscribes to both resources (protocol 2026-07-28, subscriptions/listen):")
        argv = envs.gateway.command("mcpg-subscribe", f"{base}/mcp", "report://daily", "status://service")
        client = stack.enter_context(Program([*argv, "--token", client_token], envs.gateway.environ()))
        print("    " + client.wait_for("listening", 30), flush=True)
        tok = token(plane)
        say("The report's upstream posts the webhook, with the token the operator generated:")
        print(f"    POST /webhooks/resource-updated/<token> -> HTTP {post(base, tok)}", flush=True)
        print("    client: " + client.wait_for("report://daily", 10), flush=True)
        say("The status changes upstream; the poll (every 10 s, the floor) notices the new SHA-256:")
        (site / "status.json").write_text('{"status": "amber"}\n')
        print("    client: " + client.wait_for("status://service", 25), flush=True)
        rotate(plane, envs.gateway, tok, work)


def rotate(plane: ControlPlane, image: ImageEnv, old: str, work: Path) -> None:
    say("Rotating the token by editing its Secret:")
    new = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    patch = json.dumps({"stringData": {"token": new}})
    print(f'$ kubectl -n {NS} patch secret report-webhook --type merge -p \'{{"stringData":{{"token":"<new>"}}}}\'')
    print(plane.kubectl("-n", NS, "patch", "secret", "report-webhook", "--type", "merge", "-p", patch).stdout.rstrip())
    show(plane, "-n", NS, "get", "webhooktokens")
    # Wait for this token, not just any Ready: the old token's Ready status is still there right after the edit.
    digest = hashlib.sha256(new.encode()).hexdigest()[:12]
    for condition in (f"jsonpath={{.status.currentDigest}}={digest}", "jsonpath={.status.phase}=Ready"):
        plane.kubectl("-n", NS, "wait", f"--for={condition}", "webhooktoken/report-token", "--timeout=90s")
    plane.kubectl("-n", NS, "rollout", "status", "deployment/mcpg-gateway", "--timeout=90s")
    say("Done: the new token is accepted everywhere and the old one is retired.")
    show(plane, "-n", NS, "get", "webhooktokens")
    columns = "custom-columns=REASON:.reason,MESSAGE:.message"
    show(plane, "-n", NS, "get", "events", "--field-selector", "involvedObject.kind=WebhookToken", "-o", columns)
    say("Each stage's exact configuration (one per ReplicaSet), served by a real gateway; both tokens tried:")
    for revision, config in rendered_configs(plane):
        with serving(image, config, work) as base:
            old_status, new_status = post(base, old), post(base, new)
            print(
                f"    revision {revision}: old token -> HTTP {old_status}, new token -> HTTP {new_status}", flush=True
            )


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
            print("    and kwok, which plays the kubelet of one fake node. No Docker, no VM.", flush=True)
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
