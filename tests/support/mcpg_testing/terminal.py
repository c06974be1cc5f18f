"""An interactive bash at a terminal, for a test that types a walkthrough as a person does and reads what they see.

The shell runs on a pseudo-terminal, not a pipe: only with a controlling terminal does bash turn job control on by
itself (`set -m`: `cmd &` prints `[1] PID`, each job gets its own process group, `kill %1` signals it, and a job's
end is announced before the next prompt as `Done`, `Exit N` or `Terminated`), and Python programs line-buffer
what they print to a terminal. Everything the screen shows (the prompts, the output of the shell and of its jobs)
is copied to a transcript file and kept in memory, where waits find it.

The terminal does not echo what is typed (as after `stty -echo`): a walkthrough's comments may quote what a step
should print, and a wait must find the program saying it, not the echo. The transcript records each typed text.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import signal
import socket
import subprocess
import termios
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from mcpg_testing import BOUND_S
from mcpg_testing.processes import WaitTimeout, wait_until

JOB_STARTED = re.compile(r"\[(?P<job>\d+)\] (?P<pid>\d+)$", re.MULTILINE)
"""What an interactive bash prints when a command is started with `&`."""
JOB_ENDED = re.compile(r"\[(?P<job>\d+)\][+-]? +(?P<state>Done|Exit \d+|[A-Z][a-z]+)\b", re.MULTILINE)
"""How it announces a job's end before the next prompt: `[2]-  Done    cmd` (exit 0), `Exit 3`, `Terminated`."""
TAIL_CHARS = 6000
"""How much of the screen a failed wait shows."""


class Terminal:
    """`bash --norc --noprofile --noediting -i` on a pseudo-terminal in its own session, in `cwd`, under `env`.

    `--noediting`: no readline, whose escape sequences (bracketed paste, redraws) would clutter the screen.
    """

    def __init__(self, transcript: Path, cwd: Path, env: Mapping[str, str]) -> None:
        self.transcript = transcript
        controller, terminal = os.openpty()
        self._controller = controller
        _no_echo(terminal)
        self.shell = subprocess.Popen(
            ["bash", "--norc", "--noprofile", "--noediting", "-i"],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            cwd=cwd,
            env={**env, "PS1": "$ ", "HISTFILE": os.devnull},  # history stays out of the user's home
            start_new_session=True,  # a session of its own, led by the shell: its terminal, its jobs
            preexec_fn=_take_terminal,  # runs after setsid, before exec
        )
        os.close(terminal)
        self._screen: list[str] = []
        self._changed = threading.Condition()
        self._closed = False
        self._transcript = transcript.open("w")
        self._line_start = True
        self._pumping = threading.Thread(target=self._pump, name="terminal screen", daemon=True)
        self._pumping.start()

    def _pump(self) -> None:
        """Copy the screen to the transcript and to memory until the terminal is gone, waking every waiter."""
        while chunk := _read(self._controller):
            text = chunk.decode(errors="replace").replace("\r\n", "\n")
            with self._changed:
                self._screen.append(text)
                self._record(text)
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _record(self, text: str) -> None:
        """Append to the transcript (the caller holds the lock: the pump and `enter` both write)."""
        if not self._transcript.closed and text:
            self._transcript.write(text)
            self._transcript.flush()
            self._line_start = text.endswith("\n")

    def screen(self) -> str:
        """Everything shown so far."""
        with self._changed:
            return "".join(self._screen)

    def enter(self, text: str) -> int:
        """Type `text` and Enter; returns where the screen stood, for waits on what follows."""
        line = text.rstrip("\n") + "\n"
        with self._changed:
            screen = self.screen()
            fresh = "" if self._line_start else "\n"  # a marker starts a line of its own
            self._record(fresh + "".join(f"[typed] {typed}\n" for typed in line.splitlines()))
        os.write(self._controller, line.encode())
        return len(screen)

    def wait_for(self, pattern: str, after: int, timeout: float = BOUND_S) -> re.Match[str]:
        """The first match of the regular expression `pattern` on the screen past `after`, waiting up to `timeout` s."""
        found = re.compile(pattern, re.MULTILINE)
        with self._changed:
            matched = self._changed.wait_for(lambda: found.search(self.screen(), after) or self._closed, timeout)
        if isinstance(matched, re.Match):
            return matched
        why = "the terminal closed" if self._closed else f"{timeout:.0f} s passed"
        raise WaitTimeout(f"{why} before the screen showed /{pattern}/; it shows:\n{self.screen()[-TAIL_CHARS:]}")

    def failure_report(self) -> str:
        """For a failed test's report (the integration tier's conftest asks its fixtures): the screen's end."""
        return f"transcript: {self.transcript}\n{self.screen()[-TAIL_CHARS:]}"

    def close(self) -> None:
        """Kill every process of the session (the shell and all its jobs, whatever their process group), reap
        the shell and close the terminal. A job would outlive a plain hang-up: the gateway reads SIGHUP as
        "read the configuration again"."""
        sid = self.shell.pid
        wait_until(lambda: not _kill_all(session(sid)), BOUND_S, f"the processes of session {sid} to end")
        self.shell.wait(timeout=BOUND_S)
        self._pumping.join(BOUND_S)  # no process has the terminal open any more: its reads end (EIO)
        os.close(self._controller)
        with self._changed:
            self._transcript.close()

    def __enter__(self) -> Terminal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _no_echo(terminal: int) -> None:
    modes = termios.tcgetattr(terminal)
    modes[3] &= ~termios.ECHO  # the local modes
    termios.tcsetattr(terminal, termios.TCSANOW, modes)


def _take_terminal() -> None:
    """In the child, once it leads a new session: make its stdin (the pseudo-terminal) its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _read(fd: int) -> bytes:
    """The next chunk of the screen, or b"" once no process has the terminal open (Linux says EIO then)."""
    try:
        return os.read(fd, 65536)
    except OSError as e:
        if e.errno in (errno.EIO, errno.EBADF):
            return b""
        raise


def session(sid: int) -> list[int]:
    """The live processes of session `sid` (zombies are dead: their parent reaps them)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _kill_all(pids: list[int]) -> list[int]:
    """SIGKILL each of `pids` (each may have ended already); returns them. Repeated until none is left, since one
    could fork between the listing and the kill."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def jobs_started(screen: str) -> dict[int, int]:
    """Job number -> PID, from the `[1] 4242` lines the shell printed."""
    return {int(m["job"]): int(m["pid"]) for m in JOB_STARTED.finditer(screen)}


def jobs_ended(screen: str) -> dict[int, str]:
    """Job number -> how the shell said it ended (`Done`, `Exit 3`, `Terminated`)."""
    return {int(m["job"]): m["state"] for m in JOB_ENDED.finditer(screen)}


def ended(pids: Iterable[int]) -> bool:
    """Whether none of `pids` runs any more (a zombie has ended: only its parent's reaping is left)."""
    return not any(_running(pid) for pid in pids)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def taken(ports: Iterable[int], host: str = "127.0.0.1") -> list[int]:
    """Which of `ports` a server could not bind on `host` now (as the servers bind: with SO_REUSEADDR, so a
    connection of a previous run in TIME_WAIT does not count)."""
    busy = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                busy.append(port)
    return busy
