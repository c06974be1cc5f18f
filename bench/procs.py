"""Processes the benchmarks start: the gateway, reference servers, load generators; and how they are measured.

Everything binds 127.0.0.1. CPU time and RSS come from /proc (no extra dependency); `taskset` pins a process
to one CPU where a scenario asks for it. Every wait is bounded, and `Proc.stop` always reaps what it started.
The gateway runs from the gateway image's environment (`mcpg_testing.images`), never the dev venv, and so do
the references written on the gateway's own stack (`reference`): a ratio then compares code, not installs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from mcpg_testing import images
from mcpg_testing.images import ImageEnv

HERE = Path(__file__).parent
PY = sys.executable  # the dev venv: clients, load generators and stand-in upstreams only, never the product
CLK_TCK = os.sysconf("SC_CLK_TCK")


def gateway_env() -> ImageEnv:
    """The gateway image's environment, built or refreshed if the sources changed (a no-op check otherwise)."""
    return images.ensure("gateway")


def operator_env() -> ImageEnv:
    """The operator image's environment, likewise."""
    return images.ensure("operator")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pinned(argv: list[str], cpu: int | None) -> list[str]:
    """Prefix `argv` with taskset when a CPU is named and taskset exists (a 1-CPU machine cannot pin)."""
    if cpu is None or shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return argv
    return ["taskset", "-c", str(cpu), *argv]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` (threads included), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_http(url: str, timeout: float = 20.0) -> None:
    """Wait (bounded) until `url` answers anything over HTTP."""
    import httpx2

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx2.HTTPError):
            httpx2.get(url, timeout=1.0)
            return
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


class Proc:
    """A child process whose stdout is read line by line (`READY ...`, results)."""

    def __init__(
        self, argv: list[str], env: Mapping[str, str] | None = None, stdout: Any = subprocess.PIPE, stderr: Any = None
    ) -> None:
        """`env`: the child's whole environment (default: this process's)."""
        self.argv = argv
        self.p = subprocess.Popen(
            argv,
            stdout=stdout,
            stdin=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=None if env is None else dict(env),
            bufsize=1,
        )

    @property
    def pid(self) -> int:
        return self.p.pid

    def line(self, timeout: float) -> str:
        """The next stdout line, bounded by `timeout` (raises if the process exits or stays quiet)."""
        import select

        assert self.p.stdout is not None
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"{self.argv[:4]}: no output within {timeout}s")
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError(f"{self.argv[:4]} exited ({self.p.wait(5)})")
        return out.strip()

    def expect(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            line = self.line(max(0.01, deadline - time.monotonic()))
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def send(self, text: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL, as a crash or an OOM kill ends a pod: no shutdown code runs. Reaped, bounded by `timeout`."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout)


@contextlib.contextmanager
def started(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in reversed(procs):
            proc.stop()


def reference(args: list[str], cpu: int | None = None, stderr: Any = None) -> Proc:
    """`python ARGS` from the gateway image's environment, for a reference built on the gateway's own stack (the MCP
    SDK, uvicorn, aiohttp): the same library versions as the gateway it is compared with."""
    env = gateway_env()
    return Proc(pinned(env.command("python", *args), cpu), env=env.environ(), stderr=stderr)


class Gateway:
    """`mcpg-gateway` from the gateway image's environment, on loopback ports, from a configuration dict."""

    def __init__(
        self, config: dict[str, Any], workdir: Path, cpu: int | None = None, extra_env: Mapping[str, str] | None = None
    ) -> None:
        """`extra_env`: variables added to the image environment (what `${env.NAME}` in the config reads)."""
        self.port, self.admin_port = free_port(), free_port()
        path = workdir / f"gateway-{self.port}.yaml"
        path.write_text(yaml.safe_dump(config))
        env = gateway_env()
        argv = env.command("mcpg-gateway", "--config", str(path), "--host", "127.0.0.1")
        argv += ["--port", str(self.port), "--admin-port", str(self.admin_port)]
        self.log = workdir / f"gateway-{self.port}.log"
        with self.log.open("w") as log:
            environ = env.environ(**(extra_env or {}))
            self.proc = Proc(pinned(argv, cpu), env=environ, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_http(f"{self.base}/healthz")
        except BaseException:
            self.proc.stop()
            raise

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}/metrics"

    def stop(self) -> None:
        self.proc.stop()

    def kill(self) -> None:
        """SIGKILL the gateway process itself (argv runs it directly: taskset execs, so no wrapper is hit)."""
        self.proc.kill()


UNLIMITED = {
    "watches_per_principal": 1_000_000,
    "watches_total": 1_000_000,
    "listen_streams_per_principal": 100_000,
    "listen_streams_total": 100_000,
    "sessions_per_principal": 100_000,
    "sessions_total": 100_000,
    "connections": 65_536,
}
"""The benchmarks' one anonymous principal stands in for thousands of callers: the per-principal limits (a policy
between callers, `gateway.limits`) would measure the policy, not the gateway, so they are lifted here."""


def gateway_config(resources: list[dict[str, Any]], templates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The shape mcpg_testing.configs builds: anonymous access said explicitly, as the gateway requires."""
    caps: dict[str, Any] = {"resources": resources}
    if templates:
        caps["resource_templates"] = templates
    return {"mcp": {"capabilities": caps}, "gateway": {"auth": {"anonymous": {"enabled": True}}, "limits": UNLIMITED}}


def webhook_resource(name: str, uri: str, token: str) -> dict[str, Any]:
    backend = {"kind": "http", "url": "http://127.0.0.1:9/unused"}  # a webhook watch never reads it
    return {"name": name, "uri": uri, "backend": backend, "watch": {"strategy": {"type": "webhook", "token": token}}}
