"""Render one namespace's gateway configuration from its ResourceWatches, WebhookTokens and Secrets. Pure.

Each ResourceWatch gets a verdict: served, or left out with a reason (invalid spec, a missing Secret, a token,
URI or resource name another ResourceWatch already holds, no room left in the configuration Secret). Conflicts
go to the later ResourceWatch (by creation time, then name), so the gateway never receives a collision. Each
entry, and then the whole configuration, is put to the gateway's own start-up check (`contract.check`, with
the plugin kinds its image installs): the contract is checked here, not discovered when a pod crash-loops. With
gateway replicas sharing a bus, the `gateway.bus` block (`bus.gateway_block`) goes into every configuration.
The operator's `gateway.limits`, `gateway.subscriptions` and `server_card` go into every one too, as far as its
settings set them (`GatewayDefaults`).
"""

from __future__ import annotations

import hashlib
import logging
import re
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from mcpg_gateway.contract import check, config, digests, documents, signing
from mcpg_operator import bus, models, objects, observed, rotation, spec_paths, tokens
from mcpg_operator import conditions as c
from mcpg_operator.observed import SecretData
from mcpg_operator.settings import GatewayDefaults

logger = logging.getLogger(__name__)

TokenStates = Mapping[str, rotation.TokenState]
"""WebhookToken name -> the rotation state to render its webhooks from."""
Schemes = Mapping[str, signing.Scheme]
"""WebhookToken name -> its `signatureScheme`, for those that hold a signing secret (the others hold a token)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    served: bool
    reason: str
    message: str
    stalled: bool = False
    """The spec itself can never work: retrying will not help until it is edited."""
    strategy: str | None = None
    uri: str | None = None
    detail: str = ""
    """What the Event for this verdict says beyond `message` (every problem, where it names the first); empty
    when the message says it all."""


@dataclass
class Plan:
    config: dict[str, Any]
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    clients_problem: str | None = None
    """Why no MCP client can use the gateway (no principal and no anonymous access); None when some can."""
    owners: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """`resources` and `resource_templates` -> the watch that rendered each entry of that list, in order."""

    @property
    def digest(self) -> str:
        """`digests.document` of the configuration: what each pod acknowledges serving."""
        return digests.document(self.config)

    def watch_at(self, path: str) -> str | None:
        """The watch whose entry a problem's field path (`mcp.capabilities.resources[3].watch`) is in; None for a
        path in no entry (the gateway section)."""
        return _watch_at(self.owners, path)


class Unresolved(Exception):
    """A reference (Secret, key, WebhookToken) is missing, and the watch waits for it; or (`stalled`) it names an
    object that can never serve it as it is."""

    def __init__(self, reason: str, message: str, stalled: bool = False) -> None:
        super().__init__(message)
        self.reason, self.message, self.stalled = reason, message, stalled


@dataclass(frozen=True, slots=True)
class _Held:
    """What the WebhookTokens hold for the watches: each one's rotation state, and the scheme of those that hold a
    signing secret."""

    states: TokenStates
    schemes: Schemes


def token_digest(token: str) -> str:
    """What status may show of a token: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


AUTH_SECRET, AUTH_KEY = "mcpg-gateway-auth", "auth.yaml"
"""Who may use the namespace's gateway: the `gateway.auth` block, from an optional Secret in the namespace."""


def plan(
    watches: Sequence[observed.Watch],
    states: TokenStates,
    secrets: SecretData,
    defaults: GatewayDefaults,
    wiring: bus.Wiring | None = None,
    schemes: Schemes | None = None,
) -> Plan:
    """Every watch's verdict, and the configuration of those served: one the gateway would start on.

    Each watch is rendered alone first (in creation order, so conflicts go to the later one); then the whole
    configuration is asked the gateway's start-up question, and its size is held under the Secret limit. A
    watch the gateway would refuse is left out with the reason, never rendered, so it cannot stop the others.
    `wiring`: the namespace's bus, if its gateway replicas share one. `schemes`: which WebhookTokens hold a signing
    secret (none by default).
    """
    auth, auth_problem = _auth(secrets)
    section = _Section(defaults, auth, wiring)
    rendered = _Rendered()
    claims = _Claims()
    held = _Held(states, schemes or {})
    for rw in sorted(watches, key=lambda w: (w.id.created, w.name)):
        rendered.verdicts[rw.name], kind, entry = _isolated(rw, held, secrets, section, claims)
        if entry is not None:
            rendered.add(rw.name, kind, entry)
    _refuse_what_the_gateway_would(rendered, section)
    _refuse_what_does_not_fit(rendered, section)
    if auth_problem:
        rendered.mark_served(lambda v: Verdict(False, c.INVALID_AUTH, auth_problem, False, v.strategy, v.uri))
    problem = None if auth_problem else no_principal(auth)
    return Plan(rendered.config(section), rendered.verdicts, problem, rendered.owners())


