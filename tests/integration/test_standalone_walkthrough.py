"""docs/getting-started/standalone.md's walkthrough, typed as written into one interactive bash at a terminal.

The block is read from the page (`mcpg_testing.recipes`) and typed one step (`# N.` group) at a time into a bash on
a pseudo-terminal (`mcpg_testing.terminal`: the terminal is what gives the shell job control, so `&` prints
`[1] PID`, `kill %1 %2 %3` signals the jobs and the shell announces how each ended). Between steps the test waits,
bounded, for what a person would see before typing the next one. Then the stop paragraph's commands are typed in
the same shell, and the shell must say the gateway's job is `Done` (exit 0 on SIGTERM) and the others ended.

The programs run from the gateway image's install, as in every tier: the text is typed with `.venv/bin/` replaced
by `.venv-gateway/bin/` (built by the `gateway_env` fixture). Nothing else is changed or added.

The walkthrough's own ports (8000, 8080, 9090) and /tmp/mcpg-site must be free: the test fails naming what is
taken, and afterwards kills every process of the shell's session and removes /tmp/mcpg-site.
"""

from __future__ import annotations

import itertools
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpg_testing import BOUND_S, recipes
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import ImageEnv
from mcpg_testing.processes import wait_until
from mcpg_testing.programs import START_S, STOP_S
from mcpg_testing.terminal import Terminal, ended, jobs_ended, jobs_started, taken

__all__ = ["gateway_env"]  # a fixture, used by name

TEST_ID = "tests/integration/test_standalone_walkthrough.py::test_the_standalone_walkthrough_runs_as_typed"
PAGE = recipes.ROOT / "docs" / "getting-started" / "standalone.md"
PORTS = (8000, 8080, 9090)
SITE = Path("/tmp/mcpg-site")
STOP = ("kill %1 %2 %3", "rm -rf /tmp/mcpg-site")
"""The stop paragraph's commands, in its order; the test checks the page says them."""
POLL_FLOOR_S = 10.0
STEP = re.compile(r"^# (?P<n>\d+)\. ", re.MULTILINE)

SEEN: dict[int, list[tuple[str, float]]] = {
    1: [(r"Serving HTTP on 127\.0\.0\.1 port 8000 ", BOUND_S)],
    2: [(r"gateway serving MCP on 127\.0\.0\.1:8080, admin on 127\.0\.0\.1:9090", START_S)],
    3: [(r"listening \(subscriptions/listen\) on report://daily, status://service", START_S)],
    4: [
        (r'\{"ok":true,"uri":"report://daily"\}', BOUND_S),
        (r"notifications/resources/updated report://daily", BOUND_S),
        (r'  read: \{"report": "daily", "rows": 42\}', BOUND_S),
    ],
    5: [
        (r"notifications/resources/updated status://service", POLL_FLOOR_S + BOUND_S),
        (r'  read: \{"status": "amber"\}', BOUND_S),
    ],
    6: [
        (r'\{"watches":\[.*"report://daily".*"status://service"', BOUND_S),
        (r'\nmcpg_watch_fired_total\{strategy="webhook"\} 1\.0\n', BOUND_S),
        (r'\nmcpg_watch_fired_total\{strategy="poll"\} 1\.0\n', BOUND_S),
    ],
}
"""What a person sees after each step before typing the next one: regular expressions, each with its bound, found
anywhere past where the step was typed. They are not anchored to a line: the shell's prompt may stand before a
line, and the jobs share the terminal, so one program's line can run on into another's (the client's notification
is often followed on its line by the gateway's log of the same event, and curl's answer ends with no newline)."""


def steps(text: str) -> dict[int, str]:
    """The walkthrough's steps by number: each `# N.` comment and the lines up to the next one."""
    starts = list(STEP.finditer(text))
    bounds = itertools.pairwise([m.start() for m in starts] + [len(text)])
    return {int(m["n"]): text[begin:end] for m, (begin, end) in zip(starts, bounds, strict=True)}


def stop_paragraph() -> str:
    """The paragraph of the page saying how to stop the walkthrough."""
    return next(p for p in PAGE.read_text().split("\n\n") if p.startswith("To stop the walkthrough"))


@pytest.fixture
def terminal(gateway_env: ImageEnv, tmp_path: Path) -> Iterator[Terminal]:
    """A bash at a terminal in the repository's root, the walkthrough's ports and folder free; cleaned up after."""
    if busy := taken(PORTS):
        pytest.fail(f"port {busy[0]} on 127.0.0.1 is in use; the walkthrough serves on 8000, 8080 and 9090")
    if SITE.exists():
        pytest.fail(f"{SITE} exists; the walkthrough copies the example site there (remove it if it is left over)")
    try:
        with Terminal(tmp_path / "screen.txt", recipes.ROOT, gateway_env.environ()) as shell:
            yield shell
    finally:
        shutil.rmtree(SITE, ignore_errors=True)


def test_the_standalone_walkthrough_runs_as_typed(terminal: Terminal) -> None:
    [block] = recipes.run_by(TEST_ID)
    walkthrough = steps(block.text.replace(".venv/bin/", ".venv-gateway/bin/"))
    assert sorted(walkthrough) == sorted(SEEN)
    assert [command for command in STOP if f"`{command}`" not in stop_paragraph()] == []

    for n, typed in walkthrough.items():
        at = terminal.enter(typed)
        for pattern, bound in SEEN[n]:
            terminal.wait_for(pattern, at, bound)
    started = jobs_started(terminal.screen())

    assert sorted(started) == [1, 2, 3]  # the upstream, the gateway and the client, in the order they started
    token = webhook_token(started[2])
    kill, remove = STOP
    at = terminal.enter(kill)
    wait_until(lambda: ended(started.values()), STOP_S, "the three jobs to end after kill %1 %2 %3")
    terminal.enter(remove)  # the shell announces the ended jobs before its next prompt
    terminal.wait_for(r"\[3\][+-]? +\S", at)
    said = jobs_ended(terminal.screen()[at:])

    assert said == {1: "Terminated", 2: "Done", 3: "Terminated"}  # Done: the gateway exited 0 on SIGTERM
    wait_until(lambda: not SITE.exists(), BOUND_S, f"{remove} to remove {SITE}")
    assert token not in terminal.screen()


def webhook_token(gateway: int) -> str:
    """The token the walkthrough generated, as the gateway's environment holds it: it must never reach the screen."""
    environ = Path(f"/proc/{gateway}/environ").read_bytes().split(b"\0")
    [token] = [v.partition(b"=")[2].decode() for v in environ if v.startswith(b"QUICKSTART_WEBHOOK_TOKEN=")]
    return token
