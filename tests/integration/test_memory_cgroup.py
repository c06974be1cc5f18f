"""Issue 36: caps fitted to the pod. `mcpg-gateway` from its image install, under a real 256 MiB memory cgroup.

The chart gave the pod 256 MiB while the default caps admit 10,000 sessions (~970 MB): the kernel OOM-killed the
pod long before any cap refused anyone. Here the gateway joins a cgroup v1 memory group limited to 256 MiB before
its first byte (a shell joins it, then execs the gateway: same pid), says the caps it fitted, and 10,000
handshake-era `initialize` requests arrive, 50 in flight, from 5 principals (so no principal's own share, fitted
to the total as well, refuses first). Sessions up to the fitted cap are opened, every later one is refused with the
cap's own answer; then every admitted session opens its GET stream and subscribes 10 URIs (as heavy as the fit
assumes a session is), the listen streams fill their fitted cap and the next is refused with -50300, and the
process ends alive, never OOM-killed, its cgroup's peak usage under the limit.

Needs root on a host with a cgroup v1 memory hierarchy (this project's VM); anything else fails saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcpg_testing import BOUND_S, configs, programs, stuck
from mcpg_testing.images import ImageEnv

pytest_plugins = ["mcpg_testing.fixtures"]  # gateway_env: the gateway image's install

MIB = 1024 * 1024
LIMIT = 256 * MIB
ATTEMPTS = 10_000
IN_FLIGHT = 50
PRINCIPALS = 3
HOOK = "memory-hook"
URIS = 30
"""Watched URIs, 10 for each principal: a watch is a principal's distinct URI, and the fitted `watches_total`
(76 at 256 MiB) holds these 30."""
PER_SESSION = 10
"""Subscriptions each admitted session makes (the `watches_per_principal` default): every session is as heavy as
the per-session cost the caps are fitted with (benchmark 4c: a GET stream and 10 subscriptions)."""
V1_MOUNT = Path("/sys/fs/cgroup/memory")
FLOOD_S = 300.0
"""Bound on the 10,000 requests (about 8 s here)."""
FITTED = re.compile(r"sessions_total 10000 -> (?P<sessions>\d+)\b.*listen_streams_total 512 -> (?P<streams>\d+)\b")
HANDSHAKE = stuck.HANDSHAKE
ACCEPT = {"accept": "application/json, text/event-stream"}


@dataclass(frozen=True, slots=True)
class MemoryCgroup:
    """A cgroup v1 memory group of this test's own, below the one this process runs in."""

    path: Path

    def value(self, name: str) -> int:
        return int((self.path / name).read_text())

    def oom_control(self) -> dict[str, int]:
        lines = (self.path / "memory.oom_control").read_text().splitlines()
        return {key: int(value) for key, value in (line.split() for line in lines)}

    def pids(self) -> list[int]:
        return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]


def _own_v1_memory_group() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            group = V1_MOUNT / path.lstrip("/")
            if (group / "memory.limit_in_bytes").exists():
                return group
    pytest.fail("no cgroup v1 memory hierarchy here (/sys/fs/cgroup/memory): this test needs one, and root")


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[MemoryCgroup]:
    """A new memory group limited to `limit` bytes; at the end, whatever still runs in it is moved back to this
    process's group (the caller has stopped its program by then) and the group is removed."""
    parent = _own_v1_memory_group()
    group = MemoryCgroup(parent / f"mcpg-test-{secrets.token_hex(4)}")
    group.path.mkdir()
    try:
        (group.path / "memory.limit_in_bytes").write_text(str(limit))
        yield group
    finally:
        for pid in group.pids():
            with contextlib.suppress(OSError):  # it may have exited since the list was read
                (parent / "cgroup.procs").write_text(str(pid))
        group.path.rmdir()


@contextlib.contextmanager
def gateway_in(group: MemoryCgroup, image: ImageEnv, config: Path, cwd: Path) -> Iterator[programs.Program]:
    """`mcpg-gateway` in `group` from its first byte: a shell writes its own pid into the group, then execs it."""
    argv = image.command("mcpg-gateway", "--config", str(config), "--host", "127.0.0.1", "--port", "0")
    argv += ["--admin-port", "0"]
    join = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group.path / "cgroup.procs")]
    with programs.Program([*join, *argv], image.environ(), cwd) as program:
        yield program


def _tokens() -> list[str]:
    return [f"memory-principal-{i}" for i in range(PRINCIPALS)]


