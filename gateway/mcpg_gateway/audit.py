"""Audit events: one JSON line each on the `mcpg.audit` logger, separate from operational logs."""

from __future__ import annotations

import json
import logging
import time

audit_logger = logging.getLogger("mcpg.audit")


def watch_fired(uri: str, strategy: str, subscribers: int) -> None:
    event = {
        "event": "mcpg.watch.fired",
        "ts": time.time(),
        "uri": uri,
        "strategy": strategy,
        "subscribers": subscribers,
    }
    audit_logger.info(json.dumps(event, separators=(",", ":")))
