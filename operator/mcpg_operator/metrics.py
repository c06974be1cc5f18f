"""The operator's Prometheus metrics: one registry, served at /metrics by `health`.

Names follow controller-runtime where the concept is the same (`controller_runtime_reconcile_*`,
`leader_election_master_status`), so dashboards and alerts written for Go operators read ours too; the rest are
`mcpg_operator_*`. Every label value comes from a small closed set (a controller, a result, a phase, a condition
reason, anything unknown becoming `Other`): never a namespace, an object or Secret name, a URI or a token.

The per-namespace figures of the rotation and the watches are derived in one place (`reconcile.facts`) from a
pass's pure result, kept as the last figure per namespace and summed at scrape time, so a namespace leaves the sums
as soon as a pass finds no mcpg object in it.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mcpg_operator import conditions

CONTROLLER = "gateway"
"""The controller that reconciles a namespace's ResourceWatches and WebhookTokens into its gateway."""
BUS_CONTROLLER = "bus"
"""The controller that keeps the managed NATS server's accounts in step with the gateway namespaces (it runs only
when there is a managed bus, and its series exist only then)."""
RESULTS = ("success", "error", "requeue", "requeue_after")
"""controller-runtime's reconcile results: done; failed (retried with backoff); run again now; run again later."""
TOKEN_PHASES = ("Pending", "Rolling", "Retiring", "Ready", "Unused", "Error")
"""`status.phase` of a WebhookToken (statuses.py): where each token is in its rotation."""
TRANSITIONS = {"TokenPromoted": "promoted", "TokenRetired": "retired", conditions.TOKEN_REVOKED: "revoked"}
"""The rotation's Events, by the `transition` label that counts them."""
OTHER = "Other"
KNOWN_REASONS = frozenset(
    {v for k, v in vars(conditions).items() if k.isupper() and isinstance(v, str)} | {"ProgressDeadlineExceeded"}
)
"""The operator's own condition reasons, and the Deployment controller's one for a stalled rollout."""
RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    *(1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
)
"""controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`."""
ACKNOWLEDGEMENT_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""From writing a configuration to every pod serving it: seconds when applied in place, minutes at worst."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What one pass found and did in a namespace, as the metrics count it: no name, token or URI."""

    has_objects: bool
    """The namespace holds a ResourceWatch or a WebhookToken; if not, its figures are forgotten."""
    token_phases: Mapping[str, int] = field(default_factory=dict)
    tokens_retiring: int = 0
    watches: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """(Ready status, reason) -> ResourceWatches."""
    transitions: Mapping[str, int] = field(default_factory=dict)
    """Rotation Events this pass posted, by transition."""
    written: str | None = None
    """The digest of the configuration this pass wrote (a new one in the configuration Secret)."""
    acknowledged: str | None = None
    """The digest of the configuration every counted gateway pod (at least one) serves, as this pass found it."""
    pods_counted: int = 0
    """Gateway pods counted: Ready with an IP, and if being deleted, still answering."""
    pods_acknowledged: int = 0
    """Of those, the pods serving the configuration this pass decided."""


