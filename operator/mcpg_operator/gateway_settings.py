"""Per-namespace gateway settings: the `McpGateway` resource, and its overlay on the operator's defaults. Pure.

`GatewayDefaults` (the `MCPG_GATEWAY_*` variables) say how every gateway runs; a namespace's McpGateway (named
`mcpg-gateway`, at most one) overrides some of that for its own gateway: replicas, the Service, the container's
resources, and an opt-in PodDisruptionBudget and NetworkPolicy. `shape` overlays it, and everything that renders
the namespace's gateway reads the overlaid `GatewayDefaults`, so an unset field is exactly the operator's default.
The operator writes those objects with its own rights, for tenants who may hold none of them, so an McpGateway
gets exactly what the admin's bounds allow (`GatewayBounds`: replicas, requests and limits, Service types,
annotation keys, chosen node ports), and never a disruption budget that lets no pod be evicted. A spec that cannot
be used or is outside the bounds is refused whole (`InvalidSpec`, naming the field and the bound), before anything
is rendered: the namespace keeps the defaults, rather than running half of what was asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from mcpg_operator import api_types, bus, models, objects, observed, quantities
from mcpg_operator import conditions as c
from mcpg_operator import schema_markers as sm
from mcpg_operator.settings import BOUNDED_RESOURCES, BusSettings, GatewayBounds, GatewayDefaults

PLURAL = "mcpgateways"
NAME = "mcpg-gateway"
"""The one McpGateway a namespace may hold: named after the Deployment it shapes (`objects.NAME`)."""
APPLIED = c.APPLIED
NO_GATEWAY = "NoGateway"
QUANTITY = quantities.QUANTITY
parse_quantity = quantities.parse
_BUDGET = r"^[0-9]{1,3}%$"
INT32 = 2**31 - 1
"""What the API server stores of a count (replicas, a budget's pods); more would not even print (4,300 digits)."""
_QUANTITY_CHARS = 64
"""The longest quantity taken (a number and a suffix): every value is bounded, the ones echoed in a status too."""


def _quantity(value: int | str) -> int | str:
    text = str(value)
    try:
        ok = len(text) <= _QUANTITY_CHARS and quantities.parse(value) >= 0
    except ValueError:  # not a quantity, or out of any range (1e999999999)
        ok = False
    if not ok:
        raise ValueError(f"must be a quantity such as 500m, 64Mi or 2, got {text[:40]!r}")
    return value


def _budget(value: int | str) -> int | str:
    if isinstance(value, int):
        ok = 0 <= value <= INT32
    else:  # at most 100%: the disruption controller refuses more
        ok = re.fullmatch(_BUDGET, value) is not None and int(value[:-1]) <= 100
    if not ok:
        raise ValueError(f"must be a number of pods (0 or more) or a percentage from 0% to 100%, got {value!r:.40}")
    return value


Quantity = Annotated[int | str, sm.Schema(pattern=QUANTITY), AfterValidator(_quantity)]
Budget = Annotated[int | str, AfterValidator(_budget)]
# The API server's first check of a budget; `_budget` then bounds the number and the percentage.
_BUDGET_RULE = sm.Rule(
    "type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",
    "must be a number of pods (0 or more) or a percentage such as 50%",
)
_NODE_PORT_RULES = tuple(
    sm.Rule(
        f"!has(self.{name}) || (has(self.type) && self.type != 'ClusterIP')",
        f"{name}: a node port needs type NodePort or LoadBalancer",
    )
    for name in ("httpNodePort", "adminNodePort")
)


class _Spec(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, use_attribute_docstrings=True
    )


class ServiceSpec(_Spec):
    crd_rules: ClassVar[tuple[sm.Rule, ...]] = _NODE_PORT_RULES
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] | None = None
    """The Service type; unset: the operator's `MCPG_GATEWAY_SERVICE_TYPE`."""
    http_node_port: api_types.Int32 | None = Field(default=None, ge=30000, le=32767)
    """A fixed node port for the public port (8080); only with type NodePort or LoadBalancer. A cluster has each
    node port only once."""
    admin_node_port: api_types.Int32 | None = Field(default=None, ge=30000, le=32767)
    """A fixed node port for the admin port (9090); only with type NodePort or LoadBalancer."""
    annotations: dict[str, str] = Field(default_factory=dict, max_length=64)
    """Annotations on the Service (a cloud load balancer's settings, for example)."""

    @model_validator(mode="after")
    def _node_ports_need_a_node_port_type(self) -> ServiceSpec:
        for name, port in (("httpNodePort", self.http_node_port), ("adminNodePort", self.admin_node_port)):
            if port is not None and self.type in (None, "ClusterIP"):
                raise ValueError(f"{name}: a node port needs type NodePort or LoadBalancer")
        return self


