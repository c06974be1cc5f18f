"""The gateway configuration model: the contract between the operator and the gateway.

The operator renders exactly this model into a Secret; a standalone gateway loads it from YAML. The shape is
the one the README documents (`mcp.capabilities.resources[].watch.strategy`), snake_case on the wire.
Secrets (header values, webhook tokens, database URLs) are `SecretStr` so no repr or log can print them; client
bearer tokens never appear at all, only their SHA-256 digests. CEL expressions (read policies, notification
filters) are plain strings here; `cel.py` compiles and type-checks them.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from mcpg_gateway.contract import backend_urls, pointers, signing, templates, uris

POLL_FLOOR_MS = 10_000
"""No poll-shaped watch runs more often than this: a misconfigured watcher cannot hammer a backend."""
POLL_DEFAULT_MS = 60_000
LONGEST_S = 31_536_000
"""A year (365 days): the longest duration any field takes (an interval, a timeout, a lease, a lifetime). Longer
is never in practice, and a bound keeps every deadline computed from one a number the timers take and an instant
RFC 3339 writes (`renewBy`, the admin API's times); a 400-digit `interval_ms` would not even convert to seconds."""
LONGEST_MS = LONGEST_S * 1000
LONGEST_READ_MS = 300_000
"""Five minutes: the longest one read of a backend (an HTTP request, a SQL query) may be given."""

# Types the operator's CRD fields share with the fields below (`mcpg_operator.mirror`): written once, here.
HttpMethodName = Literal["get", "post", "put", "patch", "delete", "head"]
HTTP_METHODS: tuple[str, ...] = get_args(HttpMethodName)


def lowercase_method(value: Any) -> Any:
    """`GET`, `Get` and `get` are one method (RFC 9110 names them in capitals, YAML users write either)."""
    return value.lower() if isinstance(value, str) else value


HttpMethod = Annotated[HttpMethodName, BeforeValidator(lowercase_method)]
StatusCode = Annotated[int, Field(ge=100, le=599)]
FilterScope = Literal["all", "subject_id", "expression"]


def effective_interval_ms(interval_ms: int) -> int:
    """The cadence a poll-shaped watch runs at: its interval, held to the floor."""
    return max(interval_ms, POLL_FLOOR_MS)


class _Model(BaseModel):
    # Attribute docstrings are the fields' descriptions: the reference (docs/reference.md, `hack/reference.py`) and
    # the operator's CRD descriptions are generated from them, so each field is described once, here.
    # `allow_inf_nan=False`: YAML's `.inf` and `.nan` (and JSON's `Infinity`) are refused, naming the field; an
    # infinite lease or timeout passed `gt=0` and then broke the running gateway (a 500 on every webhook, a crash).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


class HttpBackend(_Model):
    """Reads a resource with one HTTP request. `{var}` in `url` takes a resource template's variable."""

    kind: Literal["http"]
    """The backend's kind; `http` is the only one."""
    url: str = Field(min_length=1)
    """The upstream URL a read requests: `http://` or `https://` and a host. In a resource template, `{name}` in its
    path or query takes the concrete URI's value of that template variable; never in the host, port or user, where
    a caller would choose the server that receives the headers."""
    method: HttpMethod = "get"
    """The HTTP method of each read (`get`, `post`, `put`, `patch`, `delete` or `head`, in any case); `get` by
    default."""
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    """Request headers sent with every read, such as `Authorization`; the values are secrets, never logged or
    shown."""
    body: str | None = None
    """The request body sent with every read, as is; none by default."""
    expected_status_codes: list[StatusCode] = Field(default_factory=lambda: [200], min_length=1)
    """The HTTP statuses that make a successful read (`[200]` by default); any other is a failed read."""
    require_json_response: bool = False
    """Refuse a body that is not JSON: such a read fails instead of being served or hashed. Off by default."""
    timeout_ms: int = Field(default=10_000, gt=0, le=LONGEST_READ_MS)
    """Bounds the whole read: waiting for a connection to the upstream, the request, and the whole body."""
    max_response_bytes: int = Field(default=10_485_760, ge=1)
    """The largest body a read accepts, counted after decompression; 10 MiB by default. A larger one is a failed
    read (refused at once when its Content-Length says so), never held: a small gzip body can inflate a thousandfold."""
    follow_redirects: bool = False
    """Follow a 301, 302, 303, 307 or 308 answer, at most 5 in a row, and only within the url's origin (scheme, host,
    port): the headers are this backend's credentials. Off, a redirect is a failed read (unless its status is in
    `expected_status_codes`, which makes it the answer)."""

    @field_validator("url")
    @classmethod
    def _http_url_with_a_host(cls, url: str) -> str:
        if problem := backend_urls.problem(url):
            raise ValueError(problem)
        return url


Backend = Annotated[HttpBackend, Field(discriminator="kind")]


def _ignored_pointer(text: str) -> str:
    pointers.parse_ignored(text)  # a ValueError saying what is wrong; pydantic puts `ignore[i]` before it
    return text


IgnoredPointer = Annotated[str, AfterValidator(_ignored_pointer)]


class PollStrategy(_Model):
    """Re-read through the binding on a cadence; fire when the SHA-256 of the response moves."""

    type: Literal["poll"] = "poll"
    """Selects this strategy; `poll` is also what a watch without a strategy does."""
    interval_ms: int = Field(
        default=POLL_DEFAULT_MS,
        gt=0,
        le=LONGEST_MS,
        description=f"Milliseconds between two reads; {POLL_DEFAULT_MS} by default, never less than {POLL_FLOOR_MS} "
        "(the floor), at most a year.",
    )
    ignore: list[IgnoredPointer] = Field(default_factory=list)
    """JSON Pointers (RFC 6901; `*` matches any array index or object key) whose values are left out of the
    hash: fields the upstream recomputes on every read. The body must then be JSON. A read still returns them."""

    @property
    def effective_interval_ms(self) -> int:
        return effective_interval_ms(self.interval_ms)


_PATH_SEGMENT_CHARS = frozenset(string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@")
"""RFC 3986 `pchar` without percent-encodings: what a webhook token may hold."""


class WebhookStrategy(_Model):
    """Fire when `POST /webhooks/resource-updated/{token}` arrives with this (or a previous) token.

    A token travels as is in one URL path segment, so it must be ASCII a path segment holds without
    percent-encoding (RFC 3986 `pchar`: `A-Z a-z 0-9 - . _ ~ ! $ & ' ( ) * + , ; = : @`): `/` would end the
    segment, and a character one sender percent-encodes and another does not (`%`, a space, non-ASCII) would
    never match. Empty: the gateway generates one for the run (`token`) or skips it (`previous_tokens`).
    """

    type: Literal["webhook"]
    """Selects this strategy."""
    token: SecretStr = SecretStr("")
    """The secret path segment a sender presents (`openssl rand -hex 32` makes one); usually `${env.NAME}` so the
    file never holds it. Empty: the gateway generates one for the run and shows it in `GET /admin/v1/webhooks`."""
    previous_tokens: list[SecretStr] = Field(default_factory=list)
    """Replaced tokens still accepted, so senders that have not switched yet are not refused during a rotation."""
    signature: signing.WebhookSignature | None = None
    """Also require the sender's signature (`standard-webhooks`, `github`, `stripe`, `slack`, `gitlab`, `hmac`):
    the token then only routes, and the signing secret is the credential. Unset: the token alone is."""

    @staticmethod
    def token_problem(token: str) -> str | None:
        """Why `token` cannot be presented in the webhook path, or None. Names no character of it: it is a secret."""
        outside = sum(1 for char in token if char not in _PATH_SEGMENT_CHARS)
        if not outside:
            return None
        kind = "non-ASCII " if not token.isascii() else ""
        return (
            "a webhook token must consist only of ASCII characters a URL path segment holds as they are "
            "(A-Z a-z 0-9 - . _ ~ ! $ & ' ( ) * + , ; = : @), since it is sent as is in the path "
            f"/webhooks/resource-updated/{{token}}; this one has {outside} {kind}character(s) outside that set "
            "(`openssl rand -hex 32` makes one that fits)"
        )

    @field_validator("token")
    @classmethod
    def _token_fits_a_path(cls, token: SecretStr) -> SecretStr:
        if problem := cls.token_problem(token.get_secret_value()):
            raise ValueError(problem)
        return token

    @field_validator("previous_tokens")
    @classmethod
    def _previous_tokens_fit_a_path(cls, tokens: list[SecretStr]) -> list[SecretStr]:
        for i, token in enumerate(tokens):
            if problem := cls.token_problem(token.get_secret_value()):
                raise ValueError(f"entry {i}: {problem}")
        return tokens


class NatsTopicStrategy(_Model):
    """Fire on any message on `subject` (wildcards allowed); the payload is never inspected."""

    type: Literal["nats_topic"]
    """Selects this strategy."""
    subject: str = Field(min_length=1)
    """The NATS subject to subscribe to; `*` and `>` wildcards are allowed."""
    url: SecretStr | None = None
    """The NATS server (`nats://host:port`, may hold credentials, so secret); unset: `gateway.nats.url`."""


class PostgresListenNotifyStrategy(_Model):
    """Fire on any NOTIFY on `channel`, over one dedicated connection per watch."""

    type: Literal["postgres_listen_notify"]
    """Selects this strategy."""
    url: SecretStr
    """The PostgreSQL connection URL (`postgresql://…`); a secret, since it usually holds a password."""
    channel: str = Field(min_length=1, max_length=63)
    """The channel to `LISTEN` on (at most 63 characters, PostgreSQL's identifier limit)."""


class SqlPollingStrategy(_Model):
    """Run a scalar tracking query on a cadence; fire when the value advances."""

    type: Literal["sql_polling"]
    """Selects this strategy."""
    url: SecretStr
    """The database connection URL (`postgresql://…`); a secret, since it usually holds a password."""
    query: str = Field(min_length=1)
    """A query returning one scalar that advances when the resource changes, such as `select max(updated_at) from
    reports`."""
    interval_ms: int = Field(
        default=POLL_DEFAULT_MS,
        gt=0,
        le=LONGEST_MS,
        description=f"Milliseconds between two runs of the query; {POLL_DEFAULT_MS} by default, never less than "
        f"{POLL_FLOOR_MS}, at most a year.",
    )
    timeout_ms: int = Field(default=30_000, gt=0, le=LONGEST_READ_MS)
    """How long one run of the query may take. A run that takes longer is abandoned and its connection closed, as
    a server that stops answering looks exactly like that; the next run opens a new one."""

    @property
    def effective_interval_ms(self) -> int:
        return effective_interval_ms(self.interval_ms)


class PluginStrategy(BaseModel):
    """Hand the whole spec to the installed plugin whose `kind()` is `kind`; other fields are the plugin's."""

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)
    type: Literal["plugin"]
    """Selects this strategy."""
    kind: str = Field(min_length=1)
    """The `kind()` of the installed plugin (entry point group `mcpg.watch_strategies`) that runs this watch."""


Strategy = Annotated[
    PollStrategy
    | WebhookStrategy
    | NatsTopicStrategy
    | PostgresListenNotifyStrategy
    | SqlPollingStrategy
    | PluginStrategy,
    Field(discriminator="type"),
]
STRATEGY_TYPES = ("poll", "webhook", "nats_topic", "postgres_listen_notify", "sql_polling", "plugin")


SUBJECT_ID = "subject_id"
"""The template variable (or the resource field) that names the person a per-person resource belongs to."""


class NotificationFilter(_Model):
    """Who among a URI's subscribers is told when it fires. Not an access control: see the README.

    `all`: every subscriber. `subject_id`: only the subscriber whose principal_id is the resource's subject (the
    `{subject_id}` template variable of the concrete URI, or the resource's `subject_id` field). `expression`: a
    CEL expression over `subscriber.*` and `event.uri` that must be true.
    """

    scope: FilterScope = "all"
    """Who is told: `all` subscribers (the default), only the resource's subject (`subject_id`), or those for whom
    `expression` is true."""
    expression: str | None = None
    """A CEL expression over `subscriber.*` and `event.uri`; required with scope `expression`, refused otherwise."""

    @model_validator(mode="after")
    def _expression_matches_scope(self) -> NotificationFilter:
        if self.scope == "expression" and not self.expression:
            raise ValueError("scope 'expression' needs an 'expression'")
        if self.scope != "expression" and self.expression is not None:
            raise ValueError(f"'expression' is only read when scope is 'expression' (scope is {self.scope!r})")
        return self


class WatchConfig(_Model):
    """How the gateway learns that a resource changed, and whom it tells."""

    strategy: Strategy = Field(default_factory=PollStrategy)
    """What tells the gateway the resource changed, selected by `type`; a poll every 60 s by default."""
    notification_filter: NotificationFilter = Field(default_factory=NotificationFilter)
    """Which of the resource's subscribers are told when it fires; all of them by default."""


def _filter_scope(watch: WatchConfig | None) -> str:
    return watch.notification_filter.scope if watch is not None else "all"


class _Entry(_Model):
    """What a resource and a resource template share."""

    name: str = Field(min_length=1)
    """The MCP name clients see in `resources/list` (or `resources/templates/list`); unique in the gateway."""
    description: str = ""
    """What the resource is, shown to clients as its MCP description; empty by default."""
    mime_type: str | None = None
    """The MIME type reads are served as (e.g. `application/json`); unset, the upstream's Content-Type is used."""
    backend: Backend
    """Where a read goes: every `resources/read`, and every poll, is one request through this binding."""
    watch: WatchConfig | None = None
    """Makes the resource subscribable and says how changes are noticed; without it, clients can read but not
    subscribe."""
    read_policy: str | None = Field(default=None, min_length=1)
    """CEL over `subscriber.*` and `resource.*` (a template's variables as `resource.variables.<name>`); true
    allows read, subscribe and listen. Unset: any authenticated caller."""


def _braces(names: Sequence[str]) -> str:
    """Variable names as a message shows them, the way they are written: `{a}, {b}` (or `none`)."""
    return ", ".join("{" + name + "}" for name in names) or "none"


def _backend_url_error(url: str, message: str) -> ValidationError:
    """A problem an entry's validator finds in `backend.url`. Raised as a ValidationError located at that field
    (pydantic keeps the location, under the entry's own), so the problem names `...backend.url`, not the entry."""
    error = InitErrorDetails(type="value_error", loc=("backend", "url"), input=url, ctx={"error": ValueError(message)})
    return ValidationError.from_exception_data("backend", [error])


class ResourceConfig(_Entry):
    """One MCP resource: a single URI, read through its backend."""

    uri: str = Field(min_length=1)
    """The resource's URI as clients ask for it, spelled canonically (RFC 3986), e.g. `drive://folder/reports`."""
    subject_id: str | None = Field(default=None, min_length=1)
    """The principal this resource is about: what `scope: subject_id` and `resource.subject_id` compare with."""

    @field_validator("uri")
    @classmethod
    def _servable_as_written(cls, value: str) -> str:
        # Clients must be able to ask for the URI exactly as configured: the gateway serves canonical URIs only.
        try:
            uris.check(value)
        except uris.UriError as e:
            raise ValueError(f"{e}; clients can only ask for a canonical URI, so write it that way") from None
        return value

    @model_validator(mode="after")
    def _backend_url_has_no_variables(self) -> ResourceConfig:
        # Nothing would substitute a `{name}` here: the gateway would send the braces to the upstream as they are.
        names = templates.undefined(self.backend.url, defined=())
        if names:
            raise _backend_url_error(
                self.backend.url,
                f"names {_braces(names)}, but a resource has no variables (a resource "
                "template's uri_template defines them); the gateway would request the braces literally, so "
                "remove them or make this a resource template",
            )
        return self

    @model_validator(mode="after")
    def _subject_scope_needs_a_subject(self) -> ResourceConfig:
        if _filter_scope(self.watch) == SUBJECT_ID and self.subject_id is None:
            raise ValueError(
                "notification_filter scope 'subject_id' on a resource needs a 'subject_id' field naming "
                "the principal it belongs to"
            )
        return self


class ResourceTemplateConfig(_Entry):
    """An MCP resource template: many URIs, one per value of its `{variables}`, read through one backend."""

    uri_template: str = Field(min_length=1)
    """The template, e.g. `mail://inbox/{subject_id}`; each `{name}` matches one path segment and fills the
    same `{name}` in the backend's url."""

    @property
    def has_subject(self) -> bool:
        return "{" + SUBJECT_ID + "}" in self.uri_template

    @field_validator("uri_template")
    @classmethod
    def _each_variable_once(cls, value: str) -> str:
        # A concrete URI gives a variable one value from one place; `templates.parse` relies on this too.
        names = templates.repeated(value)
        if names:
            raise ValueError(
                f"repeats {_braces(names)}: each variable names one part of a concrete URI, so give every "
                "occurrence its own name"
            )
        return value

    @field_validator("uri_template")
    @classmethod
    def _no_adjacent_variables(cls, value: str) -> str:
        # `{a}{b}` could split a value anywhere: `templates.parse` needs text between two variables.
        pairs = templates.adjacent(value)
        if pairs:
            a, b = pairs[0]
            raise ValueError(
                f"puts {{{b}}} right after {{{a}}}: nothing in a URI would say where one value ends, so put "
                "literal text (such as '-' or '/') between them"
            )
        return value

    @field_validator("uri_template")
    @classmethod
    def _servable_uris(cls, value: str) -> str:
        try:
            uris.check_template(value, templates.literals(value))
        except uris.UriError as e:
            raise ValueError(f"{e}; clients can only ask for canonical URIs, so write it that way") from None
        return value

    @model_validator(mode="after")
    def _backend_url_uses_only_template_variables(self) -> ResourceTemplateConfig:
        # `reader.render_url` substitutes only the template's variables; any other `{name}` would reach the upstream.
        defined = templates.variables(self.uri_template)
        names = templates.undefined(self.backend.url, defined)
        if names:
            raise _backend_url_error(
                self.backend.url,
                f"names {_braces(names)}, which uri_template does not define (its variables: {_braces(defined)}); "
                "the gateway would request the braces literally, so use a defined variable or remove them",
            )
        return self

    @model_validator(mode="after")
    def _subject_scope_needs_the_variable(self) -> ResourceTemplateConfig:
        if _filter_scope(self.watch) == SUBJECT_ID and not self.has_subject:
            raise ValueError(
                "notification_filter scope 'subject_id' on a resource template needs a '{subject_id}' "
                "variable in uri_template: its value in the concrete URI is the subject"
            )
        return self

    @model_validator(mode="after")
    def _no_webhook_on_templates(self) -> ResourceTemplateConfig:
        # One token maps to one concrete URI; a template names many, and there is no broadcast token.
        if self.watch is not None and isinstance(self.watch.strategy, WebhookStrategy):
            raise ValueError(
                "a webhook token selects exactly one URI, so a resource template cannot use the webhook "
                "strategy; declare each concrete URI as a resource with its own token"
            )
        return self


Entry = ResourceConfig | ResourceTemplateConfig
"""What a watch can be attached to: a resource or a resource template."""


class ToolConfig(BaseModel):
    """Tools are accepted for shape compatibility and not served: this gateway only watches resources."""

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)
    name: str = Field(min_length=1)
    """The tool's name; other fields are accepted as they are and ignored."""

    @model_validator(mode="before")
    @classmethod
    def _no_watch_on_tools(cls, data: Any) -> Any:
        if isinstance(data, dict) and "watch" in data:
            raise ValueError(
                "tools do not take a watch block: there is nothing to subscribe to; "
                "put watch on a resource or a resource template"
            )
        return data


