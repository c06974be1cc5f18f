"""`make demo`: mcpg end to end on a local control plane, narrated for a newcomer, then torn down.

Control plane up, CRDs and the chart's RBAC installed, the operator running under that identity, a WebhookToken
and two ResourceWatches (webhook and poll) applied, a gateway process started on the configuration the operator
rendered, an MCP client subscribed, a webhook posted and a poll change made, then a token rotated by editing its
Secret with the old and new tokens tried against each stage's configuration.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import yaml
from controlplane import ControlPlane, ControlPlaneError, free_ports

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".cluster"
NS = "demo"
PY = sys.executable


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def show(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """Run kubectl as the admin and print what it printed, as if typed at a terminal."""
    print(f"$ kubectl {' '.join(args)}", flush=True)
    out = plane.kubectl(*args, stdin=stdin).stdout.rstrip()
    print(out, flush=True)
    return out


class Lines:
    """A child process whose output lines can be awaited with a bound."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # noqa: S603
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip())

    def wait_for(self, text: str, timeout: float) -> str:
        deadline, seen = time.monotonic() + timeout, []
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if text in line:
                return line
            seen.append(line)
        said = "\n      ".join(seen[-15:]) or "(nothing)"
        raise ControlPlaneError(f"waited {timeout:.0f}s for {text!r} from {self.proc.args!r}; it said:\n      {said}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str] | None = None) -> Iterator[Lines]:
    lines = Lines(argv, env)
    try:
        yield lines
    finally:
        lines.stop()


def install(plane: ControlPlane) -> None:
    say("Installing the CRDs and the Helm chart's RBAC (helm template | kubectl apply).")
    show(plane, "apply", "-f", str(ROOT / "crds"))
    plane.kubectl("wait", "--for=condition=Established", "crd/resourcewatches.mcpg.dev", "crd/webhooktokens.mcpg.dev")
    rendered = subprocess.run(  # noqa: S603 - our helm, our chart
        [str(plane.binary("helm")), "template", "mcpg", str(ROOT / "charts/mcpg"), "--namespace", "mcpg-system"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    plane.kubectl("create", "namespace", "mcpg-system", check=False)
    show(plane, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


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
    out = []
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
def gateway(config: bytes, workdir: Path) -> Iterator[str]:
    path = workdir / f"gateway-{time.monotonic_ns()}.yaml"
    path.write_bytes(config)
    argv = [PY, "-m", "mcpg_gateway", "--config", str(path), "--host", "127.0.0.1", "--port", "0", "--admin-port", "0"]
    with running(argv) as gw:
        line = gw.wait_for("serving MCP on", 30)
        yield "http://" + line.split("serving MCP on ")[1].split(",")[0]


def post(base: str, tok: str) -> int:
    return httpx2.post(f"{base}/webhooks/resource-updated/{tok}", timeout=10).status_code


def demo(plane: ControlPlane, work: Path) -> None:
    install(plane)
    say("Starting the operator as the chart's ServiceAccount (exactly the RBAC the chart grants).")
    env = {
        **os.environ,
        "KUBECONFIG": str(plane.operator_kubeconfig),
        "MCPG_RESYNC_SECONDS": "5",
        "MCPG_GATEWAY_REPLICAS": "2",
    }
    with contextlib.ExitStack() as stack:
        operator = stack.enter_context(running([PY, "-m", "mcpg_operator"], env))
        plane.kubectl("create", "namespace", NS, check=False)
        site = work / "site"
        site.mkdir()
        (site / "report.json").write_text('{"report": "daily", "rows": 42}\n')
        (site / "status.json").write_text('{"status": "green"}\n')
        [port] = free_ports(1)
        stack.enter_context(
            running([PY, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)])
        )
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
        base = stack.enter_context(gateway(current_config(plane), work))
        print(f"    gateway at {base}", flush=True)
        say("An MCP client subscribes to both resources (protocol 2026-07-28, subscriptions/listen):")
        argv = [PY, "-m", "mcpg_gateway.subscribe_cli", f"{base}/mcp", "report://daily", "status://service"]
        client = stack.enter_context(running([*argv, "--token", client_token]))
        print("    " + client.wait_for("listening", 30), flush=True)
        tok = token(plane)
        say("The report's upstream posts the webhook, with the token the operator generated:")
        print(f"    POST /webhooks/resource-updated/<token> -> HTTP {post(base, tok)}", flush=True)
        print("    client: " + client.wait_for("report://daily", 10), flush=True)
        say("The status changes upstream; the poll (every 10 s, the floor) notices the new SHA-256:")
        (site / "status.json").write_text('{"status": "amber"}\n')
        print("    client: " + client.wait_for("status://service", 25), flush=True)
        rotate(plane, tok, work)
    operator.stop()


def rotate(plane: ControlPlane, old: str, work: Path) -> None:
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
        with gateway(config, work) as base:
            old_status, new_status = post(base, old), post(base, new)
            print(
                f"    revision {revision}: old token -> HTTP {old_status}, new token -> HTTP {new_status}", flush=True
            )


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="    %(message)s", stream=sys.stdout)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # its request log would print webhook tokens
    started = time.monotonic()
    plane = ControlPlane(STATE)
    reuse = plane.is_running()
    if reuse:
        say(f"Using the control plane already running in {STATE} (make cluster-up); it stays up afterwards.")
    try:
        if not reuse:
            say("Starting a local Kubernetes control plane: etcd, kube-apiserver, controller-manager, scheduler,")
            print("    and kwok, which plays the kubelet of one fake node. No Docker, no VM.", flush=True)
            plane.start()
        with tempfile.TemporaryDirectory(prefix="mcpg-demo-") as tmp:
            demo(plane, Path(tmp))
    except ControlPlaneError as e:
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
