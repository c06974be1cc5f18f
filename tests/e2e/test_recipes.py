"""The docs' recipes run as written, on the operator installed by helm and its gateway's real pods.

Each recipe is read from the page a user copies it from (`mcpg_testing.recipes`: the block marked as run by the
test), run by bash with the cluster's kubectl on PATH and a kubeconfig whose context names the test's namespace, as
a user's shell would have, and judged by its exit status, what it printed and what it made true.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from mcpg_testing import recipes
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.images import ImageEnv
from mcpg_testing.pods import apply, gateway_pods, serving_everywhere
from mcpg_testing.processes import WaitTimeout, wait_until
from mcpg_testing.release import OperatorRelease

ROOT = Path(__file__).parents[2]
REPLICAS = 3
"""The session's chart values render three gateway replicas: every one must take the new token."""
BOUND_S = 150.0
"""Bound on a new namespace's gateway pods all serving its first configuration (real pods on 2 busy cores)."""
RECIPE_S = 300.0
"""Bound on a recipe's commands (its own waits have bounds of their own, kubectl's default of 30 s or as written)."""
TOLD_S = 60.0
"""Bound on a subscribed client printing what a webhook told it, and the content it re-read."""


def shell(plane: ControlPlane, namespace: str, home: Path) -> dict[str, str]:
    """A user's shell: the cluster's kubectl first on PATH, a kubeconfig whose current context is `namespace`."""
    kubeconfig = home / "kubeconfig"
    kubeconfig.write_text(plane.kubeconfig.read_text())
    env = {**os.environ, "PATH": f"{plane.bin_dir}:{os.environ['PATH']}", "KUBECONFIG": str(kubeconfig)}
    env["HOME"] = str(home)  # kubectl's discovery cache, the user's own
    subprocess.run(["kubectl", "config", "set-context", "--current", f"--namespace={namespace}"], env=env, check=True)
    return env


def run(block: recipes.Block, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return recipes.run(block, cwd=ROOT, env=env, timeout=RECIPE_S)


def example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "manifests" / name).read_text())
    return loaded


def webhook_watch(token: str) -> dict[str, Any]:
    """A ResourceWatch told by the example WebhookToken's webhook (its backend is never read here)."""
    spec = {"uri": "recipe://reports", "backend": {"http": {"url": "http://127.0.0.1:9/unused"}}}
    spec["watch"] = {"webhook": {"tokenRef": {"name": token}}}
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": "reports"}, "spec": spec}


def token_in(plane: ControlPlane, namespace: str, secret: str) -> str:
    found = json.loads(plane.kubectl("-n", namespace, "get", "secret", secret, "-o", "json").stdout)
    return base64.b64decode(found["data"]["token"]).decode()


def test_rotation_recipe_as_written(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str, tmp_path: Path
) -> None:
    rotate, look = recipes.run_by("tests/e2e/test_recipes.py::test_rotation_recipe_as_written")
    token = example("webhooktoken.yaml")
    secret = token["spec"]["secretRef"]["name"]
    apply(control_plane, namespace, token, webhook_watch(token["metadata"]["name"]))
    control_plane.kubectl(
        "-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/reports", f"--timeout={BOUND_S:.0f}s"
    )
    wait_until(lambda: serving_everywhere(control_plane, namespace, REPLICAS) is not None, BOUND_S, "every pod")
    old = token_in(control_plane, namespace, secret)
    env = shell(control_plane, namespace, tmp_path)

    rotated = run(rotate, env)
    # The moment the recipe's wait returns, a sender switches: every pod must take the new token at once.
    new = token_in(control_plane, namespace, secret)
    pods = gateway_pods(control_plane, namespace)
    with httpx2.Client(timeout=10) as http:
        answers = {pod: http.post(f"{url}/webhooks/resource-updated/{new}").status_code for pod, url in pods.items()}

    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.splitlines() == rotate.printed()
    assert new != old
    assert len(answers) == REPLICAS
    assert answers == dict.fromkeys(pods, 200)

    shown = run(look, env)
    assert shown.returncode == 0, shown.stderr
    # What a user sees: the table's columns and the Events named in the page (values differ run to run).
    assert shown.stdout.splitlines()[0].split() == look.printed()[0].split()
    assert {"TokenPromoted", "TokenAccepted"} <= {line.split()[0] for line in shown.stdout.splitlines() if line}


QUICKSTART = "tests/e2e/test_recipes.py::test_local_cluster_quickstart_as_written"