class NamespaceFigures(Collector):
    """The last `Facts` of each namespace, exported as sums when scraped."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, Facts] = {}

    def update(self, namespace: str, figures: Facts) -> None:
        if figures.has_objects:
            self._by_namespace[namespace] = figures
        else:
            self.forget(namespace)

    def forget(self, namespace: str) -> None:
        self._by_namespace.pop(namespace, None)

    def collect(self) -> Iterable[Metric]:
        known = list(self._by_namespace.values())
        namespaces = GaugeMetricFamily("mcpg_operator_namespaces", "Namespaces holding mcpg objects.")
        namespaces.add_metric([], len(known))
        phases = GaugeMetricFamily(
            "mcpg_operator_webhooktokens", "WebhookTokens by rotation phase (status.phase).", labels=["phase"]
        )
        for phase in (*TOKEN_PHASES, OTHER):
            phases.add_metric([phase], sum(f.token_phases.get(phase, 0) for f in known))
        retiring = GaugeMetricFamily(
            "mcpg_operator_tokens_retiring",
            "Replaced webhook tokens still accepted, waiting on the gateway pods' acknowledgements or a grace period.",
        )
        retiring.add_metric([], sum(f.tokens_retiring for f in known))
        counted = GaugeMetricFamily(
            "mcpg_operator_gateway_pods", "Gateway pods counted (Ready, and if being deleted, still answering)."
        )
        counted.add_metric([], sum(f.pods_counted for f in known))
        acknowledged = GaugeMetricFamily(
            "mcpg_operator_gateway_pods_acknowledged",
            "Counted gateway pods that acknowledged serving the newest configuration of their namespace.",
        )
        acknowledged.add_metric([], sum(f.pods_acknowledged for f in known))
        watches = GaugeMetricFamily(
            "mcpg_operator_resourcewatches", "ResourceWatches by Ready status and reason.", labels=["ready", "reason"]
        )
        for (ready, reason), count in sorted(sum((Tally(f.watches) for f in known), Tally()).items()):
            watches.add_metric([ready, reason], count)
        return [namespaces, phases, retiring, watches, counted, acknowledged]


class Metrics:
    """Every collector the operator exports, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        by_controller = ["controller"]
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Reconciles of a namespace, by controller and result.",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Reconciles that failed, by controller.",
            by_controller,
            registry=registry,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "How long a reconcile of one namespace took, by controller.",
            by_controller,
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Reconciles running now, by controller.",
            by_controller,
            registry=registry,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "1 while this replica holds the Lease named `name`.",
            ["name"],
            registry=registry,
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth",
            "Keys (namespaces) waiting for a turn to reconcile (MCPG_RECONCILE_CONCURRENCY), by controller.",
            ["name"],
            registry=registry,
        )
        self.fenced_writes = Counter(
            "mcpg_operator_fenced_writes_total",
            "Writes not sent because this replica did not hold the Lease (or could no longer be sure it did).",
            registry=registry,
        )
        self.reconciler_running = Gauge(
            "mcpg_operator_reconciler_running",
            "1 while this replica runs the reconciler (it leads, and its startup finished).",
            registry=registry,
        )
        self.transitions = Counter(
            "mcpg_operator_token_transitions_total",
            "Token rotation steps: promoted (a new token), retired (an old one dropped), revoked.",
            ["transition"],
            registry=registry,
        )
        self.configurations_written = Counter(
            "mcpg_operator_gateway_configurations_written_total",
            "New gateway configurations this replica wrote (each applied in place by the pods).",
            registry=registry,
        )
        self.configurations_acknowledged = Counter(
            "mcpg_operator_gateway_configurations_acknowledged_total",
            "Configurations this replica wrote that every counted gateway pod then acknowledged serving.",
            registry=registry,
        )
        self.acknowledgement_time = Histogram(
            "mcpg_operator_gateway_acknowledgement_duration_seconds",
            "From writing a new configuration to the pass that found every counted gateway pod serving it.",
            buckets=ACKNOWLEDGEMENT_BUCKETS,
            registry=registry,
        )
        self.namespaces = NamespaceFigures()
        registry.register(self.namespaces)
        self._written: dict[str, tuple[str, float]] = {}
        """Namespace -> (configuration digest, when it was written): the one configuration being timed."""
        self._initialise()

    def _initialise(self) -> None:
        # Every series exists from the start at 0, as controller-runtime does, so rate() sees the first event.
        self.controller(CONTROLLER)
        for transition in TRANSITIONS.values():
            self.transitions.labels(transition)

    def controller(self, name: str) -> None:
        """Create the reconcile series of controller `name` at 0 (its scheduler does, when it is created)."""
        for result in RESULTS:
            self.reconcile_total.labels(name, result)
        self.reconcile_errors.labels(name)
        self.reconcile_time.labels(name)
        self.active_workers.labels(name)  # a new child starts at 0; never reset one that is counting
        self.workqueue_depth.labels(name)

    def reconciled(self, result: str, seconds: float, controller: str = CONTROLLER) -> None:
        """One reconcile of `controller` ended with `result` (one of RESULTS) after `seconds`."""
        self.reconcile_total.labels(controller, result).inc()
        if result == "error":
            self.reconcile_errors.labels(controller).inc()
        self.reconcile_time.labels(controller).observe(seconds)

    def namespace_pass(self, namespace: str, figures: Facts, now: float) -> None:
        """Record what a pass of `namespace` found and did; `now` is a monotonic clock."""
        self.namespaces.update(namespace, figures)
        for transition, count in figures.transitions.items():
            self.transitions.labels(transition).inc(count)
        started = self._written.get(namespace)
        if started is not None and figures.acknowledged == started[0]:
            self.configurations_acknowledged.inc()
            self.acknowledgement_time.observe(max(0.0, now - started[1]))
            del self._written[namespace]
        if figures.written is not None:
            self.configurations_written.inc()
            self._written[namespace] = (figures.written, now)  # a newer configuration supersedes an unacknowledged one
        if not figures.has_objects:
            self.forget(namespace)

    def forget(self, namespace: str) -> None:
        """`namespace` holds nothing of ours any more (or is being deleted): drop its figures."""
        self.namespaces.forget(namespace)
        self._written.pop(namespace, None)


REGISTRY = CollectorRegistry()
"""What /metrics serves: the operator's metrics and the process's own (CPU, memory, file descriptors, GC)."""
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
METRICS = Metrics(REGISTRY)
