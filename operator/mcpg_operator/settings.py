"""The operator's settings, read from the environment once, in this module only (the chart sets the variables).

`load()` is called by the entrypoint (to fail fast, before anything starts) and by the kopf startup handler; the
result is passed down explicitly. A bad value raises `SettingsError` naming every variable that is wrong. Besides
the `MCPG_*` variables, `POD_NAME` and `POD_NAMESPACE` (the chart sets them from the downward API) are read here.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from mcpg_gateway.contract import config
from mcpg_operator import quantities


class SettingsError(ValueError):
    """The operator's environment cannot be used; the message names each variable and what is wrong."""


ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]
SERVICE_TYPES: tuple[ServiceType, ...] = ("ClusterIP", "NodePort", "LoadBalancer")
NO_BOUND = "none"
"""The value of a resource bound that leaves the resource unbounded (`MCPG_GATEWAY_MAX_CPU_LIMIT=none`)."""


@dataclass(frozen=True, slots=True)
class GatewayBounds:
    """What a namespace's McpGateway may ask for: the cluster admin's bounds, `MCPG_GATEWAY_MAX_*`,
    `MCPG_GATEWAY_ALLOWED_*` and `MCPG_GATEWAY_ALLOW_NODE_PORTS`.

    The operator writes a gateway's Deployment, Service and PodDisruptionBudget with its own rights, for a tenant
    who may hold none of them: whoever may edit an McpGateway gets exactly what these bounds allow, and an
    McpGateway outside them is refused whole (`gateway_settings.shape`). The operator's own defaults
    (`GatewayDefaults`) are the admin's and are not bounded, except that the default replicas must be within
    `max_replicas`. Resource bounds are Kubernetes quantities; None (`none`) leaves that resource unbounded.
    """

    max_replicas: int = 10
    """`MCPG_GATEWAY_MAX_REPLICAS`: the gateway pods one namespace may ask for."""
    max_cpu_request: str | None = "2"
    """`MCPG_GATEWAY_MAX_CPU_REQUEST`: the CPU the scheduler reserves for one gateway container."""
    max_cpu_limit: str | None = None
    """`MCPG_GATEWAY_MAX_CPU_LIMIT`: unbounded by default, as the operator's own default sets no CPU limit (CPU
    above the request is only idle time other pods did not reserve). When set, an McpGateway must set the limit."""
    max_memory_request: str | None = "2Gi"
    """`MCPG_GATEWAY_MAX_MEMORY_REQUEST`: the memory the scheduler reserves for one gateway container."""
    max_memory_limit: str | None = "4Gi"
    """`MCPG_GATEWAY_MAX_MEMORY_LIMIT`: the memory one gateway container may use. While it is bounded, an
    McpGateway that sets resources must set this limit: a container without one may take a node's memory."""
    service_types: tuple[ServiceType, ...] = ("ClusterIP", "NodePort")
    """`MCPG_GATEWAY_ALLOWED_SERVICE_TYPES` (comma-separated): the types an McpGateway may set. Not LoadBalancer by
    default: it provisions infrastructure outside the cluster (often reachable from the internet, often paid for)
    and its cloud controller acts on the Service's annotations."""
    service_annotations: tuple[str, ...] = ()
    """`MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS` (comma-separated): the Service annotation keys an McpGateway may
    set. `prefix/` allows every key under that prefix, `*` every key; any other entry is one key. None by default:
    what a key does depends on the controllers of the cluster (load balancers, external-dns, meshes), which only
    the admin knows."""
    node_ports: bool = False
    """`MCPG_GATEWAY_ALLOW_NODE_PORTS` (true or false): whether an McpGateway may choose its node ports. Off by
    default: a node port exists once per cluster, so a chosen one is taken from every other namespace (the
    quickstart's 30080 included); the API server allocates a free one to a NodePort Service that names none."""

    def allows_annotation(self, key: str) -> bool:
        """Whether an McpGateway may put `key` on its Service."""
        return any(
            entry in ("*", key) or (entry.endswith("/") and key.startswith(entry)) for entry in self.service_annotations
        )

    def resource_bound(self, part: str, name: str) -> tuple[str | None, str]:
        """(the bound, its variable) for `requests` or `limits` of `cpu` or `memory`."""
        attribute = f"max_{name}_{part.removesuffix('s')}"
        return getattr(self, attribute), f"MCPG_GATEWAY_{attribute.upper()}"


