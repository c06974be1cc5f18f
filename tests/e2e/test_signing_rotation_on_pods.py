"""Rotation of a webhook's signing secret on running gateway pods, applied in place, judged from what signed senders
saw through the Service.

The watch's webhook is routed by a long-lived token (WebhookToken `reports-route`) and requires a Standard Webhooks
signature made with the secret a second WebhookToken keeps (`reports-signing`, `signatureScheme:
standard-webhooks`, generated: `whsec_` and the base64 of 32 bytes). A 3-replica gateway runs as real pods behind
its ClusterIP Service. While the user rotates the signing secret (an edit of its Secret) and the operator carries
it to every pod, two senders POST through the Service at 12 deliveries a second each, one signing with the old
secret and one with the new: each delivery a fresh `webhook-id` and timestamp and a small JSON body, on a fresh
connection from the next of many source addresses (so the kernel's connection tracking names the pod kube-proxy
sent it to). A sampler reads the API and each Ready pod's acknowledgement meanwhile (`mcpg_testing.rotation`, as
for the routing token's rotation in `test_rotation_on_pods.py`), for the moments that divide the rotation into
stages:

    before     until the Secret edit
    accepting  from the edit until the WebhookToken says the secret of the Secret's new resourceVersion is accepted
    accepted   from then until the configuration Secret drops the old secret (the grace period, then)
    retiring   from then until every Ready pod acknowledges serving a configuration without it
    after      a few seconds more

The promise, asserted from the recorded answers: no delivery signed with a secret not yet retired is refused (nor
fails): the old secret's are answered 200 until the configuration drops it, the new secret's from acceptance on,
by every pod; once every pod has dropped the old secret, each of its deliveries is a 401 `bad_signature`. No pod
is replaced or restarted, the Deployment's generation unchanged; neither secret, nor the routing token, reaches a
status, an Event, a workload, a log or a /metrics; and the WebhookToken ends Ready on the new secret.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import datetime
import itertools
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from mcpg_testing import rotation
from mcpg_testing.conntrack import ServiceConnections, client_addresses
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.pods import CONFIG_SECRET
from mcpg_testing.release import OperatorRelease
from mcpg_testing.rotation import WEBHOOK_PATH, Api, Delivery, Moments, Sampler, Traffic, send, stage, value_digest

URI = "rotation://signed"
ROUTE = "reports-route"
"""The WebhookToken (and its Secret) whose token routes the deliveries: never rotated here."""
SIGNING = "reports-signing"
"""The WebhookToken (and its Secret) whose signing secret is rotated."""
SCHEME = "standard-webhooks"
GRACE_S = 5
"""The signing WebhookToken's grace period: the old secret still verifies this long after every pod accepted the new."""
TOLERANCE_S = 300
RATE_PER_SECRET = 12.0
"""Deliveries per second signed with each secret: 24 in total, over the issue's floor of 20."""
SOURCES = 64
"""Senders' addresses: many senders from many addresses, as upstreams are (`conntrack.client_addresses`)."""
WHSEC = "whsec_"
SECRET_BYTES = 32
"""A generated standard-webhooks secret is `whsec_` and the base64 of this many random bytes."""


# -- manifests -----------------------------------------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "WebhookToken",
            "metadata": {"name": ROUTE},
            "spec": {"secretRef": {"name": ROUTE}, "generate": True},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "WebhookToken",
            "metadata": {"name": SIGNING},
            "spec": {
                "secretRef": {"name": SIGNING},
                "generate": True,
                "signatureScheme": SCHEME,
                "gracePeriodSeconds": GRACE_S,
            },
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "ResourceWatch",
            "metadata": {"name": "reports"},
            "spec": {
                "uri": URI,
                "backend": {"http": {"url": "http://127.0.0.1:9/reports.json"}},
                "watch": {
                    "webhook": {
                        "tokenRef": {"name": ROUTE},
                        "signature": {
                            "scheme": SCHEME,
                            "secretRef": {"name": SIGNING},
                            "toleranceSeconds": TOLERANCE_S,
                        },
                    }
                },
            },
        },
    ]


