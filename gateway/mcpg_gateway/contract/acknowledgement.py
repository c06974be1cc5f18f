"""What a gateway process says it serves: the acknowledgement the operator counts, one per pod.

Served at `PATH` on the admin port without the admin token, like /metrics: it holds digests (`digests.py`), field
paths and reasons, never a value of the configuration. The gateway builds it; the operator parses it with this
same model, so the two cannot disagree on a field.

What `serving` guarantees, exactly: this process has swapped its catalog, webhook token index, principals, read
policies, notification filters and limits to the document of that digest, and every request and fire it handles
from then on uses them; its restart-only fields (`digests.RESTART_ONLY`) are those it started with, and
`restart_pending` names those the document would change. It says nothing about the upstreams: a watch served is
one whose notifications this process will send, not one whose source is reachable.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PATH = "/admin/v1/configuration"
"""Where the admin port serves the acknowledgement (GET, JSON)."""
CONFIG_KEY = "gateway.yaml"
"""The key of the configuration Secret a gateway in a cluster follows (`MCPG_CONFIG_SECRET` names the Secret)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Serving(_Model):
    digest: str
    """`digests.document` of the configuration applied."""
    entries: list[str] = Field(default_factory=list)
    """`digests.entries` of it: the shortened digest of every resource and template entry served."""
    since: float
    """When it was applied (Unix time)."""
    source: str
    """Where it came from: `file` (the start, a reload) or `secret` (the configuration Secret, through the API)."""
    resource_version: str | None = None
    """The configuration Secret's resourceVersion it was read at (source `secret` only)."""


class ProblemView(_Model):
    path: str
    message: str


class Refusal(_Model):
    """The latest configuration this process was given and refused: it kept serving the one before."""

    digest: str
    problems: list[ProblemView]
    """Why, each naming its field (as `--check` prints them); never a value."""
    at: float
    resource_version: str | None = None


class Acknowledgement(_Model):
    instance: str
    """The process's name: the pod's, in a cluster."""
    serving: Serving | None = None
    """None only while a process started on a configuration it refused waits for one it accepts (it is unready)."""
    refused: Refusal | None = None
    """Cleared once a later configuration is applied."""
    restart_pending: list[str] = Field(default_factory=list)
    """Restart-only fields (dotted paths) of the configuration served that differ from what this process runs."""
    synced: bool = True
    """False until a process that follows its configuration Secret has read it once (it is unready until then)."""
    plugins: list[str] = Field(default_factory=list)
    """The watch-strategy plugin kinds this process has installed."""
