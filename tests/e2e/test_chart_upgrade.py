"""The chart's lifecycle as NOTES.txt and docs/upgrade.md ("Upgrade and removal") tell it: upgrading a 0.1.0 release
to this chart, what `helm uninstall` leaves, and the full removal.

What runs where decides what these tests can prove. The releases' operator images (0.1.0's and this chart's
default, both from a registry) cannot be pulled here, so the release namespace's pods go to kwok's fake node
(`installation.on_kwok`): the chart's operator Deployment rolls out, and nothing runs in it. The operator runs
beside the cluster as processes under the chart's ServiceAccount (the control plane maps the operator's static
token to `mcpg-system/mcpg-operator`, so the release is `mcpg` in `mcpg-system`): it has exactly the RBAC the
installed release grants. The gateways are real pods on the real node, of `mcpg/gateway:local`, this checkout's
gateway image built from its Dockerfile.

`test_the_documented_upgrade_from_0_1_0_...` proves, on one control plane:
- 0.1.0 as released serves a WebhookToken and a ResourceWatch: its chart (`data/mcpg-0.1.0.tgz`, CRDs
  installed by `helm install`) and its operator, built from its sources (`data/mcpg-0.1.0-src.tar.gz`) as its
  Dockerfile builds the image;
- the documented steps (`kubectl apply --server-side --force-conflicts -f <chart>/crds/`, then `helm upgrade`)
  leave every CRD as this chart ships it (printer columns, schemas, and any CRD new in it), and keep the
  custom resources and their Secrets (same uid, same token);
- the upgraded release lets the operator's ServiceAccount do every verb this chart's ClusterRole lists, on
  every resource of every CRD in the chart;
- the gateway rendered by the 0.1.0 operator answers the webhook through its Service after each step, and this
  checkout's operator, started in place of the 0.1.0 one as the Deployment's rollout would replace it, takes
  the old resources over: it rolls the gateway pods once, onto its template (the one configuration Secret they
  follow through the API), keeps the 0.1.0 operator's per-hash configuration Secrets while a ReplicaSet mounts
  one and collects them once none does, and a token rotation begun after the upgrade completes in place, with
  no further rollout.
It does not prove the 0.1.0 images (neither can be pulled here): the 0.1.0 operator runs from its sources'
environment, and the gateway pods run this checkout's gateway image throughout, rendered first by the 0.1.0
operator.

`test_helm_uninstall_...` and `test_the_documented_removal_...` prove what `helm uninstall` leaves (CRDs,
custom resources with a stale Ready, gateways still serving) and that the removal procedure leaves nothing:
no CRD of the `mcpg.dev` group, no object labelled as the operator's or the chart's, no Lease.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_testing import images, installation, oci
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.images import ImageEnv
from mcpg_testing.installation import OPERATOR_NAMESPACE
from mcpg_testing.operators import OperatorReplicas
from mcpg_testing.processes import wait_until

pytestmark = pytest.mark.own_cluster  # each test installs, replaces and deletes cluster-wide CRDs
HERE = Path(__file__).parent
CHART = HERE.parents[1] / "charts" / "mcpg"
# The chart as of commit a6effb1 (0.1.0), made with:
#   git archive a6effb1 charts/mcpg | tar -x -C /tmp/old && helm package /tmp/old/charts/mcpg -d tests/e2e/data
PREVIOUS_CHART = HERE / "data" / "mcpg-0.1.0.tgz"
# What the 0.1.0 operator image was built from (its Dockerfile's COPY sources), made with:
#   git archive --format=tar.gz --prefix=mcpg-0.1.0/ a6effb1 pyproject.toml README.md operator gateway
PREVIOUS_SOURCES = HERE / "data" / "mcpg-0.1.0-src.tar.gz"
RELEASE = "mcpg"  # with OPERATOR_NAMESPACE: the ServiceAccount the operator's token is mapped to
SHOP = "shop"
GROUP = "mcpg.dev"
MANAGED_BY_OPERATOR = "app.kubernetes.io/managed-by=mcpg-operator"
PART_OF_MCPG = "app.kubernetes.io/part-of=mcpg"
BOUND_S = 90.0
"""Rollouts of real gateway pods and a token rotation: the bound of `kubectl wait` in the other e2e tests."""
SETTINGS = {
    "POD_NAMESPACE": OPERATOR_NAMESPACE,
    "MCPG_RESYNC_SECONDS": "5",
    "MCPG_GATEWAY_IMAGE": oci.GATEWAY_IMAGE,  # imported into the node's runtime: run for real
    "MCPG_GATEWAY_IMAGE_PULL_POLICY": "Never",
    # A stopped replica releases the Lease; these bound the takeover if one does not.
    "MCPG_LEADER_ELECTION_LEASE_DURATION_SECONDS": "4",
    "MCPG_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "3",
    "MCPG_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "1",
}
NAMESPACED_KINDS = (
    "deployments,replicasets,pods,services,serviceaccounts,secrets,configmaps,roles,rolebindings,"
    "poddisruptionbudgets,leases"
)


# -- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    """A cluster of this test's own: these tests install, replace and delete CRDs, which are cluster-wide, so
    they must not share the session's."""
    with ControlPlane(tmp_path / "control-plane", die_with_parent=True) as plane:
        yield plane


