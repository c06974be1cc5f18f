"""`kubectl get --watch` as a stream of status lines, for narrating a status change as it happens.

The demo shows a WebhookToken moving Rolling -> Retiring -> Ready and a ResourceWatch moving RollingOut -> Served
while they move: a watch reports every status write the API server stores, where `kubectl wait` reports only
the end and a poll could miss a short-lived phase. Each distinct line is handed to the caller once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import TracebackType

from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.programs import Program, ProgramError


def fields(line: str) -> dict[str, str]:
    """A line `NAME key=value key=value ...` as {"name": NAME, key: value, ...}; words without `=` are skipped
    (the rest of a message), and an empty value (a status field not written yet) is ""."""
    name, _, rest = line.partition(" ")
    pairs = (word.partition("=") for word in rest.split())
    return {"name": name} | {key: value for key, sep, value in pairs if sep}


class KubectlWatch:
    """`kubectl get ARGS --watch -o jsonpath=TEMPLATE` (one line per object per event), read line by line.

    TEMPLATE is `{.metadata.name} key={...} key={...}`: `until` hands the caller each line's `fields`."""

    def __init__(self, plane: ControlPlane, *args: str, template: str) -> None:
        argv = [
            str(plane.binary("kubectl")),
            f"--kubeconfig={plane.kubeconfig}",
            f"--cache-dir={plane.layout.kubectl_cache}",
            "get",
            *args,
            "--watch",
            "-o",
            f"jsonpath={template}" + '{"\\n"}',
        ]
        self._program = Program(argv, os.environ)
        self._last: dict[str, str] = {}
        """Each object's last line, by its name (the template starts with `{.metadata.name}`)."""
        self._latest: dict[str, str] | None = None

    def until(
        self, done: Callable[[dict[str, str]], bool], timeout: float, show: Callable[[str], None]
    ) -> dict[str, str]:
        """Hand each new distinct line to `show` until `done(fields(line))` holds for one; return its fields.

        The line an earlier `until` stopped at counts too: one status write can satisfy two successive waits.
        ProgramError, with what was seen, if `timeout` s pass or kubectl exits first."""
        if self._latest is not None and done(self._latest):
            return self._latest
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProgramError(f"no status matched within {timeout:.0f}s; seen: {self._program.seen[-10:]}")
            line = self._program.wait_for("", left)
            parsed = fields(line)
            if self._last.get(parsed["name"]) == line:
                continue  # a write that changed nothing this template shows (another field, a resync)
            self._last[parsed["name"]] = line
            self._latest = parsed
            show(line)
            if done(parsed):
                return parsed

    def __enter__(self) -> KubectlWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._program.stop()