class Capabilities(_Model):
    """What the gateway serves over MCP."""

    resources: list[ResourceConfig] = Field(default_factory=list)
    """Resources with one URI each; none by default."""
    resource_templates: list[ResourceTemplateConfig] = Field(default_factory=list)
    """Resource templates, each standing for many URIs; none by default."""
    tools: list[ToolConfig] = Field(default_factory=list)
    """Accepted so a configuration shared with a tool server loads; never served."""


def entries_by_kind(caps: Capabilities) -> tuple[tuple[str, Sequence[Entry]], ...]:
    return (("resources", caps.resources), ("resource_templates", caps.resource_templates))


class McpConfig(_Model):
    """The MCP side: what clients can list, read and subscribe to."""

    capabilities: Capabilities = Field(default_factory=Capabilities)
    """The resources, resource templates and tools; empty by default."""


class ServerConfig(_Model):
    """The public HTTP server: /mcp, the webhook route and the server card."""

    allowed_origins: list[str] = Field(default_factory=list)
    """Origins a browser may call /mcp and the webhook route from. A request with no Origin always passes. A
    gateway bound to a loopback address (`--host 127.0.0.1`, `::1`, `localhost`) also accepts http(s) origins on
    localhost, 127.0.0.1 and [::1], any port: only local processes reach it there."""
    max_webhook_body_bytes: int = Field(default=65_536, ge=0)
    """The largest webhook request body accepted, in bytes (64 KiB by default); a larger one is answered 413
    without being read. The body is otherwise ignored."""
    session_idle_timeout_s: float = Field(default=1800, gt=0, le=LONGEST_S)
    """Seconds after which a stateful MCP session with no request is closed, ending its subscriptions (30 min by
    default, at most a year)."""
    server_card: bool = True
    """Serve the server card (no authentication, no secrets in it) at `GET /mcp/server-card`, with
    `/.well-known/ai-catalog.json` pointing at it, and at the older `/.well-known/mcp/server-card.json`."""


