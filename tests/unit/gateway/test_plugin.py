"""Plugin loading: entry points become kinds, broken ones are named, a missing kind is a start-up error."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from mcpg_gateway import catalog
from mcpg_gateway.contract import check, config
from mcpg_gateway.contract.errors import ConfigError
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.strategies import base, plugin
from mcpg_testing.configs import gateway_config, resource


@dataclass
class FakeEntryPoint:
    name: str
    value: str
    target: Callable[[], Any]

    def load(self) -> Any:
        return self.target()


class Recorder:
    """A plugin that records the spec it was built with."""

    specs: ClassVar[list[dict[str, Any]]] = []

    @staticmethod
    def kind() -> str:
        return "recorder"

    def __init__(self, spec: dict[str, Any], ctx: base.WatchContext) -> None:
        Recorder.specs.append(spec)

    async def start(self) -> None:
        return None

    async def run(self, fire: base.Fire) -> None:
        return None

    async def close(self) -> None:
        return None


class AlsoRecorder(Recorder):
    pass


class Exploding(Recorder):
    @staticmethod
    def kind() -> str:
        return "exploding"

    def __init__(self, spec: dict[str, Any], ctx: base.WatchContext) -> None:
        raise KeyError("port")


def ep(name: str, obj: Any) -> FakeEntryPoint:
    return FakeEntryPoint(name, f"pkg:{name}", lambda: obj)


def failing(name: str, error: Exception) -> FakeEntryPoint:
    def load() -> Any:
        raise error

    return FakeEntryPoint(name, f"pkg:{name}", load)


def test_each_entry_point_is_registered_under_its_kind_not_its_name() -> None:
    registry = plugin.PluginRegistry.load([ep("whatever", Recorder), ep("exploding", Exploding)])
    assert registry.kinds == ["exploding", "recorder"]
    Gateway(plugin_config("recorder"), Options(plugins=registry))  # a provided kind starts


def test_entry_points_come_from_the_mcpg_watch_strategies_group(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def entry_points(group: str) -> list[FakeEntryPoint]:
        asked.append(group)
        return [ep("recorder", Recorder)]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert plugin.PluginRegistry.load().kinds == ["recorder"]
    assert asked == ["mcpg.watch_strategies"]


def test_the_kind_field_names_the_group_plugins_are_found_in() -> None:
    # The field's description is the CRD's and the reference's: a user writes their entry point from it.
    description = config.PluginStrategy.model_fields["kind"].description or ""
    assert f"`{plugin.ENTRY_POINT_GROUP}`" in description


def test_an_unknown_kind_is_explained_with_the_installed_kinds() -> None:
    registry = plugin.PluginRegistry.load([ep("recorder", Recorder)])
    assert missing(registry, "twilio_inbound") == (
        "no installed watch-strategy plugin has kind 'twilio_inbound' (installed kinds: recorder)"
    )
    assert "installed kinds: none" in missing(plugin.PluginRegistry.load([]), "x")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (failing("gone", ModuleNotFoundError("No module named 'gone'")), "ModuleNotFoundError: No module named 'gone'"),
        (ep("nokind", object()), "expected a class with kind() and a (spec, ctx) constructor"),
        (ep("badkind", type("BadKind", (), {"kind": staticmethod(lambda: 42)})), "kind() returned 42"),
    ],
)
def test_an_unusable_entry_point_is_skipped_and_named_when_a_kind_is_missing(entry: FakeEntryPoint, why: str) -> None:
    registry = plugin.PluginRegistry.load([entry, ep("recorder", Recorder)])
    assert registry.kinds == ["recorder"]
    problem = missing(registry, "sms")
    assert f"entry point {entry.name!r}" in problem
    assert why in problem


def test_two_plugins_claiming_one_kind_make_it_unavailable_and_say_so() -> None:
    registry = plugin.PluginRegistry.load([ep("one", Recorder), ep("two", AlsoRecorder)])
    assert registry.kinds == []
    assert "kind 'recorder' is provided by both 'one' and 'two'" in missing(registry, "recorder")


def plugin_config(kind: str, **extra: Any) -> config.GatewayConfig:
    raw = gateway_config(
        resource("inbound", "phone://inbound", "http://127.0.0.1:9/", {"type": "plugin", "kind": kind, **extra})
    )
    return check.load(raw, environ={})


def missing(registry: plugin.PluginRegistry, kind: str) -> str:
    """Why a gateway with these plugins refuses a watch of `kind` (the contract's check, as the gateway asks it)."""
    with pytest.raises(ConfigError) as caught:
        Gateway(plugin_config(kind), Options(plugins=registry))
    [problem] = caught.value.problems
    assert problem.path == "mcp.capabilities.resources[0].watch.strategy.kind"
    return problem.message


def test_a_watch_naming_a_missing_kind_stops_the_gateway_naming_the_field() -> None:
    registry = plugin.PluginRegistry.load([ep("recorder", Recorder)])
    with pytest.raises(ConfigError) as caught:
        Gateway(plugin_config("twilio_inbound"), Options(plugins=registry))
    assert [str(p) for p in caught.value.problems] == [
        "mcp.capabilities.resources[0].watch.strategy.kind: no installed watch-strategy plugin has kind "
        "'twilio_inbound' (installed kinds: recorder)"
    ]


def context() -> base.WatchContext:
    binding = catalog.Catalog(plugin_config("recorder").mcp.capabilities).resolve("phone://inbound")
    assert binding is not None

    async def read() -> bytes:
        return b""

    return base.WatchContext(binding, read, base.ReadStats(), base.RealClock())


async def test_the_plugin_receives_the_whole_spec_including_its_own_fields() -> None:
    Recorder.specs.clear()
    registry = plugin.PluginRegistry.load([ep("recorder", Recorder)])
    spec = config.PluginStrategy.model_validate({"type": "plugin", "kind": "recorder", "kinds": ["sms", "voice"]})
    watch = registry.build(spec, context())
    await watch.start()
    await watch.close()
    assert Recorder.specs == [{"type": "plugin", "kind": "recorder", "kinds": ["sms", "voice"]}]


async def test_a_plugin_that_fails_to_build_refuses_with_its_error_type_only() -> None:
    registry = plugin.PluginRegistry.load([ep("exploding", Exploding)])
    watch = registry.build(config.PluginStrategy.model_validate({"type": "plugin", "kind": "exploding"}), context())
    with pytest.raises(StrategyError, match=r"^plugin 'exploding' could not be set up \(KeyError\)$"):
        await watch.start()
    await watch.close()  # after a failed start, as the registry does