@dataclass(frozen=True, slots=True)
class _Section:
    """What the `gateway` section is rendered from: the operator's defaults, the namespace's auth block and bus."""

    defaults: GatewayDefaults
    auth: dict[str, Any] | None = None
    wiring: bus.Wiring | None = None

    def config(self, entries: dict[str, list[dict[str, Any]]], checked: bool = False) -> dict[str, Any]:
        """The whole configuration; `checked`: as the start-up check is asked about it (see `bus.checked_block`)."""
        block = None
        if self.wiring is not None:
            block = bus.checked_block(self.wiring) if checked else bus.gateway_block(self.wiring)
        return _gateway_config(entries, self.defaults, self.auth, block)

    def problems(self, entries: dict[str, list[dict[str, Any]]]) -> list[check.Problem]:
        """The gateway's start-up check, with no environment: a watch naming any variable is refused."""
        raw = self.config(entries, checked=True)
        return check.problems(raw, environ={}, plugin_kinds=self.defaults.plugin_kinds)


@dataclass
class _Rendered:
    """The entries rendered so far, each with the watch it came from, and every watch's verdict."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    entries: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """(watch name, kind, entry), in creation order."""

    def add(self, watch: str, kind: str, entry: dict[str, Any]) -> None:
        self.entries.append((watch, kind, entry))

    def by_kind(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
        for _, kind, entry in self.entries:
            out[kind].append(entry)
        return out

    def config(self, section: _Section) -> dict[str, Any]:
        return section.config(self.by_kind())

    def owners(self) -> dict[str, tuple[str, ...]]:
        """Each list of entries in `config()` -> the watch each entry came from, in order."""
        return {kind: tuple(name for name, k, _ in self.entries if k == kind) for kind in KINDS}

    def watch_at(self, path: str) -> str | None:
        """The watch whose entry a problem's path is in, in `config()` (as `Plan.watch_at`)."""
        return _watch_at(self.owners(), path)

    def refuse(self, watch: str, reason: str, message: str, detail: str = "") -> None:
        self.entries = [e for e in self.entries if e[0] != watch]
        v = self.verdicts[watch]
        self.verdicts[watch] = Verdict(False, reason, message, True, v.strategy, v.uri, detail)

    def mark_served(self, verdict: Callable[[Verdict], Verdict]) -> None:
        rendered = {name for name, _, _ in self.entries}
        for name in rendered:
            self.verdicts[name] = verdict(self.verdicts[name])


@dataclass
class _Claims:
    """What the watches rendered so far hold: a URI, a resource name, a token (by digest) each have one owner. Not
    a signing secret: it identifies no watch, so one WebhookToken may sign the deliveries of several."""

    uris: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)


_ENTRY_PATH = re.compile(r"^mcp\.capabilities\.(resources|resource_templates)\[(\d+)\]\.?(.*)$")
KINDS = ("resources", "resource_templates")
"""The two lists of entries of a configuration, in the order they are rendered."""


def _watch_at(owners: Mapping[str, Sequence[str]], path: str) -> str | None:
    match = _ENTRY_PATH.match(path)
    listed = owners.get(match[1], ()) if match else ()
    index = int(match[2]) if match else len(listed)
    return listed[index] if index < len(listed) else None


def _refuse_what_the_gateway_would(rendered: _Rendered, section: _Section) -> None:
    """Ask the gateway's own start-up check about the whole configuration; leave out each watch it names.

    Rules that relate entries to each other (and the plugins the gateway image has) can only be checked here.
    Each round removes at least one entry, so this ends.
    """
    while problems := section.problems(rendered.by_kind()):
        at_fault: dict[str, list[str]] = {}
        for problem in problems:
            match = _ENTRY_PATH.match(problem.path)
            watch = rendered.watch_at(problem.path)
            if match is None or watch is None:  # the gateway section: no watch can fix it, so none is served
                said = spec_paths.in_user_words(problem.path, problem.message, None)
                message = c.first_of([said], "; no watch is served until it is fixed")
                for name, _, _ in list(rendered.entries):
                    rendered.refuse(name, c.INVALID_SPEC, message, said)
                return
            strategy = rendered.verdicts[watch].strategy or "poll"
            at_fault.setdefault(watch, []).append(spec_paths.in_spec_words(match[3], problem.message, strategy))
        for watch, messages in at_fault.items():
            rendered.refuse(watch, c.INVALID_SPEC, c.first_of(messages), "; ".join(messages))


