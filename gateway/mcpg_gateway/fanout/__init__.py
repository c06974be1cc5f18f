"""The fan-out wing: a change's way from its watch to every subscriber's client, behind one object.

Callers (the MCP handlers, the gateway for webhooks and the bus, the admin API) use `fanout.Fanout` and nothing
else here; the modules below are its parts.

Module map (a fire's path through it, top to bottom):

    fanout          `Fanout`: open, subscribe, touch, fire, carry and close subscribers; what the admin API lists
    watchers        one watcher per subscribed URI; a fire tells each subscriber its audience admits, once
    running         how one watcher runs: started (again until its source answers, after a swap), supervised, polled
    rebinding       what a new configuration does to a running watcher: keep it, restart it, or end it
    states          each URI's state token, so a subscriber who comes back is told what moved, and only that
    lease           a subscription's lease: an idle session's pull watch slows, and every notification says so
    lifetimes       every subscription ends `lifetime_s` after it began: the schedule and its one task
    limits          how many watches and listen streams a principal, and everyone, may hold
    endings         why the gateway ended a watch, in the closed vocabulary a listen's result carries
    subscribers     subscribers, their outboxes, and the one owner of their lifecycle
    delivery        the one delivery interface (`Writer`): the one reader of an outbox, its task, span and metrics
    stream_writer   over Streamable HTTP: the frame written to the SSE stream in the fire's own turn
    session_writer  off HTTP (stdio): each notification written by the SDK's session, from the writer's task
    frames          notifications/resources/updated as SSE bytes, encoded once per fire; the SDK's bytes
    streams         the /mcp SSE streams notifications are written to, found beside the SDK that owns them
    eager           run a coroutine in the caller's turn, and give it a task only if it has to wait
"""
