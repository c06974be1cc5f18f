"""`mcpg-operator`: kopf runs our handlers by module name, on the configured namespaces, or not at all."""

from __future__ import annotations

import pytest

from mcpg_operator import __main__ as entry


def test_the_configured_namespaces_become_kopf_namespace_flags() -> None:
    argv = entry.kopf_argv(["--verbose"], ("shop", "mail"))
    assert argv == [
        "kopf",
        "run",
        "--standalone",
        "-m",
        entry.HANDLERS,
        "--namespace=shop",
        "--namespace=mail",
        "--verbose",
    ]


def test_no_namespaces_means_all_of_them_unless_the_command_line_says_otherwise() -> None:
    assert entry.kopf_argv([], ())[-1] == "--all-namespaces"
    assert entry.kopf_argv(["-n", "x"], ("shop",)) == ["kopf", "run", "--standalone", "-m", entry.HANDLERS, "-n", "x"]


def test_a_bad_setting_stops_the_operator_before_kopf_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCPG_RESYNC_SECONDS", "soon")
    assert entry.main([]) == 2
    assert "MCPG_RESYNC_SECONDS" in capsys.readouterr().err
