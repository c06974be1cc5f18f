"""The local kubelet's image table and the kwok stages it keeps kwok away from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from mcpg_testing import components, images, runtimes
from mcpg_testing.podspec import ConfigError

NATS_CMD = ["nats-server", "--config", "/etc/nats/nats-server.conf"]
TAGS = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", fullmatch=True)
"""Docker's tag grammar."""


def test_the_gateway_image_runs_the_dockerfiles_entrypoint_and_command() -> None:
    runtime = runtimes.runtime(runtimes.GATEWAY_IMAGE)
    assert runtime is not None
    assert (runtime.component, runtime.entrypoint) == ("gateway", ("mcpg-gateway",))
    assert runtime.cmd == ("--config", "/etc/mcpg/gateway.yaml")
    assert runtime.env == {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    assert runtime.bin_dir == images.REPO / ".venv-gateway" / "bin"
    assert runtime.argv(["--config", "x"], uses_entrypoint=True) == ["mcpg-gateway", "--config", "x"]
    assert runtimes.runtime("registry.k8s.io/pause:3.10") is None
    assert runtimes.runtime("mcpg/gateway:0.1.0") is None, "only our own tag is run: a release image is not built"


@pytest.mark.parametrize(
    "image",
    ["nats:2.11-alpine", "nats", "nats:latest", "docker.io/library/nats:2.10", "library/nats:2.11", "nats@sha256:ab"],
)
def test_every_reference_to_the_nats_repository_runs_the_test_venvs_nats_server(image: str) -> None:
    runtime = runtimes.runtime(image)
    assert runtime is not None
    assert runtime.component == "nats"
    assert runtime.bin_dir == Path(sys.executable).parent  # where servers._nats_argv finds it too
    assert (runtime.bin_dir / "nats-server").is_file()


@pytest.mark.parametrize(
    "image", ["natsio/nats-box:0.14", "myorg/nats:2.11", "localhost:5000/nats:2.11", "nats-streaming:0.25", "natsx"]
)
def test_another_repository_named_like_nats_stays_with_kwok(image: str) -> None:
    assert runtimes.runtime(image) is None


@given(TAGS)
def test_any_tag_of_nats_is_run_locally(tag: str) -> None:
    assert runtimes.component(f"nats:{tag}") == "nats"
    assert runtimes.component(f"docker.io/library/nats:{tag}") == "nats"


@given(st.from_regex(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)?", fullmatch=True), TAGS)
def test_a_repository_is_its_reference_without_tag_digest_or_docker_hub_prefix(name: str, tag: str) -> None:
    assume(not name.startswith(("docker.io/", "index.docker.io/", "registry-1.docker.io/")))
    expected = runtimes.repository(name)
    assert runtimes.repository(f"{name}:{tag}") == expected
    assert runtimes.repository(f"{name}:{tag}@sha256:{'0' * 64}") == expected
    assert runtimes.repository(f"docker.io/{name}:{tag}") == expected
    assert expected == name.removeprefix("library/")


def test_a_registry_port_is_not_a_tag() -> None:
    assert runtimes.repository("localhost:5000/nats") == "localhost:5000/nats"
    assert runtimes.repository("localhost:5000/nats:2.11") == "localhost:5000/nats"


def test_the_bus_pods_own_command_replaces_the_images_entrypoint() -> None:
    nats = runtimes.nats()
    args = ["--config", "/etc/nats/nats.conf", "--jetstream"]
    assert nats.argv(["nats-server", *args], uses_entrypoint=False) == ["nats-server", *args]


def test_the_nats_entrypoint_runs_the_server_for_flags_and_execs_anything_else() -> None:
    nats = runtimes.nats()
    assert nats.argv(["--port", "4222"], uses_entrypoint=True) == ["nats-server", "--port", "4222"]
    assert nats.argv(["sh", "-c", "true"], uses_entrypoint=True) == ["sh", "-c", "true"]
    assert nats.argv([], uses_entrypoint=True) == ["nats-server"]
    # neither command nor args: podspec passes the image's CMD, which names the server itself
    assert nats.argv(list(nats.cmd), uses_entrypoint=True) == NATS_CMD


def test_a_container_with_nothing_to_run_is_a_config_error() -> None:
    runtime = runtimes.runtime(runtimes.GATEWAY_IMAGE)
    assert runtime is not None
    with pytest.raises(ConfigError, match="no command"):
        runtime.argv([], uses_entrypoint=False)


def test_the_tables_exclusions_split_into_exact_references_and_repositories() -> None:
    assert runtimes.local_images() == (["mcpg/gateway:local"], ["nats"])


STAGES = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-initialize}
spec: {resourceRef: {apiGroup: v1, kind: Node}, selector: {matchExpressions: []}, next: {}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions: [{key: .metadata.deletionTimestamp, operator: DoesNotExist}]
  next: {}
"""


def test_every_kwok_pod_stage_skips_the_local_images_and_node_stages_are_untouched() -> None:
    node, pod = yaml.safe_load_all(components.kwok_stages(STAGES, ["mcpg/gateway:local"], ["nats"]))
    assert node["spec"]["selector"]["matchExpressions"] == []
    exact, repository = pod["spec"]["selector"]["matchExpressions"][-2:]
    assert exact == {"key": ".spec.containers.[0].image", "operator": "NotIn", "values": ["mcpg/gateway:local"]}
    assert repository["operator"] == "NotIn"
    assert repository["values"] == ["nats"]
    # the jq that kwok runs applies runtimes.repository's rules, in order, to the same image
    assert repository["key"] == runtimes.repository_query(".spec.containers.[0].image")
    assert repository["key"].startswith('.spec.containers.[0].image | sub("@.*$"; "") | sub(":[^:/]*$"; "")')


def test_kwok_gets_no_empty_not_in_which_it_would_refuse() -> None:
    [_, pod] = yaml.safe_load_all(components.kwok_stages(STAGES, ["mcpg/gateway:local"]))
    keys = [e["key"] for e in pod["spec"]["selector"]["matchExpressions"]]
    assert keys == [".metadata.deletionTimestamp", ".spec.containers.[0].image"]
