"""The one table of images the local kubelet runs as processes, and how it runs each.

An image maps to an image environment (`images.py`: a venv installed as that image's Dockerfile installs it) and
to the entrypoint, default command and environment its Dockerfile's final stage declares, read from the
Dockerfile itself so they cannot drift. Every other image stays with kwok, which fakes its pods without running
anything; the two never manage the same pod (`components.kwok_stages` excludes these images from kwok's pod
stages).

Local runs render the gateway with `IMAGE_GATEWAY`; the next image to run for real (NATS) adds a row.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from mcpg_testing import images
from mcpg_testing.images import ImageEnv

GATEWAY_IMAGE = "mcpg/gateway:local"
"""What the e2e tier, the demo and the benchmarks set as MCPG_GATEWAY_IMAGE."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """How the pods of one image run: `entrypoint` from the image env's bin dir, `cmd` unless the pod sets args."""

    component: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: dict[str, str]

    def env_dir(self, root: Path = images.REPO) -> ImageEnv:
        return ImageEnv(self.component, root / f".venv-{self.component}")


def from_dockerfile(component: str, root: Path = images.REPO) -> Runtime:
    """ENTRYPOINT, CMD and ENV of the Dockerfile's final stage (exec form; PATH is the image env's own)."""
    entrypoint: list[str] = []
    cmd: list[str] = []
    env: dict[str, str] = {}
    for line in _joined_lines(images.dockerfile(component, root).read_text()):
        word, _, rest = line.partition(" ")
        match word.upper():
            case "FROM":
                entrypoint, cmd, env = [], [], {}  # a new stage: only the last one ships
            case "ENTRYPOINT":
                entrypoint = json.loads(rest)
            case "CMD":
                cmd = json.loads(rest)
            case "ENV":
                env |= dict(pair.split("=", 1) for pair in shlex.split(rest))
    env.pop("PATH", None)
    return Runtime(component, tuple(entrypoint), tuple(cmd), env)


def _joined_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        current += line.removesuffix("\\").strip() + " "
        if not line.endswith("\\"):
            lines.append(current.strip())
            current = ""
    return lines


IMAGES: dict[str, str] = {GATEWAY_IMAGE: "gateway"}
"""Image reference (exactly as a pod names it) -> the component whose image env runs it."""


def runtime(image: str) -> Runtime | None:
    """How to run `image`, or None if kwok plays its pods."""
    component = IMAGES.get(image)
    return from_dockerfile(component) if component else None
