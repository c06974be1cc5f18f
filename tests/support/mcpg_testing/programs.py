"""The shipped programs run as processes from their image environments (`images.py`), never the dev venv.

`gateway()` serves a configuration on free loopback ports (read back from its "serving MCP on" log line);
`OperatorProcess` runs `mcpg-operator` under a kubeconfig as the Helm chart runs a replica, and is ready when its
/metrics says it leads and runs the reconciler. `Program` is any child whose output lines a caller awaits.
"""

from __future__ import annotations

import contextlib
import queue
import re
import secrets
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

from mcpg_testing import installation, processes
from mcpg_testing.images import ImageEnv
from mcpg_testing.loopback import GatewayUrls
from mcpg_testing.processes import WaitTimeout, free_ports, tail, wait_until

START_S = 60.0
"""Bound on a program becoming ready: an import-heavy start on 2 busy cores takes seconds, not a minute."""
STOP_S = 15.0
SERVING = re.compile(r"serving MCP on [^\s:]+:(?P<port>\d+), admin on [^\s:]+:(?P<admin_port>\d+)")
FAILURE_LINES = 30
BIND_FLAG = "--metrics-bind-address"
"""The operator's flag for where it serves /metrics, /healthz and /readyz (the chart's container port `metrics`)."""
LEADER = "leader_election_master_status"
RUNNING = "mcpg_operator_reconciler_running"


class ProgramError(Exception):
    """A program exited, or did not say or serve what was awaited in time."""


