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
    reconcile/   one pass over a namespace: read -> decide -> write (its own map: run, read, references,
                 decide, acceptance, gateway_objects, write, facts)
    acks         the read phase's one question outside the API: each gateway pod's acknowledgement of what it
                 serves, over HTTP on its admin port (the only module that imports aiohttp)
    observed     typed, frozen views over the raw objects a pass reads (and the pods with their
                 acknowledgements): the decision's only input, and what the builders below take
    serving      what the counted gateway pods serve, as a decision counts it (pure): who serves an entry, who
                 refused or is late with the configuration, when to look again
    actions      what a write is, as a value (create, apply, patch, delete, post; its stage): the decision's
                 output, which `reconcile.write` performs
    rotation     the token rotation state machine (pure), and `tokens`: a token's Secret and persisted state
    bus          the NATS bus of gateway replicas (pure); `bus_reconcile`: the cluster-wide step that runs the
                 managed server for the namespaces served, or removes one left over at start when none is used;
                 `bus_key`: the key their passwords are derived from
    render       a namespace's gateway configuration from its watches, asked of the gateway's contract
    spec_paths   a gateway configuration path as the ResourceWatch field it was rendered from
    objects      pure builders of the gateway's Deployment, Service, ServiceAccount, Role and RoleBinding, and
                 its one configuration Secret
    gateway_settings   the McpGateway model, its bounds (`quantities` compares them) and its overlay on
                       GatewayDefaults (pure), and its status
    gateway_policy     the gateway's optional PodDisruptionBudget and NetworkPolicy (pure builders and writes)
    statuses, events, conditions   what users see on the objects and in Events
    rollout      the `kubectl rollout status` rule (for what only a new pod template changes)
    models       pydantic mirrors of the CRDs, the only hand-written form of their shape; `api_types`: the
                 Kubernetes value types their fields are made of; `mirror`: a field that is a gateway
                 configuration field, declared once from the contract's
                 `schema_markers`: what a model says of its schema beyond what pydantic validates
    crdgen/      the CRDs written from the models (`make reference`, checked by `make lint`): `openapi`, a
                 model's structural OpenAPI v3 schema as a CRD version holds it; `kinds`, the three CRDs as
                 declarations (names, scope, printer columns), assembled into whole CRDs
    kube         a thin async Kubernetes client (server-side apply), and the protocol its test fake follows
"""