class ResourcesSpec(_Spec):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    """What the scheduler reserves for the gateway container (cpu, memory, ...)."""
    limits: dict[str, Quantity] = Field(default_factory=dict)
    """What the gateway container may use at most; each request must be at most its limit."""

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ResourcesSpec:
        for part, values in (("requests", self.requests), ("limits", self.limits)):
            other = next((name for name in values if name not in BOUNDED_RESOURCES), None)
            if other is not None:  # a GPU, hugepages, storage: resources the operator has no bound for
                raise ValueError(f"{part}.{other[:63]}: an McpGateway may set only cpu and memory")
        for name, request in self.requests.items():
            limit = self.limits.get(name)
            if limit is not None and parse_quantity(request) > parse_quantity(limit):
                raise ValueError(f"requests.{name}: {request} is more than limits.{name} ({limit})")
        return self

    def rendered(self) -> dict[str, Any]:
        """As the container gets them: quantities as strings (the API server reads an integer back as one)."""
        out: dict[str, Any] = {}
        for part, values in (("requests", self.requests), ("limits", self.limits)):
            if values:
                out[part] = {k: str(v) for k, v in values.items()}
        return out


class DisruptionBudgetSpec(_Spec):
    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule(
            "!(has(self.minAvailable) && has(self.maxUnavailable))",
            "minAvailable, maxUnavailable: set at most one of them",
        ),
    )
    enabled: bool = False
    """Render a PodDisruptionBudget for the gateway pods."""
    min_available: Annotated[Budget | None, _BUDGET_RULE] = None
    """Pods that must stay available during a voluntary disruption: a number or a percentage."""
    max_unavailable: Annotated[Budget | None, _BUDGET_RULE] = None
    """Pods that may be unavailable during a voluntary disruption; 1 when neither this nor minAvailable is set."""

    @model_validator(mode="after")
    def _at_most_one(self) -> DisruptionBudgetSpec:
        if self.min_available is not None and self.max_unavailable is not None:
            raise ValueError("minAvailable, maxUnavailable: set at most one of them")
        return self


Port = Annotated[api_types.Int32, Field(ge=1, le=65535)]


class NetworkPolicySpec(_Spec):
    enabled: bool = False
    """Render a NetworkPolicy for the gateway pods (opt-in: off unless set)."""
    ingress_from: list[dict[str, Any]] = Field(default_factory=list, max_length=32)
    """NetworkPolicyPeer objects (podSelector, namespaceSelector, ipBlock) allowed to reach the gateway's ports;
    empty: from anywhere. The operator's namespace may always reach the admin port (9090), where it asks each pod
    which configuration it serves."""
    api_server_ports: list[Port] = Field(default_factory=lambda: [443, 6443], min_length=1, max_length=8)
    """The ports egress to the Kubernetes API server is allowed on: the gateway reads its configuration Secret
    through the API. A NetworkPolicy selects peers by pod, namespace or IP block, never by Service, and the API
    server is no pod: most network plugins see the address the `kubernetes` Service (port 443) is translated to,
    an API server's own (6443 on most clusters), so both are allowed by default (443 and 6443), to any address."""