def _refuse_what_does_not_fit(rendered: _Rendered, section: _Section) -> None:
    """Keep the configuration within one Secret: first come, first served, like every other claim.

    Watches are taken in creation order and each one that would push the configuration over the limit is left
    out, so a watch added later is served if it still fits. Entry sizes are estimated from each entry alone;
    the final size is measured exactly, and if the estimate was short, the latest watches go until it fits.
    """
    limit = objects.SECRET_SIZE_LIMIT
    if _size(rendered, section) <= limit:
        return
    used = len(objects.config_text(section.config({})).encode())
    for watch, _, entry in list(rendered.entries):
        cost = _entry_size(entry)
        if used + cost > limit:
            rendered.refuse(watch, c.CONFIG_TOO_LARGE, _too_large(used + cost, limit))
        else:
            used += cost
    while rendered.entries and (size := _size(rendered, section)) > limit:
        rendered.refuse(rendered.entries[-1][0], c.CONFIG_TOO_LARGE, _too_large(size, limit))


def _size(rendered: _Rendered, section: _Section) -> int:
    return len(objects.config_text(rendered.config(section)).encode())


def _entry_size(entry: dict[str, Any]) -> int:
    """About what `entry` adds to the configuration's text: its own text, each line indented under its list."""
    text = objects.config_text({"x": [entry]})
    return len(text.encode()) + 4 * text.count("\n")


def _too_large(size: int, limit: int) -> str:
    return f"the gateway configuration would be ~{size} bytes with it, over a Secret's {limit}: shrink its spec"


def rendered_values(config: Mapping[str, Any], role: tokens.Role) -> frozenset[str]:
    """Every webhook token (or signing secret) the configuration accepts: what it carries to the gateway's pods."""
    return frozenset(t for entry_values in values_by_entry(config, role).values() for t in entry_values)


def values_by_entry(config: Mapping[str, Any], role: tokens.Role) -> dict[str, frozenset[str]]:
    """Resource name -> the webhook tokens (or signing secrets) the configuration accepts for it."""
    capabilities = config["mcp"]["capabilities"]
    return {entry["name"]: frozenset(_values_of(entry, role)) for kind in capabilities.values() for entry in kind}


def entry_digests(config: Mapping[str, Any]) -> dict[str, str]:
    """Resource name -> the digest of its entry (`digests.entries`, as the pods acknowledge them): what a watch's
    own serving depends on, apart from the others'."""
    return digests.entries(config)


def parse_config(text: str | None) -> dict[str, Any] | None:
    """A configuration as read back from its Secret; None if it is gone or not one the operator wrote."""
    try:
        # `documents` loads with libyaml where the wheel has it, and bounds the document like every YAML read
        # (whoever can write the Secret can write an alias bomb).
        loaded = documents.load(text, "configuration") if text is not None else None
    except check.ConfigError:
        return None
    ok = isinstance(loaded, dict) and isinstance((loaded.get("mcp") or {}).get("capabilities"), dict)
    return loaded if ok else None


def no_principal(auth: dict[str, Any] | None) -> str | None:
    """Why no MCP client can use a gateway with this (valid) auth block, or None when some principal can."""
    if auth is None:
        return f"no principal, so every MCP client gets 401: create Secret {AUTH_SECRET} key {AUTH_KEY}"
    parsed = config.AuthConfig.model_validate(auth)
    if parsed.principals or parsed.anonymous.enabled:
        return None
    return f"no principal, so every MCP client gets 401: Secret {AUTH_SECRET} lists none, anonymous access is off"


def _auth(secrets: SecretData) -> tuple[dict[str, Any] | None, str | None]:
    """The namespace's auth block, or None (every MCP client refused) with the reason it could not be used."""
    text = secrets.get(AUTH_SECRET, {}).get(AUTH_KEY)
    if text is None:
        return None, None
    where = f"Secret {AUTH_SECRET} key {AUTH_KEY}"
    try:
        auth = documents.load(text, where) or {}  # the user's text: bounded before it is validated or rendered
        config.AuthConfig.model_validate(auth)
    except check.ConfigError as e:  # not YAML (its text is never echoed: it stays in the Secret), or too large
        problem = e.problems[0].message
        why = "is not valid YAML" if problem.startswith("not valid YAML") else problem
        return None, c.first_of([f"{where} {why}"], "; every MCP client gets 401 until it is fixed")
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        path = ".".join(str(x) for x in first["loc"])
        return None, c.first_of([f"{where}: {path}: {first['msg']}"], "; every MCP client gets 401")
    return auth, None


