"""The documented senders work as written: each `examples/senders/<scheme>.sh`, run by bash with curl and openssl,
against `mcpg-gateway` from the gateway image serving `examples/gateway/signed-webhooks.yaml`.

Each script is what the signed-webhooks guide (docs/guides/signed-webhooks.md, where each block is marked as run by
`test_each_documented_sender_is_answered_200_with_its_uri`) and the reference show for its scheme. It must be
answered 200 with its watch's URI; signed with a secret the gateway does not hold, 401 naming the check; and a second
run of the Standard Webhooks sender (a fresh id) must fire again while the same delivery replayed must not.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv
from mcpg_testing.programs import GatewayProcess, gateway

__all__ = ["gateway_env"]  # a fixture, used by name

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "examples" / "gateway" / "signed-webhooks.yaml"
SENDERS = ROOT / "examples" / "senders"
URIS = {
    "standard-webhooks": "events://standard-webhooks",
    "github": "github://acme/reports/pulls",
    "stripe": "stripe://invoices",
    "slack": "slack://commands",
    "gitlab": "gitlab://acme/reports/pushes",
    "hmac": "custom://events",
}
HOOK_TOKEN = secrets.token_hex(16)


def whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


SECRETS = {
    "standard-webhooks": whsec(),
    "github": "It's a Secret to Everybody",  # GitHub's documented example: spaces and a quote, as users write them
    "stripe": "whsec_" + secrets.token_hex(16),
    "slack": secrets.token_hex(16),
    "gitlab": secrets.token_hex(20),
    "hmac": secrets.token_hex(32),
}


def environ() -> dict[str, str]:
    env = {f"{scheme.upper().replace('-', '_')}_SECRET": value for scheme, value in SECRETS.items()}
    return {**env, "HOOK_TOKEN": HOOK_TOKEN, "STANDARD_WEBHOOKS_SECRET_OLD": ""}


@pytest.fixture(scope="module")
def signed(gateway_env: ImageEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with gateway(gateway_env, CONFIG, environ(), cwd=tmp_path_factory.mktemp("signed")) as running:
        yield running


def send(gw: GatewayProcess, scheme: str, secret: str, trace: bool = False) -> tuple[dict[str, object], str]:
    """Run the scheme's sender as a user would (bash, its variables in the environment): the JSON answer, and
    what bash traced (`-x`) when asked, to replay the request it made."""
    env = {**os.environ, "GATEWAY": gw.base, "TOKEN": f"{HOOK_TOKEN}-{scheme}", "SECRET": secret}
    argv = ["bash", "-e", *(["-x"] if trace else []), str(SENDERS / f"{scheme}.sh")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("scheme", sorted(URIS))
def test_each_documented_sender_is_answered_200_with_its_uri(signed: GatewayProcess, scheme: str) -> None:
    answer, _ = send(signed, scheme, SECRETS[scheme])
    assert answer == {"ok": True, "uri": URIS[scheme]}


@pytest.mark.parametrize("scheme", sorted(URIS))
def test_each_documented_sender_with_a_secret_the_gateway_does_not_hold_is_refused(
    signed: GatewayProcess, scheme: str
) -> None:
    stranger = whsec() if scheme == "standard-webhooks" else secrets.token_hex(16)
    answer, _ = send(signed, scheme, stranger)
    assert answer["check"] == "bad_signature"
    assert str(answer["error"]).startswith("signature check failed")


def test_the_standard_webhooks_sender_fires_each_run_and_a_replay_of_one_fires_nothing(signed: GatewayProcess) -> None:
    first, trace = send(signed, "standard-webhooks", SECRETS["standard-webhooks"], trace=True)
    again, _ = send(signed, "standard-webhooks", SECRETS["standard-webhooks"])
    assert first == again == {"ok": True, "uri": URIS["standard-webhooks"]}
    # The very request the first run made, sent again: curl's command line as bash traced it.
    [curl] = [line.removeprefix("+ ") for line in trace.splitlines() if line.startswith("+ curl ")]
    replayed = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(replayed.stdout)["check"] == "replay"
