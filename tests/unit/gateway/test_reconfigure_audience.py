"""Who a new configuration concerns: subscribers told their list changed, and authorization checked again.

`notifications/resources/list_changed` goes to every handshake-era session and to every listen stream that asked for
list changes, and only when what that subscriber's principal may list changed. At the swap every subscription is
authorised again: a removed principal's subscriptions, streams and sessions end, and a URI a read policy now denies
ends for its subscriber, each saying why on a listen stream.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcpg_gateway.sdk.protocol import SUBSCRIPTION_ID_META_KEY
from mcpg_testing import BOUND_S
from mcpg_testing.clients import ERAS
from mcpg_testing.configs import bearer, gateway_config, principal, watched
from mcpg_testing.gateways import SENTINEL_TOKEN, SENTINEL_URI, GatewayFactory, RunningGateway, sentinel
from mcpg_testing.watching import Watching, until, watching

HOOK = "drive://folder/reports"
SECRET = "drive://folder/secret"
ALICE, BOB = bearer("alice-token"), bearer("bob-token")
ONLY_BOB = 'subscriber.principal_id == "bob"'


def config(*extra: dict[str, Any], people: tuple[str, ...] = ("alice", "bob"), **alice: Any) -> dict[str, Any]:
    """The hook and the sentinel, each readable by every principal, `extra` entries, and the principals named."""
    principals = [principal(f"{name}-token", name, **(alice if name == "alice" else {})) for name in people]
    return gateway_config(
        watched("reports", HOOK, {"type": "webhook", "token": "tok-hook"}),
        sentinel(),
        *extra,
        auth={"principals": principals},
    )


def secret(read_policy: str | None = None) -> dict[str, Any]:
    entry = watched("secret", SECRET, {"type": "webhook", "token": "tok-secret"})
    if read_policy is not None:
        entry["read_policy"] = read_policy
    return entry


@pytest.fixture
async def running(gateway_factory: GatewayFactory) -> RunningGateway:
    return await gateway_factory(config())


async def no_list_change(gw: RunningGateway, sub: Watching) -> None:
    """The sentinel's notification arrives on the same stream after anything written before it: no list change."""
    assert await gw.post_webhook(SENTINEL_TOKEN) == 200
    assert (await sub.next()).uri == SENTINEL_URI
    assert sub.list_changes.empty()


def subscribers(gw: RunningGateway, kind: str) -> float:
    return gw.gw.metrics.registry.get_sample_value("mcpg_subscribers", {"kind": kind}) or 0.0


# --- list changes ----------------------------------------------------------------------------------------------


@ERAS
async def test_a_resource_added_that_the_subscriber_may_read_tells_it_the_list_changed(
    running: RunningGateway, mode: str
) -> None:
    async with watching(running.mcp_url, mode, [SENTINEL_URI], ALICE, list_changed=True) as sub:
        await running.reconfigure(config(secret()))
        meta = await _next(sub)
        if mode == "listen":  # on the listen's own stream, as each of its notifications
            assert set(meta) == {SUBSCRIPTION_ID_META_KEY}
        else:
            assert meta == {}
        await no_list_change(running, sub)


@ERAS
async def test_a_resource_only_another_principal_may_read_changes_nothing_this_one_is_told(
    running: RunningGateway, mode: str
) -> None:
    async with (
        watching(running.mcp_url, mode, [SENTINEL_URI], ALICE, list_changed=True) as alice,
        watching(running.mcp_url, mode, [SENTINEL_URI], BOB, list_changed=True) as bob,
    ):
        await running.reconfigure(config(secret(ONLY_BOB)))
        await _next(bob)
        await no_list_change(running, alice)


async def test_a_listen_that_did_not_ask_for_list_changes_is_not_told(running: RunningGateway) -> None:
    async with watching(running.mcp_url, "listen", [SENTINEL_URI], ALICE) as sub:
        await running.reconfigure(config(secret()))
        await no_list_change(running, sub)