BOUNDED_RESOURCES = ("cpu", "memory")
"""The only resources an McpGateway may set: the ones `GatewayBounds` bounds."""


class GatewayDefaults(BaseModel):
    """What every rendered gateway gets: `MCPG_GATEWAY_<FIELD>` variables; and `bounds`, what a namespace's
    McpGateway may change of that (`GatewayBounds`), carried here so that every reader of the defaults (the
    namespace pass and the bus step) holds them too."""

    model_config = ConfigDict(frozen=True)

    image: str = "ghcr.io/mcpg/gateway:0.2.0"
    image_pull_policy: str = "IfNotPresent"
    replicas: int = Field(default=1, ge=1)
    resources: dict[str, Any] = Field(
        default_factory=lambda: {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
    )
    allowed_origins: list[str] = Field(default_factory=list)
    admin_token_secret: str | None = None
    """Name of a Secret (key `token`) in each gateway namespace; unset leaves the admin API disabled."""
    nats_url: str | None = None
    plugin_kinds: list[str] = Field(default_factory=list)
    """The watch-strategy plugin kinds the gateway image installs; a watch naming another kind is refused."""
    log_format: str = "json"
    service_type: ServiceType = "ClusterIP"
    http_node_port: int | None = Field(default=None, ge=30000, le=32767)
    """A fixed node port for the public port; a cluster has each only once, so set it for one namespace's gateway."""
    admin_node_port: int | None = Field(default=None, ge=30000, le=32767)
    # The gateway's own settings, set once for every gateway rendered. Validated with the contract's models, so a
    # value the gateway would refuse stops the operator at start instead of every gateway pod. Only what was set
    # is rendered (`render._gateway_config`): the keys given in the JSON, `server_card` if set. What is left out
    # stays the gateway's default, defined in one place (the contract), and an operator given none of them renders
    # the configuration it rendered before these settings existed, so upgrading it rolls no gateway.
    limits: config.LimitsConfig = Field(default_factory=config.LimitsConfig)
    """`gateway.limits`, from the JSON object `MCPG_GATEWAY_LIMITS`."""
    subscriptions: config.SubscriptionsConfig = Field(default_factory=config.SubscriptionsConfig)
    """`gateway.subscriptions`, from the JSON object `MCPG_GATEWAY_SUBSCRIPTIONS`."""
    liveness: config.LivenessConfig = Field(default_factory=config.LivenessConfig)
    """`gateway.liveness`, from the JSON object `MCPG_GATEWAY_LIVENESS`."""
    server_card: bool | None = None
    """`gateway.server.server_card`, from `MCPG_GATEWAY_SERVER_CARD` (true or false); None: not set."""
    bounds: GatewayBounds = Field(default_factory=GatewayBounds)
    """What an McpGateway may ask for; read from variables of its own (`GatewayBounds`), not `MCPG_GATEWAY_BOUNDS`."""
    operator_namespace: str | None = None
    """Where the operator runs (`POD_NAMESPACE`, not a variable of its own): a gateway NetworkPolicy that limits
    who reaches the gateway still lets the operator reach each pod's admin port, to ask what it serves."""

    @field_validator("http_node_port", "admin_node_port")
    @classmethod
    def _on_a_node_service(cls, port: int | None, info: ValidationInfo) -> int | None:
        # A ClusterIP Service has no node port: accepting one would silently leave the gateway unreachable there.
        if port is not None and info.data.get("service_type", "ClusterIP") == "ClusterIP":
            raise ValueError(
                "a node port needs MCPG_GATEWAY_SERVICE_TYPE NodePort or LoadBalancer; the Service is a ClusterIP"
            )
        return port


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """Which replica reconciles: the holder of one `coordination.k8s.io` Lease (`MCPG_LEADER_ELECTION_*`).

    The timings are controller-runtime's defaults: a leader that cannot renew for `renew_s` stops, so it has
    stopped before its Lease (`lease_s`) can expire for the others, who try every `retry_s`.
    """

    enabled: bool = True
    """`MCPG_LEADER_ELECTION_ENABLED` (true or false): off only for a single replica run by hand."""
    lease_name: str = "mcpg-operator"
    """`MCPG_LEADER_ELECTION_LEASE_NAME`."""
    namespace: str = ""
    """`MCPG_LEADER_ELECTION_NAMESPACE`, else `POD_NAMESPACE`: required while election is on."""
    identity: str = ""
    """`POD_NAME`, else the host name and a random suffix: unique among the candidates, as the Lease holder."""
    lease_s: float = 15.0
    """`MCPG_LEADER_ELECTION_LEASE_DURATION_SECONDS`: how long the others wait on a Lease nobody renews."""
    renew_s: float = 10.0
    """`MCPG_LEADER_ELECTION_RENEW_DEADLINE_SECONDS`: the leader gives up after failing to renew this long."""
    retry_s: float = 2.0
    """`MCPG_LEADER_ELECTION_RETRY_PERIOD_SECONDS`: how often every candidate tries to acquire or renew."""


BusMode = Literal["managed", "external"]
BUS_MODES: tuple[BusMode, ...] = ("managed", "external")


@dataclass(frozen=True, slots=True)
class BusSettings:
    """Where the NATS bus comes from when a namespace runs more than one gateway replicas (`MCPG_BUS_*`).

    `managed`: the operator runs one NATS server (JetStream) in `namespace`, with an account per gateway namespace.
    `external`: the user's server at `url`; each gateway namespace holds the Secret `credentials_secret` (keys
    `user` and `password`). With one gateway replica per namespace no bus is used, whatever is set here.
    """

    mode: BusMode = "managed"
    """`MCPG_BUS_MODE`."""
    namespace: str = ""
    """`MCPG_BUS_NAMESPACE`, else `POD_NAMESPACE`: where the managed server runs (required only when it does run:
    managed mode, gateway replicas above 1). Otherwise, where a server left from such a run is removed at start."""
    image: str = "nats:2.11-alpine"
    """`MCPG_BUS_IMAGE`: the managed server's image (the official one: `nats-server` with JetStream)."""
    url: str = ""
    """`MCPG_BUS_URL` (external mode): `nats://host:port` or `tls://host:port`, never with credentials in it."""
    credentials_secret: str = ""
    """`MCPG_BUS_CREDENTIALS_SECRET` (external mode): the Secret each gateway namespace holds for the bus."""


RECONCILE_CONCURRENCY = 4
"""`MCPG_RECONCILE_CONCURRENCY`'s default: a pass mostly waits on the API server, so a few overlap well on one
event loop (on a pod of 2 cores), and each holds what it read of its namespace until it ends."""


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    resync_s: float = 30.0
    """`MCPG_RESYNC_SECONDS`: every known namespace is reconciled this often, covering any missed event."""
    settle_s: float = 0.5
    """`MCPG_SETTLE_SECONDS`: a namespace's reconcile waits this long for more events (a burst becomes one
    configuration)."""
    watch_namespaces: tuple[str, ...] = ()
    """`MCPG_WATCH_NAMESPACES`, comma-separated; empty means every namespace."""
    gateway: GatewayDefaults = field(default_factory=GatewayDefaults)
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    bus: BusSettings = field(default_factory=BusSettings)
    reconcile_concurrency: int = RECONCILE_CONCURRENCY
    """`MCPG_RECONCILE_CONCURRENCY` (1 to 64): passes at once, over every namespace and the bus step; a namespace
    waits its turn behind those already waiting (`scheduler.Turns`), so a busy one cannot take every turn."""


_JSON_FIELDS = frozenset(
    {
        "replicas",
        "resources",
        "allowed_origins",
        "plugin_kinds",
        "http_node_port",
        "admin_node_port",
        "limits",
        "subscriptions",
        "liveness",
    }
)


def load(env: Mapping[str, str] | None = None) -> OperatorSettings:
    """Every operator setting from `env` (default: the process environment)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    resync = _seconds(env, "MCPG_RESYNC_SECONDS", 30.0, lambda v: v > 0, "a number of seconds above 0", problems)
    settle = _seconds(env, "MCPG_SETTLE_SECONDS", 0.5, lambda v: v >= 0, "a number of seconds, 0 or more", problems)
    gateway = _gateway_defaults(env, problems)
    election = _leader_election(env, problems)
    bus = _bus(env, gateway.replicas if gateway else 1, problems)
    concurrency = _reconcile_concurrency(env, problems)
    if problems or gateway is None:
        raise SettingsError("; ".join(problems))
    namespaces = tuple(ns.strip() for ns in env.get("MCPG_WATCH_NAMESPACES", "").split(",") if ns.strip())
    return OperatorSettings(resync, settle, namespaces, gateway, election, bus, reconcile_concurrency=concurrency)


MAX_CONCURRENCY = 64
"""Every pass runs on one event loop: beyond this, more at once would only hold more namespaces in memory."""


def _reconcile_concurrency(env: Mapping[str, str], problems: list[str]) -> int:
    raw = env.get("MCPG_RECONCILE_CONCURRENCY", "").strip()
    if not raw:
        return RECONCILE_CONCURRENCY
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_CONCURRENCY:
        wanted = f"a whole number from 1 to {MAX_CONCURRENCY}"
        problems.append(f"MCPG_RECONCILE_CONCURRENCY: must be {wanted}, got {raw[:80]!r}")
        return RECONCILE_CONCURRENCY
    return int(raw)


def _seconds(
    env: Mapping[str, str], name: str, default: float, ok: Callable[[float], bool], wanted: str, problems: list[str]
) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isnan(value) or math.isinf(value) or not ok(value):
        problems.append(f"{name}: must be {wanted}, got {raw[:80]!r}")
    return value


def _gateway_defaults(env: Mapping[str, str], problems: list[str]) -> GatewayDefaults | None:
    """`MCPG_GATEWAY_<FIELD>` variables (those in `_JSON_FIELDS` are JSON), and the bounds (`_bounds`)."""
    bounds = _bounds(env, problems)
    values: dict[str, Any] = {"bounds": bounds, "operator_namespace": env.get("POD_NAMESPACE", "").strip() or None}
    for name in GatewayDefaults.model_fields:
        if name in ("bounds", "operator_namespace"):
            continue  # variables of their own
        var = f"MCPG_GATEWAY_{name.upper()}"
        raw = env.get(var)
        if not raw:
            continue
        try:
            values[name] = _standard_json(raw) if name in _JSON_FIELDS else raw
        except ValueError as e:
            problems.append(f"{var}: not valid JSON ({str(e)[:80]}): {raw[:80]!r}")
    try:
        defaults = GatewayDefaults.model_validate(values)
    except ValidationError as e:
        problems += [_gateway_problem(err) for err in e.errors()]
        return None
    if defaults.replicas > bounds.max_replicas:  # a namespace asking for the default itself would be refused
        problems.append(
            f"{_MAX}REPLICAS: {bounds.max_replicas} is below MCPG_GATEWAY_REPLICAS ({defaults.replicas}): the "
            "operator's own default must be within its bounds"
        )
    return defaults


_MAX = "MCPG_GATEWAY_MAX_"
_ALLOWED = "MCPG_GATEWAY_ALLOWED_"
_QUANTITY_CHARS = 64
"""The longest resource bound taken: a quantity is a number and a suffix, never a text."""


def _bounds(env: Mapping[str, str], problems: list[str]) -> GatewayBounds:
    """`MCPG_GATEWAY_MAX_*`, `MCPG_GATEWAY_ALLOWED_*` and `MCPG_GATEWAY_ALLOW_NODE_PORTS`; unset: the defaults."""
    d = GatewayBounds()
    bounds = GatewayBounds(
        _max_replicas(env.get(f"{_MAX}REPLICAS", "").strip(), d.max_replicas, problems),
        _resource_bound(env, "cpu", "request", d.max_cpu_request, problems),
        _resource_bound(env, "cpu", "limit", d.max_cpu_limit, problems),
        _resource_bound(env, "memory", "request", d.max_memory_request, problems),
        _resource_bound(env, "memory", "limit", d.max_memory_limit, problems),
        _service_types(env.get(f"{_ALLOWED}SERVICE_TYPES", ""), d.service_types, problems),
        _annotation_keys(env.get(f"{_ALLOWED}SERVICE_ANNOTATIONS", ""), problems),
        _boolean(env, "MCPG_GATEWAY_ALLOW_NODE_PORTS", d.node_ports, problems),
    )
    _requests_within_limits(bounds, problems)
    return bounds


def _max_replicas(raw: str, default: int, problems: list[str]) -> int:
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9) or int(raw) < 1:
        problems.append(f"{_MAX}REPLICAS: must be a whole number of gateway pods, 1 or more, got {raw[:80]!r}")
        return default
    return int(raw)


def _resource_bound(
    env: Mapping[str, str], name: str, part: str, default: str | None, problems: list[str]
) -> str | None:
    """`MCPG_GATEWAY_MAX_<NAME>_<PART>`: a quantity, or None for `none` (unbounded); unset: `default`."""
    var = f"{_MAX}{name.upper()}_{part.upper()}"
    raw = env.get(var, "").strip()
    if not raw:
        return default
    if raw == NO_BOUND:
        return None
    try:
        ok = len(raw) <= _QUANTITY_CHARS and quantities.parse(raw) >= 0
    except ValueError:
        ok = False
    if not ok:
        problems.append(f"{var}: must be a resource quantity such as 500m, 2 or 4Gi, or {NO_BOUND}, got {raw[:80]!r}")
        return default
    return raw


def _requests_within_limits(bounds: GatewayBounds, problems: list[str]) -> None:
    """A request bound above its limit bound could never be used: a request is at most its limit."""
    for name in BOUNDED_RESOURCES:
        (request, request_var), (limit, limit_var) = (bounds.resource_bound(p, name) for p in ("requests", "limits"))
        if request is not None and limit is not None and quantities.parse(request) > quantities.parse(limit):
            problems.append(f"{request_var}: {request} is above {limit_var} ({limit}); a request is at most its limit")


def _service_types(raw: str, default: tuple[ServiceType, ...], problems: list[str]) -> tuple[ServiceType, ...]:
    found = _listed(raw)
    if not found:
        return default
    wrong = [t for t in found if t not in SERVICE_TYPES]
    if wrong:
        problems.append(
            f"{_ALLOWED}SERVICE_TYPES: each must be one of {', '.join(SERVICE_TYPES)}, got {wrong[0][:80]!r}"
        )
        return default
    return tuple(t for t in SERVICE_TYPES if t in found)


_ANNOTATION_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_ANNOTATION_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/")


def _annotation_keys(raw: str, problems: list[str]) -> tuple[str, ...]:
    found = _listed(raw)
    for entry in found:
        if entry != "*" and not (_ANNOTATION_KEY.fullmatch(entry) or _ANNOTATION_PREFIX.fullmatch(entry)):
            problems.append(
                f"{_ALLOWED}SERVICE_ANNOTATIONS: each must be an annotation key, a prefix ending in / (example.com/) "
                f"or *, got {entry[:80]!r}"
            )
            return ()
    return found


def _listed(raw: str) -> tuple[str, ...]:
    """A comma-separated variable's entries, without blanks and repeats, in order."""
    return tuple(dict.fromkeys(e.strip() for e in raw.split(",") if e.strip()))


def _boolean(env: Mapping[str, str], var: str, default: bool, problems: list[str]) -> bool:
    raw = env.get(var, "").strip()
    if not raw:
        return default
    if raw.lower() not in _BOOLEANS:
        problems.append(f"{var}: must be true or false, got {raw[:80]!r}")
        return default
    return _BOOLEANS[raw.lower()]


def _standard_json(text: str) -> Any:
    """JSON as RFC 8259 has it: Python's parser also takes `NaN` and `Infinity` (and reads `1e400` as infinite),
    which no setting can use and the Kubernetes API refuses in every object rendered from them."""

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise ValueError(f"{number[:40]} is not a finite number")
        return value

    def refused(constant: str) -> Any:
        raise ValueError(f"{constant} is not a JSON value")

    return json.loads(text, parse_float=finite, parse_constant=refused)


def _gateway_problem(err: ErrorDetails) -> str:
    """`MCPG_GATEWAY_<FIELD>: [<where in its JSON>: ]<what is wrong>`.

    The first step of the error's location is the field, so the variable to fix; the rest is inside that
    variable's JSON (`MCPG_GATEWAY_LIMITS: watches_per_principal: ...`), never part of the variable's name.
    """
    field, *inside = err["loc"] or ("",)
    where = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in inside).removeprefix(".")
    return f"MCPG_GATEWAY_{str(field).upper()}: {where + ': ' if where else ''}{_gateway_message(str(field), err)}"