class LimitsConfig(_Model):
    """How much of the gateway one caller, and all callers together, may hold (`fanout/limits.py`, `connections.py`).

    A watch a principal holds is a distinct URI it is subscribed to, across its sessions and listen streams.
    The per-principal limits protect the other principals; the totals protect the process and its upstreams.
    """

    watches_per_principal: int = Field(default=10, ge=1)
    """Distinct URIs one principal may watch at once; one more is refused."""
    watches_total: int = Field(default=512, ge=1)
    """Distinct URIs watched in the whole gateway at once."""
    listen_streams_per_principal: int = Field(default=64, ge=1)
    """Open `subscriptions/listen` streams one principal may hold."""
    listen_streams_total: int = Field(default=512, ge=1)
    """Open `subscriptions/listen` streams in the whole gateway."""
    sessions_per_principal: int = Field(default=128, ge=1)
    """Stateful MCP sessions one principal may hold."""
    sessions_total: int = Field(default=10_000, ge=1)
    """Stateful MCP sessions in the whole gateway."""
    connections: int = Field(default=4096, ge=16)
    """Open TCP connections per port (public and admin each). At the cap the connection that has waited on its
    client longest (idle: no request in flight; or its response write blocked) is closed to make room; with none
    waiting the new one is closed. Lowered to fit the process's open files limit; when both ports do not fit,
    the admin port keeps 256 and the public port gets the rest."""
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    """How long a connection may take to send a request's headers (also the wait for the next request on a
    kept-alive connection)."""
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """How long a request may take to send its body, once its headers are in."""
    write_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """How long a response write may stay blocked because the client reads nothing (the connection's buffers are
    full) before the connection is closed; also how long a closing connection may hold bytes its client never took."""
    upstream_connections: int = Field(default=32, ge=1)
    """Connections the gateway opens to one upstream origin (scheme, host, port) at a time. A read that cannot get
    one within its backend's `timeout_ms` fails saying so; one slow upstream never holds another's connections."""

    @model_validator(mode="after")
    def _per_principal_within_total(self) -> LimitsConfig:
        for each, total in (
            ("watches_per_principal", "watches_total"),
            ("listen_streams_per_principal", "listen_streams_total"),
            ("sessions_per_principal", "sessions_total"),
        ):
            if getattr(self, each) > getattr(self, total):
                raise ValueError(f"{each} ({getattr(self, each)}) is more than {total} ({getattr(self, total)})")
        return self


