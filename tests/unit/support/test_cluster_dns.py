"""The local kubelet's cluster DNS: Service names in a container's env values and args reach the Service stand-in.

`<service>.<namespace>.svc[.cluster.local]:<port>` becomes `127.0.0.1:<stand-in port>` wherever it appears in a
value (a URL included); a Service the stand-in does not serve yet is a container config error, retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mcpg_testing import podspec
from mcpg_testing.podspec import ConfigError

BUS = {("mcpg-system", "mcpg-bus"): {4222: 41001, 8222: 41002}, ("shop", "db"): {5432: 41003}}
NAME_CHARS = frozenset("-.0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
LABELS = st.from_regex(r"[a-z0-9](?:[-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
"""Service and namespace names (DNS labels, shortened)."""


def services(namespace: str, name: str) -> Mapping[int, int] | None:
    return BUS.get((namespace, name))


def never(namespace: str, name: str) -> Mapping[int, int] | None:
    raise AssertionError(f"looked up {namespace}/{name} in a text that names no Service")


@pytest.mark.parametrize(
    ("text", "mapped"),
    [
        ("nats://mcpg-bus.mcpg-system.svc:4222", "nats://127.0.0.1:41001"),
        ("nats://u:p%40ss@mcpg-bus.mcpg-system.svc:4222", "nats://u:p%40ss@127.0.0.1:41001"),
        ("mcpg-bus.mcpg-system.svc.cluster.local:4222", "127.0.0.1:41001"),
        ("mcpg-bus.mcpg-system.svc.cluster.local.:4222", "127.0.0.1:41001"),
        ("http://MCPG-BUS.mcpg-system.SVC:8222/healthz", "http://127.0.0.1:41002/healthz"),
        ("--routes=nats://mcpg-bus.mcpg-system.svc:4222", "--routes=nats://127.0.0.1:41001"),
        (
            "nats://mcpg-bus.mcpg-system.svc:4222,postgres://db.shop.svc:5432/x",
            "nats://127.0.0.1:41001,postgres://127.0.0.1:41003/x",
        ),
    ],
)
def test_a_service_address_becomes_its_stand_ins_loopback_address(text: str, mapped: str) -> None:
    assert podspec.map_services(text, services) == mapped


@pytest.mark.parametrize(
    "text",
    [
        "mcpg-bus.mcpg-system.svc",  # no port: nothing says which listener
        "nats://mcpg-bus.mcpg-system:4222",  # a search-path short form
        "mcpg-bus:4222",
        "nats-0.mcpg-bus.mcpg-system.svc:4222",  # a pod of a headless Service
        "mcpg-bus.mcpg-system.svc.example.com:4222",  # another domain
        "mcpg-bus.mcpg-system.svc:123456",  # not a port
    ],
)
def test_anything_else_that_looks_like_a_name_is_left_alone(text: str) -> None:
    assert podspec.map_services(text, never) == text


def test_a_service_that_is_not_served_yet_is_a_config_error_naming_the_address() -> None:
    with pytest.raises(ConfigError, match=r"mcpg-bus\.other\.svc:4222: no Service 'mcpg-bus' in namespace 'other'"):
        podspec.map_services("nats://mcpg-bus.other.svc:4222", services)


def test_a_port_the_service_does_not_have_is_a_config_error_listing_its_ports() -> None:
    with pytest.raises(ConfigError, match=r"has no port 4223 \(it has \[4222, 8222\]\)"):
        podspec.map_services("mcpg-bus.mcpg-system.svc:4223", services)


@given(st.text(max_size=60))
def test_text_without_a_svc_label_is_never_changed_and_asks_no_service(text: str) -> None:
    if ".svc" not in text.lower():
        assert podspec.map_services(text, never) == text


@given(
    LABELS,
    LABELS,
    st.integers(1, 65535),
    st.booleans(),
    st.text(max_size=20).filter(lambda t: not t or t[-1] not in NAME_CHARS),  # the name starts at a boundary
    st.text(max_size=20).filter(lambda t: not t[:1].isdigit()),  # and its port ends there
)
def test_a_service_address_anywhere_in_a_value_is_replaced_and_the_rest_kept(
    service: str, namespace: str, port: int, fqdn: bool, before: str, after: str
) -> None:
    assume(".svc" not in before.lower())  # an address there could end inside ours (`a.b.svc:` + `0x.ns...`)
    domain = ".svc.cluster.local" if fqdn else ".svc"

    def one(ns: str, name: str) -> Mapping[int, int] | None:
        return {port: 40000} if (ns, name) == (namespace, service) else None

    text = f"{before}{service}.{namespace}{domain}:{port}{after}"
    mapped = podspec.map_services(text, one)
    # what follows may itself hold an address (`after` is arbitrary text): it is mapped or left as it was
    assert mapped.startswith(f"{before}127.0.0.1:40000")
    assert podspec.service_addresses(text, one)[f"{service}.{namespace}{domain}:{port}"] == "127.0.0.1:40000"


def pod(container: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "gw-1", "namespace": "shop", "uid": "u"}, "spec": {"containers": [container]}}


def test_a_gateways_bus_url_in_its_env_reaches_the_stand_in_and_is_recorded() -> None:
    env = [{"name": "MCPG_BUS_URL", "value": "nats://mcpg-bus.mcpg-system.svc:4222"}]
    spec = {"name": "gateway", "image": "mcpg/gateway:local", "env": env, "ports": [{"containerPort": 8080}]}
    launch = podspec.build(pod(spec), spec, Path("/p"), {8080: 40000}, lambda k, n: None, [], services)
    assert launch.env["MCPG_BUS_URL"] == "nats://127.0.0.1:41001"
    assert launch.services == {"mcpg-bus.mcpg-system.svc:4222": "127.0.0.1:41001"}


def test_a_service_name_in_args_is_mapped_and_an_unknown_one_named_by_its_index_not_its_text() -> None:
    args = ["--routes", "nats://user:secret@db.other.svc:5432"]
    spec: dict[str, Any] = {"name": "c", "image": "nats:2.11-alpine", "args": args}
    with pytest.raises(ConfigError) as raised:
        podspec.build(pod(spec), spec, Path("/p"), {}, lambda k, n: None, [], services)
    assert str(raised.value).startswith("argv[1]: db.other.svc:5432: no Service")
    assert "secret" not in str(raised.value)
    spec["args"][1] = "nats://user:secret@db.shop.svc:5432"
    launch = podspec.build(pod(spec), spec, Path("/p"), {}, lambda k, n: None, [], services)
    assert launch.command == ["--routes", "nats://user:secret@127.0.0.1:41003"]


def test_a_pod_naming_its_own_service_reaches_the_service_not_its_own_mapped_port() -> None:
    env = [{"name": "SELF", "value": "nats://mcpg-bus.mcpg-system.svc:4222"}]
    spec = {"name": "nats", "image": "nats:2.11-alpine", "env": env, "ports": [{"containerPort": 4222}]}
    launch = podspec.build(pod(spec), spec, Path("/p"), {4222: 40000}, lambda k, n: None, [], services)
    assert launch.env["SELF"] == "nats://127.0.0.1:41001"


def test_without_services_a_name_is_a_config_error_naming_the_env_variable() -> None:
    env = [{"name": "MCPG_BUS_URL", "value": "nats://mcpg-bus.mcpg-system.svc:4222"}]
    spec = {"name": "gateway", "image": "mcpg/gateway:local", "env": env}
    with pytest.raises(ConfigError, match=r"^env MCPG_BUS_URL: mcpg-bus\.mcpg-system\.svc:4222: no Service"):
        podspec.build(pod(spec), spec, Path("/p"), {}, lambda k, n: None, [])
