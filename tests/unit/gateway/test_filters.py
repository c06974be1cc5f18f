"""notification_filter over real HTTP, three principals in each protocol era: who among a URI's subscribers is told.

Nothing here has a read policy, so everyone may subscribe to everything: what each person hears is the filter
alone. Every check ends with a fire of a shared URI (scope all): a subscriber's notifications arrive in order,
so once that one arrives, anything the filter had let through would already have arrived before it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcpg_gateway import catalog, policy
from mcpg_gateway.contract import cel, check, config
from mcpg_gateway.contract.errors import ConfigError
from mcpg_gateway.fanout import running as runs
from mcpg_gateway.fanout import watchers
from mcpg_gateway.fanout.subscribers import Subscriber
from mcpg_gateway.identity import Principal
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base, memory
from mcpg_testing.clients import ERAS, Subscription, subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import bearer, gateway_config, principal, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream

PEOPLE = ("alice", "bob", "carol")
INBOXES = [f"mail://inbox/{who}" for who in PEOPLE]
LEDGER = "ledger://finance/current"
BOARD = "board://team"
DESK = "desk://alice"
SENTINEL = "notice://all"
FINANCE_FILTER = 'subscriber.trust_level == "verified" && "finance" in subscriber.groups'
PRINCIPALS = [
    principal("alice-token", "alice", trust_level="verified", groups=["finance"], attributes={"team": "payments"}),
    principal("bob-token", "bob", trust_level="verified", groups=["staff"], attributes={"team": "ops"}),
    principal("carol-token", "carol", trust_level="unverified", groups=["finance"]),  # no "team" attribute
]


def hook(name: str, uri: str, url: str, token: str, **notification_filter: Any) -> dict[str, Any]:
    entry = resource(name, uri, url, {"type": "webhook", "token": token})
    entry["watch"]["notification_filter"] = notification_filter or {"scope": "all"}
    return entry


@pytest.fixture
async def running(gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock) -> RunningGateway:
    upstream.set("/doc", "{}")
    for who in PEOPLE:
        upstream.set(f"/inbox/{who}", '{"unread": 0}')
    doc = f"{upstream.url}/doc"
    raw = gateway_config(
        hook("ledger", LEDGER, doc, "ledger", scope="expression", expression=FINANCE_FILTER),
        # carol has no team: her evaluation fails (fails closed) while alice and bob are told.
        hook("board", BOARD, doc, "board", scope="expression", expression='subscriber.attributes.team != "legal"'),
        {**hook("desk", DESK, doc, "desk", scope="subject_id"), "subject_id": "alice"},
        hook("notice", SENTINEL, doc, "notice"),
        templates=[
            {
                "name": "inbox",
                "uri_template": "mail://inbox/{subject_id}",
                "backend": {"kind": "http", "url": f"{upstream.url}/inbox/{{subject_id}}"},
                "watch": {"strategy": {"type": "poll"}, "notification_filter": {"scope": "subject_id"}},
            }
        ],
        auth={"principals": PRINCIPALS},
    )
    return await gateway_factory(raw, clock=clock)


@contextlib.asynccontextmanager
async def everyone(gw: RunningGateway, mode: str, uris: list[str]) -> AsyncIterator[dict[str, Subscription]]:
    """alice, bob and carol, each subscribed to every URI in `uris` plus the sentinel."""
    async with contextlib.AsyncExitStack() as stack:
        subs = {}
        for who in PEOPLE:
            subs[who] = await stack.enter_async_context(
                subscribed(gw.mcp_url, mode, [*uris, SENTINEL], bearer(f"{who}-token"))
            )
        yield subs


async def told(subs: dict[str, Subscription], gw: RunningGateway) -> dict[str, list[str]]:
    """Fire the sentinel, then return what each person was told before it."""
    assert await gw.post_webhook("notice") == 200
    out: dict[str, list[str]] = {}
    for who, sub in subs.items():
        out[who] = []
        while (uri := await sub.next_update()) != SENTINEL:
            out[who].append(uri)
    return out


@ERAS
async def test_each_person_is_told_only_about_their_own_inbox(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    async with everyone(running, mode, INBOXES) as subs:
        for who in PEOPLE:
            upstream.set(f"/inbox/{who}", '{"unread": 1}')
        await clock.tick(len(INBOXES))  # every inbox watcher reads, sees a change and fires
        assert await told(subs, running) == {who: [f"mail://inbox/{who}"] for who in PEOPLE}
    filtered = running.gw.metrics.notifications_filtered.labels("poll")._value.get()
    assert filtered == 6  # three fires, two subscribers held back each


@ERAS
async def test_a_subject_id_field_on_a_resource_names_who_is_told(running: RunningGateway, mode: str) -> None:
    async with everyone(running, mode, [DESK]) as subs:
        assert await running.post_webhook("desk") == 200
        assert await told(subs, running) == {"alice": [DESK], "bob": [], "carol": []}


@ERAS
async def test_a_cel_filter_tells_only_the_matching_group(running: RunningGateway, mode: str) -> None:
    async with everyone(running, mode, [LEDGER]) as subs:
        assert await running.post_webhook("ledger") == 200
        # bob is verified but not in finance; carol is in finance but not verified.
        assert await told(subs, running) == {"alice": [LEDGER], "bob": [], "carol": []}


@ERAS
async def test_an_evaluation_error_fails_closed_for_that_subscriber_while_others_are_told(
    running: RunningGateway, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcpg_gateway.policy")
    async with everyone(running, mode, [BOARD]) as subs:
        for _ in range(2):
            assert await running.post_webhook("board") == 200
            assert await told(subs, running) == {"alice": [BOARD], "bob": [BOARD], "carol": []}
    assert running.gw.metrics.policy_errors.labels("notification_filter", "not_found")._value.get() == 2
    [logged] = [r.getMessage() for r in caplog.records]  # once per cause, however often it fails
    assert logged.startswith(
        "mcp.capabilities.resources[1].watch.notification_filter.expression of resource 'board' failed to evaluate"
    )
    assert "carol" not in logged


# --- the rule and the hook, without HTTP -----------------------------------------------------------------------


def template_binding(uri: str, uri_template: str, scope: str = "subject_id") -> catalog.Binding:
    entry = config.ResourceTemplateConfig(
        name="t",
        uri_template=uri_template,
        backend=config.HttpBackend(kind="http", url="http://u/"),
        watch=config.WatchConfig(notification_filter=config.NotificationFilter(scope=scope)),
    )
    binding = catalog.Catalog(config.Capabilities(resource_templates=[entry])).resolve(uri)
    assert binding is not None
    return binding


def test_the_subject_is_the_decoded_subject_id_variable_of_the_concrete_uri() -> None:
    binding = template_binding("mail://inbox/al%40ce/folder/x", "mail://inbox/{subject_id}/folder/{folder}")
    assert policy.subject_of(binding) == "al@ce"
    hub = policy.Policies(cel.Expressions(), Metrics().policy_errors)
    assert hub.should_tell(binding, Subscriber("listen", Principal("al@ce")))
    assert not hub.should_tell(binding, Subscriber("listen", Principal("al%40ce")))
    assert not hub.should_tell(binding, Subscriber("listen"))  # no principal: fail closed


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            {"name": "t", "uri_template": "mail://inbox/{owner}"},
            "mcp.capabilities.resource_templates[0]: notification_filter scope 'subject_id' on a resource template "
            "needs a '{subject_id}' variable in uri_template",
        ),
        (
            {"name": "r", "uri": "desk://x"},
            "mcp.capabilities.resources[0]: notification_filter scope 'subject_id' on a resource needs a "
            "'subject_id' field",
        ),
    ],
)
def test_scope_subject_id_without_a_subject_is_rejected_at_load(entry: dict[str, Any], problem: str) -> None:
    kind = "resource_templates" if "uri_template" in entry else "resources"
    full = {
        **entry,
        "backend": {"kind": "http", "url": "http://u/"},
        "watch": {"notification_filter": {"scope": "subject_id"}},
    }
    with pytest.raises(ConfigError) as e:
        check.load({"mcp": {"capabilities": {kind: [full]}}}, environ={})
    [message] = map(str, e.value.problems)
    assert message.startswith(problem)


async def test_a_fire_offers_the_uri_only_to_subscribers_the_audience_admits() -> None:
    hub = memory.MemoryHub()

    async def never_read(b: catalog.Binding) -> bytes:
        raise AssertionError("the memory strategy never reads")

    build = runs.build_with(hub.factory, never_read, base.RealClock())
    admitted = Subscriber("session", Principal("yes"))
    refused = Subscriber("session", Principal("no"))
    registry = watchers.WatchRegistry(
        build, Metrics(), audience=lambda b, s: s.principal is not None and s.principal.principal_id == "yes"
    )
    binding = template_binding("x://1", "x://{subject_id}", scope="all")
    for sub in (admitted, refused):
        await registry.subscribe_all([binding], sub)
    assert await registry.fire("x://1", "poll") == 1
    assert (admitted.outbox.pending, refused.outbox.pending) == (1, 0)
    await registry.close()
