"""The operator as its Deployment runs it: replicas of `mcpg-operator`, one leading, replaced when killed.

`OperatorReplicas` starts `replicas` processes from the operator image's environment under one kubeconfig, all
logging to one file, each with its own POD_NAME, contending for one Lease. `kill_leader()` SIGKILLs the leader
(no clean stop, no Lease released: as a node loss or an OOM kill ends it) and starts a replacement, as the
ReplicaSet would; the work it interrupted must then be completed by whichever replica leads next.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from mcpg_testing.images import ImageEnv
from mcpg_testing.processes import WaitTimeout, wait_until
from mcpg_testing.programs import START_S, OperatorProcess, ProgramError


class OperatorReplicas:
    def __init__(
        self,
        image: ImageEnv,
        kubeconfig: Path,
        log: Path,
        settings: Mapping[str, str],
        args: Sequence[str] = (),
        replicas: int = 2,
    ) -> None:
        self.image, self.kubeconfig, self.log = image, kubeconfig, log
        self.settings, self.args, self.replicas = dict(settings), list(args), replicas
        self.processes: list[OperatorProcess] = []
        self.started = 0

    def _start_one(self) -> OperatorProcess:
        self.started += 1
        pod = {"POD_NAME": f"mcpg-operator-{self.started}"}  # as the chart's downward API names each replica
        process = OperatorProcess(self.image, self.kubeconfig, self.log, self.settings | pod, self.args)
        self.processes.append(process)
        return process

    def start(self) -> None:
        for _ in range(self.replicas):
            self._start_one()
        self.leader()

    def leader(self, timeout: float = START_S) -> OperatorProcess:
        """The replica that leads and runs the reconciler, once one does; fail fast if every replica exited."""
        found: list[OperatorProcess] = []

        def led() -> bool:
            if all(p.proc.poll() is not None for p in self.processes):
                raise ProgramError(f"every mcpg-operator replica exited; see {self.log}")
            found[:] = [p for p in self.processes if p.leading()]
            return len(found) == 1

        try:
            wait_until(led, timeout, "one mcpg-operator replica to lead", interval=0.2)
        except WaitTimeout as e:
            raise ProgramError(f"{e}; see {self.log}") from None
        return found[0]

    def kill_leader(self) -> float:
        """SIGKILL the leader and start its replacement; return the time of the kill."""
        leader = self.leader()
        leader.kill()
        killed = time.monotonic()
        self.processes.remove(leader)
        self._start_one()
        return killed

    def stop(self) -> None:
        for process in self.processes:
            process.stop()
        self.processes.clear()

    def __enter__(self) -> OperatorReplicas:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
