"""`kubewatch.fields`: the demo's status lines (`NAME key=value ... message words`) read back as fields."""

from __future__ import annotations

from mcpg_testing.kubewatch import fields


def test_fields_reads_each_key_and_skips_the_message_words() -> None:
    line = "daily-report ready=False reason=RollingOut waiting for the gateway rollout to complete"
    assert fields(line) == {"name": "daily-report", "ready": "False", "reason": "RollingOut"}


def test_fields_keeps_a_status_field_not_written_yet_as_empty() -> None:
    assert fields("report-token phase= current= retiring=") == {
        "name": "report-token",
        "phase": "",
        "current": "",
        "retiring": "",
    }


def test_fields_of_a_line_with_only_a_name() -> None:
    assert fields("report-token") == {"name": "report-token"}
