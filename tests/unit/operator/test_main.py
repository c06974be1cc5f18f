"""`mcpg-operator`'s command line: its flags, kopf's namespaces, and nothing started on a bad setting or flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcpg_operator import __main__ as entry


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
    assert "usage: mcpg-operator" in capsys.readouterr().err


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
