"""The bus, pure: the managed server's accounts and objects, and what a gateway gets with 1 or 3 replicas."""

from __future__ import annotations

import base64
import queue
import re
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_gateway.contract import check
from mcpg_operator import bus, objects, observed, render
from mcpg_operator.settings import BusSettings, GatewayDefaults
from mcpg_testing import BOUND_S
from mcpg_testing.processes import wait_until

MANAGED = BusSettings(namespace="mcpg-system")
EXTERNAL = BusSettings("external", url="tls://nats.example:4222", credentials_secret="nats-creds")
ONE, THREE = GatewayDefaults(), GatewayDefaults(replicas=3)
PASSWORD = "Zq3-_" * 9  # what secrets.token_urlsafe gives: 43 URL-safe characters
OWNERS = objects.owner_references([("a", "uid-a")])


def watch(name: str = "w", **spec: Any) -> observed.Watch:
    body = {"uri": f"x://{name}", "backend": {"http": {"url": "http://upstream/"}}, **spec}
    return observed.watch(
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "ResourceWatch",
            "metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}"},
            "spec": body,
        }
    )


def env_of(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


# --- which namespaces get a bus ---------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [MANAGED, EXTERNAL, None])
def test_one_replica_runs_alone_whatever_the_bus_settings(settings: BusSettings | None) -> None:
    assert bus.wiring(settings, "shop", 1) is None


def test_a_managed_bus_gives_every_namespace_the_same_url_and_its_own_account() -> None:
    wired = bus.wiring(MANAGED, "shop", 3)
    assert wired == bus.Wiring("nats://mcpg-bus.mcpg-system.svc:4222", "mcpg-gateway-bus", "mcpg", "mcpg", True)
    assert bus.account_user("shop") == "mcpg-shop"


def test_an_external_bus_keeps_namespaces_apart_by_subject_prefix_and_bucket() -> None:
    wired = bus.wiring(EXTERNAL, "shop", 3)
    assert wired == bus.Wiring("tls://nats.example:4222", "nats-creds", "mcpg.shop", "mcpg-shop", False)


def test_a_long_namespace_still_gets_a_bucket_the_gateway_accepts_and_no_other_namespace_shares() -> None:
    long_a, long_b = "a" * 62 + "b", "a" * 62 + "c"
    buckets = {bus.external_bucket(ns) for ns in (long_a, long_b)}
    assert len(buckets) == 2
    assert all(len(b) <= bus.BUCKET_MAX and re.fullmatch(r"[A-Za-z0-9_-]+", b) for b in buckets)


# --- what a gateway gets --------------------------------------------------------------------------------------


def test_with_three_replicas_the_configuration_names_the_bus_credentials_only_as_environment_variables() -> None:
    plan = render.plan([watch()], {}, {}, THREE, bus.wiring(MANAGED, "shop", 3))
    assert plan.verdicts["w"].served
    assert plan.config["gateway"]["bus"] == {
        "url": "${env.MCPG_BUS_URL}",
        "user": "${env.MCPG_BUS_USER}",
        "password": "${env.MCPG_BUS_PASSWORD}",
        "subject_prefix": "mcpg",
        "bucket": "mcpg",
    }


def test_the_rendered_configuration_starts_a_gateway_given_the_pods_environment() -> None:
    plan = render.plan([watch()], {}, {}, THREE, bus.wiring(EXTERNAL, "shop", 3))
    environ = {"MCPG_BUS_URL": "tls://nats.example:4222", "MCPG_BUS_USER": "u", "MCPG_BUS_PASSWORD": "p"}
    loaded = check.load(plan.config, environ=environ)
    assert loaded.gateway.bus is not None
    assert (loaded.gateway.bus.subject_prefix, loaded.gateway.bus.bucket) == ("mcpg.shop", "mcpg-shop")


def test_with_one_replica_the_configuration_has_no_bus() -> None:
    plan = render.plan([watch()], {}, {}, ONE, bus.wiring(MANAGED, "shop", 1))
    assert "bus" not in plan.config["gateway"]
    assert plan.config == render.plan([watch()], {}, {}, ONE).config


def test_a_watch_cannot_read_the_bus_password_from_the_pods_environment() -> None:
    # The pod has MCPG_BUS_PASSWORD; an entry naming it would send it upstream. Entries are checked without one.
    sneaky = watch("sneaky", backend={"http": {"url": "http://upstream/?p=${env.MCPG_BUS_PASSWORD}"}})
    plan = render.plan([sneaky, watch("fine")], {}, {}, THREE, bus.wiring(MANAGED, "shop", 3))
    assert not plan.verdicts["sneaky"].served
    assert "MCPG_BUS_PASSWORD" in plan.verdicts["sneaky"].message
    assert plan.verdicts["fine"].served


def test_with_three_replicas_the_pods_get_the_bus_url_credentials_from_the_secret_and_their_name() -> None:
    wired = bus.wiring(MANAGED, "shop", 3)
    env = env_of(objects.deployment("shop", "h" * 64, THREE, OWNERS, bus.pod_env(wired)))
    assert env["MCPG_BUS_URL"] == {"name": "MCPG_BUS_URL", "value": "nats://mcpg-bus.mcpg-system.svc:4222"}
    assert env["MCPG_BUS_USER"]["valueFrom"] == {"secretKeyRef": {"name": "mcpg-gateway-bus", "key": "user"}}
    assert env["MCPG_BUS_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "mcpg-gateway-bus", "key": "password"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_an_external_bus_reads_the_credentials_from_the_users_secret() -> None:
    env = env_of(objects.deployment("shop", "h" * 64, THREE, OWNERS, bus.pod_env(bus.wiring(EXTERNAL, "shop", 3))))
    assert env["MCPG_BUS_URL"]["value"] == "tls://nats.example:4222"
    assert env["MCPG_BUS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "nats-creds", "key": "password"}


def test_with_one_replica_the_pods_environment_is_as_before() -> None:
    assert bus.pod_env(None) == []
    env = env_of(objects.deployment("shop", "h" * 64, ONE, OWNERS, bus.pod_env(bus.wiring(MANAGED, "shop", 1))))
    assert set(env) == {"MCPG_LOG_FORMAT", "MCPG_CONFIG_SECRET", "POD_NAME"}


@pytest.mark.parametrize(("defaults", "affinity"), [(ONE, "None"), (THREE, "ClientIP")])
def test_several_replicas_keep_a_client_on_one_pod(defaults: GatewayDefaults, affinity: str) -> None:
    assert objects.service("shop", OWNERS, defaults)["spec"]["sessionAffinity"] == affinity


def test_a_namespaces_bus_credentials_are_its_account_user_and_password_owned_like_its_gateway() -> None:
    secret = bus.credentials_secret("shop", PASSWORD, OWNERS)
    assert secret["metadata"]["name"] == "mcpg-gateway-bus"
    assert secret["metadata"]["labels"]["mcpg.dev/bus-credentials"] == "true"
    assert secret["metadata"]["ownerReferences"] == OWNERS
    assert observed.decode(secret) == {"user": "mcpg-shop", "password": PASSWORD}


# --- the managed server's configuration -----------------------------------------------------------------------


def test_every_namespace_gets_an_account_with_jetstream_and_one_user() -> None:
    text = bus.nats_config({"shop": PASSWORD, "mail": "m" * 43})
    assert text.index('"mcpg-mail"') < text.index('"mcpg-shop"')  # sorted: the same accounts, the same text
    assert (
        '  "mcpg-shop": {\n    jetstream: {max_mem: 16MB, max_file: 64MB, max_streams: 8, max_consumers: 64}\n' in text
    )
    assert f'users: [{{user: "mcpg-shop", password: "{PASSWORD}"}}]' in text
    assert text.count("jetstream: {max_mem") == 2
    # Ports, the store and JetStream are arguments, visible in the pod spec; the config file holds accounts only.
    assert not re.search(r"^\s*(port|http_port|store_dir|listen)\s*:", text, re.MULTILINE)


@pytest.mark.parametrize(
    "password",
    ['x" } users: [{user: "admin", password: "pw"}] #', "$VARIABLE_REF_0123456789", "short", "has space 0123456789ab"],
)
def test_a_password_that_could_change_the_configuration_is_refused_without_being_shown(password: str) -> None:
    with pytest.raises(ValueError, match="namespace shop") as raised:
        bus.nats_config({"shop": password})
    assert password not in str(raised.value)


def test_a_namespace_that_is_not_a_namespace_name_is_refused() -> None:
    with pytest.raises(ValueError, match="not a namespace name"):
        bus.nats_config({'shop" {': PASSWORD})


# --- the managed server's objects -----------------------------------------------------------------------------


def managed(passwords: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    found = bus.managed_objects("mcpg-system", "nats:2.11-alpine", passwords or {"shop": PASSWORD})
    return {obj["kind"]: obj for obj in found}


def test_the_managed_server_is_three_labelled_objects_in_the_bus_namespace() -> None:
    found = managed()
    assert [(o["kind"], o["metadata"]["name"]) for o in found.values()] == [
        ("Secret", "mcpg-bus-config"),
        ("Service", "mcpg-bus"),
        ("Deployment", "mcpg-bus"),
    ]
    for obj in found.values():
        assert obj["metadata"]["namespace"] == "mcpg-system"
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "mcpg-bus"
        assert (
            obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == objects.MANAGED["app.kubernetes.io/managed-by"]
        )


def test_the_config_secret_holds_nats_conf() -> None:
    text = base64.b64decode(managed()["Secret"]["data"]["nats.conf"]).decode()
    assert text == bus.nats_config({"shop": PASSWORD})


def test_the_server_runs_nats_with_jetstream_its_store_and_ports_as_arguments() -> None:
    pod = managed()["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert (container["name"], container["image"], container["command"]) == (
        "nats",
        "nats:2.11-alpine",
        ["nats-server"],
    )
    assert container["args"] == [
        *("--config", "/etc/nats/nats.conf", "--pid", "/var/run/nats/nats.pid"),
        *("--jetstream", "--store_dir", "/data/jetstream", "--port", "4222", "--http_port", "8222"),
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"client": 4222, "monitor": 8222}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz?js-enabled-only=true", "port": 8222}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts == {"config": "/etc/nats", "run": "/var/run/nats", "data": "/data"}
    assert volumes["config"]["secret"]["secretName"] == "mcpg-bus-config"
    assert volumes["data"]["emptyDir"] == {}
    assert pod["automountServiceAccountToken"] is False


def test_a_sidecar_of_the_same_image_reloads_the_server_from_its_pid_file_sharing_its_process_namespace() -> None:
    pod = managed()["Deployment"]["spec"]["template"]["spec"]
    server, reloader = pod["containers"]
    assert pod["shareProcessNamespace"] is True
    assert reloader["image"] == server["image"]
    program, flag, script, name, *args = reloader["command"]
    assert (program, flag, name, args) == (
        "sh",
        "-c",
        "config-reloader",
        ["/etc/nats/nats.conf", "/var/run/nats/nats.pid", "2"],
    )
    assert 'nats-server --signal "reload=$pid_file"' in script
    assert {m["name"]: (m["mountPath"], m.get("readOnly")) for m in reloader["volumeMounts"]} == {
        "config": ("/etc/nats", True),
        "run": ("/var/run/nats", True),
    }
    assert reloader["securityContext"] == server["securityContext"]


def forward(stream: Iterable[str] | None, to: queue.Queue[str]) -> None:
    for line in stream or ():
        to.put(line)


def test_the_reloader_signals_the_server_once_at_start_and_then_only_when_the_file_changes(tmp_path: Path) -> None:
    """The script run by a real `sh`, with recording stand-ins on PATH: `nats-server` records each signal and
    `sha256sum` each look at the file (then does the real work), so "no reload while unchanged" is asserted
    after two looks, not after a guess at how long a look takes."""
    config_file, pid_file, signals, looks = (tmp_path / n for n in ("nats.conf", "nats.pid", "signals", "looks"))
    config_file.write_text("accounts {}\n")
    pid_file.write_text("4242\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {"nats-server": f'echo "$*" >> {signals}', "sha256sum": f"echo >> {looks}; exec /usr/bin/sha256sum"}
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    [reloader] = [c for c in managed()["Deployment"]["spec"]["template"]["spec"]["containers"] if c["name"] != "nats"]
    program, flag, script, name, *_ = reloader["command"]
    argv = [program, flag, script, name, str(config_file), str(pid_file), "0.05"]

    def looked() -> int:
        return len(looks.read_text().splitlines()) if looks.exists() else 0

    with subprocess.Popen(argv, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, stdout=subprocess.PIPE, text=True) as proc:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=forward, args=(proc.stdout, lines), daemon=True).start()
        try:
            assert "reloaded" in lines.get(timeout=BOUND_S)  # once at start
            config_file.write_text('accounts { "mcpg-shop": {} }\n')
            assert "reloaded" in lines.get(timeout=BOUND_S)  # the change
            config_file.write_text('accounts { "mcpg-shop": {} }\n')  # rewritten as it was
            after = looked()
            wait_until(lambda: looked() >= after + 2, BOUND_S, "the reloader to look at the file twice more")
            proc.terminate()
            assert proc.wait(timeout=BOUND_S) == 0  # SIGTERM ends it cleanly
        finally:
            proc.kill()
    assert signals.read_text().splitlines() == [f"--signal reload={pid_file}"] * 2


def test_one_server_whose_successor_is_ready_before_it_stops() -> None:
    spec = managed()["Deployment"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_the_service_is_the_client_port_of_the_server() -> None:
    spec = managed()["Service"]["spec"]
    assert spec["selector"] == {"app.kubernetes.io/name": "mcpg-bus"}
    assert spec["ports"] == [{"name": "client", "port": 4222, "targetPort": "client", "protocol": "TCP"}]


def test_a_change_of_accounts_changes_the_config_secret_and_never_the_server_deployment() -> None:
    one, two = managed({"shop": PASSWORD}), managed({"shop": PASSWORD, "mail": "m" * 43})
    assert one["Deployment"] == two["Deployment"]  # reloaded by the sidecar, never rolled
    assert one["Secret"]["data"] != two["Secret"]["data"]
    assert PASSWORD not in yaml.safe_dump(managed()["Deployment"])