class McpGatewaySpec(_Spec):
    """How the namespace's gateway runs; every field left unset takes the operator's default."""

    replicas: api_types.Int32 | None = Field(default=None, ge=1, le=INT32)
    """Gateway pods. Above 1 they share a NATS bus, so the operator must have one: an external bus
    (MCPG_BUS_MODE=external), or the managed one, which runs when the operator's own replica default
    (MCPG_GATEWAY_REPLICAS) is above 1. Otherwise the McpGateway is refused (InvalidSpec)."""
    service: ServiceSpec = Field(default_factory=ServiceSpec)
    """The gateway's Service (ports 8080 http and 9090 admin)."""
    resources: ResourcesSpec | None = None
    """The gateway container's resources, as in a pod spec. When set it replaces the operator's default whole: what
    is written here is what the container gets. The gateway lowers its caps (gateway.limits sessions_total,
    listen_streams_total, watches_total, by one factor) to fit its memory limit and logs what it lowered, so a
    full gateway refuses callers instead of being OOM-killed. With the default caps, limits.memory 256Mi holds
    3,359 sessions, 172 listen streams and 172 watches; 512Mi all of them (10,000, 512 and 512)."""
    pod_disruption_budget: DisruptionBudgetSpec = Field(default_factory=DisruptionBudgetSpec)
    """A policy/v1 PodDisruptionBudget for the gateway pods. With neither minAvailable nor maxUnavailable,
    maxUnavailable is 1."""
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)
    """An opt-in networking.k8s.io/v1 NetworkPolicy for the gateway pods. Ingress: only the gateway's ports (8080,
    9090), from ingressFrom (from anywhere when empty), and the admin port from the operator's namespace. Egress:
    DNS (port 53, UDP and TCP), the API server (apiServerPorts), and the ports of every URL the rendered
    configuration names (backends, databases, NATS) and of the bus when replicas share one. A NetworkPolicy cannot
    match host names, so egress is allowed by port, to any address."""


class McpGatewayStatus(_Spec):
    """The settings in effect, and whether they could be applied."""

    # Unlisted, all: a status is the operator's to write, and a partial status patch must never be refused.
    observed_generation: Annotated[api_types.Int64, sm.Unlisted()]
    """The generation these conditions describe."""
    conditions: Annotated[list[models.Condition], models.CONDITIONS, sm.Unlisted()]
    """`Ready` (reason `Applied`, `InvalidSpec` or `NoGateway`), and `Stalled` while the spec cannot be used."""
    replicas: Annotated[api_types.Int32, sm.Unlisted()]
    """The gateway replicas in effect in the namespace."""
    service_type: Annotated[str, sm.Unlisted()]
    """The Service type in effect in the namespace."""


@dataclass(frozen=True, slots=True)
class Shape:
    """How one namespace's gateway runs: the operator's defaults with its McpGateway laid over them."""

    defaults: GatewayDefaults
    """What every builder reads: replicas, Service type and node ports, resources."""
    service_annotations: dict[str, str] = field(default_factory=dict)
    disruption_budget: DisruptionBudgetSpec | None = None
    """The PodDisruptionBudget to render; None: none (deleted if the operator made one)."""
    network_policy: NetworkPolicySpec | None = None
    """The NetworkPolicy to render; None: none (deleted if the operator made one)."""
    refusal: str | None = None
    """Why the namespace's McpGateway is not used (it names the field); None if it is, or there is none."""


def shape(found: observed.McpGateway | None, defaults: GatewayDefaults, bus_settings: BusSettings | None) -> Shape:
    """`defaults` overlaid with the namespace's McpGateway (`found`); a refused one leaves them as they are."""
    if found is None:
        return Shape(defaults)
    try:
        spec = McpGatewaySpec.model_validate(found.spec)
    except ValidationError as e:
        return Shape(defaults, refusal=_first_error(e))
    # Cheap checks of what was asked for, before anything is overlaid or rendered; the first problem is told.
    bounds = defaults.bounds
    refusal = (
        _replicas_refusal(spec, bounds)
        or _bus_refusal(spec, defaults, bus_settings)
        or _service_refusal(spec.service, bounds)
        or _resources_refusal(spec.resources, bounds)
    )
    if refusal is not None:
        return Shape(defaults, refusal=refusal)
    shaped = _overlay(spec, defaults)
    budget = spec.pod_disruption_budget if spec.pod_disruption_budget.enabled else None
    refusal = _budget_refusal(budget, shaped.replicas) if budget else None
    if refusal is not None:
        return Shape(defaults, refusal=refusal)
    return Shape(
        shaped,
        dict(spec.service.annotations),
        budget,
        spec.network_policy if spec.network_policy.enabled else None,
    )


