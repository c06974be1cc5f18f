"""Log output, configured once by the entrypoint: text locally, one JSON object per line in a cluster.

Log lines carry text callers choose (a URI, a header, an exception's message), and a hostile-caller probe used
that: a newline in a URI forged a `CRITICAL … admin token accepted` line, and 39 MB of URIs wrote 78 MB of log.
So the handler, not each call site, makes every record of every logger that reaches it one bounded line: a long
string argument is cut to `MAX_ARG_CHARS`, the message to `MAX_MESSAGE_CHARS`, a traceback to `MAX_TRACE_CHARS`.
In text, control characters are escaped (`\\n`, `\\x1b`, `\\u2028`) and a traceback's lines are indented, so a
line that starts at column 0 always starts a record; JSON escapes them itself.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Any, TextIO

MAX_ARG_CHARS = 512
"""A longer str argument keeps its first 512 characters and says how many it lost: `…(+N chars)`."""
MAX_MESSAGE_CHARS = 8192
"""The whole message, after interpolation (and, in text, escaping), at most: one line is never megabytes."""
MAX_TRACE_CHARS = 16384
"""A traceback keeps its first and last halves of this: the outermost frames, and the exception's own line."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TRACE_INDENT = "  "
"""Prefixes every traceback line in text: only a record's first line starts at column 0."""
QUIET_UNLESS_DEBUG = ("mcp",)
"""The MCP SDK logs at INFO per request it serves (`Terminating session: …` as each one's transport ends):
request-rate noise. Its loggers stay at WARNING unless the level is DEBUG."""

# C0, DEL, C1, and the two Unicode line separators some viewers break lines at.
_CONTROL = re.compile("([\x00-\x1f\x7f-\x9f\u2028\u2029])")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shortened(value: object) -> object:
    """`value`, but a str longer than `MAX_ARG_CHARS` keeps its head and says how much it lost."""
    if isinstance(value, str) and len(value) > MAX_ARG_CHARS:
        return f"{value[:MAX_ARG_CHARS]}…(+{len(value) - MAX_ARG_CHARS} chars)"
    return value


def message(record: logging.LogRecord) -> str:
    """The record's message with each long argument shortened; not yet capped or escaped."""
    text = str(record.msg)
    args = record.args
    if isinstance(args, Mapping):
        text = text % {key: shortened(value) for key, value in args.items()}
    elif args:
        text = text % tuple(shortened(arg) for arg in args)
    return text.removesuffix("\n")  # uvicorn ends some messages with a newline that says nothing


