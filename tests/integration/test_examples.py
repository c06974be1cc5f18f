"""Every example in examples/gateway runs: `mcpg-gateway` from the gateway image's install serves it against local
servers, a subscribed MCP client is told when the example's event source says "changed", and a read returns what
the upstream serves.

Each example is loaded as shipped and changed only where it must be to run here. Its HTTP backends move to an
upstream on loopback by scheme, host and port (`examples.rebased`): the path and query stay the example's, and the
upstream must be asked exactly those. `${env.X}` gets the tests' values; the event sources' addresses become the
session's NATS and PostgreSQL; poll intervals drop to the 10 s floor (the cadence is the unit tier's business,
the request and the change are this test's); a file without `gateway.auth` gets one principal. No twilio_inbound
plugin exists here, so for plugin.yaml the test plugin (udp_datagram) stands in, with the example's own `kinds`.

Every file needs an entry in RUNNERS: a new example fails until someone says how it runs. The quickstarts' in-cluster
upstream (examples/manifests/quickstart-upstream.yaml) is run here without a cluster: its container's command on
this machine, serving the ConfigMap's files. The e2e tier runs the manifests on the API server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx2
import nats
import pytest
import yaml

from mcpg_gateway.contract.config import POLL_FLOOR_MS
from mcpg_testing import BOUND_S, examples, plugin_site, programs
from mcpg_testing.clients import Subscription, subscribed
from mcpg_testing.configs import EXAMPLE_ENV, bearer, principal
from mcpg_testing.fixtures import gateway_env
from mcpg_testing.images import REPO, ImageEnv
from mcpg_testing.processes import free_ports
from mcpg_testing.servers import NatsServer, PostgresServer
from mcpg_testing.upstream import Upstream, serve

__all__ = ["gateway_env"]  # a fixture, used by name

Doc = tuple[int, str]
"""What the upstream answers for a backend: status and JSON body."""
CLIENT_TOKEN = secrets.token_hex(16)
PULL_BOUND_S = POLL_FLOOR_MS / 1000 + BOUND_S
"""A pull strategy (poll, sql_polling) sees a change at its next run: within one interval at the floor."""
JOBS = [{"id": 1, "name": "test", "stage": "test", "status": "running", "duration": 12.5, "queued_duration": 0.4}]
GONE = '{"error": {"code": 404, "message": "File not found: FILE_ID."}}'  # Drive's answer for a deleted file


@dataclass(frozen=True)
class Runner:
    """What running one example needs besides what its strategies say; the defaults suit most."""

    principal_id: str = "me"
    principal: dict[str, Any] = field(default_factory=dict)
    """Fields of the principal added when the file has no `gateway.auth` (a filter or policy may need them)."""
    variables: dict[str, str] = field(default_factory=dict)
    """A template's variables: the concrete URI subscribed to, and the path the backend is asked."""
    before: Doc | None = None
    """The upstream's answer until the change; None: a JSON document naming the entry."""
    after: Doc | None = None
    """Its answer from the change on; None: that document, changed."""
    sql: tuple[str, ...] = ()
    """sql_polling: the statements that make the tracking query's table, run in a fresh database."""
    sql_change: str = ""
    """sql_polling: the statement that advances the tracked value."""
    env: dict[str, str] = field(default_factory=dict)
    """Values of its `${env.X}` besides `configs.EXAMPLE_ENV`'s."""


RUNNERS: dict[str, Runner] = {
    "filter-expression.yaml": Runner(principal={"trust_level": "verified", "groups": ["finance"]}),
    "filter-subject-id.yaml": Runner(principal_id="alice", variables={"subject_id": "alice"}),
    "nats-topic.yaml": Runner(),
    "plugin.yaml": Runner(),
    "poll-delete-as-event.yaml": Runner(after=(404, GONE)),
    "poll-drive-folder.yaml": Runner(),
    "poll-ignore-ci-jobs.yaml": Runner(
        before=(200, json.dumps(JOBS)), after=(200, json.dumps([JOBS[0] | {"status": "success", "duration": 31.0}]))
    ),
    "postgres-listen-notify.yaml": Runner(),
    "quickstart.yaml": Runner(),
    # A random signing secret: the shell sender cannot carry EXAMPLE_ENV's all-zero key bytes through a variable.
    "signed-webhooks.yaml": Runner(
        env={"STANDARD_WEBHOOKS_SECRET": "whsec_" + base64.b64encode(os.urandom(32)).decode()}
    ),
    "sql-polling.yaml": Runner(
        sql=("CREATE TABLE orders (id bigint, updated_at timestamptz)", "INSERT INTO orders VALUES (1, now())"),
        sql_change="INSERT INTO orders VALUES (2, now() + interval '1 minute')",
    ),
    "webhook-rotation.yaml": Runner(),
    "webhook.yaml": Runner(),
}


