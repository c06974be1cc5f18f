"""mcpg gateway: serves MCP resource subscriptions and runs the watches behind them.

Module map (a request's path through it, top to bottom):

    __main__        `mcpg-gateway`'s command line; `process`, imported once it is parsed: load and check the
                    configuration, then serve
    contract/       what a configuration is and whether a gateway accepts it; the only part the operator imports
                    (config: the model; documents: YAML read within a bound on its expanded size and depth;
                    loading: YAML, ${env.X}, schema; cel: policies and filters compiled;
                    check: the whole question; templates: URI templates, matched in linear time; uris: the one
                    canonical spelling, the length cap, what a variable may hold; pointers: the JSON Pointers of
                    watch.strategy.ignore; errors: Problem, ConfigError; digests: of a document, its entries and
                    its restart-only fields; acknowledgement: what a process says it serves, as both programs read it;
                    signing: a webhook's signature block, the schemes and which secrets each takes)
    sdk/            the one door to the MCP SDK: protocol versions and codes, how it reads a request, the session
                    manager, session owners, a connection's scratch, auth, what each era advertises (its own map)
    servers         the two HTTP servers and the MCP session manager, started and stopped in order
    reconfigure     a new configuration applied in place: checked whole, swapped at once, followed through
    served          what this process serves and last refused: its acknowledgement
    config_file     the configuration file read again on SIGHUP and when it changes
    config_secret   the configuration Secret followed through the API (in a cluster)
    connections     per port: the connection cap, and a deadline for every state of a connection
    signals         `Signal`: asyncio.Event's set, clear and wait in 48 bytes, for what every connection keeps
    memory_fit      the admission caps (sessions, listen streams, watches) fitted to the container's memory limit
    request_heads   request heads held to fixed limits below every route; a repeated singleton header refused
    stdio           `--stdio`: one client over stdin/stdout with the same handlers, as one configured principal
    stdio_transport newline-delimited JSON-RPC on stdin/stdout, read on the event loop, bounded, errors answered
    public_app      port 8080: /mcp (classified, origins, identity, sessions, envelope), webhooks, health
    mcp_requests    an /mcp request read once: its era and session the SDK's way; its body, ids and _meta bounded
    sessions        the sessions-per-principal limit, counted where the SDK opens sessions
    handshake_sessions  handshake-era sessions kept by the gateway: cap, owner, idle, end
    card            the server card (`/mcp/server-card`, its first home, the AI Catalog) and the `_meta` it shares
    admin_app       port 9090: /metrics and /admin/v1/*
    origins         the Origin rule shared by /mcp and the webhook route (bound to loopback: local origins too)
    identity        bearer tokens to principals, through the MCP SDK's auth hooks
    mcp_handlers    list, read, subscribe (handshake era) and subscriptions/listen (2026-07-28), through the fan-out
    webhook_route   POST /webhooks/resource-updated/{token}: the route (its token index is the webhook strategy's)
    signatures      a signed delivery verified, each scheme as its provider publishes it; pure
    replays         a signed delivery id fires once: remembered here and, on a bus, claimed in a shared bucket
    gateway         `Gateway`: everything below wired once from a configuration; readiness, start and stop
    catalog         which entry serves a concrete URI (resources, templates and their variables)
    policy          read policies and notification filters, evaluated fail-closed
    reader          reading a resource through its backend binding: capped, no redirects off-origin, no cookies,
                    a queue of connections per upstream origin
    fanout/         the notification path behind one object, `fanout.Fanout` (its own map): watchers, running,
                    rebinding, states, lease, lifetimes, limits, endings, subscribers, delivery (stream and session
                    writers), frames, streams, eager
    bus             N gateways as one (gateway.bus): fires published once on NATS, told by every process
    ownership       pull watches read by one gateway for all: leases, stored state, handover, self-fencing
    rendezvous      which gateway should own a pull URI: rendezvous hashing over the live gateways that want it
    buckets         the bus's key-value buckets (<bucket>-owners, -state, -deliveries), created if missing
    peers           what the other gateways on the bus say of their event sources, which /readyz weighs
    upstream_pauses after a 429, every read of that upstream with the same credentials waits out its pause
    strategies/     base, poll, nats_topic, postgres_listen_notify, sql_polling (+ sql_values, its state as text;
                    pg and reconnect, what the SQL ones share), webhook (passive, and the token index),
                    plugin (entry points), memory (tests)
    backoff         the one retry rhythm: 1, 2, 5, 10, then every 30 s
    cancellation    a cancel never lost (re-checked after awaits that may swallow it), and bounded shutdown waits
    liveness        how a connection that stopped without closing is noticed within a bound, and each watch's record
    metrics, audit, logs, redaction, errors
    tracing         OpenTelemetry: the provider when OTEL_EXPORTER_OTLP_ENDPOINT is set, and the spans of a change
    subscribe_cli   `mcpg-subscribe`'s command line; `subscribe_client`: the small MCP client it runs, which waits
                    for a gateway that is starting, subscribes and prints each notification
"""