def _overlay(spec: McpGatewaySpec, defaults: GatewayDefaults) -> GatewayDefaults:
    service = spec.service
    changes: dict[str, Any] = {}
    if spec.replicas is not None:
        changes["replicas"] = spec.replicas
    if spec.resources is not None:
        changes["resources"] = spec.resources.rendered()
    if service.type is not None:
        # The type and its node ports go together: the operator's fixed ports belong to its own Service type.
        changes |= {"service_type": service.type, "http_node_port": None, "admin_node_port": None}
    if service.http_node_port is not None:
        changes["http_node_port"] = service.http_node_port
    if service.admin_node_port is not None:
        changes["admin_node_port"] = service.admin_node_port
    return defaults.model_copy(update=changes)


def has_bus(bus_settings: BusSettings | None, defaults: GatewayDefaults) -> bool:
    """Whether gateway replicas of any namespace can share a bus: an external one, or the managed server, which
    the operator runs only when its own replica default is above 1 (`bus.runs_server`)."""
    if bus_settings is None:
        return False
    return bus_settings.mode == "external" or bus.runs_server(bus_settings, defaults.replicas)


def _bus_refusal(spec: McpGatewaySpec, defaults: GatewayDefaults, bus_settings: BusSettings | None) -> str | None:
    if spec.replicas is None or spec.replicas <= 1 or has_bus(bus_settings, defaults):
        return None
    return (
        f"spec.replicas: {spec.replicas} gateway replicas share a NATS bus, and the operator has none: configure "
        "an external bus (MCPG_BUS_MODE=external, MCPG_BUS_URL, MCPG_BUS_CREDENTIALS_SECRET; chart values "
        "gateway.bus.*) or the managed one (MCPG_GATEWAY_REPLICAS above 1), or set replicas to 1"
    )


# --- the operator's bounds (`GatewayBounds`) ----------------------------------------------------------------


def _replicas_refusal(spec: McpGatewaySpec, bounds: GatewayBounds) -> str | None:
    if spec.replicas is None or spec.replicas <= bounds.max_replicas:
        return None
    return f"spec.replicas: {spec.replicas} is above the operator's maximum of {bounds.max_replicas} ({_MAX}REPLICAS)"


def _service_refusal(service: ServiceSpec, bounds: GatewayBounds) -> str | None:
    if service.type is not None and service.type not in bounds.service_types:
        allowed = ", ".join(bounds.service_types)
        return (
            f"spec.service.type: {service.type} is not among the Service types the operator allows ({allowed}; "
            "MCPG_GATEWAY_ALLOWED_SERVICE_TYPES)"
        )
    for name, port in (("httpNodePort", service.http_node_port), ("adminNodePort", service.admin_node_port)):
        if port is not None and not bounds.node_ports:
            return (
                f"spec.service.{name}: the operator lets no McpGateway choose a node port "
                "(MCPG_GATEWAY_ALLOW_NODE_PORTS is false); leave it out and the API server allocates a free one"
            )
    key = next((k for k in service.annotations if not bounds.allows_annotation(k)), None)
    if key is None:
        return None
    allowed = ", ".join(bounds.service_annotations) or "none"
    return (
        f"spec.service.annotations: {key[:80]!r} is not among the annotation keys the operator allows "
        f"({allowed[:200]}; MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS)"
    )


def _resources_refusal(resources: ResourcesSpec | None, bounds: GatewayBounds) -> str | None:
    """The first request or limit above its bound. Unset, resources are the operator's own (not bounded)."""
    if resources is None:
        return None
    for name in BOUNDED_RESOURCES:
        for part in ("limits", "requests"):
            refusal = _resource_refusal(resources, part, name, bounds)
            if refusal is not None:
                return refusal
    return None


def _resource_refusal(resources: ResourcesSpec, part: str, name: str, bounds: GatewayBounds) -> str | None:
    bound, var = bounds.resource_bound(part, name)
    if bound is None:
        return None
    field_path, limit = f"spec.resources.{part}.{name}", resources.limits.get(name)
    value = resources.requests.get(name, limit) if part == "requests" else limit
    if value is None and part == "limits":
        return f"{field_path}: required, at most {bound} ({var}): a container without a limit may use any amount"
    if value is None or parse_quantity(value) <= parse_quantity(bound):
        return None
    if name not in resources.requests and part == "requests":  # the API server makes an unset request the limit
        return (
            f"{field_path}: unset, so the API server makes it limits.{name} ({value}), which is above the "
            f"operator's maximum of {bound} ({var}); set it"
        )
    return f"{field_path}: {value} is above the operator's maximum of {bound} ({var})"