def _uri(n: int) -> str:
    return f"drive://folder/doc-{n}"


def _uris_of(principal: int) -> list[str]:
    """The URIs every session of `principal` subscribes: the same `PER_SESSION` for all of its sessions, so it
    holds no more distinct watches than its limit; the principals together watch all `URIS`."""
    return [_uri((principal * PER_SESSION + j) % URIS) for j in range(PER_SESSION)]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    # Each principal may hold every session (fitted down to the total): what refuses is the server-wide cap.
    auth = {"principals": [configs.principal(t, f"p{i}") for i, t in enumerate(_tokens())]}
    hooks = [configs.watched(f"r{n}", _uri(n), {"type": "webhook", "token": f"{HOOK}-{n}"}) for n in range(URIS)]
    raw = configs.gateway_config(*hooks, auth=auth)
    raw["gateway"]["limits"] = {"sessions_per_principal": ATTEMPTS}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _initialize() -> dict[str, Any]:
    params = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "memory", "version": "1"}}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    session: str | None
    principal: int
    code: int | None
    message: str | None


async def _open_sessions(url: str) -> list[Answer]:
    """`ATTEMPTS` initialize requests, `IN_FLIGHT` at a time, the principals taking turns; each one's answer."""
    tokens, answers = _tokens(), []
    numbers = iter(range(ATTEMPTS))
    limits = httpx2.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx2.AsyncClient(limits=limits, timeout=30.0) as http:

        async def worker() -> None:
            for n in numbers:
                headers = {**ACCEPT, **configs.bearer(tokens[n % PRINCIPALS])}
                r = await http.post(url, json=_initialize(), headers=headers)
                answers.append(_answer(r, n % PRINCIPALS))

        async with asyncio.timeout(FLOOD_S):
            await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return answers


def _answer(r: httpx2.Response, principal: int) -> Answer:
    session = r.headers.get("mcp-session-id")
    if r.status_code == 200:
        return Answer(200, session, principal, None, None)
    error = r.json().get("error", {})
    return Answer(r.status_code, session, principal, error.get("code"), error.get("message"))


def _socket() -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    return sock


def _rpc(text: str) -> dict[str, Any]:
    """A JSON-RPC answer, sent as JSON or as one SSE event."""
    data = next((line[5:] for line in text.splitlines() if line.startswith("data:")), text)
    answer: dict[str, Any] = json.loads(data)
    return answer


@contextlib.asynccontextmanager
async def loaded(port: int, opened: list[Answer]) -> AsyncIterator[None]:
    """Every opened session initialized, its GET stream open (a socket read past the headers only) and
    `PER_SESSION` URIs subscribed, `IN_FLIGHT` sessions at a time; the streams held until the block ends."""
    tokens, streams = _tokens(), list[socket.socket]()
    queue = iter(opened)
    limits = httpx2.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30.0) as http:

        async def worker() -> None:
            for answer in queue:
                assert answer.session is not None
                session = {**configs.bearer(tokens[answer.principal]), "mcp-protocol-version": HANDSHAKE}
                session["mcp-session-id"] = answer.session
                headers = {**ACCEPT, **session}
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (await http.post("/mcp", json=initialized, headers=headers)).status_code == 202
                head = (
                    "GET /mcp HTTP/1.1\r\n" + stuck.MCP_HEADERS + "".join(f"{k}: {v}\r\n" for k, v in session.items())
                )
                streams.append(await stuck.started(_socket(), port, head, b"", until=b"\r\n\r\n"))
                for n, uri in enumerate(_uris_of(answer.principal)):
                    subscribe = {"jsonrpc": "2.0", "id": n + 2, "method": "resources/subscribe", "params": {"uri": uri}}
                    r = await http.post("/mcp", json=subscribe, headers=headers)
                    assert r.status_code == 200, r.text[:300]
                    assert "error" not in _rpc(r.text), r.text[:300]

        try:
            async with asyncio.timeout(FLOOD_S):
                await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
            yield
        finally:
            for sock in streams:
                sock.close()


def _samples(metrics: str) -> dict[tuple[str, str], float]:
    """Each gauge sample by (name, its `kind` label or "")."""
    return {
        (s.name, s.labels.get("kind", "")): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
    }


def _fitted(metrics: str) -> dict[str, float]:
    return {
        s.labels["limit"]: s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "mcpg_limit_fitted"
    }


