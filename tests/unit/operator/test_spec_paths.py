"""Every path the gateway's check can name in a rendered entry reads as the ResourceWatch field it came from."""

from __future__ import annotations

import pytest

from mcpg_operator import spec_paths

PATHS = [
    ("", "poll", "spec"),
    ("name", "poll", "spec.name"),
    ("description", "poll", "spec.description"),
    ("uri", "poll", "spec.uri"),
    ("uri_template", "poll", "spec.uriTemplate"),
    ("mime_type", "poll", "spec.mimeType"),
    ("read_policy", "poll", "spec.readPolicy"),
    ("subject_id", "poll", "spec.subjectId"),
    ("backend", "poll", "spec.backend.http"),
    ("backend.kind", "poll", "spec.backend.http"),
    ("backend.url", "poll", "spec.backend.http.url"),
    ("backend.method", "poll", "spec.backend.http.method"),
    ("backend.headers.Authorization", "poll", "spec.backend.http.headers"),
    ("backend.body", "poll", "spec.backend.http.body"),
    ("backend.expected_status_codes[1]", "poll", "spec.backend.http.expectedStatusCodes[1]"),
    ("backend.require_json_response", "poll", "spec.backend.http.requireJsonResponse"),
    ("backend.timeout_ms", "poll", "spec.backend.http.timeoutMs"),
    ("backend.max_response_bytes", "poll", "spec.backend.http.maxResponseBytes"),
    ("backend.follow_redirects", "poll", "spec.backend.http.followRedirects"),
    ("watch", "poll", "spec.watch"),
    ("watch.strategy", "poll", "spec.watch.poll"),
    ("watch.strategy.type", "poll", "spec.watch.poll"),
    ("watch.strategy.interval_ms", "poll", "spec.watch.poll.intervalMs"),
    ("watch.strategy.ignore[2]", "poll", "spec.watch.poll.ignore[2]"),
    ("watch.strategy.token", "webhook", "spec.watch.webhook.tokenRef"),
    ("watch.strategy.previous_tokens[0]", "webhook", "spec.watch.webhook.tokenRef"),
    ("watch.strategy.signature", "webhook", "spec.watch.webhook.signature"),
    ("watch.strategy.signature.scheme", "webhook", "spec.watch.webhook.signature.scheme"),
    ("watch.strategy.signature.secrets[1]", "webhook", "spec.watch.webhook.signature.secretRef"),
    ("watch.strategy.signature.tolerance_s", "webhook", "spec.watch.webhook.signature.toleranceSeconds"),
    ("watch.strategy.signature.max_body_bytes", "webhook", "spec.watch.webhook.signature.maxBodyBytes"),
    ("watch.strategy.signature.header", "webhook", "spec.watch.webhook.signature.hmac.header"),
    ("watch.strategy.signature.prefix", "webhook", "spec.watch.webhook.signature.hmac.prefix"),
    ("watch.strategy.subject", "nats_topic", "spec.watch.natsTopic.subject"),
    ("watch.strategy.url", "nats_topic", "spec.watch.natsTopic.urlSecretRef"),
    ("watch.strategy.url", "postgres_listen_notify", "spec.watch.postgresListenNotify.urlSecretRef"),
    ("watch.strategy.channel", "postgres_listen_notify", "spec.watch.postgresListenNotify.channel"),
    ("watch.strategy.url", "sql_polling", "spec.watch.sqlPolling.urlSecretRef"),
    ("watch.strategy.query", "sql_polling", "spec.watch.sqlPolling.query"),
    ("watch.strategy.timeout_ms", "sql_polling", "spec.watch.sqlPolling.timeoutMs"),
    ("watch.strategy.kind", "plugin", "spec.watch.plugin.kind"),
    ("watch.strategy.phone_numbers[0]", "plugin", "spec.watch.plugin.config.phone_numbers[0]"),
    ("watch.notification_filter", "poll", "spec.watch.notificationFilter"),
    ("watch.notification_filter.expression", "poll", "spec.watch.notificationFilter.expression"),
]


@pytest.mark.parametrize(("path", "strategy", "field"), PATHS)
def test_a_rendered_entrys_path_reads_as_its_resourcewatch_field(path: str, strategy: str, field: str) -> None:
    assert spec_paths.spec_field(path, strategy) == field


def test_a_problem_naming_the_gateways_default_nats_server_names_the_charts_value() -> None:
    said = spec_paths.in_spec_words(
        "watch.strategy.url", "no NATS server for this watch: set url here or gateway.nats.url", "nats_topic"
    )
    assert said == (
        "spec.watch.natsTopic.urlSecretRef: no NATS server for this watch: set urlSecretRef or the chart's "
        "gateway.natsUrl"
    )


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("gateway.nats.url", "the chart's gateway.natsUrl"),
        ("gateway.server.allowed_origins[2]", "the chart's gateway.allowedOrigins[2]"),
        ("gateway.limits.watches_total", "the chart's gateway.limits.watches_total"),
        ("gateway.auth.principals[0].token", "Secret mcpg-gateway-auth key auth.yaml: principals[0].token"),
        ("elsewhere.x", "elsewhere.x"),
    ],
)
def test_a_path_in_the_gateway_section_reads_as_what_sets_it(path: str, said: str) -> None:
    assert spec_paths.section_field(path) == said


def test_a_pods_refusal_reads_as_the_watchs_field_or_the_charts_value() -> None:
    in_entry = spec_paths.in_user_words("mcp.capabilities.resources[3].backend.url", "has no scheme", "poll")
    in_section = spec_paths.in_user_words("gateway.nats.url", "not a NATS URL", None)
    assert (in_entry, in_section) == (
        "spec.backend.http.url: has no scheme",
        "the chart's gateway.natsUrl: not a NATS URL",
    )
