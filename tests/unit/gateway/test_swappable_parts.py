"""The parts a new configuration replaces in place (identity, catalog, webhook tokens) swap whole, at once."""

from __future__ import annotations

from mcpg_gateway import catalog, identity
from mcpg_gateway.contract import check
from mcpg_gateway.strategies import webhook
from mcpg_testing.configs import gateway_config, principal, watched


def _identity(*principals: dict[str, object]) -> identity.Identity:
    cfg = check.load(gateway_config(auth={"principals": list(principals)}), environ={})
    return identity.Identity(cfg.gateway.auth)


def test_a_replaced_identity_forgets_a_removed_principal_and_knows_an_added_one() -> None:
    ids = _identity(principal("tok-a", "alice"))
    later = check.load(gateway_config(auth={"principals": [principal("tok-b", "bob")]}), environ={})
    ids.replace(later.gateway.auth)
    assert ids.by_id("alice") is None
    bob = ids.by_id("bob")
    assert bob is not None
    assert bob.principal_id == "bob"


def test_a_replaced_catalog_resolves_only_what_the_new_configuration_serves() -> None:
    first = check.load(gateway_config(watched("a", "drive://a", {"type": "webhook", "token": "ta"})), environ={})
    second = check.load(gateway_config(watched("b", "drive://b", {"type": "webhook", "token": "tb"})), environ={})
    cat = catalog.Catalog(first.mcp.capabilities)
    cat.replace(second.mcp.capabilities)
    assert cat.resolve("drive://a") is None
    resolved = cat.resolve("drive://b")
    assert resolved is not None
    assert resolved.entry.name == "b"


def test_a_token_made_up_for_the_run_survives_a_rebuild_of_the_index() -> None:
    cfg = check.load(gateway_config(watched("a", "drive://a", {"type": "webhook"})), environ={})
    resources = cfg.mcp.capabilities.resources
    first = webhook.build_index(resources)
    made_up = first.generated()["drive://a"]
    first.replace(webhook.build_index(resources, first.generated()))
    route = first.lookup(made_up)
    assert route is not None
    assert route.uri == "drive://a"
