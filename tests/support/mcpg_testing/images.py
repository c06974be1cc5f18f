"""One virtual environment per image, installed by the image's own Dockerfile: what is tested is what ships.

`.venv-operator` and `.venv-gateway` (repository root) are built like the image's build stage: a fresh venv,
then the Dockerfile's `pip install` lines, run in a copy of exactly what the Dockerfile COPYs. Each holds the
built wheel (not an editable install) and only its extra's dependencies, so a missing dependency fails here as
it would in the image. The first release's operator image could not start (`No module named 'mcp'`) while every
test passed in the all-extras dev venv.

A stamp in each env records what it was built from. A changed Dockerfile, pyproject.toml or interpreter
rebuilds it; changed sources (anything else the Dockerfile copies) reinstall just the project, in seconds.

    python -m mcpg_testing.images operator gateway    # ensure both; print their bin directories
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mcpg_testing.processes import WaitTimeout, file_lock

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
COMPONENTS = ("operator", "gateway")
STAMP = "mcpg-image.json"
RECIPE_FILES = ("pyproject.toml",)
"""Besides the Dockerfile: what decides the dependencies, so a change rebuilds the env from scratch."""
LOCK_WAIT_S = 900.0
"""How long to wait for another process building the same env (a cold build takes about a minute)."""
PIP_TIMEOUT_S = 900.0
# The pip cache is what makes a rebuild take seconds instead of minutes; it changes no installed file.
DROPPED_PIP_OPTIONS = frozenset({"--no-cache-dir"})
# Variables that would make an env's interpreter see more than the image's does.
LEAKY_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")


class ImageEnvError(Exception):
    """The Dockerfile could not be read as a recipe, or an install step failed."""


@dataclass(frozen=True, slots=True)
class Copy:
    """One build-stage `COPY src... dest`; sources relative to the build context, dest to the WORKDIR."""

    sources: tuple[str, ...]
    dest: str


@dataclass(frozen=True, slots=True)
class Recipe:
    """The part of a Dockerfile's build stage that decides what the image's environment holds."""

    extra: str
    copies: tuple[Copy, ...]
    installs: tuple[tuple[str, ...], ...]
    """The arguments after `pip install` of each install command, in order."""


@dataclass(frozen=True, slots=True)
class ImageEnv:
    """A built image environment; run its programs with `command` under `environ`."""

    component: str
    path: Path

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin_dir / "python"

    def command(self, program: str, *args: str) -> list[str]:
        """The argv running `program` (a console script, or `python`) from this env."""
        return [str(self.bin_dir / program), *args]

    def environ(self, **extra: str) -> dict[str, str]:
        """This process's environment as the image would see it: no PYTHONPATH or user site, the env first on PATH."""
        env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARIABLES}
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONNOUSERSITE"] = "1"
        return env | extra

    def installed(self) -> dict[str, str]:
        """Distribution name -> version, as recorded when the env was last built."""
        return dict(json.loads((self.path / STAMP).read_text())["installed"])


# -- the recipe, read from the Dockerfile --------------------------------------------------------------


def dockerfile(component: str, root: Path = REPO) -> Path:
    return root / component / "Dockerfile"


