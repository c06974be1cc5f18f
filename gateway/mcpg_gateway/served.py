"""What this process serves, and the last configuration it refused: the record its acknowledgement is made from.

`reconfigure.py` writes it, in the same synchronous step as the swap it describes, so the acknowledgement
(`contract/acknowledgement.py`, served by the admin API) never runs ahead of what requests and fires see. It also
answers what a start needs before serving: whether a process that follows its configuration Secret has read it
once (`synced`), and whether it serves anything at all (one started on a configuration it refused does not).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcpg_gateway.contract import acknowledgement, digests
from mcpg_gateway.contract.errors import Problem

SOURCE_FILE = "file"
SOURCE_SECRET = "secret"  # noqa: S105  # where a configuration came from, not a secret


@dataclass(frozen=True, slots=True)
class Applied:
    """One configuration this process serves (or refused): its digests, where it came from, and when."""

    document: Mapping[str, Any]
    digest: str
    entries: tuple[str, ...]
    at: float
    source: str
    resource_version: str | None = None

    @classmethod
    def of(cls, document: Mapping[str, Any], source: str, resource_version: str | None = None) -> Applied:
        entries = tuple(sorted(digests.entries(document).values()))
        return cls(document, digests.document(document), entries, time.time(), source, resource_version)


@dataclass(frozen=True, slots=True)
class Refused:
    digest: str
    problems: tuple[Problem, ...]
    at: float
    resource_version: str | None = None


@dataclass
class Record:
    instance: str
    started: Mapping[str, Any]
    """The document this process started on: its restart-only fields are the ones it runs."""
    serving: Applied | None
    plugins: tuple[str, ...] = ()
    refused: Refused | None = None
    synced: bool = True
    """False while a process that follows its configuration Secret has not read it yet."""
    restart_pending: list[str] = field(default_factory=list)

    def applied(self, now: Applied) -> None:
        self.serving, self.refused = now, None
        self.restart_pending = digests.restart_changes(self.started, now.document)

    def refuse(self, document: Mapping[str, Any], problems: Sequence[Problem], resource_version: str | None) -> None:
        self.refused = Refused(digests.document(document), tuple(problems), time.time(), resource_version)

    def acknowledgement(self) -> acknowledgement.Acknowledgement:
        return acknowledgement.Acknowledgement(
            instance=self.instance,
            serving=_serving(self.serving),
            refused=_refused(self.refused),
            restart_pending=list(self.restart_pending),
            synced=self.synced,
            plugins=list(self.plugins),
        )


def _serving(applied: Applied | None) -> acknowledgement.Serving | None:
    if applied is None:
        return None
    return acknowledgement.Serving(
        digest=applied.digest,
        entries=list(applied.entries),
        since=applied.at,
        source=applied.source,
        resource_version=applied.resource_version,
    )


def _refused(refused: Refused | None) -> acknowledgement.Refusal | None:
    if refused is None:
        return None
    problems = [acknowledgement.ProblemView(path=p.path, message=p.message) for p in refused.problems]
    return acknowledgement.Refusal(
        digest=refused.digest, problems=problems, at=refused.at, resource_version=refused.resource_version
    )