class SubscriptionsConfig(_Model):
    """A subscription's lease and lifetime (`fanout/lease.py`)."""

    idle_after_s: float = Field(default=1800, gt=0, le=LONGEST_S)
    """With no request on the subscribing session for this long (seconds, at most a year), its pull watches slow
    down."""
    slow_interval_ms: int = Field(default=600_000, ge=POLL_FLOOR_MS, le=LONGEST_MS)
    """The cadence of a slowed pull watch (never faster than its own interval; at most a year)."""
    lifetime_s: float = Field(default=86_400, gt=0, le=LONGEST_S)
    """Every watch ends this long after it began (seconds, at most a year), renewals included; the client
    subscribes again."""


class NatsConfig(_Model):
    """The NATS server `nats_topic` watches use unless they name their own."""

    url: SecretStr | None = None
    """Default server for nats_topic watches that name none."""


class LivenessConfig(_Model):
    """How the gateway tells a dead connection from a quiet one (`liveness.py`): a connection that stopped without
    closing (a partition, an idle timeout in between, a frozen server) is noticed within a bound and then handled
    as a closed one. The LISTEN connections of postgres_listen_notify make a round trip every `interval_s`, which
    must answer within `timeout_s`; the NATS connections (nats_topic and the bus) send a PING every `interval_s`,
    and one still unanswered at the next is a dead connection."""

    interval_s: float = Field(default=10.0, ge=0.5, le=300)
    """Seconds between two round trips on an idle event-source connection."""
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    """Seconds a round trip on a PostgreSQL LISTEN connection may take before the connection counts as dead."""


