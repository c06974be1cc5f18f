"""The bus's two key-value buckets, where pull-watch ownership keeps its leases and states (`ownership.py`).

`<bucket>-owners` holds one lease per pull URI and drops an entry `lease_ttl_s` after its last write (the
stream's max age); `<bucket>-state` holds each pull URI's last state, with no expiry. Keys are
`bus.uri_hash(uri)`. Every gateway creates them if they are missing; one that finds them made by another
(perhaps with another TTL) opens them as they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from mcpg_gateway.contract import config

logger = logging.getLogger(__name__)


def unavailable(cfg: config.BusConfig) -> str:
    """What to say when the buckets cannot be had: without them no gateway runs a pull watch."""
    return (
        f"cannot create or open the key-value buckets {cfg.bucket}-owners and {cfg.bucket}-state; pull watches "
        "(poll, sql_polling, pull plugins) wait for them: enable JetStream for this account, or create them"
    )


@dataclass(frozen=True, slots=True)
class Buckets:
    owners: KeyValue
    state: KeyValue
    lease_ttl_s: float
    """The owners bucket's actual TTL (an existing bucket keeps the one it was made with)."""


async def open_buckets(js: JetStreamContext, cfg: config.BusConfig) -> Buckets:
    """Both buckets, created if missing. Raises what JetStream raised when it cannot."""
    owners = await _bucket(js, f"{cfg.bucket}-owners", cfg.lease_ttl_s)
    state = await _bucket(js, f"{cfg.bucket}-state", None)
    ttl = (await owners.status()).ttl or cfg.lease_ttl_s
    if abs(ttl - cfg.lease_ttl_s) > 0.001:
        logger.warning(
            "bus bucket %s-owners exists with a lease TTL of %.1f s (configured: %.1f s); using it",
            cfg.bucket,
            ttl,
            cfg.lease_ttl_s,
        )
    return Buckets(owners, state, ttl)


async def _bucket(js: JetStreamContext, name: str, ttl_s: float | None) -> KeyValue:
    try:
        return await js.create_key_value(bucket=name, ttl=ttl_s, history=1)
    except nats.js.errors.APIError:
        # Exists with another configuration (another TTL), or this account may not create it: opening tells which.
        return await js.key_value(name)