@dataclass
class Scene:
    """The servers one example runs against, and what its strategies asked of the gateway's start."""

    runner: Runner
    upstream: Upstream
    nats: NatsServer
    postgres: PostgresServer
    db: Any
    tmp: Path
    cleanup: contextlib.AsyncExitStack
    env: dict[str, str] = field(default_factory=lambda: dict(EXAMPLE_ENV))
    """The gateway's environment besides the image's: the examples' variables, and what a strategy adds."""
    sql_url: str | None = None
    """sql_polling: the database made for it."""


@dataclass(frozen=True)
class Entry:
    """One resource (or template, made concrete) of the example as the test drives it."""

    uri: str
    strategy: dict[str, Any]
    target: str
    """The path and query the example's backend asks for (its own URL's, not the rebased one's)."""
    headers: dict[str, str]
    """The backend's headers, their `${env.X}` resolved."""
    before: Doc
    after: Doc

    @property
    def path(self) -> str:
        return urlsplit(self.target).path


# -- what each strategy needs before the gateway starts, and how its change is made -------------------------------


Prepare = Callable[[Scene, dict[str, Any], dict[str, Any]], Awaitable[None]]
Fire = Callable[[Scene, programs.GatewayProcess, Entry], Awaitable[int]]
"""Make the change the strategy watches for; returns how many notifications it must cause."""


async def prepare_pull(scene: Scene, raw: dict[str, Any], strategy: dict[str, Any]) -> None:
    strategy["interval_ms"] = POLL_FLOOR_MS


async def prepare_nothing(scene: Scene, raw: dict[str, Any], strategy: dict[str, Any]) -> None:
    return None


async def prepare_nats(scene: Scene, raw: dict[str, Any], strategy: dict[str, Any]) -> None:
    raw.setdefault("gateway", {}).setdefault("nats", {})["url"] = scene.nats.url


async def prepare_postgres(scene: Scene, raw: dict[str, Any], strategy: dict[str, Any]) -> None:
    strategy["url"] = scene.postgres.url


async def prepare_sql(scene: Scene, raw: dict[str, Any], strategy: dict[str, Any]) -> None:
    """A database of its own, holding the table the example's query reads."""
    name = f"examples_{uuid.uuid4().hex[:8]}"
    await scene.db.execute(f"CREATE DATABASE {name}")
    scene.cleanup.push_async_callback(scene.db.execute, f"DROP DATABASE {name} WITH (FORCE)")
    url = urlsplit(scene.postgres.url)._replace(path=f"/{name}").geturl()
    conn = await asyncpg.connect(url)
    scene.cleanup.push_async_callback(conn.close)
    for statement in scene.runner.sql:
        await conn.execute(statement)
    scene.sql_url = strategy["url"] = url
    await prepare_pull(scene, raw, strategy)


async def prepare_plugin(scene: Scene, raw: dict[str, Any], strategy: dict[str, Any]) -> None:
    strategy["kind"] = "udp_datagram"  # the stand-in for twilio_inbound; every other field is the example's
    strategy["port"] = udp_port()
    scene.env["PYTHONPATH"] = str(plugin_site.install(scene.tmp / "plugins"))


def udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def fire_pull(scene: Scene, gw: programs.GatewayProcess, entry: Entry) -> int:
    return 1  # the upstream's changed answer is the change


async def fire_webhook(scene: Scene, gw: programs.GatewayProcess, entry: Entry) -> int:
    """Post every token that routes (the current one and each previous one), each answered with the URI; a
    signed watch's delivery comes from the documented sender for its scheme."""
    tokens = [entry.strategy["token"], *entry.strategy.get("previous_tokens", [])]
    for token in tokens:
        answer = await deliver(gw, examples.resolved(token, scene.env), entry.strategy.get("signature"), scene.env)
        assert answer == {"ok": True, "uri": entry.uri}
    return len(tokens)


