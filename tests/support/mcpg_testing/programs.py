"""The shipped programs run as processes from their image environments (`images.py`), never the dev venv.

`gateway()` serves a configuration on free loopback ports (read back from its "serving MCP on" log line);
`OperatorProcess` runs `mcpg-operator` under a kubeconfig with kopf's liveness endpoint, as the Helm chart
runs it, and is ready when that endpoint answers. `Program` is any child whose output lines a caller awaits.
"""

from __future__ import annotations

import contextlib
import queue
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from mcpg_testing import processes
from mcpg_testing.images import ImageEnv
from mcpg_testing.loopback import GatewayUrls
from mcpg_testing.processes import WaitTimeout, free_ports, tail, wait_until

START_S = 60.0
"""Bound on a program becoming ready: an import-heavy start on 2 busy cores takes seconds, not a minute."""
STOP_S = 15.0
SERVING = re.compile(r"serving MCP on [^\s:]+:(?P<port>\d+), admin on [^\s:]+:(?P<admin_port>\d+)")
FAILURE_LINES = 30


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

    def _report(self, what: str) -> str:
        said = "\n    ".join(self.seen[-FAILURE_LINES:]) or "(nothing)"
        return f"{' '.join(self.argv)}\n  {what}; it said:\n    {said}"

    def stop(self, timeout: float = STOP_S) -> None:
        """SIGTERM, then SIGKILL after `timeout` s; always reaps."""
        processes.stop(self.proc, timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

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
    image: ImageEnv, config: Path, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Iterator[GatewayProcess]:
    """`mcpg-gateway --config config` from `image`, serving on free loopback ports until the block ends."""
    argv = image.command("mcpg-gateway", "--config", str(config), "--host", "127.0.0.1")
    argv += ["--port", "0", "--admin-port", "0"]  # the kernel picks; the log line says which
    with Program(argv, image.environ(**(environ or {})), cwd) as program:
        match = SERVING.search(program.wait_for("serving MCP on"))
        assert match is not None, program.seen[-1]
        yield GatewayProcess(program, int(match["port"]), int(match["admin_port"]))


class OperatorProcess:
    """`mcpg-operator` from `image` under `kubeconfig`, logging to `log`, with kopf's liveness endpoint on."""

    def __init__(
        self,
        image: ImageEnv,
        kubeconfig: Path,
        log: Path,
        settings: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        """`settings`: MCPG_* variables; `args`: extra `kopf run` flags."""
        [port] = free_ports(1)
        self.liveness = f"http://127.0.0.1:{port}/healthz"  # the chart's --liveness, on loopback
        self.log = log
        argv = image.command("mcpg-operator", f"--liveness={self.liveness}", *args)
        env = image.environ(KUBECONFIG=str(kubeconfig), **(settings or {}))
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = START_S) -> None:
        """Return once kopf has started (its liveness endpoint answers); fail fast if the operator exits."""

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise ProgramError(self._report(f"mcpg-operator exited ({self.proc.returncode})"))
            return _answers(self.liveness)

        try:
            wait_until(ready, timeout, f"mcpg-operator's liveness endpoint {self.liveness}", interval=0.2)
        except WaitTimeout as e:
            raise ProgramError(self._report(str(e))) from None

    def _report(self, what: str) -> str:
        return f"{what}; last lines of {self.log}:\n{tail(self.log, FAILURE_LINES)}"

    def stop(self, timeout: float = STOP_S) -> None:
        """SIGTERM (kopf exits cleanly), then SIGKILL after `timeout` s; always reaps."""
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
