"""The installed `mcpg-operator` (from `.venv-operator`) on its command line, with no cluster: --version, --help,
a bad flag (one line, exit 2), a bad environment variable (exit 2, naming it) and a metrics address in use
(one line, exit 3), each without a traceback; the statuses are the three programs' (`command_line.Exit`)."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpg_gateway.contract.command_line import Exit
from mcpg_operator import __main__ as entry
from mcpg_testing import processes
from mcpg_testing.fixtures import operator_env
from mcpg_testing.images import ImageEnv

__all__ = ["operator_env"]  # a fixture, used by name


def operator(image: ImageEnv, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = image.environ(**env)
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):  # nothing here may reach a cluster, even by accident
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        image.command("mcpg-operator", *argv), capture_output=True, text=True, timeout=60, env=environ, check=False
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on for the test's length."""
    with processes.taken_port() as port:
        yield port


def test_version_prints_the_distributions_version(operator_env: ImageEnv) -> None:
    done = operator(operator_env, "--version")

    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"mcpg-operator {operator_env.installed()['mcpg-watch']}\n",
        "",
    )


def test_help_lists_the_exit_statuses(operator_env: ImageEnv) -> None:
    done = operator(operator_env, "--help")

    assert done.returncode == 0
    for status in (Exit.OK, Exit.FAILED, Exit.USAGE, Exit.UNBINDABLE, Exit.UNREACHABLE):
        assert f"\n  {status.value:<3} " in done.stdout, status


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--metrics-bind-address=h:99999"], "--metrics-bind-address: 'h:99999' is not HOST:PORT"),
        (["--log-format=yaml"], "--log-format: invalid choice: 'yaml'"),
        (["--liveness=http://0.0.0.0:8080/healthz"], "unrecognized arguments: --liveness=http://0.0.0.0:8080/healthz"),
        (["-n", "shop", "-A"], "either --namespace or --all-namespaces, not both"),
    ],
    ids=["bind-port", "log-format", "kopf-flag", "namespaces"],
)
def test_a_bad_flag_exits_2_in_one_line_naming_it(operator_env: ImageEnv, argv: list[str], said: str) -> None:
    done = operator(operator_env, *argv)

    assert done.returncode == Exit.USAGE
    assert done.stderr.startswith(f"mcpg-operator: {said}"), done.stderr
    assert done.stderr.endswith("; see mcpg-operator --help\n")
    assert done.stderr.count("\n") == 1, done.stderr


def test_a_bad_environment_variable_exits_2_naming_it(operator_env: ImageEnv) -> None:
    done = operator(operator_env, POD_NAMESPACE="ops", MCPG_RESYNC_SECONDS="soon")

    assert done.returncode == Exit.USAGE
    assert done.stderr.startswith("mcpg-operator: invalid settings: MCPG_RESYNC_SECONDS"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_metrics_address_in_use_exits_3_naming_it(operator_env: ImageEnv, taken_port: int) -> None:
    bind = f"127.0.0.1:{taken_port}"
    done = operator(operator_env, f"--metrics-bind-address={bind}", "--quiet", POD_NAMESPACE="ops")

    assert "Traceback" not in done.stderr, done.stderr
    assert (done.returncode, done.stderr) == (
        Exit.UNBINDABLE,
        f"mcpg-operator: --metrics-bind-address {bind} is in use: stop what listens there, or choose another port\n",
    )


def test_its_exit_statuses_are_the_shared_ones() -> None:
    assert (entry.USAGE_ERROR, entry.LOST) == (Exit.USAGE, Exit.FAILED) == (2, 1)


def kubeconfig_for(server: str, path: Path) -> Path:
    """A kubeconfig naming `server`, with a token that is never sent anywhere that answers."""
    cluster = {"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
    user = {"name": "u", "user": {"token": "not-a-real-token"}}
    context = {"name": "x", "context": {"cluster": "c", "user": "u"}}
    doc = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "users": [user], "contexts": [context]}
    path.write_text(json.dumps(doc | {"current-context": "x"}))
    return path


@pytest.mark.parametrize("case", ["no-kubeconfig", "nothing-listening"])
def test_an_api_server_it_cannot_reach_exits_4_in_one_line(
    operator_env: ImageEnv, taken_port: int, tmp_path: Path, case: str
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = closed.getsockname()[1]  # bound, never listening: a connect is refused
        kubeconfig = tmp_path / "missing" if case == "no-kubeconfig" else tmp_path / "kubeconfig"
        if case == "nothing-listening":
            kubeconfig_for(f"https://127.0.0.1:{refused}", kubeconfig)
        done = operator(
            operator_env, "--metrics-bind-address=127.0.0.1:0", "--quiet", POD_NAMESPACE="ops",
            KUBECONFIG=str(kubeconfig),
        )  # fmt: skip

    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == Exit.UNREACHABLE, done.stderr
    [line] = done.stderr.splitlines()
    said = {"no-kubeconfig": "no Kubernetes configuration", "nothing-listening": "cannot reach the Kubernetes API"}
    assert line.startswith(f"mcpg-operator: {said[case]}"), line
    assert "not-a-real-token" not in done.stderr
