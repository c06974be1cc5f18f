"""mcpg operator: reconciles ResourceWatch, WebhookToken and McpGateway into per-namespace gateways.

Module map:

    __main__     `mcpg-operator`: flags and settings (exit 2 if unusable), probes and /metrics, wait to lead, then
                 kopf in this process on `handlers`; stop at once if the Lease is lost, release it on SIGTERM
    leader       leader election on a coordination.k8s.io Lease: one replica reconciles, the others stand by;
                 its `Fence` refuses any write once the Lease is not held within its renew deadline;
                 `candidacy`: the elector on a thread of its own, so renewals never wait behind reconcile work
    health       /healthz, /readyz and /metrics, served from the process's start (a standby answers its probes)
    metrics      the Prometheus registry: controller-runtime's reconcile and leader families, mcpg_operator_*
    handlers     kopf wiring only: every event asks for a reconcile of its namespace
    scheduler    coalesces those requests: one reconcile per namespace at a time, a burst becomes one pass,
                 at most MCPG_RECONCILE_CONCURRENCY at once, served in turn; counts and times each pass
    settings     the operator's settings, read from the environment here and nowhere else
    reconcile    one pass over a namespace: read -> decide -> write
      read         everything a pass needs, as an `observed.Snapshot`; no writes
      references   which Secrets a pass reads (its own by label, the named ones by name) and the label its
                   Secret watch selects
      observed     typed, frozen views over the raw objects
      decision     the pure decision: token states, configuration, statuses, Events, and the writes
      write        performs the writes in the order rotation safety needs (`writes`: what a write is), logs
                   each change, and says what failed so every object of the namespace can report it
    rotation     the token rotation state machine (pure), and `tokens`: a token's Secret and persisted state
    bus          the NATS bus of gateway replicas (pure); `bus_reconcile`: the cluster-wide step that runs the
                 managed server for the namespaces served, or removes one left over at start when none is used;
                 `bus_key`: the key their passwords are derived from
    render       a namespace's gateway configuration from its watches, asked of the gateway's contract
    objects      pure builders of the gateway's Deployment, Service, ServiceAccount and configuration Secret
    gateway_settings   the McpGateway model, its bounds (`quantities` compares them) and its overlay on
                       GatewayDefaults (pure), and its status
    gateway_policy     the gateway's optional PodDisruptionBudget and NetworkPolicy (pure builders and writes)
    statuses, events, conditions   what users see on the objects and in Events
    rollout      the `kubectl rollout status` rule
    models       pydantic mirrors of the CRDs
    kube         a thin async Kubernetes client (server-side apply), and the protocol its test fake follows
"""