@pytest.fixture(scope="module")
def previous_operator_env() -> ImageEnv:
    """The 0.1.0 operator image's environment, built once into $MCPG_CACHE from the 0.1.0 sources."""
    cache = Path(os.environ.get("MCPG_CACHE", Path.home() / ".cache" / "mcpg")) / "previous-releases"
    root = cache / "mcpg-0.1.0"
    if not root.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache))
        with tarfile.open(PREVIOUS_SOURCES) as archive:
            archive.extractall(staging, filter="data")
        try:
            (staging / root.name).rename(root)  # atomic: a concurrent session's extraction wins or loses whole
        except OSError:
            assert root.is_dir()
        shutil.rmtree(staging)
    return images.ensure("operator", root)


@pytest.fixture
def current_operator_env(operator_env: ImageEnv) -> ImageEnv:
    return operator_env


# -- helpers --------------------------------------------------------------------------------------------------


def helm(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    argv = [str(plane.binary("helm")), "--kubeconfig", str(plane.kubeconfig), *args]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
    return done.stdout


def get(plane: ControlPlane, *what: str) -> Any:
    return json.loads(plane.kubectl("get", *what, "-o", "json").stdout)


def names(plane: ControlPlane, *what: str) -> set[str]:
    """`kind/name` (with `namespace/` first when namespaced) of every object `kubectl get` lists."""
    items = get(plane, *what)["items"]
    return {"/".join(filter(None, (i["metadata"].get("namespace"), i["kind"], i["metadata"]["name"]))) for i in items}


def shipped_crds() -> dict[str, dict[str, Any]]:
    """Name -> CRD, for each file in this chart's crds/: what the documented upgrade step applies."""
    docs = [yaml.safe_load(path.read_text()) for path in sorted((CHART / "crds").glob("*.yaml"))]
    return {d["metadata"]["name"]: d for d in docs}


def mcpg_crds(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    """Name -> served CRD, for every CRD of the mcpg.dev group."""
    return {c["metadata"]["name"]: c for c in get(plane, "crd")["items"] if c["spec"]["group"] == GROUP}


def install(plane: ControlPlane, chart: Path) -> None:
    """`helm install` of `chart` as the release, its namespace's pods on kwok's node (the images the chart names
    cannot be pulled here: the operator runs as processes, `operators`)."""
    plane.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    installation.on_kwok(plane, OPERATOR_NAMESPACE)
    helm(plane, "install", RELEASE, str(chart), "-n", OPERATOR_NAMESPACE)


def wait_established(plane: ControlPlane, crds: list[str]) -> None:
    plane.kubectl("wait", "--for=condition=Established", *(f"crd/{c}" for c in crds), "--timeout=60s")


def operators(env: ImageEnv, plane: ControlPlane, log: Path) -> OperatorReplicas:
    """One operator replica (the chart's pod) from `env`, leading once `start()` returns."""
    return OperatorReplicas(env, plane.operator_kubeconfig, log, SETTINGS, ["--verbose"], replicas=1)


def serve_a_webhook(plane: ControlPlane) -> None:
    """A WebhookToken the operator generates and a ResourceWatch using it, in SHOP; wait until both are Ready."""
    plane.kubectl("create", "namespace", SHOP)
    token = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "WebhookToken",
        "metadata": {"name": "reports-token", "namespace": SHOP},
        "spec": {"secretRef": {"name": "reports-webhook", "key": "token"}, "generate": True, "gracePeriodSeconds": 0},
    }
    watch = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": "reports", "namespace": SHOP},
        "spec": {
            "uri": "drive://folder/reports",
            "backend": {"http": {"url": "http://127.0.0.1:9/reports"}},  # never read: only webhooks are sent
            "watch": {"webhook": {"tokenRef": {"name": "reports-token"}}},
        },
    }
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([token, watch]))
    ready = ("resourcewatch/reports", "webhooktoken/reports-token")
    plane.kubectl("-n", SHOP, "wait", "--for=condition=Ready", *ready, f"--timeout={BOUND_S:.0f}s")
    plane.kubectl("-n", SHOP, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={BOUND_S:.0f}s")


def webhook_token(plane: ControlPlane) -> str:
    return base64.b64decode(get(plane, "-n", SHOP, "secret", "reports-webhook")["data"]["token"]).decode()


def post_webhook(plane: ControlPlane, token: str) -> tuple[int, dict[str, Any]]:
    """POST the webhook through the gateway's Service, as an upstream would: (status, JSON body)."""
    url = f"{plane.service_url(SHOP, 'mcpg-gateway')}/webhooks/resource-updated/{token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def assert_served(plane: ControlPlane, token: str) -> None:
    assert post_webhook(plane, token) == (200, {"ok": True, "uri": "drive://folder/reports"})


def uids(plane: ControlPlane) -> dict[str, str]:
    objects = ("resourcewatch/reports", "webhooktoken/reports-token", "secret/reports-webhook")
    return {o: get(plane, "-n", SHOP, o)["metadata"]["uid"] for o in objects}


LEGACY_LABEL = "mcpg.dev/config-hash"
"""On the 0.1.0 operator's configuration Secrets, one per content hash (`mcpg-gateway-config-<hash>`)."""


def legacy_secrets(plane: ControlPlane) -> set[str]:
    return {s["metadata"]["name"] for s in get(plane, "-n", SHOP, "secrets", "-l", LEGACY_LABEL)["items"]}


def mounted(workload: dict[str, Any]) -> set[str]:
    """The Secrets a Deployment's or a ReplicaSet's pod template mounts."""
    volumes = workload["spec"]["template"]["spec"].get("volumes") or []
    return {v["secret"]["secretName"] for v in volumes if "secret" in v}


def gateway(plane: ControlPlane) -> dict[str, Any]:
    """What a rollout moves and an in-place change does not: the gateway Deployment's generation, the Secret its
    template mounts as the configuration, its pods (by uid); and the 0.1.0 configuration Secrets there are."""
    deployment = get(plane, "-n", SHOP, "deployment", "mcpg-gateway")
    [config] = [
        v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"
    ]
    listed = get(plane, "-n", SHOP, "pods", "-l", "app.kubernetes.io/name=mcpg-gateway")["items"]
    return {
        "generation": deployment["metadata"]["generation"],
        "config": config,
        "pods": {p["metadata"]["uid"] for p in listed if not p["metadata"].get("deletionTimestamp")},
        "legacy": legacy_secrets(plane),
    }


def ready_status(plane: ControlPlane, what: str) -> str:
    obj = get(plane, "-n", SHOP, what)
    return str(next(c["status"] for c in obj["status"]["conditions"] if c["type"] == "Ready"))


def can_i(plane: ControlPlane, verb: str, resource: str, group: str = "", name: str | None = None) -> bool:
    """Whether the operator's ServiceAccount may `verb` `resource` (a `plural/subresource` included) of `group`
    (the object `name`, for a rule granted by name)."""
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}-operator"
    plural, _, sub = resource.partition("/")
    kind = f"{plural}.{group}" if group else plural
    what = [f"{kind}/{name}" if name else kind, *([f"--subresource={sub}"] if sub else [])]
    result = plane.kubectl("auth", "can-i", verb, *what, f"--as={user}", "--all-namespaces", check=False)
    return result.stdout.strip() == "yes"


