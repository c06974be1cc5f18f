"""The operator's log at INFO is one line per change it makes, naming the object; a pass that changes nothing is
silent, and kopf's per-event "Handler ... succeeded." lines stay out unless --verbose or --debug asks for them."""

from __future__ import annotations

import logging

import pytest

from mcpg_operator import __main__ as entry
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, resourcewatch, run, settle, webhooktoken


@pytest.fixture
def settled_kube(kube: FakeKube) -> FakeKube:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="t0ken")
    kube.put(resourcewatch("hook"))
    kube.put(resourcewatch("broken", token=None, backend={"http": {"url": "upstream/x"}}))
    return kube


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and r.name.startswith("mcpg_")]


async def test_a_pass_that_changes_nothing_logs_nothing(
    settled_kube: FakeKube, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    await settle(settled_kube, clock)
    caplog.set_level(logging.DEBUG)
    await run(settled_kube, clock)
    assert info_lines(caplog) == []


async def test_a_change_to_one_object_logs_one_line_naming_it_and_the_change(
    settled_kube: FakeKube, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    await settle(settled_kube, clock)
    caplog.set_level(logging.DEBUG)
    # Still invalid, differently: its status changes (a new generation, a new message), nothing else does.
    settled_kube.put(resourcewatch("broken", token=None, backend={"http": {"url": "ftp://upstream/x"}}))
    await run(settled_kube, clock)
    (line,) = info_lines(caplog)
    assert line.startswith(f"namespace {NS}: status of ResourceWatch broken: Ready=False (InvalidSpec)")


def kopf_level(*flags: str) -> int:
    """The level `mcpg-operator FLAGS` leaves on kopf's per-object logger (NOTSET: the root's, as kopf set it)."""
    entry.quiet_event_lines(entry.parse(list(flags)))
    return logging.getLogger(entry.PER_EVENT_LOGGER).level


@pytest.fixture
def kopf_objects_level() -> object:
    """The level the tests set on kopf's logger, put back afterwards: loggers are process-wide."""
    kopf_logger = logging.getLogger(entry.PER_EVENT_LOGGER)
    level = kopf_logger.level
    kopf_logger.setLevel(logging.NOTSET)
    yield None
    kopf_logger.setLevel(level)


@pytest.mark.usefixtures("kopf_objects_level")
def test_kopfs_per_event_lines_are_left_out_unless_verbose_or_debug_asks() -> None:
    levels = [kopf_level(), kopf_level("--verbose"), kopf_level("--debug"), kopf_level("--quiet")]
    assert levels == [logging.WARNING, logging.NOTSET, logging.NOTSET, logging.WARNING]