def _isolated(
    rw: observed.Watch, held: _Held, secrets: SecretData, section: _Section, claims: _Claims
) -> tuple[Verdict, str, dict[str, Any] | None]:
    """`_one`, behind an isolation boundary: a watch the renderer cannot handle is left out, never the namespace."""
    try:
        return _one(rw, held, secrets, section, claims)
    except Exception as e:  # a bug here must cost one watch, not every watch of the namespace
        # The frames, not the exception's text: it may quote a value resolved from a Secret.
        where = "".join(traceback.format_tb(e.__traceback__))
        logger.error("rendering ResourceWatch %s failed with %s at\n%s", rw.name, type(e).__name__, where)
        message = f"the operator could not render this watch ({type(e).__name__}); see the operator log"
        return Verdict(False, c.INVALID_SPEC, message, stalled=True), "", None


def _one(
    rw: observed.Watch, held: _Held, secrets: SecretData, section: _Section, claims: _Claims
) -> tuple[Verdict, str, dict[str, Any] | None]:
    try:
        spec = models.ResourceWatchSpec.model_validate(rw.spec)
    except ValidationError as e:
        found = _spec_errors(e)
        return Verdict(False, c.INVALID_SPEC, c.first_of(found), stalled=True, detail="; ".join(found)), "", None
    watch = spec.watch or models.WatchSpec()
    kind = "resources" if spec.uri is not None else "resource_templates"
    strategy, uri = watch.strategy_type, spec.address

    def refused(reason: str, message: str, stalled: bool = False, detail: str = "") -> tuple[Verdict, str, None]:
        return Verdict(False, reason, message, stalled, strategy, uri, detail), kind, None

    try:
        entry = _entry(rw.name, spec, watch, held, secrets)
    except Unresolved as e:
        return refused(e.reason, e.message, e.stalled)
    problems = _contract_problems(kind, entry, section, strategy)
    if problems:
        return refused(c.INVALID_SPEC, c.first_of(problems), stalled=True, detail="; ".join(problems))
    if spec.address in claims.uris:
        msg = c.fit("URI {uri} is already served by ResourceWatch {other}", uri=uri, other=claims.uris[uri])
        return refused(c.URI_CONFLICT, msg)
    if entry["name"] in claims.names:
        where = "spec.name" if spec.name else "spec.name (default: metadata.name)"
        other = claims.names[entry["name"]]
        msg = c.fit(f"{where} {{name}} is already used by ResourceWatch {{other}}", name=entry["name"], other=other)
        return refused(c.NAME_CONFLICT, msg)
    entry_tokens = [hashlib.sha256(t.encode()).hexdigest() for t in _values_of(entry, "token")]
    clash = next((claims.tokens[d] for d in entry_tokens if d in claims.tokens), None)
    if clash is not None:
        msg = c.fit("spec.watch.webhook.tokenRef: its token is already used by ResourceWatch {other}", other=clash)
        return refused(c.TOKEN_CONFLICT, msg)
    claims.uris[spec.address] = claims.names[entry["name"]] = rw.name
    claims.tokens.update(dict.fromkeys(entry_tokens, rw.name))
    message = c.fit(f"served by the gateway as {{uri}}{_floored(watch)}", uri=uri)
    return Verdict(True, c.SERVED, message, False, strategy, uri), kind, entry


def _floored(watch: models.WatchSpec) -> str:
    """What a status adds when an interval is below the floor every poll-shaped watch is held to."""
    # The floor is the gateway's: the contract says what cadence an interval runs at, and the status says so.
    for field_path, spec in (("poll", watch.poll), ("sqlPolling", watch.sql_polling)):
        floored = None if spec is None else config.effective_interval_ms(spec.interval_ms)
        if spec is not None and floored is not None and floored != spec.interval_ms:
            floor_s = floored // 1000
            return f"; spec.watch.{field_path}.intervalMs {spec.interval_ms} is below the floor: read every {floor_s} s"
    return ""


