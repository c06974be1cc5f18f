"""Each image starts and works from its own install: what is tested is what ships.

No Docker engine runs here, so each image's environment is built by its Dockerfile's own install steps
(`mcpg_testing.images`: `.venv-operator`, `.venv-gateway`). The first release's operator image could not start
(`import mcpg_operator.handlers`: No module named 'mcp') while every tier passed in the all-extras dev venv,
and the image test only ran `--help`. So the programs here run from the image envs against real peers: the
gateway serves the standalone quickstart (docs/getting-started/standalone.md) to a real MCP client, and the
operator reconciles a ResourceWatch on a real control plane. Only the clients and kubectl run from the dev venv.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import secrets
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from mcpg_testing import images, oci, programs
from mcpg_testing.clients import legacy_client, listen_client, subscribe
from mcpg_testing.images import ImageEnv

ROOT = images.REPO
QUICKSTART = ROOT / "examples" / "gateway" / "quickstart.yaml"
REPORT_URI = "report://daily"  # the quickstart's webhook-watched resource: no upstream read to subscribe
BOOTSTRAP = frozenset({"pip", "setuptools"})
"""What `python -m venv` puts in every env (the image's too) before the install line runs."""
ABSENT = {
    "gateway": ["kopf", "kubernetes_asyncio"],
    "operator": ["mcp", "starlette", "uvicorn", "asyncpg", "nats"],
}
"""Import names each image must not carry: the other image's dependencies."""
READY_BOUND = "90s"
DISTRIBUTION = canonicalize_name(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"])


def run(image: ImageEnv, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command from the image env, outside the source tree (the checkout must not be importable)."""
    return subprocess.run(
        image.command(*argv), capture_output=True, text=True, timeout=120, env=image.environ(), cwd=cwd, check=False
    )


def env_for(component: str, gateway_env: ImageEnv, operator_env: ImageEnv) -> ImageEnv:
    return {"gateway": gateway_env, "operator": operator_env}[component]


# --- what each environment holds ------------------------------------------------------------------------------


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_each_dockerfile_installs_its_own_extra_and_runs_its_program_as_a_non_root_user(component: str) -> None:
    dockerfile = images.dockerfile(component)
    text = dockerfile.read_text()

    assert images.read_recipe(dockerfile).extra == component
    assert re.search(r"^USER 65532:65532$", text, re.M), "the image must run as a non-root user"
    assert re.search(rf"^ENTRYPOINT \[\"mcpg-{component}\"\]$", text, re.M)


def installed(image: ImageEnv) -> dict[NormalizedName, importlib.metadata.Distribution]:
    [site] = image.path.glob("lib/python*/site-packages")
    return {canonicalize_name(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=[str(site)])}


def requirement_closure(dists: dict[NormalizedName, importlib.metadata.Distribution], extra: str) -> set[str]:
    """What the project with `extra` needs, transitively, by the requirements the installed metadata states."""
    needed: set[tuple[NormalizedName, frozenset[str]]] = set()
    todo = [(DISTRIBUTION, frozenset({extra}))]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in needed:
            continue
        needed.add((name, extras))
        for line in dists[name].requires or []:
            req = Requirement(line)
            markers = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(m) for m in markers):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {name for name, _ in needed}


def editable(dist: importlib.metadata.Distribution) -> bool:
    direct_url = dist.read_text("direct_url.json")  # PEP 610: how pip installed it
    return bool(direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"))


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_each_image_env_holds_the_built_wheel_and_exactly_its_extras_dependencies(
    component: str, gateway_env: ImageEnv, operator_env: ImageEnv, tmp_path: Path
) -> None:
    image = env_for(component, gateway_env, operator_env)
    dists = installed(image)

    assert set(dists) - BOOTSTRAP == requirement_closure(dists, component)
    assert not editable(dists[DISTRIBUTION]), "the project must be the built wheel, not an editable install"
    package = f"mcpg_{component}"
    where = run(image, "python", "-c", f"import {package}; print({package}.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(image.path), where.stderr
    checked = run(image, "python", "-m", "pip", "check", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_neither_image_carries_the_other_images_dependencies(
    component: str, gateway_env: ImageEnv, operator_env: ImageEnv, tmp_path: Path
) -> None:
    image = env_for(component, gateway_env, operator_env)
    probe = "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])"

    found = run(image, "python", "-c", probe, *ABSENT[component], cwd=tmp_path)

    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]", f"the {component} image carries {found.stdout.strip()}"
    # The stdlib `operator` module is intact in the installed layout, too.
    assert run(image, "python", "-c", "import operator; operator.itemgetter", cwd=tmp_path).returncode == 0


# --- the gateway image serves the standalone quickstart -------------------------------------------------------


@pytest.fixture
def webhook_token() -> str:
    return secrets.token_urlsafe(32)


@pytest.fixture
def quickstart(gateway_env: ImageEnv, webhook_token: str, tmp_path: Path) -> Iterator[programs.GatewayProcess]:
    """`mcpg-gateway --config examples/gateway/quickstart.yaml`, as the standalone page runs it, on free ports."""
    environ = {"QUICKSTART_WEBHOOK_TOKEN": webhook_token, "MCPG_ADMIN_TOKEN": "quickstart-admin"}
    with programs.gateway(gateway_env, QUICKSTART, environ, cwd=tmp_path) as gateway:
        yield gateway


async def test_the_gateway_image_serves_the_quickstart_and_notifies_clients_of_both_eras_after_a_webhook(
    quickstart: programs.GatewayProcess, webhook_token: str
) -> None:
    async with (
        legacy_client(quickstart.mcp_url) as legacy,
        listen_client(quickstart.mcp_url, [REPORT_URI]) as listening,
        httpx2.AsyncClient() as http,
    ):
        await subscribe(legacy, REPORT_URI)

        posted = await http.post(f"{quickstart.base}/webhooks/resource-updated/{webhook_token}")

        assert posted.status_code == 200
        assert posted.json() == {"ok": True, "uri": REPORT_URI}
        assert await legacy.next_update() == REPORT_URI
        assert await listening.next_update() == REPORT_URI


# --- the operator image starts and reconciles on a real control plane -----------------------------------------


def test_the_operator_image_imports_its_handlers(operator_env: ImageEnv, tmp_path: Path) -> None:
    imported = run(operator_env, "python", "-c", "import mcpg_operator.handlers", cwd=tmp_path)

    assert imported.returncode == 0, imported.stderr


# --- the images as built from the Dockerfiles ------------------------------------------------------------------

POD_USER = "65532:65532"
"""The runAsUser and runAsGroup the operator and the chart render."""
IMAGE_PROGRAM = {
    "gateway": ["mcpg-gateway", "--help"],
    "operator": ["python", "-c", "import mcpg_operator.handlers"],
}


def buildah(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(oci.buildah_command(*args), capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_each_image_built_from_its_dockerfile_runs_its_program_as_the_pod_user_without_the_others_dependencies(
    component: str,
) -> None:
    """The archive the node imports (`mcpg_testing.oci`), its filesystem run by buildah, not by containerd."""
    [archive] = oci.ensure([component]).values()
    created = buildah("from", "--quiet", f"docker-archive:{archive}")
    assert created.returncode == 0, created.stderr
    container = created.stdout.strip()
    try:
        config = json.loads(buildah("inspect", "--type", "container", container).stdout)["OCIv1"]["config"]
        ran = buildah("run", "--user", POD_USER, container, "--", *IMAGE_PROGRAM[component])
        probe = "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])"
        found = buildah("run", "--user", POD_USER, container, "--", "python", "-c", probe, *ABSENT[component])
    finally:
        buildah("rm", container)

    assert config["User"] == POD_USER
    assert config["Entrypoint"] == [f"mcpg-{component}"]
    assert ran.returncode == 0, ran.stderr
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]", f"the {component} image carries {found.stdout.strip()}"
