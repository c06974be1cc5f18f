"""One reconcile of a namespace, as a pipeline: read -> decide (pure) -> write, level-based and idempotent.

Pipeline map:

    run          the pass itself: `reconcile(kube, namespace, ...)` reads, decides, writes and says what it found
                 (`Outcome`); a failed write is reported on every object of the namespace before the retry
    read         everything a pass needs, as one `observed.Snapshot`; no writes
    references   which Secrets a pass reads (its own by label, the named ones by name), the label its Secret
                 watch selects, and the writes that put that label on a named Secret
    decide       the pure decision: token states, configuration, statuses, Events, and the writes (`Decision`)
    acceptance   the tokens' part of it (pure): what the pods acknowledge accepts a token, retires the one it
                 replaced, and forgets it once no pod serves it; what pods may still accept, from the
                 configuration Secret
    gateway_objects   the writes that keep the namespace's gateway objects as decided (pure): configuration
                      and bus credentials Secrets, ServiceAccount, Role, RoleBinding, Service, Deployment,
                      an older operator's configuration Secrets to collect
    write        performs the writes in the order rotation safety needs, logs each change, and says what
                 failed so every object of the namespace can report it
    facts        what the pass found and did, as the metrics count it

What a pass reads and writes is described outside this package, one floor down: `observed` (the typed views of
the snapshot, the pods' acknowledgements among them: `acks` asks for those) and `actions` (a write, as a value).
The builders the decision asks (`render`, `serving`, `statuses`, `events`, `gateway_policy`, `gateway_settings`)
take and return those, so they cannot import this package.
"""
