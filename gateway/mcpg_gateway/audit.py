"""Audit events: one JSON line each on the `mcpg.audit` logger, separate from operational logs.

The event's `ts` is stamped by the handler that writes it (`logs.AuditFormatter`), from the record's own time and
in the format of the other log lines (ISO 8601 UTC with milliseconds in JSON, the text lines' `asctime` in text),
so an audit line sorts and greps with the lines around it.
"""

from __future__ import annotations

import json
import logging

audit_logger = logging.getLogger("mcpg.audit")


def watch_fired(uri: str, strategy: str, subscribers: int) -> None:
    event = {"event": "mcpg.watch.fired", "uri": uri, "strategy": strategy, "subscribers": subscribers}
    audit_logger.info(json.dumps(event, separators=(",", ":")))