async def test_a_principal_added_changes_nothing_for_the_others(gateway_factory: GatewayFactory) -> None:
    running = await gateway_factory(config(people=("alice",)))
    async with watching(running.mcp_url, "legacy", [SENTINEL_URI, HOOK], ALICE, list_changed=True) as sub:
        await running.reconfigure(config(people=("alice", "bob")))
        async with watching(running.mcp_url, "listen", [HOOK], BOB) as bob:
            assert await running.post_webhook("tok-hook") == 200
            assert ((await sub.next()).uri, (await bob.next()).uri) == (HOOK, HOOK)
        await no_list_change(running, sub)


# --- authorization, again ------------------------------------------------------------------------------------------


async def test_a_removed_principal_s_listen_ends_saying_so(running: RunningGateway) -> None:
    async with watching(running.mcp_url, "listen", [HOOK], BOB) as sub:
        await running.reconfigure(config(people=("alice",)))
        end = (await sub.ended())["dev.mcpg/watch-end"]
        assert (end["reason"], end["uris"]) == ("principal_removed", [HOOK])


async def test_a_removed_principal_s_list_only_listen_ends_too(running: RunningGateway) -> None:
    async with watching(running.mcp_url, "listen", [], BOB, list_changed=True) as sub:
        await running.reconfigure(config(people=("alice",)))
        end = (await sub.ended())["dev.mcpg/watch-end"]
        assert end["reason"] == "principal_removed"


async def test_a_removed_principal_s_sessions_end_and_the_others_stay(running: RunningGateway) -> None:
    async with (
        watching(running.mcp_url, "legacy", [HOOK], BOB),
        watching(running.mcp_url, "legacy", [], BOB),  # a session that holds no subscription ends as well
        watching(running.mcp_url, "legacy", [HOOK, SENTINEL_URI], ALICE) as alice,
    ):
        assert subscribers(running, "session") == 2  # subscribers exist for sessions that subscribed
        await running.reconfigure(config(people=("alice",)))
        await until(lambda: subscribers(running, "session") == 1)
        watcher = running.gw.fanout.watcher(HOOK)
        assert watcher is not None
        assert {s.principal_id for s in watcher.subscribers} == {"alice"}
        assert await running.post_webhook("tok-hook") == 200
        assert (await alice.next()).uri == HOOK
        await no_list_change(running, alice)  # alice's list did not change


async def test_a_read_policy_that_now_denies_a_held_uri_ends_it_on_listen_with_access_revoked(
    gateway_factory: GatewayFactory,
) -> None:
    running = await gateway_factory(config(secret()))
    async with watching(running.mcp_url, "listen", [SECRET, HOOK], ALICE) as sub:
        await running.reconfigure(config(secret(ONLY_BOB)))
        end = (await sub.ended())["dev.mcpg/watch-end"]
        assert (end["reason"], end["uris"]) == ("access_revoked", [SECRET])


async def test_a_read_policy_that_now_denies_a_held_uri_ends_that_one_only_on_a_session(
    gateway_factory: GatewayFactory,
) -> None:
    running = await gateway_factory(config(secret()))
    async with watching(running.mcp_url, "legacy", [SECRET, HOOK, SENTINEL_URI], ALICE) as sub:
        await running.reconfigure(config(secret(ONLY_BOB)))
        assert (await _next(sub)) == {}  # the secret resource left alice's list
        assert await running.post_webhook("tok-secret") == 200
        assert await running.post_webhook("tok-hook") == 200
        assert (await sub.next()).uri == HOOK  # the secret one was not told
        await no_list_change(running, sub)


async def test_a_principal_whose_roles_changed_is_judged_by_its_new_roles(gateway_factory: GatewayFactory) -> None:
    admins = '"admin" in subscriber.roles'
    running = await gateway_factory(config(secret(admins), roles=["admin"]))
    async with watching(running.mcp_url, "listen", [SECRET], ALICE) as sub:
        await running.reconfigure(config(secret(admins), roles=["viewer"]))
        end = (await sub.ended())["dev.mcpg/watch-end"]
        assert (end["reason"], end["uris"]) == ("access_revoked", [SECRET])


async def _next(sub: Watching) -> dict[str, Any]:
    """The next list change's `_meta` (bounded)."""
    async with asyncio.timeout(BOUND_S):
        return await sub.list_changes.get()