def escaped(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` with its control characters escaped, cut to `limit` characters plus `…(+N chars)` for the rest."""
    if len(text) <= limit and _CONTROL.search(text) is None:
        return text
    shown: list[str] = []
    room, kept = limit, 0
    # Escaping only lengthens, so nothing past `limit` could show; split keeps the separators at odd indexes.
    for i, piece in enumerate(_CONTROL.split(text[:limit])):
        out = _escape_one(piece) if i % 2 else piece
        if len(out) > room:
            if not i % 2:
                shown.append(piece[:room])
                kept += room
            break
        shown.append(out)
        room -= len(out)
        kept += len(piece)
    return "".join(shown) + _lost(len(text) - kept)


def capped(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` cut to `limit` characters plus `…(+N chars)`, for JSON (which escapes by itself)."""
    return text if len(text) <= limit else text[:limit] + _lost(len(text) - limit)


def _escape_all(text: str) -> str:
    return _CONTROL.sub(lambda found: _escape_one(found.group()), text)


def _escape_one(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def _lost(count: int) -> str:
    return f"…(+{count} chars)" if count > 0 else ""


def _middle_cut(text: str, limit: int = MAX_TRACE_CHARS) -> str:
    """Head and tail of a traceback: where it started, and the exception (the part a message can bloat)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n…({len(text) - 2 * half} chars cut)…\n{text[-half:]}"


def _trace(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback and stack, as Formatter.format would append them, bounded."""
    parts = []
    if record.exc_info:
        parts.append(formatter.formatException(record.exc_info))
    elif record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return _middle_cut("\n".join(parts))


class TextFormatter(logging.Formatter):
    """One line per record, control characters escaped; a traceback follows on indented lines."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        shown = copy.copy(record)  # every other handler (the audit one, pytest's) still sees the record as logged
        shown.message = escaped(message(record))
        shown.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(shown)
        trace = _trace(self, record)
        if trace:
            # Not escaped to one line: a traceback is read as lines. Each is escaped and indented instead, so a
            # newline in an exception's message cannot start a line that reads as a record.
            lines = (TRACE_INDENT + _escape_all(part) for part in trace.split("\n"))
            line += "\n" + "\n".join(lines)
        return line


def json_time(record: logging.LogRecord) -> str:
    """A JSON line's `ts`: ISO 8601 in UTC, with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.name == "mcpg.audit":
            return audit_line(stamped(record.getMessage(), json_time(record)))
        out = {
            "ts": json_time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": capped(message(record)),
        }
        trace = _trace(self, record)
        if trace:
            out["exc"] = trace
        return json.dumps(out, separators=(",", ":"))


def audit_line(text: str) -> str:
    """An audit event (one JSON object) as written: as it is when short, else with its long strings shortened."""
    if len(text) > MAX_MESSAGE_CHARS:
        with contextlib.suppress(ValueError):  # not JSON after all: cut below like any text
            text = json.dumps(_shortened_json(json.loads(text)), separators=(",", ":"))
    return escaped(text)  # json.dumps left no control character: a no-op for every event audit.py writes


def _shortened_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _shortened_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shortened_json(item) for item in value]
    return shortened(value)


def stamped(text: str, ts: str) -> str:
    """An audit event with `ts` put first (`audit.py` leaves it to the handler); other text as it is."""
    if not text.startswith("{"):
        return text
    rest = text[1:]
    return '{"ts":' + json.dumps(ts) + ("" if rest.lstrip().startswith("}") else ",") + rest


class AuditFormatter(logging.Formatter):
    """Audit events as they are, `ts` stamped as the other lines of `fmt` ("text" or "json") show time.

    Every fire writes one, so the date and time to the second are formatted once per second, not per line:
    formatting them was a measurable share of a webhook's cost."""

    def __init__(self, fmt: str = "text") -> None:
        super().__init__()
        if fmt == "json":  # as json_time
            self._pattern, self._convert, self._millis = "%Y-%m-%dT%H:%M:%S", time.gmtime, ".{:03d}Z"
        else:  # as logging.Formatter.formatTime, which TextFormatter uses
            self._pattern, self._convert, self._millis = self.default_time_format, time.localtime, ",{:03d}"
        self._second, self._prefix = -1, ""

    def stamp(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._second, self._prefix = second, time.strftime(self._pattern, self._convert(record.created))
        return self._prefix + self._millis.format(int(record.msecs))

    def format(self, record: logging.LogRecord) -> str:
        return audit_line(stamped(record.getMessage(), self.stamp(record)))


def handler(fmt: str, stream: TextIO | None = None) -> logging.Handler:
    """The root handler for `fmt` ("text" or "json"), writing to `stream` (stderr by default)."""
    out = logging.StreamHandler(stream)
    out.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    return out


def configure(fmt: str, level: str, stream: TextIO | None = None) -> None:
    root = logging.getLogger()
    root.handlers[:] = [handler(fmt, stream)]
    root.setLevel(level.upper())
    for name in QUIET_UNLESS_DEBUG:
        logging.getLogger(name).setLevel(logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING)
    # Audit events are already one JSON object each: written as they are, in both formats, through their own
    # handler. That keeps them machine-readable in text mode too, and skips the root formatter (its timestamp
    # formatting was a measurable share of a webhook's cost).
    audit = logging.getLogger("mcpg.audit")
    audit_handler = logging.StreamHandler(stream)
    audit_handler.setFormatter(AuditFormatter(fmt))
    audit.handlers[:] = [audit_handler]
    audit.propagate = False
    audit.setLevel(logging.INFO)
