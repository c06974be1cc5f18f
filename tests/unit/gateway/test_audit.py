"""The audit line's `ts`: the record's time, in the format of the log lines around it (text and JSON)."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterator

import pytest

from mcpg_gateway import audit, logs

TEXT_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")
JSON_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
Configure = Callable[[str], io.StringIO]


def record_at(created: float, name: str = "mcpg.audit") -> logging.LogRecord:
    record = logging.LogRecord(name, logging.INFO, __file__, 1, '{"event":"e"}', None, None)
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


@pytest.mark.parametrize("created", [1_764_547_384.0, 1_764_547_384.999, 1_764_547_385.001, 1_767_225_599.5])
def test_the_audit_stamp_is_what_the_other_lines_of_each_format_show(created: float) -> None:
    text, json_audit = logs.AuditFormatter("text"), logs.AuditFormatter("json")
    for formatter in (text, json_audit):
        formatter.stamp(record_at(created - 1.5))  # a second earlier: the stamp kept from it must not leak
    record = record_at(created)
    assert text.stamp(record) == logs.TextFormatter().formatTime(record)
    assert json_audit.stamp(record) == json.loads(logs.JsonFormatter().format(record_at(created, "mcpg_gateway")))["ts"]


@pytest.fixture
def configure() -> Iterator[Configure]:
    """`logs.configure` into a StringIO; the root and audit loggers put back after."""
    root, audit_log = logging.getLogger(), logging.getLogger("mcpg.audit")
    saved = (root.handlers[:], root.level, audit_log.handlers[:], audit_log.level, audit_log.propagate)
    quiet = {name: logging.getLogger(name).level for name in logs.QUIET_UNLESS_DEBUG}

    def run(fmt: str) -> io.StringIO:
        stream = io.StringIO()
        logs.configure(fmt, "INFO", stream)
        return stream

    yield run
    root.handlers[:], root.level, audit_log.handlers[:], audit_log.level, audit_log.propagate = saved
    for name, level in quiet.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(("fmt", "pattern"), [("text", TEXT_TIME), ("json", JSON_TIME)])
def test_an_audit_line_carries_its_time_as_the_log_lines_around_it_do(
    configure: Configure, fmt: str, pattern: re.Pattern[str]
) -> None:
    out = configure(fmt)
    logging.getLogger("mcpg_gateway.fanout.watchers").info("before the fire")
    audit.watch_fired("drive://folder/reports", "webhook", 2)
    operational, line = out.getvalue().splitlines()
    event = json.loads(line)
    shown = operational[:23] if fmt == "text" else json.loads(operational)["ts"]
    assert pattern.fullmatch(shown)
    assert pattern.fullmatch(event["ts"]), event["ts"]
    assert list(event) == ["ts", "event", "uri", "strategy", "subscribers"]
    assert (event["event"], event["uri"], event["subscribers"]) == ("mcpg.watch.fired", "drive://folder/reports", 2)


def test_text_that_is_not_an_event_object_is_written_unstamped() -> None:
    assert logs.stamped("not json", "t") == "not json"
    assert json.loads(logs.stamped("{}", "t")) == {"ts": "t"}
    assert json.loads(logs.stamped('{"a":1}', "t")) == {"ts": "t", "a": 1}
