"""What one pass found and did, as the operator's metrics count it: derived from the pass's pure decision.

The pass computes these figures itself and hands them to the scheduler in its `Outcome`, so `metrics` keeps the
registry and its sums and needs no view of a pass (it would otherwise import the decision that the pass imports
it for). The figures carry no name, token or URI: only small closed sets (`metrics.TOKEN_PHASES`, the reasons).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from typing import Any

from mcpg_operator import actions as w
from mcpg_operator import conditions, objects, observed
from mcpg_operator.metrics import KNOWN_REASONS, OTHER, TOKEN_PHASES, TRANSITIONS, Facts
from mcpg_operator.reconcile.decide import Decision


def of(snap: observed.Snapshot, decided: Decision) -> Facts | None:
    """The figures of a pass; None for a pass that only created Secrets (it decided no status: `rerun`)."""
    if decided.rerun:
        return None
    watches = Tally(_ready(s) for ref, s in decided.statuses.items() if ref.plural == "resourcewatches")
    phases = Tally(str(s.get("phase")) for ref, s in decided.statuses.items() if ref.plural == "webhooktokens")
    transitions = Tally(TRANSITIONS[e.reason] for e in decided.events if e.reason in TRANSITIONS)
    pods, digest = decided.pods, decided.plan.digest
    config = w.Ref("secrets", objects.CONFIG_SECRET)
    wrote = any(isinstance(x, w.ApplyObject) and x.ref == config for x in decided.writes)
    new = snap.config is None or snap.config.digest != digest
    acknowledged = sum(p.serving_digest == digest for p in pods.counted)
    return Facts(
        has_objects=bool(snap.watches or snap.tokens),
        token_phases={p if p in TOKEN_PHASES else OTHER: n for p, n in phases.items()},
        tokens_retiring=sum(len(state.retiring) for state in decided.states.values()),
        watches=dict(watches),
        transitions=dict(transitions),
        written=digest if wrote and new else None,
        acknowledged=digest if pods.counted and acknowledged == len(pods.counted) else None,
        pods_counted=len(pods.counted),
        pods_acknowledged=acknowledged,
    )


def _ready(status: Mapping[str, Any]) -> tuple[str, str]:
    conds = status.get("conditions")
    found: Mapping[str, Any] = next((c for c in conds or [] if c.get("type") == conditions.READY), {})
    reason = str(found.get("reason", ""))
    return ("True" if found.get("status") == "True" else "False"), reason if reason in KNOWN_REASONS else OTHER