def _listen(principal: int, uri: str) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": stuck.MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "memory", "version": "0"},
    }
    params = {"notifications": {"resourceSubscriptions": [uri]}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": principal, "method": "subscriptions/listen", "params": params}


@contextlib.asynccontextmanager
async def listen_streams(port: int, count: int) -> AsyncIterator[None]:
    """`count` listen streams open, the principals taking turns, until the block ends."""
    tokens, socks = _tokens(), list[socket.socket]()
    try:
        for n in range(count):
            principal = n % PRINCIPALS  # a URI its sessions watch already: the listen adds no watch
            token = configs.bearer(tokens[principal])
            socks.append(await stuck.listen_stream(port, _uris_of(principal)[0], headers=token))
        yield
    finally:
        for sock in socks:
            sock.close()


async def _one_listen_too_many(url: str) -> dict[str, Any]:
    """One more listen stream's answer, from a principal under its own share: the refusal, as JSON-RPC."""
    headers = {
        **ACCEPT,
        **configs.bearer(_tokens()[-1]),
        "mcp-protocol-version": stuck.MODERN,
        "mcp-method": "subscriptions/listen",
    }
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        r = await http.post(url, json=_listen(1, _uris_of(PRINCIPALS - 1)[0]), headers=headers)
    return _rpc(r.text)


async def test_a_gateway_under_256_mib_refuses_at_its_fitted_caps_and_is_never_oom_killed(
    gateway_env: ImageEnv, config: Path, tmp_path: Path
) -> None:
    started = time.monotonic()
    with memory_cgroup(LIMIT) as group, gateway_in(group, gateway_env, config, tmp_path) as program:
        fitted_line = program.wait_for("limits lowered to fit the container memory limit of 256 MiB")
        match = FITTED.search(fitted_line)
        assert match is not None, fitted_line
        sessions, streams = int(match["sessions"]), int(match["streams"])
        serving = programs.SERVING.search(program.wait_for("serving MCP on"))
        assert serving is not None
        gw = programs.GatewayProcess(program, int(serving["port"]), int(serving["admin_port"]))
        assert group.pids() == [program.proc.pid]  # the gateway itself, joined before it started

        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            shown = _fitted((await http.get(f"{gw.admin}/metrics")).text)
            card = (await http.get(f"{gw.base}/.well-known/mcp/server-card.json")).text
        assert f'"listen_streams_total": {streams}' in card  # the card callers read says the fitted caps too
        assert shown["sessions_total"] == sessions
        assert shown["sessions_per_principal"] == sessions  # configured 10,000: never above its total

        answers = await _open_sessions(gw.mcp_url)
        opened = [a for a in answers if a.status == 200]
        refused = [a for a in answers if a.status != 200]
        assert len(opened) == sessions
        assert all(a.session for a in opened)
        # The session cap's answer is the SDK's own (`servers.py` gives it `sessions_total`): HTTP 503, no session.
        assert Counter((a.status, a.code, a.message, a.session) for a in refused) == {
            (503, -32603, "Too many open sessions", None): ATTEMPTS - sessions
        }

        # Every admitted session as heavy as the fit assumes, and the listen-stream cap filled too, which answers
        # with the gateway's server-wide -50300.
        async with loaded(gw.port, opened), listen_streams(gw.port, streams):
            refusal = await _one_listen_too_many(gw.mcp_url)
            async with httpx2.AsyncClient(timeout=BOUND_S) as http:
                held = _samples((await http.get(f"{gw.admin}/metrics")).text)
        assert refusal["error"]["code"] == -50300, refusal
        assert f"server-wide ceiling on listen streams ({streams})" in refusal["error"]["message"]
        assert held[("mcpg_subscribers", "session")] == sessions
        assert held[("mcpg_subscribers", "listen")] == streams
        assert held[("mcpg_watch_active_watchers", "")] == URIS

        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            assert (await http.get(f"{gw.base}/healthz")).status_code == 200
        assert program.proc.poll() is None
        peak, failures, oom = (
            group.value("memory.max_usage_in_bytes"),
            group.value("memory.failcnt"),
            group.oom_control(),
        )
        program.stop()
        assert program.proc.returncode == 0, program.output()[-20:]
    elapsed = time.monotonic() - started
    print(f"\nfitted: {sessions} sessions, {streams} listen streams; peak {peak / MIB:.1f} MiB of 256; {elapsed:.0f} s")
    assert oom.get("oom_kill", 0) == 0, oom
    assert oom["under_oom"] == 0, oom
    assert failures == 0
    assert peak < LIMIT
