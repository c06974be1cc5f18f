"""Prometheus metrics. One registry per gateway instance, so tests can run several in one process.

Labels are low-cardinality on purpose: a strategy type or a result word, never a URI, token or principal.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.active_watchers = Gauge(
            "mcpg_watch_active_watchers", "Watchers running now (one per subscribed URI)", registry=r
        )
        self.fired = Counter("mcpg_watch_fired_total", "Watches that fired", ["strategy"], registry=r)
        self.notifications_sent = Counter(
            "mcpg_watch_notifications_sent_total",
            "notifications/resources/updated written to a subscriber",
            ["strategy"],
            registry=r,
        )
        self.poll_failures = Counter(
            "mcpg_watch_poll_failures_total", "Reads that failed and were skipped", ["strategy"], registry=r
        )
        self.source_losses = Counter(
            "mcpg_watch_source_losses_total",
            "Watches that lost their event source's connection, by cause: closed, or unresponsive (a liveness "
            "round trip went unanswered); counted once per outage and watch",
            ["strategy", "cause"],
            registry=r,
        )
        self.sources_down = Gauge(
            "mcpg_watch_sources_down",
            "Watches whose event-source connection is down now (being reopened)",
            registry=r,
        )
        self.strategy_restarts = Counter(
            "mcpg_watch_strategy_restarts_total",
            "Strategy runs that crashed and were restarted",
            ["strategy"],
            registry=r,
        )
        self.notifications_dropped = Counter(
            "mcpg_watch_notifications_dropped_total",
            "Notifications not delivered: the subscriber's stream did not accept them in time, or a handshake-era "
            "session had no GET stream open",
            ["strategy"],
            registry=r,
        )
        self.webhook_requests = Counter(
            "mcpg_webhook_requests_total", "Webhook requests by result", ["result"], registry=r
        )
        self.webhook_signatures = Counter(
            "mcpg_webhook_signatures_total",
            "Signed webhook deliveries by scheme and by the check that decided them (ok, missing_header, "
            "malformed_header, stale_timestamp, bad_signature, replay)",
            ["scheme", "check"],
            registry=r,
        )
        self.subscribers = Gauge(
            "mcpg_subscribers", "Open subscribers (legacy sessions and listen streams)", ["kind"], registry=r
        )
        self.notifications_filtered = Counter(
            "mcpg_watch_notifications_filtered_total",
            "Subscribers of a fired URI not told because the watch's notification_filter excluded them",
            ["strategy"],
            registry=r,
        )
        self.policy_errors = Counter(
            "mcpg_policy_evaluation_errors_total",
            "CEL evaluations that failed at run time and were treated as false (the subscriber is refused or not told)",
            ["check", "reason"],
            registry=r,
        )
        self.auth_failures = Counter(
            "mcpg_auth_failures_total", "/mcp requests refused with 401, by reason", ["reason"], registry=r
        )
        # The connection guard (`connections.py`); `port` is "public" or "admin".
        self.connections_open = Gauge(
            "mcpg_connections_open", "Open TCP connections, by port (counted from accept)", ["port"], registry=r
        )
        self.connections_cap = Gauge(
            "mcpg_connections_cap",
            "The cap on open connections per port, once fitted under RLIMIT_NOFILE",
            ["port"],
            registry=r,
        )
        self.connections_closed = Counter(
            "mcpg_connections_closed_total",
            "Connections the guard closed, by port and reason"
            " (cap, header_timeout, body_timeout, write_timeout, pipelining)",
            ["port", "reason"],
            registry=r,
        )
        self.accept_errors = Counter(
            "mcpg_connections_accept_errors_total",
            "Accepts that failed for want of descriptors or memory (logged at most once per 10 s)",
            registry=r,
        )
        self.watch_ends = Counter(
            "mcpg_watch_ends_total",
            "Subscriptions the gateway ended, by reason (resource_gone, lifetime_reached, watcher_evicted)",
            ["reason"],
            registry=r,
        )
        self.refusals = Counter(
            "mcpg_subscription_refusals_total",
            "Subscriptions, listen streams and sessions refused, by JSON-RPC code (-32602, -42900, -50300, -32603)",
            ["method", "code"],
            registry=r,
        )
        # Labelled by upstream host:port as configured (`reader._upstream`: a template's `{variables}` in the host stay
        # unexpanded, so callers' values never make series): never a URL path, header or credential.
        self.upstream_rate_limited = Counter(
            "mcpg_upstream_rate_limited_total",
            "Upstream 429 answers: each pauses (or keeps paused) its reads of that upstream with the same credentials",
            ["upstream"],
            registry=r,
        )
        self.upstream_paused_reads = Counter(
            "mcpg_upstream_paused_reads_total",
            "Reads not sent because their upstream had rate-limited this gateway (paused)",
            ["upstream"],
            registry=r,
        )
        self.upstream_too_large = Counter(
            "mcpg_upstream_responses_too_large_total",
            "Reads refused because the upstream's body (decompressed) was larger than the backend's max_response_bytes",
            ["upstream"],
            registry=r,
        )
        self.upstream_redirects_refused = Counter(
            "mcpg_upstream_redirects_refused_total",
            "Reads failed because the upstream redirected and the redirect was not followed (not opted in, another "
            "origin, or too many)",
            ["upstream"],
            registry=r,
        )
        self.upstream_connections_busy = Counter(
            "mcpg_upstream_connections_busy_total",
            "Reads not sent because every connection to their upstream (limits.upstream_connections) stayed busy "
            "for the read's whole timeout_ms",
            ["upstream"],
            registry=r,
        )
        self.configurations = Counter(
            "mcpg_config_offers_total",
            "New configurations offered to this process (a reload, the configuration Secret), by result: applied, "
            "unchanged (its digest is the one served: nothing done), refused (the one before keeps serving)",
            ["result"],
            registry=r,
        )
        self.config_applied_at = Gauge(
            "mcpg_config_applied_timestamp_seconds", "When the configuration served now was applied", registry=r
        )
        self.config_apply_seconds = Gauge(
            "mcpg_config_apply_seconds",
            "How long the latest configuration applied took to check and swap in (the event loop waited that long)",
            registry=r,
        )
        self.limit_fitted = Gauge(
            "mcpg_limit_fitted",
            "Each admission cap as served: the configured value, lowered at start (and on each configuration applied) "
            "to fit the container memory limit (sessions_total, listen_streams_total, watches_total and their "
            "per-principal limits)",
            ["limit"],
            registry=r,
        )
        self.config_restart_pending = Gauge(
            "mcpg_config_restart_pending",
            "1 while the configuration served changes a field only a restart applies (the bus, NATS, liveness, "
            "socket caps), else 0",
            registry=r,
        )


class BusMetrics:
    """The bus that N gateways share (`bus.py`, `ownership.py`): registered by the bus, so only with one."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.connected = Gauge("mcpg_bus_connected", "1 while connected to the bus", registry=r)
        self.reconnects = Counter("mcpg_bus_reconnects_total", "Connections to the bus regained", registry=r)
        self.losses = Counter(
            "mcpg_bus_connection_losses_total",
            "Connections to the bus lost: closed, or dropped after a PING went unanswered (`gateway.liveness`)",
            registry=r,
        )
        self.buckets_ready = Gauge(
            "mcpg_bus_buckets_ready", "1 once the owners and state key-value buckets are open", registry=r
        )
        self.fires_published = Counter(
            "mcpg_bus_fires_published_total",
            "Fires published on the bus, by result (ok, failed)",
            ["result"],
            registry=r,
        )
        self.fires_received = Counter(
            "mcpg_bus_fires_received_total", "Fires received from other gateways on the bus", registry=r
        )
        self.fires_malformed = Counter(
            "mcpg_bus_fires_malformed_total",
            "Messages on the fire subjects that were not a fire (ignored): another client of the account",
            registry=r,
        )
        self.owned_watches = Gauge(
            "mcpg_bus_owned_watches", "Pull watches this gateway runs for all gateways (holds the lease of)", registry=r
        )
        self.lease_changes = Counter(
            "mcpg_bus_lease_changes_total",
            "Pull-watch lease changes, by event (acquired, released, handed_over: released to a gateway that should own"
            " it, unclaimed: acquired after one that should own it left it free, lost, fenced)",
            ["event"],
            registry=r,
        )
        self.leases_held_by_unknown = Counter(
            "mcpg_bus_leases_held_by_unknown_total",
            "Pull-watch leases this gateway contended for long while held by a name no gateway on the bus reports"
            " as (once per URI and episode): another client of the bus account may be silencing the watch",
            registry=r,
        )
