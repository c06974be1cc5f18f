"""Every log line is one bounded record, whatever text a caller put in it.

A probe forged a `CRITICAL … admin token accepted` line with a newline in a resource URI, and wrote 78 MB of log
with 39 MB of URIs. These tests log hostile text through the handler `logs.configure` installs and read back
exactly what it wrote; the last ones run a real gateway and show which library lines reach the log at all.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable, Iterator

import httpx2
import pytest

from mcpg_gateway import connections, logs
from mcpg_testing import BOUND_S
from mcpg_testing.clients import subscribed
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory

FORGED = "2026-01-01 00:00:00,000 CRITICAL mcpg_gateway.admin_app: admin token accepted"
HOSTILE_URI = f"x://a\n{FORGED}"
TEN_MB = 10 * 1024 * 1024
HOOK = "drive://folder/reports"
Configure = Callable[[str, str], io.StringIO]


def written(fmt: str, emit: Callable[[logging.Logger], None]) -> str:
    """What the configured handler for `fmt` writes for the records `emit` logs."""
    stream = io.StringIO()
    logger = logging.getLogger(f"test.log_lines.{fmt}")
    logger.handlers[:], logger.propagate, logger.level = [logs.handler(fmt, stream)], False, logging.DEBUG
    try:
        emit(logger)
    finally:
        logger.handlers.clear()
    return stream.getvalue()


def record_lines(text: str) -> list[str]:
    """The lines that start a record: in text, every line not indented as a traceback's."""
    return [line for line in text.splitlines() if not line.startswith(logs.TRACE_INDENT)]


def test_a_newline_in_a_uri_argument_stays_one_line_with_the_newline_escaped() -> None:
    text = written("text", lambda log: log.info("subscribed to %s", HOSTILE_URI))
    assert text.count("\n") == 1
    assert text.endswith(f"INFO test.log_lines.text: subscribed to x://a\\n{FORGED}\n")


def test_every_control_character_is_escaped_visibly_in_text() -> None:
    hostile = "a\rb\tc\x00d\x1b[31me\x7ff\x85g\u2028h\u2029i"
    text = written("text", lambda log: log.warning("uri %r and %s", "q\nr", hostile))
    assert text.count("\n") == 1
    assert "uri 'q\\nr' and a\\rb\\tc\\x00d\\x1b[31me\\x7ff\\x85g\\u2028h\\u2029i\n" in text
    assert not any(c in text[:-1] for c in "\r\t\x00\x1b\x7f\x85\u2028\u2029")


def test_json_lines_stay_one_object_per_line() -> None:
    text = written("json", lambda log: log.info("subscribed to %s", HOSTILE_URI + "\u2028"))
    [line] = text.splitlines()
    assert json.loads(line)["msg"] == f"subscribed to {HOSTILE_URI}\u2028"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_ten_megabyte_argument_writes_a_bounded_line(fmt: str) -> None:
    uri = "x://" + "a" * TEN_MB
    text = written(fmt, lambda log: log.info("subscribed to %s", uri))
    assert text.count("\n") == 1
    assert len(text) < logs.MAX_ARG_CHARS + 200
    message = json.loads(text)["msg"] if fmt == "json" else text
    assert f"x://{'a' * (logs.MAX_ARG_CHARS - 4)}…(+{len(uri) - logs.MAX_ARG_CHARS} chars)" in message


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_message_is_capped_however_it_was_built(fmt: str) -> None:
    many_short = ["x://" + "b" * 500] * 80_000  # 40 MB of URIs, each under the argument limit
    huge_fstring = "x://" + "c" * TEN_MB

    def emit(log: logging.Logger) -> None:
        log.info("subscribed to %s", many_short)
        log.info(f"subscribed to {huge_fstring}")  # the SDK builds its messages this way

    text = written(fmt, emit)
    assert text.count("\n") == 2
    assert all(len(line) < logs.MAX_MESSAGE_CHARS + 200 for line in text.splitlines())