def _entry(
    name: str,
    spec: models.ResourceWatchSpec,
    watch: models.WatchSpec,
    held: _Held,
    secrets: SecretData,
) -> dict[str, Any]:
    http = spec.backend.http
    backend: dict[str, Any] = {
        "kind": "http",
        "url": http.url,
        "method": http.method,
        "headers": {h.name: _secret(secrets, h.secret_key_ref) for h in http.headers},
        "expected_status_codes": http.expected_status_codes,
        "require_json_response": http.require_json_response,
        "timeout_ms": http.timeout_ms,
    }
    if http.body is not None:
        backend["body"] = http.body
    if http.max_response_bytes is not None:
        backend["max_response_bytes"] = http.max_response_bytes
    if http.follow_redirects is not None:
        backend["follow_redirects"] = http.follow_redirects
    entry: dict[str, Any] = {"name": spec.name or name, "description": spec.description, "backend": backend}
    entry["uri" if spec.uri is not None else "uri_template"] = spec.address
    if spec.mime_type:
        entry["mime_type"] = spec.mime_type
    if spec.read_policy:
        entry["read_policy"] = spec.read_policy
    if spec.subject_id:
        entry["subject_id"] = spec.subject_id
    entry["watch"] = {"strategy": _strategy(watch, held, secrets)}
    if watch.notification_filter is not None:
        entry["watch"]["notification_filter"] = watch.notification_filter.model_dump(exclude_none=True)
    return entry


def _strategy(watch: models.WatchSpec, held: _Held, secrets: SecretData) -> dict[str, Any]:
    if watch.webhook is not None:
        return _webhook(watch.webhook, held)
    if watch.nats_topic is not None:
        out: dict[str, Any] = {"type": "nats_topic", "subject": watch.nats_topic.subject}
        if watch.nats_topic.url_secret_ref is not None:
            out["url"] = _secret(secrets, watch.nats_topic.url_secret_ref)
        return out
    if watch.postgres_listen_notify is not None:
        pg = watch.postgres_listen_notify
        return {"type": "postgres_listen_notify", "url": _secret(secrets, pg.url_secret_ref), "channel": pg.channel}
    if watch.sql_polling is not None:
        sql = watch.sql_polling
        url = _secret(secrets, sql.url_secret_ref)
        return {
            "type": "sql_polling",
            "url": url,
            "query": sql.query,
            "interval_ms": sql.interval_ms,
            "timeout_ms": sql.timeout_ms,
        }
    if watch.plugin is not None:
        return {**watch.plugin.config, "type": "plugin", "kind": watch.plugin.kind}
    poll = watch.poll or models.PollSpec()
    strategy: dict[str, Any] = {"type": "poll", "interval_ms": poll.interval_ms}
    if poll.ignore:  # only when set: a configuration (and its hash) without it renders as before
        strategy["ignore"] = list(poll.ignore)
    return strategy


def _webhook(webhook: models.WebhookSpec, held: _Held) -> dict[str, Any]:
    current, *previous = _values(webhook.token_ref.name, None, held)
    out: dict[str, Any] = {"type": "webhook", "token": current, "previous_tokens": previous}
    if webhook.signature is not None:
        out["signature"] = _signature(webhook.signature, held)
    return out


def _signature(spec: models.WebhookSignatureSpec, held: _Held) -> dict[str, Any]:
    """The gateway's `signature` block: the scheme, and the secrets of the WebhookToken `secretRef` names."""
    block: dict[str, Any] = {
        "scheme": spec.scheme,
        "secrets": _values(spec.secret_ref.name, spec.scheme, held),
        "tolerance_s": spec.tolerance_seconds,
    }
    if spec.max_body_bytes is not None:  # unset: the gateway's default, which the configuration need not repeat
        block["max_body_bytes"] = spec.max_body_bytes
    if spec.hmac is not None:
        block.update(spec.hmac.model_dump(exclude_none=True))
    return block


def _values(name: str, scheme: signing.Scheme | None, held: _Held) -> list[str]:
    """The values of WebhookToken `name` to accept, current first: its tokens (`scheme` None, for `tokenRef`) or its
    signing secrets for `scheme` (for `signature.secretRef`). A WebhookToken holding the other kind is refused."""
    state = held.states.get(name)
    if state is None:
        raise Unresolved(
            c.WEBHOOK_TOKEN_NOT_FOUND, c.fit("WebhookToken {name} does not exist in this namespace", name=name)
        )
    if (mismatch := _mismatch(name, scheme, held.schemes.get(name))) is not None:
        raise Unresolved(c.INVALID_SPEC, mismatch, stalled=True)
    if state.current is None:
        noun = "token" if scheme is None else "signing secret"
        raise Unresolved(c.TOKEN_PENDING, c.fit(f"WebhookToken {{name}} has no {noun} yet (see its status)", name=name))
    # Retired values are left out: they stay in the state only until every pod has dropped them.
    return state.tokens()