def _budget_refusal(budget: DisruptionBudgetSpec, replicas: int) -> str | None:
    """A budget that lets no pod be evicted makes every node drain wait on the gateway forever."""
    field_name, value = (
        ("minAvailable", budget.min_available)
        if budget.min_available is not None
        else ("maxUnavailable", 1 if budget.max_unavailable is None else budget.max_unavailable)
    )
    where = f"spec.podDisruptionBudget.{field_name}"
    pods = _pods(value, replicas)
    if (replicas - pods if field_name == "minAvailable" else pods) > 0:
        return None
    return (
        f"{where}: {value} of {replicas} replica(s) lets no pod be evicted, so every node drain would wait on the "
        "gateway forever; allow at least one (maxUnavailable: 1, the default, does)"
    )


def _pods(value: int | str, replicas: int) -> int:
    """A budget's number or percentage as pods, rounded up, as the disruption controller counts them."""
    if isinstance(value, int):
        return value
    return -(-int(value[:-1]) * replicas // 100)


_MAX = "MCPG_GATEWAY_MAX_"


_NAMED = re.compile(r"^([A-Za-z][A-Za-z0-9./_-]*): (.*)$", re.DOTALL)
"""A validator's message that starts by naming the field inside the object it checks (`httpNodePort: ...`)."""


def _first_error(e: ValidationError) -> str:
    """`spec.<field path>: <what is wrong>` for the first problem."""
    err = e.errors(include_url=False)[0]
    path, message = ["spec", *(str(x) for x in err["loc"])], str(err["msg"]).removeprefix("Value error, ")
    named = _NAMED.match(message)
    if named:
        path.append(named[1])
        message = named[2]
    return c.fit("{path}: {message}", path=".".join(path), message=message)


def status(found: observed.McpGateway, shaped: Shape, has_gateway: bool, now: float) -> dict[str, Any]:
    """The McpGateway's status: whether its settings are in the namespace's rendered gateway objects."""
    gen, conds = found.id.generation, list(found.status.get("conditions", []))
    if shaped.refusal is not None:
        ready, reason, message = False, c.INVALID_SPEC, shaped.refusal
    elif not has_gateway:
        ready, reason = False, NO_GATEWAY
        message = "no ResourceWatch in this namespace, so no gateway runs; these settings apply once one does"
    else:
        ready, reason, message = True, APPLIED, summary(shaped)
    conds = c.set_condition(conds, c.READY, ready, reason, message, gen, now)
    conds = c.set_stalled(conds, shaped.refusal is not None, reason, message, gen, now)
    d = shaped.defaults
    return McpGatewayStatus(
        observed_generation=gen, conditions=conds, replicas=d.replicas, service_type=d.service_type
    ).model_dump(by_alias=True)


def summary(shaped: Shape) -> str:
    """What is in effect, in one line (the Ready message)."""
    d = shaped.defaults
    parts = [f"{d.replicas} replica(s)", f"Service {d.service_type}"]
    parts.append("PodDisruptionBudget" + ("" if shaped.disruption_budget else " off"))
    parts.append("NetworkPolicy" + ("" if shaped.network_policy else " off"))
    return "the gateway objects carry these settings: " + ", ".join(parts)


EXACT_FIELDS: tuple[tuple[str | int, ...], ...] = (
    ("metadata", "annotations", objects.SERVICE_ANNOTATIONS),
    ("spec", "template", "spec", "containers", 0, "resources"),
)
"""Fields of the gateway's objects that must equal the desired value, not just cover it: a resource or an
annotation dropped from an McpGateway leaves every remaining key in place, so `covers` alone would keep it."""


def differs_exactly(live: observed.Applied, desired: dict[str, Any]) -> bool:
    """Some field of `EXACT_FIELDS` is not what `desired` says (an absent one included): apply it again."""
    wanted = observed.Applied(desired)
    return any(live.at(*path) != wanted.at(*path) for path in EXACT_FIELDS)