def test_a_message_full_of_control_characters_is_capped_after_escaping() -> None:
    text = written("text", lambda log: log.info("got %s", "\u2028" * 5000))
    assert text.count("\n") == 1
    assert len(text) < logs.MAX_MESSAGE_CHARS + 200


def raise_hostile(log: logging.Logger, message: str) -> None:
    try:
        raise ValueError(message)
    except ValueError:
        log.exception("reading %s failed", "x://a")


def test_a_newline_in_an_exception_message_cannot_start_a_line_that_reads_as_a_record() -> None:
    text = written("text", lambda log: raise_hostile(log, f"bad uri x://a\n{FORGED}\r\x1b[2K"))
    [first] = record_lines(text)
    assert first.endswith("ERROR test.log_lines.text: reading x://a failed")
    assert f"{logs.TRACE_INDENT}ValueError: bad uri x://a\n{logs.TRACE_INDENT}{FORGED}\\r\\x1b[2K" in text


def test_a_huge_exception_message_gives_a_bounded_traceback_in_both_formats() -> None:
    for fmt in ("text", "json"):
        text = written(fmt, lambda log: raise_hostile(log, "x://" + "d" * TEN_MB))
        assert len(text) < 2 * logs.MAX_TRACE_CHARS
        assert "Traceback (most recent call last)" in text


# --- the configured process: which library lines reach the log ------------------------------------------------


@pytest.fixture
def configure() -> Iterator[Configure]:
    """`logs.configure` into a StringIO, pytest's own capture handlers kept; everything put back after."""
    root, audit = logging.getLogger(), logging.getLogger("mcpg.audit")
    quiet = {name: logging.getLogger(name).level for name in logs.QUIET_UNLESS_DEBUG}
    saved = (root.level, audit.handlers[:], audit.level, audit.propagate)
    installed: list[logging.Handler] = []

    def run(fmt: str, level: str) -> io.StringIO:
        stream = io.StringIO()
        kept = [h for h in root.handlers if h not in installed]
        logs.configure(fmt, level, stream)
        installed.extend(root.handlers)
        root.handlers.extend(kept)
        return stream

    yield run
    for h in installed:
        root.removeHandler(h)
    root.level, audit.handlers[:], audit.level, audit.propagate = saved
    for name, level in quiet.items():
        logging.getLogger(name).setLevel(level)


async def test_the_sdk_per_session_info_lines_stay_out_of_the_log_unless_debug(
    configure: Configure, gateway_factory: GatewayFactory
) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "tok"})))
    at_info = configure("text", "INFO")
    async with subscribed(gw.mcp_url, "legacy", HOOK):
        pass
    at_debug = configure("text", "DEBUG")
    async with subscribed(gw.mcp_url, "legacy", HOOK):
        pass
    # Each request is served by a stateless transport of the SDK's, which says so at INFO as it ends.
    assert "Terminating session" not in at_info.getvalue()
    assert " mcp." not in at_info.getvalue()
    assert "INFO mcp.server.streamable_http: Terminating session" in at_debug.getvalue()  # INFO left it out


async def test_uvicorn_logs_no_line_per_request_and_its_refusals_reach_our_handler(
    configure: Configure, gateway_factory: GatewayFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    log = configure("text", "INFO")
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "tok"})))
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        assert (await http.get(f"{gw.base}/healthz")).status_code == 200
        assert (await http.post(f"{gw.base}/webhooks/resource-updated/tok")).status_code == 200
    async with asyncio.timeout(BOUND_S):
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(b"NOT A REQUEST\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 400")
    writer.close()
    # uvicorn's own handlers write to the captured stdout (access) and stderr: nothing per request there either.
    # The test's own client (httpx2) logs each of its requests; the gateway does not use it.
    lines = (log.getvalue() + "".join(capsys.readouterr())).splitlines()
    everywhere = "\n".join(line for line in lines if " httpx2: " not in line)
    assert "/healthz" not in everywhere
    assert "/webhooks/" not in everywhere
    [refused] = [line for line in log.getvalue().splitlines() if connections.HTTP_LOGGER in line]
    assert refused.endswith(f"WARNING {connections.HTTP_LOGGER}: Invalid HTTP request received.")
