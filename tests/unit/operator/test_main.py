"""`mcpg-operator`'s command line: its flags, kopf's namespaces, and nothing started on a bad setting or flag; then
how it leads: kopf runs while the Lease is held, stops at once with every pass when it is lost, and the Lease is
released on a stop asked for (kopf stands in as a coroutine with kopf's part: it runs our startup, then waits)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from mcpg_operator import __main__ as entry
from mcpg_operator import settings
from mcpg_operator.kube import Kube
from mcpg_operator.reconcile.run import Outcome
from mcpg_operator.scheduler import Scheduler, Turns
from mcpg_testing import BOUND_S
from mcpg_testing.leases import Leases

ELECTION = settings.LeaderElection(namespace="ops", identity="a", lease_s=1.5, renew_s=1.0, retry_s=0.1)


def test_by_default_it_serves_on_every_interface_at_8080_with_kopfs_full_log_format() -> None:
    opts = entry.parse([])
    assert (opts.bind, opts.log_format, opts.verbose, opts.log_prefix) == (("0.0.0.0", 8080), "full", False, None)


def test_kopfs_logging_flags_are_taken_as_kopf_run_takes_them() -> None:
    opts = entry.parse(["--verbose", "--log-format=json", "--no-log-prefix", "--log-refkey=obj"])
    assert (opts.verbose, opts.log_format, opts.log_prefix, opts.log_refkey) == (True, "json", False, "obj")


@pytest.mark.parametrize(
    ("flag", "bind"),
    [
        ("--metrics-bind-address=127.0.0.1:9400", ("127.0.0.1", 9400)),
        ("--metrics-bind-address=:8443", ("0.0.0.0", 8443)),
    ],
)
def test_the_bind_address_is_host_and_port(flag: str, bind: tuple[str, int]) -> None:
    assert entry.parse([flag]).bind == bind


@pytest.mark.parametrize(
    "argv",
    [
        ["--metrics-bind-address=8080"],
        ["--metrics-bind-address=h:99999"],
        ["--liveness=http://0.0.0.0:8080/healthz"],  # kopf's endpoint: ours replaces it
        ["-n", "shop", "--all-namespaces"],
        ["--log-format=yaml"],
    ],
)
def test_a_bad_flag_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        entry.parse(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.endswith("; see mcpg-operator --help\n")


def test_the_configured_namespaces_become_kopfs_namespaces() -> None:
    assert entry.kopf_scope(entry.parse([]), ("shop", "mail")) == {"clusterwide": False, "namespaces": ("shop", "mail")}


def test_no_namespaces_means_all_of_them_unless_the_command_line_says_otherwise() -> None:
    assert entry.kopf_scope(entry.parse([]), ()) == {"clusterwide": True, "namespaces": ()}
    assert entry.kopf_scope(entry.parse(["-n", "x"]), ("shop",)) == {"clusterwide": False, "namespaces": ("x",)}
    assert entry.kopf_scope(entry.parse(["-A"]), ("shop",)) == {"clusterwide": True, "namespaces": ()}


def test_a_bad_setting_stops_the_operator_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCPG_RESYNC_SECONDS", "soon")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert entry.main([]) == 2
    assert "MCPG_RESYNC_SECONDS" in capsys.readouterr().err


def test_without_a_lease_namespace_the_operator_does_not_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("POD_NAMESPACE", "MCPG_LEADER_ELECTION_NAMESPACE", "MCPG_LEADER_ELECTION_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    assert entry.main([]) == 2
    assert "MCPG_LEADER_ELECTION_NAMESPACE" in capsys.readouterr().err


def test_help_is_cheap_it_imports_neither_kopf_nor_a_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "from mcpg_operator.__main__ import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "heavy = sorted(m for m in ('kopf', 'kubernetes_asyncio', 'aiohttp') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "--metrics-bind-address" in result.stdout


@pytest.mark.parametrize("value", ["0", "65", "four", "2.5", "-1"])
def test_a_reconcile_concurrency_outside_1_to_64_stops_the_operator_before_anything_starts(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCPG_RECONCILE_CONCURRENCY", value)
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert entry.main([]) == 2
    assert f"MCPG_RECONCILE_CONCURRENCY: must be a whole number from 1 to 64, got {value!r}" in capsys.readouterr().err


def test_the_reconcile_concurrency_is_read_and_defaults_to_4() -> None:
    assert settings.load({"POD_NAMESPACE": "ops"}).reconcile_concurrency == 4
    assert settings.load({"POD_NAMESPACE": "ops", "MCPG_RECONCILE_CONCURRENCY": " 1 "}).reconcile_concurrency == 1


# --- leading ------------------------------------------------------------------------------------------------------


@pytest.fixture
def leases(monkeypatch: pytest.MonkeyPatch) -> Leases:
    """The Lease API the elector's own client reaches (the elector connects it on its own thread)."""
    store = Leases()

    async def connect(fence: Any = None) -> Leases:
        assert fence is None, "the elector's own client must carry no fence: it writes to take the Lease"
        return store

    monkeypatch.setattr(Kube, "connect", connect)
    return store


async def test_losing_the_lease_cancels_the_running_passes_at_once_then_kopf_and_exits_1(
    leases: Leases, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    in_flight = asyncio.Event()

    async def reconcile(namespace: str) -> Outcome:
        in_flight.set()
        try:
            await asyncio.Event().wait()  # a request in flight
        except asyncio.CancelledError:
            order.append("pass cancelled")
            raise
        return Outcome()

    async def kopf(_: entry.Options, __: settings.OperatorSettings, memo: Any, *___: Any) -> None:
        memo.scheduler = Scheduler(reconcile, turns=Turns(1))  # what our startup handler keeps on kopf's memo
        memo.scheduler.request("shop")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            order.append("kopf cancelled")
            raise

    monkeypatch.setattr(entry, "_kopf", kopf)
    config = settings.OperatorSettings(leader_election=ELECTION)
    leading = asyncio.create_task(entry._elect_and_reconcile(entry.parse([]), config, asyncio.Event()))
    async with asyncio.timeout(BOUND_S):
        await in_flight.wait()
        leases.take("intruder")
        assert await leading == entry.LOST
    assert order == ["pass cancelled", "kopf cancelled"]
    assert leases.spec()["holderIdentity"] == "intruder"


async def test_a_stop_asked_for_stops_kopf_while_the_lease_is_held_then_releases_it(
    leases: Leases, monkeypatch: pytest.MonkeyPatch
) -> None:
    running, held_at_stop = asyncio.Event(), []

    async def kopf(_: entry.Options, __: settings.OperatorSettings, memo: Any, stop: asyncio.Event, *___: Any) -> None:
        assert memo.fence.holds(), "kopf ran before the Lease was held"
        running.set()
        await stop.wait()  # kopf's graceful stop: its cleanup may still write
        held_at_stop.append(memo.fence.holds())

    monkeypatch.setattr(entry, "_kopf", kopf)
    config, stopping = settings.OperatorSettings(leader_election=ELECTION), asyncio.Event()
    leading = asyncio.create_task(entry._elect_and_reconcile(entry.parse([]), config, stopping))
    async with asyncio.timeout(BOUND_S):
        await running.wait()
        stopping.set()  # SIGTERM
        assert await leading == 0
    assert held_at_stop == [True]
    assert "holderIdentity" not in leases.spec()
    assert leases.closed