def _gateway_message(field: str, err: ErrorDetails) -> str:
    """pydantic's message, in the terms of the variable: JSON objects and their keys, not model classes."""
    info = GatewayDefaults.model_fields.get(field)
    model = info.annotation if info is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return err["msg"].removeprefix("Value error, ")  # a validator's own sentence
    if err["type"] == "model_type":  # pydantic names the class, which nobody setting the variable knows
        return f"must be a JSON object, got {json.dumps(err['input'], default=repr)[:80]}"
    if err["type"] == "extra_forbidden":  # most likely a typo: say what is spelled right
        return f"{err['msg']}; the keys are {', '.join(model.model_fields)}"
    return err["msg"].removeprefix("Value error, ")  # a validator's own sentence


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_ELECTION = "MCPG_LEADER_ELECTION_"


def _leader_election(env: Mapping[str, str], problems: list[str]) -> LeaderElection:
    """`MCPG_LEADER_ELECTION_*`, `POD_NAME` and `POD_NAMESPACE`; the timings must be lease > renew > retry."""
    default = LeaderElection()
    raw_enabled = env.get(f"{_ELECTION}ENABLED", "").strip()
    enabled = _BOOLEANS.get(raw_enabled.lower(), default.enabled) if raw_enabled else default.enabled
    if raw_enabled and raw_enabled.lower() not in _BOOLEANS:
        problems.append(f"{_ELECTION}ENABLED: must be true or false, got {raw_enabled[:80]!r}")
    positive, wanted, before = (lambda v: v > 0), "a number of seconds above 0", len(problems)
    lease = _seconds(env, f"{_ELECTION}LEASE_DURATION_SECONDS", default.lease_s, positive, wanted, problems)
    renew = _seconds(env, f"{_ELECTION}RENEW_DEADLINE_SECONDS", default.renew_s, positive, wanted, problems)
    retry = _seconds(env, f"{_ELECTION}RETRY_PERIOD_SECONDS", default.retry_s, positive, wanted, problems)
    if len(problems) == before and not lease > renew > retry:  # each one valid, but not in this order
        problems.append(
            f"{_ELECTION}LEASE_DURATION_SECONDS, _RENEW_DEADLINE_SECONDS, _RETRY_PERIOD_SECONDS: must be "
            f"lease > renew deadline > retry period, got {lease:g} > {renew:g} > {retry:g}"
        )
    name = env.get(f"{_ELECTION}LEASE_NAME", "").strip() or default.lease_name
    if not _DNS_SUBDOMAIN.fullmatch(name):
        problems.append(f"{_ELECTION}LEASE_NAME: must be a lowercase DNS subdomain name, got {name[:80]!r}")
    namespace = _election_namespace(env, enabled, problems)
    identity = env.get("POD_NAME", "").strip() or f"{socket.gethostname()}_{secrets.token_hex(4)}"
    return LeaderElection(enabled, name, namespace, identity, lease, renew, retry)