class Program:
    """A child process whose output lines (stdout and stderr, merged) can be awaited with a bound."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(env),
            cwd=cwd,
        )
        self.seen: list[str] = []
        """Every line `wait_for` has read, in order."""
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, name=f"output of {Path(self.argv[0]).name}", daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # end of output: the program exited

    def wait_for(self, text: str, timeout: float = START_S) -> str:
        """The next output line containing `text`; ProgramError if the program exits or `timeout` s pass first."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self._lines.put(None)  # later waits see the end too
                raise ProgramError(self._report(f"exited ({self.proc.wait()}) before saying {text!r}"))
            self.seen.append(line)
            if text in line:
                return line
        raise ProgramError(self._report(f"did not say {text!r} within {timeout:.0f}s"))

    def output(self) -> list[str]:
        """Every line it has said so far (read or not by `wait_for`), in order; for a failure's report."""
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return list(self.seen)
            if line is None:
                self._lines.put(None)  # later waits see the end too
                return list(self.seen)
            self.seen.append(line)

    def _report(self, what: str) -> str:
        said = "\n    ".join(self.seen[-FAILURE_LINES:]) or "(nothing)"
        return f"{' '.join(self.argv)}\n  {what}; it said:\n    {said}"

    def stop(self, timeout: float = STOP_S) -> None:
        """SIGTERM, then SIGKILL after `timeout` s; always reaps."""
        processes.stop(self.proc, timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def kill(self) -> None:
        """SIGKILL (no clean stop: as a node loss or an OOM kill ends it); reaps it. `stop` afterwards is a no-op."""
        self.proc.kill()
        self.proc.wait(timeout=STOP_S)

    def __enter__(self) -> Program:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass(frozen=True, slots=True)
class GatewayProcess(GatewayUrls):
    """A running `mcpg-gateway` and the loopback ports it chose."""

    program: Program
    port: int
    admin_port: int


@contextlib.contextmanager
def gateway(
    image: ImageEnv,
    config: Path,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    nofile: str | None = None,
) -> Iterator[GatewayProcess]:
    """`mcpg-gateway --config config` from `image`, serving on free loopback ports until the block ends.

    `nofile`: the child's RLIMIT_NOFILE as `prlimit --nofile` takes it ("SOFT:HARD"), for it alone."""
    argv = image.command("mcpg-gateway", "--config", str(config), "--host", "127.0.0.1")
    argv += ["--port", "0", "--admin-port", "0"]  # the kernel picks; the log line says which
    if nofile is not None:
        argv = ["prlimit", f"--nofile={nofile}", "--", *argv]  # prlimit execs the gateway: same pid, signals reach it
    with Program(argv, image.environ(**(environ or {})), cwd) as program:
        match = SERVING.search(program.wait_for("serving MCP on"))
        assert match is not None, program.seen[-1]
        yield GatewayProcess(program, int(match["port"]), int(match["admin_port"]))


@contextlib.contextmanager
def gateways(
    image: ImageEnv, configs: Sequence[Path], environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Iterator[list[GatewayProcess]]:
    """One `mcpg-gateway` per configuration, as `gateway()` runs each, started together (not one after another)."""
    with contextlib.ExitStack() as stack:
        started = []
        for config in configs:
            argv = image.command("mcpg-gateway", "--config", str(config), "--host", "127.0.0.1")
            argv += ["--port", "0", "--admin-port", "0"]
            started.append(stack.enter_context(Program(argv, image.environ(**(environ or {})), cwd)))
        running = []
        for program in started:
            match = SERVING.search(program.wait_for("serving MCP on"))
            assert match is not None, program.seen[-1]
            running.append(GatewayProcess(program, int(match["port"]), int(match["admin_port"])))
        yield running


class OperatorProcess:
    """`mcpg-operator` from `image` under `kubeconfig`, logging to `log`, run as the chart runs each replica.

    As the chart: `--metrics-bind-address` (here a free loopback port, unless `args` name one) and the downward
    API's POD_NAME (unique per process unless `settings` name one) and POD_NAMESPACE (the chart's namespace, where
    its RBAC lets the operator hold the leader-election Lease). Several processes with the same Lease name behave
    as replicas: one leads (`wait_ready`), the others stand by (`wait_standby`).
    """

    def __init__(
        self,
        image: ImageEnv,
        kubeconfig: Path,
        log: Path,
        settings: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        """`settings`: MCPG_* (and POD_*) variables; `args`: extra `mcpg-operator` flags."""
        bind = next((a.partition("=")[2] for a in args if a.startswith(f"{BIND_FLAG}=")), None)
        if bind is None:
            [port] = free_ports(1)
            bind = f"127.0.0.1:{port}"
            args = [f"{BIND_FLAG}={bind}", *args]
        host, _, port_text = bind.rpartition(":")
        self.base = f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port_text}"
        self.metrics_url = f"{self.base}/metrics"
        self.log = log
        pod = {"POD_NAME": f"mcpg-operator-{secrets.token_hex(3)}", "POD_NAMESPACE": installation.OPERATOR_NAMESPACE}
        self.env = image.environ(KUBECONFIG=str(kubeconfig), **(pod | dict(settings or {})))
        self.pod_name = self.env["POD_NAME"]
        argv = image.command("mcpg-operator", *args)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=self.env
            )

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Its /metrics now: sample name -> (labels, value) of each sample; empty if it does not answer yet."""
        text = _text(self.metrics_url)
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text or ""):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out

    def leading(self) -> bool | None:
        """Whether it leads and runs the reconciler; None while it does not answer or has not tried to lead yet.

        Leading: the reconciler runs, and every Lease gauge says 1 (none with leader election off). Standing by:
        a Lease gauge says 0 and the reconciler does not run.
        """
        found = self.metrics()
        leader = [v for _, v in found.get(LEADER, [])]
        running = [v for _, v in found.get(RUNNING, [])]
        if running == [1.0] and all(v == 1.0 for v in leader):
            return True
        return False if running == [0.0] and leader and not any(leader) else None

    def wait_ready(self, timeout: float = START_S) -> None:
        """Return once it leads (holds the Lease) and kopf runs its handlers; fail fast if it exits."""
        self._wait(lambda: self.leading() is True, "lead and run the reconciler", timeout)

    def wait_standby(self, timeout: float = START_S) -> None:
        """Return once it is healthy and stands by: it answers /healthz and neither leads nor runs kopf."""
        self._wait(lambda: _answers(f"{self.base}/healthz") and self.leading() is False, "stand by", timeout)

    def _wait(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        def done() -> bool:
            if self.proc.poll() is not None:
                raise ProgramError(self._report(f"mcpg-operator exited ({self.proc.returncode})"))
            return check()

        try:
            wait_until(done, timeout, f"mcpg-operator {self.pod_name} to {what} ({self.metrics_url})", interval=0.2)
        except WaitTimeout as e:
            raise ProgramError(self._report(str(e))) from None

    def _report(self, what: str) -> str:
        return f"{what}; last lines of {self.log}:\n{tail(self.log, FAILURE_LINES)}"

    def kill(self) -> None:
        """SIGKILL (no clean stop, no Lease released: as a node loss or an OOM kill ends it); reaps it."""
        self.proc.kill()
        self.proc.wait(timeout=STOP_S)

    def stop(self, timeout: float = STOP_S) -> None:
        """SIGTERM (kopf stops, the Lease is released), then SIGKILL after `timeout` s; always reaps."""
        processes.stop(self.proc, timeout)

    def __enter__(self) -> OperatorProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):  # not listening yet
        return False


def _text(url: str) -> str | None:
    """The body at `url` (a 200), or None if it does not answer (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode()) if response.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None