def signing_secrets(config_yaml: bytes) -> frozenset[str]:
    """The credentials this rotation moves: the signing secrets the watch's signature block lists."""
    return frozenset(rotation.watch_strategy(config_yaml)["signature"]["secrets"])


def is_generated_secret(value: str) -> bool:
    """`whsec_` and the base64 of SECRET_BYTES bytes."""
    if not value.startswith(WHSEC):
        return False
    try:
        return len(base64.b64decode(value.removeprefix(WHSEC), validate=True)) == SECRET_BYTES
    except (binascii.Error, ValueError):
        return False


def rendered_strategy(api: Api, ns: str) -> dict[str, Any]:
    """The watch strategy the configuration Secret holds now."""
    config = api.get(rotation.secret_path(ns, CONFIG_SECRET))
    return rotation.watch_strategy(base64.b64decode(config["data"]["gateway.yaml"]))


# -- signed deliveries ---------------------------------------------------------------------------------------


def signed(route: str, secret: str) -> Callable[[], Delivery]:
    """Deliveries to the route's path, each signed with `secret` as a Standard Webhooks sender signs: a fresh
    `webhook-id` (a repeated one is refused as a replay), the time now, a small JSON body."""
    signer, numbers = Webhook(secret), itertools.count()

    def delivery() -> Delivery:
        msg_id, now = f"msg_{secrets.token_hex(12)}", datetime.datetime.now(tz=datetime.UTC)
        body = json.dumps({"type": "report.updated", "seq": next(numbers)}, separators=(",", ":"))
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signer.sign(msg_id, now, body),
        }
        return Delivery(WEBHOOK_PATH + route, body.encode(), headers)

    return delivery


# -- the test ----------------------------------------------------------------------------------------------------


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[Api]:
    api = Api(control_plane.kubeconfig)
    yield api
    api.close()