def _election_namespace(env: Mapping[str, str], enabled: bool, problems: list[str]) -> str:
    missing = (
        f"{_ELECTION}NAMESPACE: where the Lease lives is unknown: set it or POD_NAMESPACE (the chart sets "
        f"POD_NAMESPACE), or run a single replica with {_ELECTION}ENABLED=false"
    )
    return _namespace(env, f"{_ELECTION}NAMESPACE", missing if enabled else None, problems)


def _namespace(env: Mapping[str, str], var: str, missing: str | None, problems: list[str]) -> str:
    """`var`, else POD_NAMESPACE: the variable named for the purpose wins over the pod's own namespace, which the
    chart always sets. `missing`: the problem to report when neither is set (None: it may be unset)."""
    used = var if env.get(var, "").strip() else "POD_NAMESPACE"
    namespace = env.get(used, "").strip()
    if missing is not None and not namespace:
        problems.append(missing)
    elif namespace and not _DNS_LABEL.fullmatch(namespace):
        problem = f"{used}: must be a namespace name, got {namespace[:80]!r}"
        if problem not in problems:  # POD_NAMESPACE may have been named for another purpose already
            problems.append(problem)
    return namespace


_BUS = "MCPG_BUS_"


def _bus(env: Mapping[str, str], replicas: int, problems: list[str]) -> BusSettings:
    """`MCPG_BUS_*`: the mode, and what that mode needs (checked even with one replica, except the namespace)."""
    default = BusSettings()
    mode = env.get(f"{_BUS}MODE", "").strip() or default.mode
    image = env.get(f"{_BUS}IMAGE", "").strip() or default.image
    url = env.get(f"{_BUS}URL", "").strip()
    secret = env.get(f"{_BUS}CREDENTIALS_SECRET", "").strip()
    if mode == "external":
        _external_bus(url, secret, problems)
        # No server of ours runs, but one left from managed mode is removed from here (`bus_reconcile.leftovers`).
        return BusSettings("external", _bus_namespace(env, 1, problems), image, url, secret)
    if mode != "managed":
        problems.append(f"{_BUS}MODE: must be one of {', '.join(BUS_MODES)}, got {mode[:80]!r}")
        return default
    for var, value in ((f"{_BUS}URL", url), (f"{_BUS}CREDENTIALS_SECRET", secret)):
        if value:  # a managed bus has its own URL and credentials: this one would be silently ignored
            problems.append(f"{var}: only used with {_BUS}MODE=external; unset it, or set the mode")
    return BusSettings("managed", _bus_namespace(env, replicas, problems), image)