def read_recipe(path: Path) -> Recipe:
    """The build stage's COPY and `pip install` steps (everything up to the second FROM)."""
    copies: list[Copy] = []
    installs: list[tuple[str, ...]] = []
    stages = 0
    for keyword, rest in _instructions(path.read_text()):
        stages += keyword == "FROM"
        if stages > 1:
            break
        if keyword == "COPY" and not rest.startswith("--from"):
            *sources, dest = shlex.split(rest)
            copies.append(Copy(tuple(sources), dest))
        elif keyword == "RUN":
            installs += [tuple(args) for args in _pip_installs(rest)]
    extras = {m.group(1) for args in installs for a in args if (m := re.fullmatch(r"\.\[(\w+)\]", a))}
    if len(extras) != 1 or not copies:
        raise ImageEnvError(f"{path}: expected COPY steps and one `pip install '.[extra]'`, found extras {extras}")
    return Recipe(extras.pop(), tuple(copies), tuple(installs))


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined and comments dropped."""
    logical = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        logical += line.rstrip()
        if logical.endswith("\\"):
            logical = logical[:-1] + " "
            continue
        if logical.strip():
            keyword, _, rest = logical.strip().partition(" ")
            yield keyword.upper(), rest.strip()
        logical = ""


def _pip_installs(run: str) -> Iterator[list[str]]:
    for command in run.split("&&"):
        argv = shlex.split(command)
        if len(argv) > 2 and Path(argv[0]).name == "pip" and argv[1] == "install":
            yield [a for a in argv[2:] if a not in DROPPED_PIP_OPTIONS]


# -- what the env was built from --------------------------------------------------------------------------


def _copied_files(recipe: Recipe, root: Path) -> Iterator[Path]:
    for copy in recipe.copies:
        for source in copy.sources:
            path = root / source
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            yield from (f for f in files if "__pycache__" not in f.parts)


def _digest(paths: list[Path], root: Path, salt: str = "") -> str:
    h = hashlib.sha256(salt.encode())
    for path in paths:
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _fingerprint(component: str, recipe: Recipe, root: Path) -> dict[str, str]:
    """What the env depends on: the recipe (Dockerfile, pyproject.toml, interpreter) and the sources."""
    recipe_files = [dockerfile(component, root), *(root / name for name in RECIPE_FILES)]
    sources = [f for f in _copied_files(recipe, root) if f not in recipe_files]
    return {"recipe": _digest(recipe_files, root, salt=sys.version), "sources": _digest(sources, root)}


def _stamp(env: ImageEnv) -> dict[str, object]:
    try:
        return dict(json.loads((env.path / STAMP).read_text()))
    except (OSError, ValueError):
        return {}


def _write_stamp(env: ImageEnv, recipe: Recipe, fingerprint: dict[str, str]) -> None:
    [site] = env.path.glob("lib/python*/site-packages")
    installed = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[str(site)])}
    stamp = {
        "component": env.component,
        "extra": recipe.extra,
        "python": sys.version,
        "installs": [list(args) for args in recipe.installs],
        **fingerprint,
        "installed": dict(sorted(installed.items(), key=lambda kv: kv[0].lower())),
    }
    partial = env.path / f"{STAMP}.partial"
    partial.write_text(json.dumps(stamp, indent=2) + "\n")
    partial.replace(env.path / STAMP)


# -- building -------------------------------------------------------------------------------------------------


def ensure(component: str, root: Path = REPO) -> ImageEnv:
    """The up-to-date env for `component`'s image: as it is, after reinstalling the project, or rebuilt."""
    env = ImageEnv(component, root / f".venv-{component}")
    with _locked(env.path.with_name(f"{env.path.name}.lock")):
        started = time.monotonic()
        recipe = read_recipe(dockerfile(component, root))
        fingerprint = _fingerprint(component, recipe, root)
        stamp = _stamp(env)
        if stamp.get("recipe") != fingerprint["recipe"] or not env.python.exists():
            logger.info("building %s from %s ('.[%s]')", env.path.name, dockerfile(component, root), recipe.extra)
            _build(env, recipe, root)
            action = "built"
        elif stamp.get("sources") != fingerprint["sources"]:
            logger.info("sources changed: reinstalling the project into %s", env.path.name)
            (env.path / STAMP).unlink()  # an interrupted reinstall must not look finished
            with _staged(recipe, root) as context:
                _pip(env, context, "install", "--no-deps", "--force-reinstall", ".")
            action = "reinstalled the project into"
        else:
            logger.info("%s is up to date (%.2fs)", env.path.name, time.monotonic() - started)
            return env
        if _fingerprint(component, recipe, root) != fingerprint:
            # Edited while pip ran (another engineer, a mutation run): what was installed is unknown, so the next
            # check reinstalls. The recorded recipe is the one read before the build, so a changed one rebuilds.
            logger.warning("sources changed during the install of %s; the next check reinstalls", env.path.name)
            fingerprint = {**fingerprint, "sources": "changed during install"}
        _write_stamp(env, recipe, fingerprint)
        logger.info("%s %s in %.1fs", action, env.path.name, time.monotonic() - started)
    return env


def _build(env: ImageEnv, recipe: Recipe, root: Path) -> None:
    """`python -m venv`, then each `pip install` of the Dockerfile, in a copy of what it COPYs."""
    shutil.rmtree(env.path, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(env.path)
    with _staged(recipe, root) as context:
        for args in recipe.installs:
            _pip(env, context, "install", *args)


@contextlib.contextmanager
def _staged(recipe: Recipe, root: Path) -> Iterator[Path]:
    """A build context holding exactly what the recipe's COPY steps copy, at the WORKDIR-relative paths."""
    with tempfile.TemporaryDirectory(prefix="mcpg-image-") as tmp:
        workdir = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__")
        for copy in recipe.copies:
            for source in copy.sources:
                src = root / source
                dest = workdir / copy.dest / src.name if copy.dest.endswith("/") else workdir / copy.dest
                dest.parent.mkdir(parents=True, exist_ok=True)
                if src.is_dir():
                    shutil.copytree(src, dest, ignore=ignore)
                else:
                    shutil.copy2(src, dest)
        yield workdir


def _pip(env: ImageEnv, cwd: Path, *args: str) -> None:
    argv = [str(env.python), "-m", "pip", *args, "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(
        argv, cwd=cwd, env=env.environ(), capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise ImageEnvError(f"`pip {' '.join(args)}` failed in {env.path} ({done.returncode}):\n{done.stderr[-4000:]}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`: one process checks or builds an env at a time."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(file_lock(path, LOCK_WAIT_S, interval=0.2))
        except WaitTimeout as e:  # only the wait for the lock: what the caller does under it raises its own
            raise ImageEnvError(str(e)) from None
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("components", nargs="+", choices=COMPONENTS, help="the images whose envs to ensure")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        envs = [ensure(component) for component in args.components]
    except ImageEnvError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for env in envs:
        print(env.bin_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
