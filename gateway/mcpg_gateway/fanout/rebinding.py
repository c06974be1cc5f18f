"""What a new configuration does to one running watcher: keep it, restart it, or end its subscriptions. Pure.

A watcher is kept (its strategy, connection and baseline untouched; only its binding swapped, so a new filter,
read policy or description applies from the next fire) when the entry serving its URI still reads and watches the
same source: the same backend, the same strategy settings, the same template values. A webhook watch's tokens
are not its source: they route deliveries to it (`strategies/webhook.TokenIndex`) and change in the index alone,
so a token rotation keeps every webhook watcher. Anything else about the source restarts the watcher, with a
baseline of its own. A URI no entry serves any more, or serves without a watch, ends its subscriptions.
"""

from __future__ import annotations

import enum

from mcpg_gateway import catalog
from mcpg_gateway.contract import config


class Fate(enum.Enum):
    KEEP = "keep"
    RESTART = "restart"
    REMOVE = "remove"


def fate(running: catalog.Binding, now: catalog.Binding | None) -> Fate:
    """What becomes of a watcher of `running` once the catalog resolves its URI to `now` (None: not served)."""
    if now is None or now.watch is None or now.uri != running.uri:
        return Fate.REMOVE
    return Fate.KEEP if same_source(running, now) else Fate.RESTART


def same_source(a: catalog.Binding, b: catalog.Binding) -> bool:
    """Whether two bindings of one URI read and watch the same thing (pydantic compares secret values too)."""
    if a.variables != b.variables or a.entry.backend != b.entry.backend:
        return False
    if a.watch is None or b.watch is None:
        return a.watch is b.watch
    return _source(a.watch.strategy) == _source(b.watch.strategy)


def _source(strategy: config.Strategy) -> object:
    if isinstance(strategy, config.WebhookStrategy):
        return strategy.type  # passive: its tokens live in the index, not in the watcher
    return strategy