def leftovers(plane: ControlPlane) -> set[str]:
    """Everything of mcpg on the control plane: CRDs of its group, objects the operator or the chart labelled,
    and any object in the release's namespace but those every namespace holds."""
    found = {f"CustomResourceDefinition/{name}" for name in mcpg_crds(plane)}
    for selector in (MANAGED_BY_OPERATOR, PART_OF_MCPG):
        found |= names(plane, NAMESPACED_KINDS, "-A", "-l", selector)
        found |= names(plane, "clusterroles,clusterrolebindings", "-l", selector)
    in_release_namespace = names(plane, "-n", OPERATOR_NAMESPACE, NAMESPACED_KINDS)
    return found | {n for n in in_release_namespace if n.partition("/")[2] not in NAMESPACE_DEFAULTS}


NAMESPACE_DEFAULTS = {"ServiceAccount/default", "ConfigMap/kube-root-ca.crt"}
"""What every namespace holds, put there by the control plane."""


def documented_steps(plane: ControlPlane, heading: str) -> list[str]:
    """The commands the release's NOTES.txt prints in the paragraph beginning `heading`."""
    notes = helm(plane, "status", RELEASE, "-n", OPERATOR_NAMESPACE).partition("NOTES:")[2]
    paragraph = next(p for p in notes.split("\n\n") if p.startswith(heading))
    return commands(paragraph)


