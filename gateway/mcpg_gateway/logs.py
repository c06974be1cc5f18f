"""Log output, configured once by the entrypoint: text locally, one JSON object per line in a cluster."""

from __future__ import annotations

import json
import logging
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.name == "mcpg.audit":
            return record.getMessage()  # already one JSON event
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"))


def configure(fmt: str, level: str) -> None:
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Audit events are already one JSON object each: written as they are, in both formats, through their own
    # handler. That keeps them machine-readable in text mode too, and skips the root formatter (its timestamp
    # formatting was a measurable share of a webhook's cost).
    audit = logging.getLogger("mcpg.audit")
    audit_handler = logging.StreamHandler()
    audit_handler.setFormatter(logging.Formatter("%(message)s"))
    audit.handlers[:] = [audit_handler]
    audit.propagate = False
    audit.setLevel(logging.INFO)
