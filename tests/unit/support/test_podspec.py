"""The local kubelet's reading of a pod: what a container runs, with which environment, files and ports."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpg_operator import objects
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing import podspec
from mcpg_testing.podspec import ConfigError

POD_DIR = Path("/pods/ns_p")


def secret(**data: str) -> dict[str, Any]:
    return {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def rendered_pod(**defaults: Any) -> dict[str, Any]:
    """A pod of the gateway Deployment exactly as the operator renders it."""
    dep = objects.deployment("ns", "a" * 64, GatewayDefaults(**defaults), [])
    template = dep["spec"]["template"]
    return {
        "metadata": {"name": "gw-1", "namespace": "ns", "uid": "u-1", **template["metadata"]},
        "spec": template["spec"],
    }


def build(pod: dict[str, Any], objects_: dict[tuple[str, str], dict[str, Any]] | None = None) -> podspec.Launch:
    spec = podspec.container(pod)
    ports = {int(p["containerPort"]): 40000 + i for i, p in enumerate(spec.get("ports", []))}
    return podspec.build(pod, spec, POD_DIR, ports, lambda k, n: (objects_ or {}).get((k, n)), ["--default"])


def test_the_rendered_gateway_reads_its_config_from_the_pods_secret_volume_on_mapped_ports() -> None:
    pod = rendered_pod()
    config = objects.config_secret_name("a" * 64)
    launch = build(pod, {("Secret", config): secret(**{"gateway.yaml": "mcp: {}"})})
    volume = POD_DIR / "volumes" / "config"
    assert launch.uses_image_entrypoint
    assert launch.command == ["--config", f"{volume}/gateway.yaml", "--port", "40000", "--admin-port", "40001"]
    assert launch.files == {volume / "gateway.yaml": (b"mcp: {}", 0o440)}
    assert launch.env["HOSTNAME"] == "gw-1"
    assert podspec.resolve_port("http", launch) == 40000
    assert podspec.resolve_port(9090, launch) == 40001


def test_a_path_outside_every_mount_is_left_alone_so_a_wrong_mount_path_reads_nothing() -> None:
    pod = rendered_pod()
    pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = "/etc/mcpg-config"
    config = objects.config_secret_name("a" * 64)
    launch = build(pod, {("Secret", config): secret(**{"gateway.yaml": "x"})})
    assert launch.command[:2] == ["--config", "/etc/mcpg/gateway.yaml"]


def test_secret_and_field_references_are_resolved_and_a_missing_required_key_is_named() -> None:
    pod = rendered_pod(admin_token_secret="admin")
    spec = podspec.container(pod)
    spec["env"] += [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NEEDED", "valueFrom": {"secretKeyRef": {"name": "admin", "key": "other"}}},
        {"name": "BOTH", "value": "$(POD)-x-$$(POD)"},
    ]
    config = objects.config_secret_name("a" * 64)
    found = {("Secret", config): secret(**{"gateway.yaml": "x"}), ("Secret", "admin"): secret(token="t", other="o")}
    launch = build(pod, found)
    assert (launch.env["MCPG_ADMIN_TOKEN"], launch.env["POD"], launch.env["NEEDED"]) == ("t", "gw-1", "o")
    assert launch.env["BOTH"] == "gw-1-x-$(POD)"
    del found[("Secret", "admin")]
    with pytest.raises(ConfigError, match="env NEEDED: secret 'admin' not found"):
        build(pod, found)


def test_an_optional_missing_secret_leaves_the_variable_unset() -> None:
    pod = rendered_pod(admin_token_secret="admin")
    config = objects.config_secret_name("a" * 64)
    launch = build(pod, {("Secret", config): secret(**{"gateway.yaml": "x"})})
    assert "MCPG_ADMIN_TOKEN" not in launch.env


def test_a_missing_volume_secret_is_a_container_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="volume 'config': secret 'mcpg-gateway-config-aaaaaaaaaaaaaaaa' not found"):
        build(rendered_pod())


def test_a_container_command_replaces_the_image_entrypoint_and_its_default_args() -> None:
    pod = rendered_pod()
    spec = podspec.container(pod)
    spec["command"] = ["python", "-m", "x"]
    del spec["args"]
    config = objects.config_secret_name("a" * 64)
    launch = build(pod, {("Secret", config): secret(**{"gateway.yaml": "x"})})
    assert (launch.uses_image_entrypoint, launch.command) == (False, ["python", "-m", "x"])


@given(st.text(max_size=40))
def test_mapping_never_touches_text_that_names_no_mount_and_no_declared_port(text: str) -> None:
    mounts = {"/etc/mcpg": Path("/pods/x/volumes/config")}
    ports = {8080: 40000}
    unrelated = not text.startswith("/etc/mcpg") and not text.endswith("8080")
    if unrelated:
        assert podspec.map_ports(podspec.map_paths(text, mounts), ports) == text


@pytest.mark.parametrize(
    ("text", "mapped"),
    [("8080", "40000"), ("--port=8080", "--port=40000"), ("0.0.0.0:8080", "0.0.0.0:40000"), ("18080", "18080")],
)
def test_a_declared_port_is_mapped_as_a_whole_number(text: str, mapped: str) -> None:
    assert podspec.map_ports(text, {8080: 40000}) == mapped


@pytest.mark.parametrize(
    ("text", "mapped"),
    [("/etc/mcpg", "/v"), ("/etc/mcpg/a.yaml", "/v/a.yaml"), ("/etc/mcpgx/a", "/etc/mcpgx/a"), ("x/etc/mcpg", None)],
)
def test_a_mount_path_is_mapped_only_as_a_path_prefix(text: str, mapped: str | None) -> None:
    assert podspec.map_paths(text, {"/etc/mcpg": Path("/v")}) == (mapped or text)


def bus_pod() -> dict[str, Any]:
    """The bus pod as the operator will render it (Deployment `mcpg-bus`)."""
    args = ["--config", "/etc/nats/nats.conf", "--jetstream", "--store_dir", "/data/jetstream"]
    container = {
        "name": "nats",
        "image": "nats:2.11-alpine",
        "command": ["nats-server"],
        "args": [*args, "--port", "4222", "--http_port", "8222"],
        "ports": [{"name": "client", "containerPort": 4222}, {"name": "monitor", "containerPort": 8222}],
        "readinessProbe": {"httpGet": {"path": "/healthz?js-enabled-only=true", "port": 8222}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/nats"}, {"name": "data", "mountPath": "/data"}],
    }
    volumes = [{"name": "config", "secret": {"secretName": "mcpg-bus"}}, {"name": "data", "emptyDir": {}}]
    return {
        "metadata": {"name": "mcpg-bus-1", "namespace": "mcpg-system", "uid": "u-2"},
        "spec": {"containers": [container], "volumes": volumes},
    }


def test_the_bus_runs_its_own_command_with_config_and_store_in_the_pods_volumes_on_mapped_ports() -> None:
    launch = build(bus_pod(), {("Secret", "mcpg-bus"): secret(**{"nats.conf": "jetstream: enabled"})})
    volumes = POD_DIR / "volumes"
    assert not launch.uses_image_entrypoint
    assert launch.command == [
        "nats-server",
        "--config",
        f"{volumes}/config/nats.conf",
        "--jetstream",
        "--store_dir",
        f"{volumes}/data/jetstream",  # the emptyDir's directory: removed with the pod
        "--port",
        "40000",
        "--http_port",
        "40001",
    ]
    assert launch.files == {volumes / "config" / "nats.conf": (b"jetstream: enabled", 0o644)}
    assert volumes / "data" in launch.dirs
    assert podspec.resolve_port(8222, launch) == 40001  # the readiness probe's port
    assert podspec.resolve_port("client", launch) == 40000  # the Service's targetPort, by name