async def test_a_signing_secret_rotated_in_place_refuses_no_delivery_signed_with_a_secret_not_yet_retired(
    control_plane: ControlPlane, operators: OperatorRelease, namespace: str, api: Api
) -> None:
    rotation.apply_and_wait(control_plane, namespace, manifests(), [ROUTE, SIGNING])
    route = api.secret_value(namespace, ROUTE)
    old = api.secret_value(namespace, SIGNING)
    generated = is_generated_secret(old)  # never the value itself in an assertion's message
    assert generated, f"the generated signing secret is not {WHSEC} and the base64 of {SECRET_BYTES} bytes"
    new = WHSEC + base64.b64encode(os.urandom(SECRET_BYTES)).decode()
    cluster_ip, port = control_plane.service_address(namespace, rotation.GATEWAY)
    base = f"http://{cluster_ip}:{port}"
    moments, traffic, stop = Moments(), Traffic(), asyncio.Event()
    loop = asyncio.get_running_loop()

    with (
        client_addresses(SOURCES) as sources,
        ServiceConnections(cluster_ip, port) as connections,
        Sampler(control_plane.kubeconfig, namespace, SIGNING, signing_secrets) as sampler,
    ):
        until = sampler.wait
        first = await until("every pod serving the first secret", lambda s: sampler.settled(s, frozenset({old})))
        # The watch as rendered: routed by the token, verified with the one secret (digests only, in any message).
        strategy = rendered_strategy(api, namespace)
        signature = strategy["signature"]
        assert (strategy["type"], value_digest(strategy["token"]), len(strategy.get("previous_tokens") or [])) == (
            "webhook",
            value_digest(route),
            0,
        )
        assert (signature["scheme"], signature["tolerance_s"]) == (SCHEME, TOLERANCE_S)
        assert [value_digest(s) for s in signature["secrets"]] == [value_digest(old)]
        senders = [
            asyncio.create_task(send(base, label, signed(route, secret), traffic, stop, sources, RATE_PER_SECRET))
            for label, secret in (("old", old), ("new", new))
        ]
        await traffic.wait_sent(4 * RATE_PER_SECRET)  # two seconds of traffic before the edit

        moments.edit = time.monotonic()
        patch = {"stringData": {"token": new}}
        edited = await loop.run_in_executor(None, api.merge_patch, rotation.secret_path(namespace, SIGNING), patch)
        sampler.new_version = edited["metadata"]["resourceVersion"]
        accepted = await until("the new secret accepted", lambda s: s.accepted)
        moments.accepted = accepted.read_at
        dropped = await until("the configuration to drop the old secret", lambda s: old not in s.config_credentials)
        moments.dropped = dropped.t
        moments.last_with_old = sampler.last_carrying(old)
        done = await until(
            "every pod to serve it without the old secret", lambda s: sampler.settled(s, frozenset({new}))
        )
        moments.done = done.acked_at
        await until(
            "the status to say so", lambda s: s.status.get("phase") == "Ready" and s.status.get("retiring") == []
        )
        await traffic.wait_sent(len(traffic.sent) + 4 * RATE_PER_SECRET)  # two seconds of traffic after
        moments.end = time.monotonic()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*senders), rotation.SENT_BOUND_S)
        samples = [s for s in sampler.samples if s.t >= first.t]
        last = samples[-1]
    pods = rotation.answered_by(connections, sampler.pod_names)
    sent = traffic.sent
    print(
        f"\nsigning secret rotated in place: after the edit, accepted in {moments.accepted - moments.edit:.2f}s, "
        f"dropped from the configuration in {moments.dropped - moments.edit:.2f}s, retired by every pod in "
        f"{moments.done - moments.edit:.2f}s; {len(sent)} deliveries, per stage, secret and status: "
        f"{json.dumps(rotation.figures(sent, moments))}; answered per pod "
        f"{dict(collections.Counter(pods.get(s.client, '?') for s in sent))}"
    )

    # While the rotation was under way the configuration listed both secrets, so either verified.
    assert any(s.config_credentials == {old, new} for s in samples), "no configuration carried both secrets"
    # 1. No refusal, and no failed delivery, of the old secret's answered before the configuration dropped it.
    early_old = [s for s in sent if s.label == "old" and s.done < moments.last_with_old]
    assert {stage(s.t, moments) for s in early_old} >= {"before", "accepting"}
    assert [s for s in early_old if s.status != 200] == []
    # 2. Once every pod had dropped it, each of the old secret's deliveries refused as a bad signature; and before
    #    the edit, each of the new secret's: the pods verified signatures throughout.
    late_old = [s for s in sent if s.label == "old" and s.t > moments.done]
    assert late_old
    assert [s for s in late_old if s.outcome != "401 bad_signature"] == []
    early_new = [s for s in sent if s.label == "new" and s.done < moments.edit]
    assert early_new
    assert [s for s in early_new if s.outcome != "401 bad_signature"] == []
    # 3. From acceptance on, every delivery signed with the new secret got a 200, and every pod answered some.
    late_new = [s for s in sent if s.label == "new" and s.t > moments.accepted]
    assert late_new
    assert [s for s in late_new if s.status != 200] == []
    assert {pods[s.client] for s in late_new if s.client in pods} == set(last.pods), "a pod answered no new secret"
    # 4. No delivery with either secret failed outright at any stage (refused, reset or timed out).
    assert [s for s in sent if s.status is None] == []
    # 5. No pod replaced, restarted or unready at any moment, and no new pod template.
    rotation.assert_pods_untouched(samples)
    # 6. Neither secret, nor the routing token, reached a status, an Event, a workload, a log or a /metrics.
    gateway_ips = [p.ip for p in last.pods.values() if p.ip]
    rotation.assert_leaked_nowhere(control_plane, operators, namespace, gateway_ips, old, new, route)
    # 7. The rotation finished, and the status says so; the routing token is as it was.
    rotation.assert_rotated(api, namespace, SIGNING, new, sampler.new_version)
    strategy = rendered_strategy(api, namespace)
    assert value_digest(strategy["token"]) == value_digest(route)
    assert [value_digest(s) for s in strategy["signature"]["secrets"]] == [value_digest(new)]
    route_status = api.get(rotation.webhook_token_path(namespace, ROUTE))["status"]
    assert (route_status["phase"], route_status["retiringCount"], route_status["currentDigest"]) == (
        "Ready",
        0,
        value_digest(route),
    )