class BusConfig(_Model):
    """Scale-out: every gateway process of one deployment shares this NATS server (JetStream on). `bus.py` uses it.

    Fires travel on `<subject_prefix>.fire.*`; pull-watch ownership leases and last states live in the key-value
    buckets `<bucket>-owners` (entries expire after `lease_ttl_s`) and `<bucket>-state`. Without a bus section
    a gateway runs alone.
    """

    url: str = Field(min_length=1)
    """`nats://host:port` or `tls://host:port`, with no credentials in it: those go in `user` and `password`."""
    user: str | None = Field(default=None, min_length=1)
    """The bus user name; unset, the gateway connects without credentials."""
    password: SecretStr | None = None
    """Usually `${env.NAME}`, so the rendered configuration never holds it."""
    subject_prefix: str = Field(default="mcpg", pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
    """The first tokens of every subject the gateways use (`mcpg` by default); distinct per deployment sharing
    one server."""
    bucket: str = Field(default="mcpg", pattern=r"^[A-Za-z0-9_-]+$", max_length=64)
    """The prefix of the two JetStream key-value buckets (`mcpg` by default); distinct per deployment."""
    lease_ttl_s: float = Field(default=10.0, ge=1, le=300)
    """How long a pull watch's owner may be silent before another gateway takes the watch over."""
    instance: str | None = Field(default=None, min_length=1)
    """This process's name on the bus; default: `POD_NAME`, else host and process id."""

    @field_validator("url")
    @classmethod
    def _no_credentials_in_url(cls, value: str) -> str:
        # Never echo the value: a URL given here by mistake may carry a password.
        scheme, sep, rest = value.partition("://")
        if not sep or scheme not in ("nats", "tls"):
            raise ValueError("expected a nats:// or tls:// URL")
        if "@" in rest.split("/", 1)[0]:
            raise ValueError("must not carry credentials: set user and password (password as ${env.NAME})")
        return value

    @model_validator(mode="after")
    def _password_needs_user(self) -> BusConfig:
        if self.password is not None and self.user is None:
            raise ValueError("password: set user as well")
        return self


class _PrincipalFields(_Model):
    """What policies and filters see of a principal, as `subscriber.<field>`."""

    trust_level: str = ""
    """A label policies may compare (`subscriber.trust_level`); empty by default."""
    roles: list[str] = Field(default_factory=list)
    """Role names, as `subscriber.roles`; none by default."""
    groups: list[str] = Field(default_factory=list)
    """Group names, as `subscriber.groups`; none by default."""
    scopes: list[str] = Field(default_factory=list)
    """OAuth-style scopes, as `subscriber.scopes`; none by default."""
    attributes: dict[str, str] = Field(default_factory=dict)
    """Any other string attributes, as `subscriber.attributes`; none by default."""


class PrincipalConfig(_PrincipalFields):
    """A client identity. Only the SHA-256 (hex) of its bearer token is configured, never the token."""

    principal_id: str = Field(min_length=1)
    """The principal's name: `subscriber.principal_id`, and what `scope: subject_id` compares; unique."""
    token_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    """The SHA-256 of the principal's bearer token, 64 hex digits (`printf %s "$TOKEN" | sha256sum`)."""

    @field_validator("token_sha256")
    @classmethod
    def _lowercase(cls, value: str) -> str:
        return value.lower()


class AnonymousConfig(_PrincipalFields):
    """A request with no Authorization header acts as this principal, only when `enabled` is true."""

    enabled: bool = False
    """Let requests without a bearer token in, as this principal; off by default (they get 401)."""
    principal_id: str = Field(default="anonymous", min_length=1)
    """The anonymous principal's name (`anonymous` by default)."""


class AuthConfig(_Model):
    """Who may use /mcp. No principals and anonymous disabled (the default) refuses every client with 401."""

    anonymous: AnonymousConfig = Field(default_factory=AnonymousConfig)
    """Whether, and as whom, requests without a bearer token are served; disabled by default."""
    principals: list[PrincipalConfig] = Field(default_factory=list)
    """The callers that present a bearer token; none by default."""

    @model_validator(mode="after")
    def _unique(self) -> AuthConfig:
        ids: dict[str, str] = {self.anonymous.principal_id: "anonymous"} if self.anonymous.enabled else {}
        digests: dict[str, int] = {}
        for i, p in enumerate(self.principals):
            if p.principal_id in ids:
                raise ValueError(
                    f"principals[{i}].principal_id: {p.principal_id!r} is already used by {ids[p.principal_id]}"
                )
            if p.token_sha256 in digests:
                raise ValueError(
                    f"principals[{i}].token_sha256: the same token digest as principals[{digests[p.token_sha256]}]"
                )
            ids[p.principal_id] = f"principals[{i}]"
            digests[p.token_sha256] = i
        return self


class GatewaySection(_Model):
    """The gateway process itself: its server, identities, limits and scale-out."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    """The public HTTP server's settings."""
    nats: NatsConfig = Field(default_factory=NatsConfig)
    """The default NATS server for `nats_topic` watches."""
    auth: AuthConfig = Field(default_factory=AuthConfig)
    """Who may use /mcp; nobody by default."""
    bus: BusConfig | None = None
    """Set to run as one of N gateways sharing a NATS bus; unset, the gateway runs alone."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    """How much one caller, and all callers, may hold."""
    subscriptions: SubscriptionsConfig = Field(default_factory=SubscriptionsConfig)
    """A subscription's lease and lifetime."""
    liveness: LivenessConfig = Field(default_factory=LivenessConfig)
    """How soon a connection to an event source (or the bus) that stopped answering is noticed."""


class GatewayConfig(_Model):
    """A whole configuration. Rules that relate entries to each other (unique names and URIs, a NATS server for
    every nats_topic watch) and the CEL are checked by `check.py`, so each problem can name its own field."""

    mcp: McpConfig = Field(default_factory=McpConfig)
    """What the gateway serves over MCP."""
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    """How the gateway process runs."""
