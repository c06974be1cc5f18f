"""A namespace's McpGateway over the operator's defaults: the overlay, what is refused and why, and its status."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mcpg_operator import gateway_settings, objects, observed
from mcpg_operator.gateway_settings import McpGatewaySpec, Shape, shape
from mcpg_operator.settings import SERVICE_TYPES, BusSettings, GatewayBounds, GatewayDefaults
from mcpg_testing.manifests import crd, crd_schema

ROOT = Path(__file__).parents[3]
CRD = ROOT / "crds" / "mcpgateways.mcpg.dev.yaml"
DEFAULTS = GatewayDefaults()
OPEN = GatewayBounds(
    max_cpu_request=None,
    max_memory_request=None,
    max_memory_limit=None,
    service_types=SERVICE_TYPES,
    service_annotations=("*",),
    node_ports=True,
)
"""Bounds that let an McpGateway ask for anything, for the tests of the overlay itself."""
MANAGED_BUS = BusSettings("managed", "mcpg-system")
EXTERNAL_BUS = BusSettings("external", "mcpg-system", url="nats://nats.example:4222", credentials_secret="nats")


def found(spec: dict[str, Any], generation: int = 3, status: dict[str, Any] | None = None) -> observed.McpGateway:
    ident = observed.Identity("mcpg.dev/v1alpha1", "McpGateway", "mcpg-gateway", "uid-1", generation)
    return observed.McpGateway(ident, spec, status or {})


# --- the overlay ---------------------------------------------------------------------------------------------


def test_without_an_mcpgateway_the_namespace_runs_the_operators_defaults_and_nothing_else() -> None:
    assert shape(None, DEFAULTS, MANAGED_BUS) == Shape(DEFAULTS)


def test_an_empty_spec_changes_nothing() -> None:
    assert shape(found({}), DEFAULTS, MANAGED_BUS) == Shape(DEFAULTS)


def test_each_field_set_replaces_the_default_and_every_other_stays() -> None:
    defaults = GatewayDefaults(
        replicas=3, service_type="NodePort", http_node_port=30080, log_format="text", bounds=OPEN
    )
    spec = {"service": {"type": "LoadBalancer", "annotations": {"lb.example/internal": "true"}}}
    shaped = shape(found(spec), defaults, MANAGED_BUS)
    assert shaped.defaults.service_type == "LoadBalancer"
    # The operator's fixed node port belongs to its own Service type: a namespace choosing a type drops it.
    assert shaped.defaults.http_node_port is None
    assert (shaped.defaults.replicas, shaped.defaults.log_format) == (3, "text")
    assert shaped.defaults.resources == defaults.resources
    assert shaped.service_annotations == {"lb.example/internal": "true"}


def test_resources_replace_the_default_whole_with_every_quantity_as_a_string() -> None:
    spec = {"resources": {"requests": {"cpu": 1, "memory": "128Mi"}}}
    shaped = shape(found(spec), GatewayDefaults(bounds=OPEN), MANAGED_BUS)
    # No limits: the default's memory limit is not merged in (what is written is what the container gets).
    assert shaped.defaults.resources == {"requests": {"cpu": "1", "memory": "128Mi"}}


def test_node_ports_come_with_the_type_that_has_them() -> None:
    spec = {"service": {"type": "NodePort", "httpNodePort": 30081, "adminNodePort": 30091}}
    d = shape(found(spec), GatewayDefaults(bounds=OPEN), MANAGED_BUS).defaults
    assert (d.service_type, d.http_node_port, d.admin_node_port) == ("NodePort", 30081, 30091)


def test_the_budget_and_the_policy_are_rendered_only_when_enabled() -> None:
    off = shape(found({"podDisruptionBudget": {"minAvailable": 1}, "networkPolicy": {}}), DEFAULTS, None)
    assert (off.disruption_budget, off.network_policy) == (None, None)
    on = shape(found({"podDisruptionBudget": {"enabled": True}, "networkPolicy": {"enabled": True}}), DEFAULTS, None)
    assert on.disruption_budget is not None
    assert on.network_policy is not None


# --- replicas need a bus -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("defaults", "bus"),
    [
        pytest.param(GatewayDefaults(replicas=3), MANAGED_BUS, id="the managed bus, running for the default"),
        pytest.param(GatewayDefaults(replicas=1), EXTERNAL_BUS, id="an external bus"),
    ],
)
def test_more_replicas_are_allowed_when_the_operator_has_a_bus(defaults: GatewayDefaults, bus: BusSettings) -> None:
    shaped = shape(found({"replicas": 5}), defaults, bus)
    assert (shaped.refusal, shaped.defaults.replicas) == (None, 5)


@pytest.mark.parametrize(
    "bus",
    [
        pytest.param(MANAGED_BUS, id="managed mode, but no server runs for one replica"),
        pytest.param(None, id="no bus settings at all"),
    ],
)
def test_more_replicas_without_a_bus_are_refused_and_the_operators_count_is_kept(bus: BusSettings | None) -> None:
    spec = {"replicas": 2, "resources": {"requests": {"cpu": "1"}}}
    shaped = shape(found(spec), GatewayDefaults(replicas=1), bus)
    assert shaped.refusal is not None
    assert shaped.refusal.startswith("spec.replicas: 2 gateway replicas share a NATS bus")
    assert "MCPG_BUS_MODE=external" in shaped.refusal
    assert "MCPG_GATEWAY_REPLICAS above 1" in shaped.refusal
    # Refused whole: nothing of it is half-applied.
    assert shaped == Shape(GatewayDefaults(replicas=1), refusal=shaped.refusal)


def test_one_replica_needs_no_bus_even_where_the_default_shares_one() -> None:
    shaped = shape(found({"replicas": 1}), GatewayDefaults(replicas=3), MANAGED_BUS)
    assert (shaped.refusal, shaped.defaults.replicas) == (None, 1)


# --- what the model refuses, naming the field ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": 0}, "spec.replicas: Input should be greater than or equal to 1"),
        ({"service": {"httpNodePort": 30080}}, "spec.service.httpNodePort: a node port needs type NodePort"),
        (
            {"service": {"type": "ClusterIP", "adminNodePort": 30090}},
            "spec.service.adminNodePort: a node port needs type NodePort",
        ),
        ({"resources": {"limits": {"memory": "lots"}}}, "spec.resources.limits.memory: must be a quantity"),
        (
            {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}},
            "spec.resources.requests.cpu: 2 is more than limits.cpu (1500m)",
        ),
        (
            {"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}},
            "spec.podDisruptionBudget: minAvailable, maxUnavailable: set at most one of them",
        ),
        ({"podDisruptionBudget": {"maxUnavailable": "5"}}, "spec.podDisruptionBudget.maxUnavailable: must be a"),
        ({"networkPolicy": {"ingressFrom": "everyone"}}, "spec.networkPolicy.ingressFrom: Input should be a valid"),
        ({"replica": 2}, "spec.replica: Extra inputs are not permitted"),
    ],
)
def test_a_spec_that_cannot_be_used_is_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    shaped = shape(found(spec), DEFAULTS, MANAGED_BUS)
    assert shaped.refusal is not None
    assert shaped.refusal.startswith(message), shaped.refusal
    assert shaped.defaults == DEFAULTS


@pytest.mark.parametrize(
    ("quantity", "value"),
    [("64Mi", 64 * 2**20), ("500m", 0.5), ("2", 2), (3, 3), ("1e3", 1000), ("1E", 10**18), (".5Gi", 2**29)],
)
def test_quantities_compare_as_the_api_server_reads_them(quantity: int | str, value: float) -> None:
    assert gateway_settings.parse_quantity(quantity) == pytest.approx(value)


# --- status --------------------------------------------------------------------------------------------------


def ready(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def test_settings_in_the_rendered_objects_are_reported_applied_with_what_is_in_effect() -> None:
    mcpgw = found({"replicas": 2, "service": {"type": "NodePort"}, "podDisruptionBudget": {"enabled": True}})
    status = gateway_settings.status(mcpgw, shape(mcpgw, GatewayDefaults(replicas=3), MANAGED_BUS), True, 10.0)
    assert (status["observedGeneration"], status["replicas"], status["serviceType"]) == (3, 2, "NodePort")
    assert (ready(status)["status"], ready(status)["reason"]) == ("True", "Applied")
    assert "2 replica(s), Service NodePort, PodDisruptionBudget, NetworkPolicy off" in ready(status)["message"]
    assert all(c["type"] != "Stalled" for c in status["conditions"])


def test_a_refused_spec_is_invalid_and_stalled_and_reports_the_defaults_in_effect() -> None:
    mcpgw = found({"replicas": 4})
    status = gateway_settings.status(mcpgw, shape(mcpgw, DEFAULTS, None), True, 10.0)
    assert (ready(status)["status"], ready(status)["reason"]) == ("False", "InvalidSpec")
    assert ready(status)["message"].startswith("spec.replicas:")
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidSpec")
    assert (status["replicas"], status["serviceType"]) == (1, "ClusterIP")


def test_without_a_resourcewatch_there_is_no_gateway_to_apply_the_settings_to() -> None:
    mcpgw = found({"replicas": 1})
    status = gateway_settings.status(mcpgw, shape(mcpgw, DEFAULTS, None), False, 10.0)
    assert (ready(status)["status"], ready(status)["reason"]) == ("False", "NoGateway")


# --- fields compared exactly ---------------------------------------------------------------------------------


def test_a_resource_dropped_from_the_spec_is_a_difference_though_the_rest_still_covers() -> None:
    before = objects.deployment(
        "ns", "h" * 64, GatewayDefaults(resources={"limits": {"cpu": "1", "memory": "1Gi"}}), []
    )
    after = objects.deployment("ns", "h" * 64, GatewayDefaults(resources={"limits": {"memory": "1Gi"}}), [])
    live = observed.Applied(before)
    assert live.covers(after)  # `covers` alone would keep the dropped cpu limit
    assert gateway_settings.differs_exactly(live, after)
    assert not gateway_settings.differs_exactly(live, copy.deepcopy(before))


def test_an_annotation_dropped_from_the_spec_is_a_difference_and_none_at_all_is_too() -> None:
    two = objects.service("ns", [], DEFAULTS, {"a": "1", "b": "2"})
    one = objects.service("ns", [], DEFAULTS, {"a": "1"})
    none = objects.service("ns", [], DEFAULTS)
    assert gateway_settings.differs_exactly(observed.Applied(two), one)
    assert gateway_settings.differs_exactly(observed.Applied(one), none)
    assert not gateway_settings.differs_exactly(observed.Applied(none), objects.service("ns", [], DEFAULTS))
    assert one["metadata"]["annotations"] == {"a": "1", objects.SERVICE_ANNOTATIONS: "a"}


# --- the CRD and the model agree ----------------------------------------------------------------------------


# That the CRD and the models name the same fields, each described, is `hack/reference.py`'s check for every CRD
# (tests/unit/operator/test_reference.py).


def test_the_crd_is_the_chart_copy_and_is_namespaced_with_its_names_and_columns() -> None:
    assert (ROOT / "charts" / "mcpg" / "crds" / CRD.name).read_text() == CRD.read_text()
    spec = crd("McpGateway")["spec"]
    names = spec["names"]
    assert (spec["group"], spec["scope"], names["kind"], names["plural"], names["singular"]) == (
        "mcpg.dev",
        "Namespaced",
        "McpGateway",
        "mcpgateways",
        "mcpgateway",
    )
    assert (names["shortNames"], names["categories"]) == (["mcpgw"], ["mcpg"])
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"].upper() for c in version["additionalPrinterColumns"]]
    assert columns == ["READY", "REPLICAS", "SERVICE TYPE", "REASON", "MESSAGE", "AGE"]


def test_a_full_spec_passes_both_the_crd_schema_and_the_model() -> None:
    spec = {
        "replicas": 2,
        "service": {"type": "NodePort", "httpNodePort": 30080, "annotations": {"a": "b"}},
        "resources": {"requests": {"cpu": "250m", "memory": 134217728}, "limits": {"memory": "256Mi"}},
        "podDisruptionBudget": {"enabled": True, "minAvailable": "50%"},
        "networkPolicy": {"enabled": True, "ingressFrom": [{"namespaceSelector": {"matchLabels": {"a": "b"}}}]},
    }
    doc = {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": {"name": "mcpg-gateway"}, "spec": spec}
    jsonschema.validate(doc, crd_schema("McpGateway"))
    McpGatewaySpec.model_validate(spec)


# --- the operator's bounds: an McpGateway gets exactly what they allow -----------------------------------------


def refused(spec: dict[str, Any], defaults: GatewayDefaults = DEFAULTS) -> str:
    """Why `spec` is refused; refused whole, so the namespace runs exactly the defaults."""
    shaped = shape(found(spec), defaults, MANAGED_BUS)
    assert shaped.refusal is not None, "not refused"
    assert shaped == Shape(defaults, refusal=shaped.refusal)
    return shaped.refusal


def test_a_replica_count_above_the_operator_maximum_is_refused_naming_the_field_and_the_bound() -> None:
    defaults = GatewayDefaults(replicas=3)
    assert refused({"replicas": 100_000}, defaults) == (
        "spec.replicas: 100000 is above the operator's maximum of 10 (MCPG_GATEWAY_MAX_REPLICAS)"
    )
    bounded = GatewayDefaults(replicas=3, bounds=GatewayBounds(max_replicas=4))
    assert refused({"replicas": 5}, bounded).endswith("above the operator's maximum of 4 (MCPG_GATEWAY_MAX_REPLICAS)")
    assert shape(found({"replicas": 4}), bounded, MANAGED_BUS).defaults.replicas == 4


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        pytest.param(
            {"requests": {"cpu": "1000"}, "limits": {"memory": "1Gi"}},
            "spec.resources.requests.cpu: 1000 is above the operator's maximum of 2 (MCPG_GATEWAY_MAX_CPU_REQUEST)",
            id="the probe's 1,000 CPUs",
        ),
        pytest.param(
            {"requests": {"memory": "4Ti"}, "limits": {"memory": "4Ti"}},
            "spec.resources.limits.memory: 4Ti is above the operator's maximum of 4Gi (MCPG_GATEWAY_MAX_MEMORY_LIMIT)",
            id="the probe's 4 TiB",
        ),
        pytest.param(
            {"requests": {"memory": "2049Mi"}, "limits": {"memory": "4Gi"}},
            "spec.resources.requests.memory: 2049Mi is above the operator's maximum of 2Gi "
            "(MCPG_GATEWAY_MAX_MEMORY_REQUEST)",
            id="compared as quantities, not as text",
        ),
        pytest.param(
            {"limits": {"memory": "3Gi"}},
            "spec.resources.requests.memory: unset, so the API server makes it limits.memory (3Gi), which is above "
            "the operator's maximum of 2Gi (MCPG_GATEWAY_MAX_MEMORY_REQUEST); set it",
            id="an unset request is its limit",
        ),
        pytest.param(
            {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "spec.resources.limits.memory: required, at most 4Gi (MCPG_GATEWAY_MAX_MEMORY_LIMIT): a container "
            "without a limit may use any amount",
            id="no memory limit is no bound",
        ),
        pytest.param(
            {"requests": {"nvidia.com/gpu": "8"}, "limits": {"memory": "1Gi"}},
            "spec.resources.requests.nvidia.com/gpu: an McpGateway may set only cpu and memory",
            id="a resource the operator has no bound for",
        ),
        pytest.param(
            {"requests": {"cpu": "1e999999999"}, "limits": {"memory": "1Gi"}},
            "spec.resources.requests.cpu: must be a quantity",
            id="a quantity beyond any range",
        ),
    ],
)
def test_requests_and_limits_above_the_operator_maxima_are_refused_naming_the_field_and_the_bound(
    resources: dict[str, Any], message: str
) -> None:
    assert refused({"resources": resources}).startswith(message)


def test_resources_at_their_bounds_are_applied_and_one_step_beyond_is_refused() -> None:
    at = {"requests": {"cpu": "2", "memory": "2147483648"}, "limits": {"cpu": "8", "memory": "4Gi"}}
    shaped = shape(found({"resources": at}), DEFAULTS, MANAGED_BUS)
    assert shaped.refusal is None
    assert shaped.defaults.resources == {k: {n: str(q) for n, q in v.items()} for k, v in at.items()}
    beyond = {"requests": {"cpu": "2001m", "memory": "2147483648"}, "limits": {"cpu": "8", "memory": "4Gi"}}
    assert refused({"resources": beyond}).startswith("spec.resources.requests.cpu: 2001m is above")


def test_a_bounded_cpu_limit_must_be_set_and_within_its_bound() -> None:
    defaults = GatewayDefaults(bounds=GatewayBounds(max_cpu_limit="4"))
    base = {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}
    assert refused({"resources": base}, defaults).startswith("spec.resources.limits.cpu: required, at most 4")
    over = {"requests": {"cpu": "1"}, "limits": {"cpu": "4001m", "memory": "1Gi"}}
    assert refused({"resources": over}, defaults).startswith("spec.resources.limits.cpu: 4001m is above")
    within = {"requests": {"cpu": "1"}, "limits": {"cpu": "4", "memory": "1Gi"}}
    assert shape(found({"resources": within}), defaults, MANAGED_BUS).refusal is None


def test_a_service_type_the_operator_does_not_allow_is_refused_naming_the_allowed_ones() -> None:
    assert refused({"service": {"type": "LoadBalancer"}}) == (
        "spec.service.type: LoadBalancer is not among the Service types the operator allows (ClusterIP, NodePort; "
        "MCPG_GATEWAY_ALLOWED_SERVICE_TYPES)"
    )
    allowed = GatewayDefaults(bounds=GatewayBounds(service_types=("ClusterIP", "LoadBalancer")))
    assert shape(found({"service": {"type": "LoadBalancer"}}), allowed, MANAGED_BUS).refusal is None
    assert refused({"service": {"type": "NodePort"}}, allowed).startswith("spec.service.type: NodePort is not")


@pytest.mark.parametrize("port", ["httpNodePort", "adminNodePort"])
def test_a_chosen_node_port_is_refused_unless_the_operator_lets_node_ports_be_chosen(port: str) -> None:
    spec = {"service": {"type": "NodePort", port: 30080}}
    assert refused(spec) == (
        f"spec.service.{port}: the operator lets no McpGateway choose a node port (MCPG_GATEWAY_ALLOW_NODE_PORTS is "
        "false); leave it out and the API server allocates a free one"
    )
    allowed = GatewayDefaults(bounds=GatewayBounds(node_ports=True))
    assert shape(found(spec), allowed, MANAGED_BUS).refusal is None
    # A NodePort Service naming no port is within the default bounds: the API server allocates a free one.
    assert shape(found({"service": {"type": "NodePort"}}), DEFAULTS, MANAGED_BUS).refusal is None


@pytest.mark.parametrize(
    ("allowed", "kept", "refused_key"),
    [
        ((), None, "service.beta.kubernetes.io/aws-load-balancer-scheme"),
        (("lb.example/",), "lb.example/scheme", "lb.example.evil/scheme"),
        (("lb.example/scheme",), "lb.example/scheme", "lb.example/schemes"),
        (("lb.example/", "*"), "external-dns.alpha.kubernetes.io/hostname", None),
    ],
)
def test_a_service_annotation_is_refused_unless_its_key_is_among_those_the_operator_allows(
    allowed: tuple[str, ...], kept: str | None, refused_key: str | None
) -> None:
    defaults = GatewayDefaults(bounds=GatewayBounds(service_annotations=allowed))
    if refused_key is not None:
        assert refused({"service": {"annotations": {refused_key: "v"}}}, defaults) == (
            f"spec.service.annotations: {refused_key!r} is not among the annotation keys the operator allows "
            f"({', '.join(allowed) or 'none'}; MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS)"
        )
    else:  # `*`: any key, so no refusal to show; what the default bounds refuse is
        assert refused({"service": {"annotations": {kept or "": "v"}}}).startswith("spec.service.annotations: ")
    if kept is not None:
        shaped = shape(found({"service": {"annotations": {kept: "v"}}}), defaults, MANAGED_BUS)
        assert (shaped.refusal, shaped.service_annotations) == (None, {kept: "v"})


@pytest.mark.parametrize(
    ("budget", "kept", "replicas", "message"),
    [
        ({"minAvailable": "100%"}, {"minAvailable": "66%"}, 3, "minAvailable: 100% of 3 replica(s) lets no pod"),
        ({"minAvailable": 3}, {"minAvailable": 2}, 3, "minAvailable: 3 of 3 replica(s) lets no pod"),
        ({"minAvailable": 5}, {"minAvailable": 0}, 3, "minAvailable: 5 of 3 replica(s) lets no pod"),
        ({"minAvailable": "67%"}, {"minAvailable": "66%"}, 3, "minAvailable: 67% of 3"),  # 2.01 pods: rounded up
        ({"minAvailable": 1}, {}, 1, "minAvailable: 1 of 1 replica(s)"),
        ({"maxUnavailable": 0}, {"maxUnavailable": 1}, 3, "maxUnavailable: 0 of 3 replica(s) lets no pod"),
        ({"maxUnavailable": "0%"}, {"maxUnavailable": "1%"}, 3, "maxUnavailable: 0% of 3 replica(s) lets no pod"),
        ({"maxUnavailable": "101%"}, {"maxUnavailable": "100%"}, 3, "maxUnavailable: must be a number of pods"),
    ],
)
def test_a_disruption_budget_that_allows_no_disruption_is_refused_naming_the_field(
    budget: dict[str, Any], kept: dict[str, Any], replicas: int, message: str
) -> None:
    spec = {"replicas": replicas, "podDisruptionBudget": {"enabled": True, **budget}}
    assert refused(spec, GatewayDefaults(replicas=3)).startswith(f"spec.podDisruptionBudget.{message}")
    # The nearest budget that lets one pod go is rendered.
    spec = {"replicas": replicas, "podDisruptionBudget": {"enabled": True, **kept}}
    shaped = shape(found(spec), GatewayDefaults(replicas=3), MANAGED_BUS)
    assert (shaped.refusal, shaped.disruption_budget is not None) == (None, True)


def test_the_budget_is_counted_against_the_replicas_in_effect_the_operators_when_unset() -> None:
    spec = {"podDisruptionBudget": {"enabled": True, "minAvailable": 2}}
    assert shape(found(spec), GatewayDefaults(replicas=3), MANAGED_BUS).refusal is None
    assert refused(spec, GatewayDefaults(replicas=2)).startswith("spec.podDisruptionBudget.minAvailable: 2 of 2")
    # A disabled budget renders nothing, so what it says blocks nothing.
    off = {"podDisruptionBudget": {"minAvailable": "100%"}}
    assert shape(found(off), GatewayDefaults(replicas=3), MANAGED_BUS).refusal is None


def test_an_mcpgateway_at_every_bound_is_applied_as_asked_and_one_step_beyond_any_is_refused() -> None:
    defaults = GatewayDefaults(replicas=3, bounds=GatewayBounds(service_annotations=("lb.example/",)))
    spec: dict[str, Any] = {
        "replicas": 10,
        "service": {"type": "NodePort", "annotations": {"lb.example/scheme": "internal"}},
        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
    }
    shaped = shape(found(spec), defaults, MANAGED_BUS)
    assert shaped.refusal is None
    assert (shaped.defaults.replicas, shaped.defaults.service_type) == (10, "NodePort")
    assert shaped.service_annotations == {"lb.example/scheme": "internal"}
    assert shaped.disruption_budget is not None
    assert refused({**spec, "replicas": 11}, defaults).startswith("spec.replicas: 11 is above")
    beyond = {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "4097Mi"}}
    assert refused({**spec, "resources": beyond}, defaults).startswith("spec.resources.limits.memory: 4097Mi")