def listening(printed: Path) -> None:
    """Once the client says it listens; else what it printed instead (a refusal is one line and its exit)."""
    try:
        wait_until(lambda: "listening" in printed.read_text(), TOLD_S, "the client to listen", 0.1)
    except WaitTimeout:
        raise AssertionError(f"the client never listened; it printed:\n{printed.read_text()}") from None


@pytest.fixture
def shop(control_plane: ControlPlane) -> Iterator[str]:
    """The quickstart's own namespace, as it names it, removed afterwards."""
    yield "shop"
    control_plane.kubectl("delete", "namespace", "shop", "--ignore-not-found", "--wait=false", check=False)


def test_local_cluster_quickstart_as_written(
    control_plane: ControlPlane, operator: OperatorRelease, gateway_env: ImageEnv, shop: str, tmp_path: Path
) -> None:
    """docs/getting-started/local-cluster.md's first watch: its upstream answers, its client is told and reads.

    The client runs from the gateway image's install: `.venv/bin/` in the page is `.venv-gateway/bin/` here."""
    setup, subscribe, post = recipes.run_by(QUICKSTART)
    env = shell(control_plane, "default", tmp_path)
    said = tmp_path / "said"
    # What the setup's shell defined, handed to the "other terminal" and to the next step, as a user's would be.
    remembered = setup.script() + f'\nprintf "%s\\n" "$CLIENT_TOKEN" "$GATEWAY" > {said}'
    done = run(recipes.Block(setup.path, setup.line, "bash", setup.marker, remembered), env)
    assert done.returncode == 0, done.stdout + done.stderr
    client_token, gateway = said.read_text().split()
    env |= {"CLIENT_TOKEN": client_token, "GATEWAY": gateway}

    printed = tmp_path / "client.out"
    script = subscribe.script().replace(".venv/bin/", f"{gateway_env.bin_dir}/")
    with printed.open("w") as out:
        client = subprocess.Popen(
            ["bash", "-c", script], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        listening(printed)
        posted = run(post, env)
        assert posted.returncode == 0, posted.stderr
        assert json.loads(posted.stdout) == {"ok": True, "uri": "report://daily"}
        wait_until(lambda: "read: " in printed.read_text(), TOLD_S, "the client to be told and to read", 0.1)
    finally:
        os.killpg(client.pid, signal.SIGTERM)  # the shell and the client it started: the other terminal's ^C
        client.wait(timeout=30)
    lines = printed.read_text().splitlines()
    assert "notifications/resources/updated report://daily" in lines, lines
    [read] = [line for line in lines if line.strip().startswith("read: ")]
    assert json.loads(read.strip().removeprefix("read: ")) == {"report": "daily", "rows": 42}


def tables(lines: list[str]) -> list[list[str]]:
    """`kubectl get`'s output as its tables (blank lines between them), each a header and rows."""
    found: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            found[-1].append(line)
        elif found[-1]:
            found.append([])
    return [t for t in found if t]


def test_kubernetes_guide_transcript_as_written(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str, tmp_path: Path
) -> None:
    """docs/guides/kubernetes.md's first transcript, command by command, in a namespace with an auth Secret (as the
    page says). What each command printed is the page's, line for line where nothing varies (apply, wait); for
    `kubectl get`, the same columns, and every object the page lists (ages, digests, addresses and the replicas
    the chart's values render vary, and a gateway of several replicas has a bus Secret more)."""
    [transcript] = recipes.run_by("tests/e2e/test_recipes.py::test_kubernetes_guide_transcript_as_written")
    auth = {"principals": [{"principal_id": "me", "token_sha256": "0" * 64}]}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mcpg-gateway-auth"}}
    apply(control_plane, namespace, secret | {"stringData": {"auth.yaml": json.dumps(auth)}})
    env = shell(control_plane, namespace, tmp_path)

    for command, page in transcript.steps():
        ran = run(recipes.Block(transcript.path, transcript.line, "bash", None, command), env)
        assert ran.returncode == 0, f"{command}: {ran.stderr}"
        said = ran.stdout.splitlines()
        if not command.startswith("kubectl get"):
            assert said == page, command
            continue
        shown, written = tables(said), tables(page)
        assert [t[0].split() for t in shown] == [t[0].split() for t in written], command
        for table_shown, table_written in zip(shown, written, strict=True):
            names = {row.split()[0] for row in table_shown[1:]}
            assert {row.split()[0] for row in table_written[1:]} <= names, command