def _external_bus(url: str, secret: str, problems: list[str]) -> None:
    # The URL is never echoed: a mistaken one may carry a password.
    if not url:
        problems.append(f"{_BUS}URL: required with {_BUS}MODE=external: the nats:// or tls:// URL of your server")
    else:
        problem = _bus_url_problem(url)
        if problem:
            problems.append(f"{_BUS}URL: {problem}")
    if not secret:
        problems.append(
            f"{_BUS}CREDENTIALS_SECRET: required with {_BUS}MODE=external: the name of the Secret (keys user and "
            "password) each gateway namespace holds for the bus"
        )
    elif not _DNS_SUBDOMAIN.fullmatch(secret):
        problems.append(f"{_BUS}CREDENTIALS_SECRET: must be a Secret name, got {secret[:80]!r}")


def _bus_url_problem(url: str) -> str | None:
    """What is wrong with an external bus URL (None if nothing), in words that never quote it."""
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        return "not a URL; expected nats://host:port or tls://host:port"
    if "@" in parts.netloc:
        return (
            f"must not carry credentials: put them in the Secret {_BUS}CREDENTIALS_SECRET names (keys user and "
            "password); the value is not shown here"
        )
    if parts.scheme not in ("nats", "tls") or not parts.hostname:
        return "expected nats://host:port or tls://host:port (the value is not shown: it may hold a credential)"
    return None


def _bus_namespace(env: Mapping[str, str], replicas: int, problems: list[str]) -> str:
    missing = (
        f"{_BUS}NAMESPACE: gateway replicas above 1 share a managed NATS server, and where it runs is unknown: "
        f"set it or POD_NAMESPACE (the chart sets POD_NAMESPACE), or set {_BUS}MODE=external"
    )
    return _namespace(env, f"{_BUS}NAMESPACE", missing if replicas > 1 else None, problems)