def _mismatch(name: str, wanted: signing.Scheme | None, held: signing.Scheme | None) -> str | None:
    """Why WebhookToken `name`, holding a value of scheme `held` (None: a token), cannot serve as `wanted`."""
    if wanted == held:
        return None
    if wanted is None:
        said = (
            "spec.watch.webhook.tokenRef: WebhookToken {name} holds a signing secret: name one without signatureScheme"
        )
        return c.fit(said, name=name)
    what = f"signatureScheme {held}" if held else "a routing token"
    said = f"spec.watch.webhook.signature.secretRef: WebhookToken {{name}} holds {what}, not signatureScheme {wanted}"
    return c.fit(said, name=name)


def _secret(secrets: SecretData, ref: models.SecretKeyRef) -> str:
    data = secrets.get(ref.name)
    if data is None:
        raise Unresolved(c.SECRET_NOT_FOUND, c.fit("Secret {name} does not exist in this namespace", name=ref.name))
    if ref.key not in data:
        raise Unresolved(c.SECRET_NOT_FOUND, c.fit("Secret {name} has no key {key}", name=ref.name, key=ref.key))
    return data[ref.key]


def _values_of(entry: Mapping[str, Any], role: tokens.Role) -> list[str]:
    """The values an entry accepts in `role`: its webhook tokens, or its signing secrets."""
    strategy = (entry.get("watch") or {}).get("strategy") or {}
    if strategy.get("type") != "webhook":
        return []
    if role == "signature":
        return list((strategy.get("signature") or {}).get("secrets", []))
    return [strategy["token"], *strategy["previous_tokens"]]


def _contract_problems(kind: str, entry: dict[str, Any], section: _Section, strategy: str) -> list[str]:
    # The gateway's own check, on this entry alone (with the gateway section it will get, for the NATS server).
    # No environment: the operator resolves every secret itself, so a ${env.X} left in a field is an error (and
    # no entry can read the bus credentials from the pod's environment). The CEL is compiled too: a bad
    # expression must never reach a gateway pod. The plugin kinds are the ones the gateway image installs.
    alone = _Section(section.defaults, None, section.wiring)
    # Each named by the ResourceWatch's field it comes from (`spec_paths`), not the configuration file's.
    prefix = f"mcp.capabilities.{kind}[0]"
    found = alone.problems({kind: [entry]})
    return [spec_paths.in_spec_words(p.path.removeprefix(prefix).lstrip("."), p.message, strategy) for p in found]


def _spec_errors(e: ValidationError, limit: int = 8) -> list[str]:
    """`spec.<field>: <what is wrong>` for each of the first `limit` problems."""
    parts = []
    for err in e.errors(include_url=False)[:limit]:
        path = ".".join(str(x) for x in err["loc"]) or "spec"
        parts.append(f"spec.{path}: {str(err['msg']).removeprefix('Value error, ')}")
    return parts


def _gateway_config(
    entries: dict[str, list[dict[str, Any]]],
    defaults: GatewayDefaults,
    auth: dict[str, Any] | None,
    bus_block: dict[str, Any] | None,
) -> dict[str, Any]:
    server: dict[str, Any] = {"allowed_origins": list(defaults.allowed_origins)}
    if defaults.server_card is not None:
        server["server_card"] = defaults.server_card
    gateway: dict[str, Any] = {"server": server}
    if auth is not None:
        gateway["auth"] = auth
    if defaults.nats_url:
        gateway["nats"] = {"url": defaults.nats_url}
    if bus_block is not None:
        gateway["bus"] = bus_block
    sections = (("limits", defaults.limits), ("subscriptions", defaults.subscriptions), ("liveness", defaults.liveness))
    for name, section in sections:
        if chosen := _set_only(section):
            gateway[name] = chosen
    return {"mcp": {"capabilities": entries}, "gateway": gateway}


def _set_only(section: BaseModel) -> dict[str, Any]:
    """The keys the operator's settings gave, as validated; the rest stays the gateway's default (see
    `GatewayDefaults.limits`). Plain JSON types, so the hash and the Secret's YAML are those of what is served."""
    return section.model_dump(mode="json", exclude_unset=True)
