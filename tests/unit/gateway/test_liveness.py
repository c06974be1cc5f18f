"""The liveness rules and the per-watch connection record the admin API and metrics show (`liveness.py`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mcpg_gateway import liveness
from mcpg_gateway.contract import config


def test_the_documented_bounds_follow_the_settings() -> None:
    rules = liveness.Rules.from_config(config.LivenessConfig())
    assert (rules.interval_s, rules.timeout_s) == (10.0, 5.0)
    assert rules.nats_options() == {"ping_interval": 10.0, "max_outstanding_pings": 1}


@pytest.mark.parametrize(
    ("field", "value"), [("interval_s", 0.1), ("interval_s", 301), ("timeout_s", 0), ("timeout_s", 61)]
)
def test_settings_out_of_range_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        config.LivenessConfig.model_validate({field: value})


@pytest.mark.parametrize("value", [0, 300_001])
def test_a_tracking_query_timeout_out_of_range_is_refused(value: int) -> None:
    spec = {"type": "sql_polling", "url": "postgresql://db/app", "query": "select 1", "timeout_ms": value}
    with pytest.raises(ValidationError, match="timeout_ms"):
        config.SqlPollingStrategy.model_validate(spec)


def test_a_watch_without_a_connection_shows_none() -> None:
    c = liveness.Connection()
    assert (c.held, c.down) == (False, False)


def test_an_outage_is_one_loss_however_many_reconnects_fail_and_a_round_trip_ends_it() -> None:
    causes: list[liveness.Cause] = []
    c = liveness.Connection(on_loss=causes.append)
    c.round_trip()
    assert (c.held, c.up, c.down) == (True, True, False)
    first = c.last_round_trip

    c.lost("unresponsive")
    c.lost("closed")  # terminating the silent connection reports its close too
    c.lost("closed")
    assert causes == ["unresponsive"]
    assert (c.up, c.down, c.losses) == (False, True, 1)
    assert c.down_since is not None
    assert c.last_round_trip == first  # the last time it did work

    c.round_trip()
    assert c.up
    assert c.down_since is None
    c.lost("closed")
    assert causes == ["unresponsive", "closed"]
    assert c.losses == 2
