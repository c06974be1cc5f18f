"""The bus's key-value buckets: pull-watch ownership's leases and states (`ownership.py`), and the delivery ids of
signed webhooks (`replays.py`).

`<bucket>-owners` holds one lease per pull URI and drops an entry `lease_ttl_s` after its last write (the stream's
max age); `<bucket>-state` holds each pull URI's last state, with no expiry. Keys are `bus.uri_hash(uri)`.
`<bucket>-deliveries` holds the id of each signed delivery let through, for twice the widest timestamp tolerance
(`signing.MAX_TOLERANCE_S`), so a replay is refused on every replica. Every gateway creates them if they are
missing; one that finds them made by another (perhaps with another TTL) opens them as they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpg_gateway.contract import config, signing

if TYPE_CHECKING:  # nats is imported once a bus is in use, not by every gateway
    from nats.js import JetStreamContext
    from nats.js.kv import KeyValue

logger = logging.getLogger(__name__)

DELIVERIES_TTL_S = 2.0 * signing.MAX_TOLERANCE_S
"""The longest an id is kept; each is written with its own watch's window (`replays.py`), usually 10 minutes."""
DELIVERIES_MAX_BYTES = 16 * 1024 * 1024
"""About 100,000 live ids: room for 160 signed deliveries a second at the default tolerance, inside a managed
namespace's share of the bus (`ACCOUNT_JETSTREAM_LIMITS`). Past it a new id is refused and its delivery answered
503, so the sender retries; nothing is let through unrecorded."""


def unavailable(cfg: config.BusConfig) -> str:
    """What to say when the buckets cannot be had: without them no gateway runs a pull watch."""
    return (
        f"cannot create or open the key-value buckets {cfg.bucket}-owners, {cfg.bucket}-state and "
        f"{cfg.bucket}-deliveries; pull watches (poll, sql_polling, pull plugins) wait for them, and signed webhooks "
        "with a delivery id are answered 503: enable JetStream for this account, or create them"
    )


@dataclass(frozen=True, slots=True)
class Buckets:
    owners: KeyValue
    state: KeyValue
    lease_ttl_s: float
    """The owners bucket's actual TTL (an existing bucket keeps the one it was made with)."""
    deliveries: KeyValue


async def open_buckets(js: JetStreamContext, cfg: config.BusConfig) -> Buckets:
    """Both buckets, created if missing. Raises what JetStream raised when it cannot."""
    owners = await _bucket(js, f"{cfg.bucket}-owners", cfg.lease_ttl_s)
    state = await _bucket(js, f"{cfg.bucket}-state", None)
    deliveries = await _bucket(js, f"{cfg.bucket}-deliveries", DELIVERIES_TTL_S, DELIVERIES_MAX_BYTES)
    ttl = (await owners.status()).ttl or cfg.lease_ttl_s
    if abs(ttl - cfg.lease_ttl_s) > 0.001:
        logger.warning(
            "bus bucket %s-owners exists with a lease TTL of %.1f s (configured: %.1f s); using it",
            cfg.bucket,
            ttl,
            cfg.lease_ttl_s,
        )
    return Buckets(owners, state, ttl, deliveries)


async def _bucket(js: JetStreamContext, name: str, ttl_s: float | None, max_bytes: int | None = None) -> KeyValue:
    import nats.js.errors  # here, not at the top: only a gateway on a bus gets this far

    try:
        return await js.create_key_value(bucket=name, ttl=ttl_s, history=1, max_bytes=max_bytes)
    except nats.js.errors.APIError:
        # Exists with another configuration (another TTL), or this account may not create it: opening tells which.
        return await js.key_value(name)
