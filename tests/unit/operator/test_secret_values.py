"""No Secret value reaches a status, an Event or a log line, whatever becomes of a token's Secret mid-rotation.

A token Secret is replaced by a `kubernetes.io/tls` one (the type of a Secret cannot change, so it is deleted and
created again: the watch sees the deletion), with or without a `token` key, or deleted, while the gateway pods
are still to acknowledge a rotation. Every status and Event the operator writes, every status left on the objects,
and every log record (at DEBUG, arguments included) are searched for each value the Secrets held, as text and as
base64.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
from typing import Any

import pytest

from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, config_tokens, ready, resourcewatch, run, settle, webhooktoken

OLD, NEW = "old-token-4f1c9a7e2b6d", "new-token-8d3e6b0a5c1f"
CERT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUcertcertcertQ\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49keykeykeykeyZ\n-----END PRIVATE KEY-----\n"
AUTH = {"auth.yaml": "anonymous: {enabled: true}\n"}
TOKEN_SECRET = f"/api/v1/namespaces/{NS}/secrets/tok-secret"
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{16,}")


def tls_secret(**extra: str) -> dict[str, Any]:
    values = {"tls.crt": CERT, "tls.key": KEY, **extra}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "tok-secret", "namespace": NS},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def forms(value: str) -> list[str]:
    """What must never appear: the value and each of its lines (base64 is decoded where it is searched)."""
    return [value, *(line for line in value.splitlines() if len(line) > 8 and "-----" not in line)]


def revealed(text: str) -> str:
    """`text`, and the decoding of every base64 run in it: base64 (a Secret's data, whole) is no protection."""
    decoded = []
    for run_ in BASE64_RUN.findall(text):
        with contextlib.suppress(ValueError):
            decoded.append(base64.b64decode(run_ + "=" * (-len(run_) % 4)).decode(errors="replace"))
    return "\n".join([text, *decoded])


def written(kube: FakeKube) -> str:
    """Every status and Event the operator wrote, and every status on the objects now, as one text."""
    bodies = [c.body for c in kube.writes if c.body and (c.path.endswith("/status") or "/events/" in c.path)]
    live = [o.get("status") for p, o in kube.objects.items() if p.startswith("/apis/mcpg.dev/")]
    return revealed(json.dumps([*bodies, *live]))


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return revealed("\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records))


async def mid_rotation(kube: FakeKube, clock: Clock) -> None:
    """A served webhook whose token was edited from OLD to NEW: the configuration carrying both is written, and no
    pod has applied it yet."""
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token=OLD)
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(resourcewatch())
    await settle(kube, clock)
    kube.set_secret(NS, "tok-secret", token=NEW)
    await run(kube, clock)
    assert config_tokens(kube) == {OLD, NEW}


async def passes(kube: FakeKube, clock: Clock) -> None:
    """A pass finds the pods late, past the bound (named in the statuses); time passes; the namespace settles."""
    await run(kube, clock)
    clock.now += 60
    await run(kube, clock)
    clock.now += 60
    await run(kube, clock)
    await settle(kube, clock)


@pytest.mark.parametrize(
    "replacement",
    [
        pytest.param(tls_secret(), id="a tls Secret without a token key"),
        pytest.param(tls_secret(token=KEY), id="a tls Secret whose token key holds a private key"),
    ],
)
async def test_no_secret_value_reaches_a_status_event_or_log_line_when_the_token_secret_becomes_a_tls_secret(
    kube: FakeKube, clock: Clock, caplog: pytest.LogCaptureFixture, replacement: dict[str, Any]
) -> None:
    caplog.set_level(logging.DEBUG)
    await mid_rotation(kube, clock)
    kube.remove(TOKEN_SECRET)
    kube.put(replacement)
    await passes(kube, clock)
    assert ready(kube, "webhooktokens", "tok")[0] == "False"  # no usable token: said, without quoting anything
    assert kube.objects[TOKEN_SECRET]["type"] == "kubernetes.io/tls"  # read and labelled, never rewritten
    text, log = written(kube), logged(caplog)
    for value in (OLD, NEW, CERT, KEY):
        for form in forms(value):
            assert form not in text, "a Secret value in a status or Event"
            assert form not in log, "a Secret value in a log line"


async def test_no_secret_value_reaches_a_status_event_or_log_line_when_the_token_secret_is_deleted_mid_rotation(
    kube: FakeKube, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await mid_rotation(kube, clock)
    kube.remove(TOKEN_SECRET)
    await passes(kube, clock)
    assert ready(kube, "webhooktokens", "tok") == ("False", "SecretNotFound")
    text, log = written(kube), logged(caplog)
    for value in (OLD, NEW):
        for form in forms(value):
            assert form not in text, "a Secret value in a status or Event"
            assert form not in log, "a Secret value in a log line"
