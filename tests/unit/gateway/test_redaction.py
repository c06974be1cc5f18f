"""redact_url and scrub: credentials inside server URLs never reach a log line or an error."""

from __future__ import annotations

import pytest

from mcpg_gateway.redaction import UNPARSABLE, redact_url, scrub


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("postgres://gateway:hunter2@db.internal:5432/app", "postgres://gateway:***@db.internal:5432/app"),
        ("postgresql://u:s3cr%40t%2Fx@127.0.0.1/postgres", "postgresql://u:***@127.0.0.1/postgres"),
        ("nats://mcpg:hunter2@nats.internal:4222", "nats://mcpg:***@nats.internal:4222"),
        ("postgres://u:p@h1:5432,h2:5433/app", "postgres://u:***@h1:5432,h2:5433/app"),
        ("postgres://u:@db/app", "postgres://u:***@db/app"),
    ],
)
def test_a_password_is_masked_and_everything_else_is_kept(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


def test_a_lone_user_is_a_role_for_postgres_but_a_token_for_nats() -> None:
    assert redact_url("postgres://gateway@db.internal/app") == "postgres://gateway@db.internal/app"
    assert redact_url("nats://s3cret-token@nats.internal:4222") == "nats://***@nats.internal:4222"


def test_secret_looking_query_parameters_are_masked() -> None:
    redacted = redact_url("postgres://db/app?sslmode=require&password=hunter2&sslpassword=x")
    assert redacted == "postgres://db/app?sslmode=require&password=***&sslpassword=***"


def test_a_url_without_credentials_is_unchanged() -> None:
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


@pytest.mark.parametrize("url", ["user:hunter2@db.internal", "postgres://[::1/app:hunter2@x"])
def test_a_url_that_does_not_parse_shows_nothing_of_itself(url: str) -> None:
    assert redact_url(url) == UNPARSABLE


def test_scrub_masks_the_url_and_each_spelling_of_its_password_in_foreign_text() -> None:
    url = "postgresql://u:s3cr%40t@db/app"
    text = f"could not connect to {url}; password 's3cr@t' rejected (raw s3cr%40t)"
    scrubbed = scrub(text, url)
    assert "s3cr" not in scrubbed
    assert "postgresql://u:***@db/app" in scrubbed


def test_scrub_masks_a_nats_token_wherever_it_appears() -> None:
    assert scrub("auth failed for token tok-123", "nats://tok-123@h:4222") == "auth failed for token ***"