def commands(paragraph: str) -> list[str]:
    """The paragraph's indented lines, a trailing backslash joining a line to the next."""
    out: list[str] = []
    for line in (line.strip() for line in paragraph.splitlines() if line.startswith("  ")):
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + line
        else:
            out.append(line)
    return out


def run_step(plane: ControlPlane, command: str) -> None:
    """Run one documented command as a user would type it, with this control plane's kubeconfig and binaries."""
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "PATH": f"{plane.bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{command}: {done.stderr}"


# -- tests ----------------------------------------------------------------------------------------------------


def test_the_documented_upgrade_from_0_1_0_replaces_the_crds_and_rbac_and_keeps_resources_and_gateways(
    plane: ControlPlane, previous_operator_env: ImageEnv, current_operator_env: ImageEnv, tmp_path: Path
) -> None:
    install(plane, PREVIOUS_CHART)
    wait_established(plane, ["resourcewatches.mcpg.dev", "webhooktokens.mcpg.dev"])
    log = tmp_path / "operator.log"
    with operators(previous_operator_env, plane, log):
        serve_a_webhook(plane)
        token, before = webhook_token(plane), uids(plane)
        assert_served(plane, token)
        rendered = gateway(plane)
        assert rendered["config"] in rendered["legacy"]  # 0.1.0 mounts an immutable Secret per configuration

        # The documented path. Helm installs crds/ only on install and never upgrades them: this step does.
        run_step(plane, f"kubectl apply --server-side --force-conflicts -f {CHART}/crds/")
        shipped = shipped_crds()
        wait_established(plane, sorted(shipped))
        assert_served(plane, token)
        helm(plane, "upgrade", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE)
        assert_served(plane, token)
        # The steps taken are the ones the upgraded release's NOTES.txt prints.
        assert documented_steps(plane, "Upgrading:") == [
            "kubectl apply --server-side --force-conflicts -f CHART/crds/",
            f"helm upgrade {RELEASE} CHART -n {OPERATOR_NAMESPACE}",
        ]

    # The Deployment's rollout replaces the 0.1.0 replica with this chart's; here its process is this checkout's.
    with operators(current_operator_env, plane, log):
        served = mcpg_crds(plane)
        assert sorted(served) == sorted(shipped)  # a CRD new in this chart is there too
        for name, crd in shipped.items():
            assert served[name]["spec"]["versions"] == crd["spec"]["versions"], name  # columns, schemas

        assert uids(plane) == before
        assert webhook_token(plane) == token
        assert_served(plane, token)

        # One rollout onto this operator's template, and the configuration Secret its pods follow.
        wait_until(lambda: gateway(plane)["generation"] > rendered["generation"], BOUND_S, "this operator's template")
        plane.kubectl("-n", SHOP, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={BOUND_S:.0f}s")
        rolled = gateway(plane)
        assert rolled["generation"] == rendered["generation"] + 1
        assert rolled["config"] == "mcpg-gateway-config"
        assert rolled["pods"].isdisjoint(rendered["pods"])
        assert_served(plane, token)
        # The 0.1.0 configuration Secrets stay while a ReplicaSet (kept for a rollback) mounts one; once none does,
        # they are collected.
        assert rendered["config"] in legacy_secrets(plane)
        legacy = legacy_secrets(plane)
        for rs in get(plane, "-n", SHOP, "replicasets")["items"]:
            if mounted(rs) & legacy:
                plane.kubectl("-n", SHOP, "delete", "replicaset", rs["metadata"]["name"])
        wait_until(lambda: not legacy_secrets(plane), BOUND_S, "the 0.1.0 configuration Secrets to be collected")

        role = next(
            d
            for d in yaml.safe_load_all(helm(plane, "get", "manifest", RELEASE, "-n", OPERATOR_NAMESPACE))
            if d and d["kind"] == "ClusterRole"
        )
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb, name in itertools.product(rule["verbs"], rule.get("resourceNames") or [None]):
                        assert can_i(plane, verb, resource, group, name), (verb, resource, name)
        for crd in shipped.values():
            for verb in ("get", "list", "watch"):
                assert can_i(plane, verb, crd["spec"]["names"]["plural"], GROUP), (verb, crd["metadata"]["name"])

        # The new operator reconciles what the old one made: a rotation begun now completes.
        rotated = "rotated-" + os.urandom(16).hex()
        plane.set_secret_token(SHOP, "reports-webhook", rotated)
        wait_until(lambda: post_webhook(plane, rotated)[0] == 200, BOUND_S, "the rotated token to be served")
        wait_until(lambda: post_webhook(plane, token)[0] == 404, BOUND_S, "the old token to be refused")
        plane.kubectl("-n", SHOP, "wait", "--for=condition=Ready", "webhooktoken/reports-token", "--timeout=90s")
        assert uids(plane) == before
        assert gateway(plane) == {**rolled, "legacy": set()}  # in place: no new template, the same pods


def test_helm_uninstall_leaves_the_crds_the_resources_and_their_gateways_serving(
    plane: ControlPlane, current_operator_env: ImageEnv, tmp_path: Path
) -> None:
    install(plane, CHART)
    wait_established(plane, sorted(mcpg_crds(plane)))
    with operators(current_operator_env, plane, tmp_path / "operator.log"):
        serve_a_webhook(plane)
        token = webhook_token(plane)
        helm(plane, "uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait")
    # The operator's pods (kwok's) went with its Deployment; so have its processes here.

    assert sorted(mcpg_crds(plane)) == sorted(shipped_crds())
    assert (ready_status(plane, "resourcewatch/reports"), ready_status(plane, "webhooktoken/reports-token")) == (
        "True",
        "True",
    )  # stale: nothing reconciles them any more
    gateway = names(plane, "deployments,services,serviceaccounts,secrets", "-n", SHOP, "-l", MANAGED_BY_OPERATOR)
    assert {"shop/Deployment/mcpg-gateway", "shop/Service/mcpg-gateway", "shop/ServiceAccount/mcpg-gateway"} <= gateway
    assert_served(plane, token)
    # Of the release's namespace, only what the operator made itself, outside the chart.
    remaining = names(plane, "-n", OPERATOR_NAMESPACE, NAMESPACED_KINDS)
    assert {n for n in remaining if n.partition("/")[2] not in NAMESPACE_DEFAULTS} == {
        f"{OPERATOR_NAMESPACE}/Lease/{RELEASE}-operator"
    }


def test_the_documented_removal_leaves_nothing_of_mcpg(
    plane: ControlPlane, current_operator_env: ImageEnv, tmp_path: Path
) -> None:
    install(plane, CHART)
    wait_established(plane, sorted(mcpg_crds(plane)))
    steps = documented_steps(plane, "Uninstalling:")
    assert [s.split()[:2] for s in steps[:3]] == [["kubectl", "delete"], ["helm", "uninstall"], ["kubectl", "delete"]]
    with operators(current_operator_env, plane, tmp_path / "operator.log"):
        serve_a_webhook(plane)
        run_step(plane, steps[0])  # the custom resources: the garbage collector removes the gateways they own

        def gateways_gone() -> bool:
            return not names(plane, NAMESPACED_KINDS, "-A", "-l", MANAGED_BY_OPERATOR)

        wait_until(gateways_gone, BOUND_S, "the garbage collector to remove every gateway object")
        run_step(plane, steps[1])  # the release: its pods stop with it (here the operator's processes too)
    for step in steps[2:]:
        run_step(plane, step)

    assert leftovers(plane) == set()
    assert plane.kubectl("api-resources", f"--api-group={GROUP}", "-o", "name").stdout.strip() == ""