async def deliver(
    gw: programs.GatewayProcess, token: str, signature: dict[str, Any] | None, environ: dict[str, str]
) -> Any:
    if signature is None:
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            return (await http.post(f"{gw.base}/webhooks/resource-updated/{token}")).json()
    sender = examples.SENDERS / f"{signature['scheme']}.sh"
    secret = examples.resolved(signature["secrets"][0], environ)
    env = {**os.environ, "GATEWAY": gw.base, "TOKEN": token, "SECRET": secret}  # as a user runs it: bash, curl
    done = await asyncio.to_thread(
        subprocess.run, ["bash", "-e", str(sender)], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return json.loads(done.stdout)


async def fire_nats(scene: Scene, gw: programs.GatewayProcess, entry: Entry) -> int:
    client = await nats.connect(scene.nats.url, name="mcpg-examples", allow_reconnect=False)
    try:
        await client.publish(entry.strategy["subject"], b"{}")
        await client.flush()
    finally:
        await client.close()
    return 1


async def fire_postgres(scene: Scene, gw: programs.GatewayProcess, entry: Entry) -> int:
    await scene.db.execute(f"NOTIFY {entry.strategy['channel']}")
    return 1


async def fire_sql(scene: Scene, gw: programs.GatewayProcess, entry: Entry) -> int:
    assert scene.sql_url is not None
    conn = await asyncpg.connect(scene.sql_url)
    try:
        await conn.execute(scene.runner.sql_change)
    finally:
        await conn.close()
    return 1


async def fire_plugin(scene: Scene, gw: programs.GatewayProcess, entry: Entry) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(f"{entry.strategy['kinds'][0]} +15550100 hello".encode(), ("127.0.0.1", entry.strategy["port"]))
    return 1


@dataclass(frozen=True)
class Driver:
    prepare: Prepare
    fire: Fire
    bound_s: float = BOUND_S


DRIVERS: dict[str, Driver] = {
    "poll": Driver(prepare_pull, fire_pull, PULL_BOUND_S),
    "webhook": Driver(prepare_nothing, fire_webhook),
    "nats_topic": Driver(prepare_nats, fire_nats),
    "postgres_listen_notify": Driver(prepare_postgres, fire_postgres),
    "sql_polling": Driver(prepare_sql, fire_sql, PULL_BOUND_S),
    "plugin": Driver(prepare_plugin, fire_plugin),
}


# -- one example, end to end ------------------------------------------------------------------------------------


def strategy_of(entry: dict[str, Any]) -> dict[str, Any]:
    strategy: dict[str, Any] = entry.get("watch", {}).get("strategy") or {"type": "poll"}
    entry.setdefault("watch", {})["strategy"] = strategy  # an omitted strategy is a poll: made explicit to edit
    return strategy


def documents(runner: Runner, name: str) -> tuple[Doc, Doc]:
    before = runner.before or (200, json.dumps({"entry": name, "version": 1}))
    return before, runner.after or (200, json.dumps({"entry": name, "version": 2}))


async def prepared(path: Path, scene: Scene) -> tuple[dict[str, Any], list[Entry]]:
    """The example rebased onto the scene's servers, and each entry as the test drives it."""
    shipped = examples.load(path)
    raw = examples.rebased(shipped, scene.upstream.url)
    out = []
    for own, moved in zip(examples.entries(shipped), examples.entries(raw), strict=True):
        strategy = strategy_of(moved)
        await DRIVERS[strategy["type"]].prepare(scene, raw, strategy)
        variables = scene.runner.variables
        uri = moved["uri_template"].format(**variables) if "uri_template" in moved else moved["uri"]
        target = examples.target(own["backend"]["url"], variables)
        headers = {k: examples.resolved(v, scene.env) for k, v in own["backend"].get("headers", {}).items()}
        out.append(Entry(uri, strategy, target, headers, *documents(scene.runner, moved["name"])))
    return raw, out


def authorised(raw: dict[str, Any], runner: Runner) -> dict[str, str]:
    """The client's headers: none if the example says who may connect, else a principal's token, added."""
    gateway = raw.setdefault("gateway", {})
    if "auth" in gateway:
        return {}
    gateway["auth"] = {"principals": [principal(CLIENT_TOKEN, runner.principal_id, **runner.principal)]}
    return bearer(CLIENT_TOKEN)


def answer(upstream: Upstream, entry: Entry, doc: Doc) -> None:
    upstream.set(entry.path, doc[1], status=doc[0])


@contextlib.asynccontextmanager
async def serving(image: ImageEnv, config: Path, env: dict[str, str]) -> AsyncIterator[programs.GatewayProcess]:
    """The gateway program, started off the event loop: the upstream on it keeps answering meanwhile."""
    with contextlib.ExitStack() as stack:
        gw = await asyncio.to_thread(stack.enter_context, programs.gateway(image, config, env, cwd=config.parent))
        try:
            yield gw
        except BaseException:
            print("\n".join(gw.program.output()[-60:]))  # the gateway's own account, in the failure's report
            raise


async def told_and_read(sub: Subscription, scene: Scene, gw: programs.GatewayProcess, entry: Entry) -> None:
    """Change the entry's source as its strategy watches it; the client must be told, and read the new answer."""
    driver = DRIVERS[entry.strategy["type"]]
    answer(scene.upstream, entry, entry.after)
    for _ in range(await driver.fire(scene, gw, entry)):
        assert await sub.next_update(timeout=driver.bound_s) == entry.uri
    read = await sub.client.read_resource(entry.uri)
    assert [getattr(c, "text", None) for c in read.contents] == [entry.after[1]]


def assert_asked_as_written(upstream: Upstream, entries: list[Entry]) -> None:
    asked = [examples.decoded(target) for target in upstream.targets]
    for entry in entries:
        assert examples.decoded(entry.target) in asked, (entry.target, upstream.targets)
    seen = [{k.lower(): v for k, v in headers.items()} for headers in upstream.headers_seen]
    for entry in entries:
        for name, value in entry.headers.items():
            assert any(h.get(name.lower()) == value for h in seen), f"{name} never reached the upstream"


async def run(path: Path, scene: Scene, image: ImageEnv) -> None:
    raw, entries = await prepared(path, scene)
    headers = authorised(raw, scene.runner)
    for entry in entries:
        answer(scene.upstream, entry, entry.before)
    config = scene.tmp / path.name
    config.write_text(yaml.safe_dump(raw))
    uris = [entry.uri for entry in entries]
    async with serving(image, config, scene.env) as gw, subscribed(gw.mcp_url, "listen", uris, headers) as sub:
        for entry in entries:
            await told_and_read(sub, scene, gw, entry)
        assert sub.drained() == []  # one notification per change, none besides
    assert_asked_as_written(scene.upstream, entries)


# -- the tests ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", examples.gateway_examples(), ids=lambda p: p.name)
async def test_each_gateway_example_tells_its_subscriber_and_reads_the_upstream(
    path: Path,
    gateway_env: ImageEnv,
    nats: NatsServer,
    postgres: PostgresServer,
    db: Any,
    tmp_path: Path,
) -> None:
    runner = RUNNERS.get(path.name)
    assert runner is not None, f"no runner for examples/gateway/{path.name}: add one to RUNNERS in {__file__}"
    async with serve() as upstream, contextlib.AsyncExitStack() as cleanup:
        scene = Scene(runner, upstream, nats, postgres, db, tmp_path, cleanup, EXAMPLE_ENV | runner.env)
        await run(path, scene, gateway_env)


def test_every_runner_has_its_example() -> None:
    assert sorted(RUNNERS) == [p.name for p in examples.gateway_examples()]


EXAMPLE_FILES = [*examples.gateway_examples(), *sorted(examples.MANIFEST_EXAMPLES.glob("*.yaml"))]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_example_with_a_placeholder_says_it_is_a_real_world_one(path: Path) -> None:
    found = examples.placeholders(path)
    if found:
        assert examples.REAL_WORLD in examples.header_comment(path), f"{path.name} holds {found}"
    else:
        assert examples.REAL_WORLD not in examples.header_comment(path)


def test_the_webhook_manifest_points_newcomers_to_the_quickstart_one() -> None:
    header = examples.header_comment(examples.MANIFEST_EXAMPLES / "webhook.yaml")
    assert "real-world example: replace FOLDER_ID and add credentials; the quickstarts use quickstart.yaml" in header


# -- the quickstarts' in-cluster upstream, run here ---------------------------------------------------------------

UPSTREAM_MANIFEST = examples.MANIFEST_EXAMPLES / "quickstart-upstream.yaml"
QUICKSTART_MANIFEST = examples.MANIFEST_EXAMPLES / "quickstart.yaml"


def manifest_objects(path: Path) -> dict[str, dict[str, Any]]:
    """Kind -> object, for a file holding one object of each kind."""
    objects = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    by_kind = {doc["kind"]: doc for doc in objects}
    assert len(by_kind) == len(objects), path
    return by_kind


def quickstart_url() -> str:
    url: str = manifest_objects(QUICKSTART_MANIFEST)["ResourceWatch"]["spec"]["backend"]["http"]["url"]
    return url


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def test_the_quickstart_reads_the_upstreams_service_in_its_own_namespace() -> None:
    objects = manifest_objects(UPSTREAM_MANIFEST)
    service, pod = objects["Service"], objects["Deployment"]["spec"]["template"]
    url = urlsplit(quickstart_url())
    assert url.hostname == service["metadata"]["name"]  # a bare name: the Service of the watch's namespace
    [port] = [p for p in service["spec"]["ports"] if p["port"] == url.port]
    assert [p["containerPort"] for p in container(objects["Deployment"])["ports"] if p["name"] == port["targetPort"]]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert "namespace" not in service["metadata"]  # applied with -n, next to the watch


def test_the_quickstart_upstream_runs_the_gateway_image_the_kind_quickstart_builds() -> None:
    app_version = yaml.safe_load((REPO / "charts" / "mcpg" / "Chart.yaml").read_text())["appVersion"]
    serve_container = container(manifest_objects(UPSTREAM_MANIFEST)["Deployment"])
    assert serve_container["image"] == f"mcpg/gateway:{app_version}"
    assert serve_container["imagePullPolicy"] == "IfNotPresent"  # loaded into the node; no registry is asked


@contextlib.contextmanager
def upstream_container_here(image: ImageEnv, tmp_path: Path) -> Iterator[str]:
    """The upstream Deployment's container command, run on this machine from the gateway image's install: the
    ConfigMap's keys as files where the volume mounts them, but in `tmp_path`; loopback and a free port instead
    of the pod's 0.0.0.0:8000. Yields the base URL it serves."""
    objects = manifest_objects(UPSTREAM_MANIFEST)
    serve_container = container(objects["Deployment"])
    [mount] = serve_container["volumeMounts"]
    [volume] = [v for v in objects["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    for key, text in objects["ConfigMap"]["data"].items():
        (tmp_path / key).write_text(text)
    [port] = free_ports(1)
    here = {str(serve_container["ports"][0]["containerPort"]): str(port), "0.0.0.0": "127.0.0.1"}
    argv = [here.get(arg, str(tmp_path) if arg == mount["mountPath"] else arg) for arg in serve_container["command"]]
    env = image.environ(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")  # the image's ENV
    program = shutil.which(argv[0], path=env["PATH"])
    assert program is not None
    assert Path(program).parent == image.bin_dir  # python3 as the image's PATH finds it: the gateway's venv
    with programs.Program([program, *argv[1:]], env, cwd=tmp_path) as running:
        running.wait_for("Serving HTTP on 127.0.0.1")
        yield f"http://127.0.0.1:{port}"


def test_the_quickstart_upstreams_container_serves_the_report_the_quickstart_reads(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    objects = manifest_objects(UPSTREAM_MANIFEST)
    probe = container(objects["Deployment"])["readinessProbe"]["httpGet"]["path"]
    with upstream_container_here(gateway_env, tmp_path) as base:
        report = httpx2.get(base + urlsplit(quickstart_url()).path, timeout=BOUND_S)
        ready = httpx2.get(base + probe, timeout=BOUND_S)
    assert report.status_code == 200
    assert report.json() == json.loads(objects["ConfigMap"]["data"]["report.json"])
    assert report.headers["content-type"] == "application/json"  # the watch requires a JSON response
    assert ready.status_code == 200
