"""Child processes as the control plane and the programs under test need them: free loopback ports, bounded
waits, PID checks that survive PID reuse, and children that die with the process that started them.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class WaitTimeout(TimeoutError):
    """A bounded wait ran out."""


# Ports handed out come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768 and up here)
# and below the NodePort range (30000-32767). A port taken from the ephemeral
# range by binding port 0 and closing is free again at once: any process binding port 0 before its user binds it
# can be handed the same port, and the user then dies with "Address already in use" (a gateway pod did, in the
# end-to-end tier). The kernel never hands out a port from this range, so only callers of this function compete.
PORTS = range(20_000, 30_000)
_next = [random.randrange(len(PORTS))]
"""Where this process goes on walking PORTS: a port is handed out again only once all 10,000 have been, so two
pods started a moment apart never share one, and each process starts at its own place, so two rarely meet."""


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on while the block runs: what a busy port is to a program."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that are free now, the next ones along this process's walk of PORTS."""
    found: list[int] = []
    for _ in range(len(PORTS)):
        if len(found) == count:
            return found
        port = PORTS[_next[0] % len(PORTS)]
        _next[0] += 1
        if _bindable(port):
            found.append(port)
    if len(found) == count:
        return found
    raise OSError(f"no {count} free ports left in {PORTS.start}-{PORTS.stop - 1}")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll `check` until it returns True; raise WaitTimeout naming `what` after `timeout` s.

    For state only reachable by asking (a port, a PID, an HTTP endpoint); events are awaited, not polled.
    """
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int, argv0: str) -> bool:
    """True if `pid` runs and is still the binary we started (guards against PID reuse)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z" and cmdline.split(b"\0", 1)[0].decode() == argv0


def send_signal(pid: int, sig: signal.Signals) -> None:
    """Signal `pid`, which may have exited already."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def tail(path: Path, lines: int = 25) -> str:
    """The last `lines` lines of a log file, or a note that it is missing."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def die_with_parent_hook() -> Callable[[], None]:
    """A preexec_fn that makes the child get SIGKILL when this process dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: dlopen is unsafe in the child
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def stop(proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` s; always reaps, so no zombie outlives a test."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


@contextlib.contextmanager
def file_lock(path: Path, timeout: float, interval: float = 0.2) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created, with its folder, if missing): one process builds a given thing
    at a time while the others wait, each for at most `timeout` (WaitTimeout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:

        def acquired() -> bool:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        if not acquired():
            logger.info("waiting for another process building %s", path.stem)
            wait_until(acquired, timeout, f"the lock on {path}", interval=interval)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
