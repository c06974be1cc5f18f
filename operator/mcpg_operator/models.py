"""Pydantic mirrors of the CRDs in crds/ (camelCase on the wire, snake_case here).

The API server enforces the same rules first (schema + CEL); these models are what the operator trusts, and a
test proves every example manifest passes both. Anything the API server cannot know (a referenced Secret that
does not exist) is the reconciler's business, not the model's. Each field's docstring is its description in the
CRD and in docs/reference.md (`hack/reference.py` copies it there); a field that is the same thing as a gateway
configuration field takes that field's description (`described_as`), so the text is written once.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from mcpg_gateway.contract import config

GROUP, VERSION = "mcpg.dev", "v1alpha1"

# The API server's own rules for what these fields name, as patterns in the CRDs (tests/unit/operator/test_api.py
# checks that every reference there carries exactly these). A name the API server would refuse must be refused
# here too: the operator writes the Secret a WebhookToken names, and a refused write would fail the namespace's
# every reconcile instead of this one object.
NAME_MAX = 253
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (DNS-1123 subdomain): what a Secret or a WebhookToken may be called."""
DATA_KEY_PATTERN = r"^([-_a-zA-Z0-9]|\.[-_a-zA-Z0-9])[-._a-zA-Z0-9]*$"
"""A Secret data key: `[-._a-zA-Z0-9]+`, and neither `.` nor `..` nor anything starting with `..`."""


def _matching(pattern: str, what: str) -> Callable[[str], str]:
    """A validator: the whole value matches `pattern` and has at most NAME_MAX characters, or `what` is said."""

    def check(value: str) -> str:
        # fullmatch, as the API server's RE2 does: Python's `$` alone would let a trailing newline through.
        if len(value) > NAME_MAX or not re.fullmatch(pattern, value):
            raise ValueError(f"must be {what}")
        return value

    return check


ObjectName = Annotated[
    str,
    AfterValidator(
        _matching(
            OBJECT_NAME_PATTERN,
            f"a Kubernetes object name: at most {NAME_MAX} lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit",
        )
    ),
]
DataKey = Annotated[
    str,
    AfterValidator(
        _matching(
            DATA_KEY_PATTERN,
            f"a Secret key: at most {NAME_MAX} letters, digits, '-', '_' and '.', and not '.', '..' or starting "
            "with '..'",
        )
    ),
]


def described_as(model: type[BaseModel], field: str | None = None, *, then: str = "") -> str:
    """The gateway contract's description of `model.field` (of `model` itself without a field), then `then`.

    For a CRD field that is the same thing as a gateway configuration field: the text lives in the contract, once.
    """
    text = model.model_fields[field].description if field else inspect.getdoc(model)
    if not text:  # fails at import: a contract field lost the docstring this model shares
        raise LookupError(f"{model.__name__}.{field or ''} has no description to share")
    return " ".join(f"{text} {then}".split())


class _Spec(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        # A field's docstring is its description: `hack/reference.py` copies it into the CRD and the reference.
        use_attribute_docstrings=True,
    )


class SecretKeyRef(_Spec):
    """A key of a Secret in the same namespace."""

    name: ObjectName
    """The Secret's name."""
    key: DataKey
    """The key in the Secret's data whose value is used."""


class Header(_Spec):
    """A request header whose value comes from a Secret."""

    name: str = Field(min_length=1, examples=["Authorization"])
    """The header's name."""
    secret_key_ref: SecretKeyRef
    """The Secret key that holds the header's whole value (e.g. `Bearer …`); the value reaches only the gateway's
    configuration Secret, never a status or a log."""


_HTTP = config.HttpBackend


class HttpBackendSpec(_Spec):
    """Reads the resource with one HTTP request."""

    url: str = Field(
        min_length=1,
        description=described_as(_HTTP, "url"),
        examples=["https://drive.example.com/api/folders/reports", "https://mail.example.com/inbox/{subject_id}"],
    )
    method: Literal["get", "post", "put", "patch", "delete", "head"] = Field(
        default="get", description=described_as(_HTTP, "method")
    )
    headers: list[Header] = Field(
        default_factory=list,
        description=described_as(
            _HTTP, "headers", then="Each value comes from a Secret in this namespace, never inline."
        ),
    )
    body: str | None = Field(default=None, description=described_as(_HTTP, "body"))
    expected_status_codes: list[int] = Field(
        default_factory=lambda: [200], description=described_as(_HTTP, "expected_status_codes"), examples=[[200, 304]]
    )
    require_json_response: bool = Field(default=False, description=described_as(_HTTP, "require_json_response"))
    timeout_ms: int = Field(
        default=10_000, gt=0, le=300_000, description=described_as(_HTTP, "timeout_ms", then="In milliseconds.")
    )
    # The two below have no default here nor in the CRD: unset, they are not rendered and the gateway's defaults
    # (the contract's, in one place) apply, so an operator upgrade renders what it rendered before and rolls no gateway.
    max_response_bytes: int | None = Field(
        default=None, ge=1, description=described_as(_HTTP, "max_response_bytes", then="Unset: the gateway's default.")
    )
    follow_redirects: bool | None = Field(
        default=None, description=described_as(_HTTP, "follow_redirects", then="Unset: the gateway's default (off).")
    )


class BackendSpec(_Spec):
    """Where reads of the resource go."""

    http: HttpBackendSpec
    """An HTTP upstream, the only kind of backend."""


class PollSpec(_Spec):
    """Re-read through the backend on a cadence; fire when the SHA-256 of the response moves."""

    interval_ms: int = Field(
        default=60_000, gt=0, le=config.LONGEST_MS, description=described_as(config.PollStrategy, "interval_ms")
    )
    ignore: list[str] = Field(
        default_factory=list,
        description=described_as(config.PollStrategy, "ignore"),
        examples=[["/duration", "/jobs/*/updated_at"]],
    )


class LocalRef(_Spec):
    """An object in the same namespace."""

    name: ObjectName
    """The object's name."""


class WebhookSpec(_Spec):
    """Fire when a sender posts to `/webhooks/resource-updated/{token}` with the token of a WebhookToken."""

    token_ref: LocalRef
    """The WebhookToken in this namespace whose token (and tokens still retiring) the sender presents."""


class NatsTopicSpec(_Spec):
    """Fire on any message on a NATS subject; the payload is never inspected."""

    subject: str = Field(
        min_length=1, description=described_as(config.NatsTopicStrategy, "subject"), examples=["reports.updated"]
    )
    url_secret_ref: SecretKeyRef | None = None
    """The Secret key holding the server URL (it may hold credentials); unset, the operator's default NATS server."""


class PostgresListenNotifySpec(_Spec):
    """Fire on any PostgreSQL NOTIFY on a channel, over one dedicated connection per watch."""

    url_secret_ref: SecretKeyRef
    """The Secret key holding the PostgreSQL connection URL (`postgresql://…`)."""
    channel: str = Field(
        min_length=1,
        max_length=63,
        description=described_as(config.PostgresListenNotifyStrategy, "channel"),
        examples=["reports_changed"],
    )


class SqlPollingSpec(_Spec):
    """Run a scalar tracking query on a cadence; fire when the value advances."""

    url_secret_ref: SecretKeyRef
    """The Secret key holding the database connection URL (`postgresql://…`)."""
    query: str = Field(
        min_length=1,
        description=described_as(config.SqlPollingStrategy, "query"),
        examples=["select max(updated_at) from reports"],
    )
    interval_ms: int = Field(
        default=60_000, gt=0, le=config.LONGEST_MS, description=described_as(config.SqlPollingStrategy, "interval_ms")
    )
    timeout_ms: int = Field(
        default=30_000,
        gt=0,
        le=300_000,
        description=described_as(config.SqlPollingStrategy, "timeout_ms", then="In milliseconds."),
    )


class PluginSpec(_Spec):
    """Hand the watch to an installed strategy plugin."""

    kind: str = Field(min_length=1, description=described_as(config.PluginStrategy, "kind"))
    config: dict[str, Any] = Field(default_factory=dict)
    """Handed to the plugin as the rest of its strategy spec; the plugin defines and checks it."""


class NotificationFilterSpec(_Spec):
    """Who among a URI's subscribers is told when it fires. Not an access control: that is `readPolicy`."""

    scope: Literal["all", "subject_id", "expression"] = Field(
        default="all", description=described_as(config.NotificationFilter, "scope")
    )
    expression: str | None = Field(
        default=None,
        description=described_as(config.NotificationFilter, "expression"),
        examples=['"ops" in subscriber.groups'],
    )


STRATEGY_FIELDS = ("poll", "webhook", "nats_topic", "postgres_listen_notify", "sql_polling", "plugin")


class WatchSpec(_Spec):
    """How the gateway learns that the resource changed (at most one strategy), and whom it tells. Omitted, or
    with no strategy set: a poll every 60 s."""

    poll: PollSpec | None = None
    """Poll the backend on a cadence (what a watch without a strategy does, every 60 s)."""
    webhook: WebhookSpec | None = None
    """Fire on a webhook request carrying a WebhookToken's token; for a uri only, not a uriTemplate."""
    nats_topic: NatsTopicSpec | None = None
    """Fire on messages on a NATS subject."""
    postgres_listen_notify: PostgresListenNotifySpec | None = None
    """Fire on PostgreSQL NOTIFY on a channel."""
    sql_polling: SqlPollingSpec | None = None
    """Fire when a SQL tracking query's value advances."""
    plugin: PluginSpec | None = None
    """Hand the watch to an installed strategy plugin."""
    notification_filter: NotificationFilterSpec | None = Field(
        default=None, description=described_as(config.WatchConfig, "notification_filter")
    )

    @model_validator(mode="after")
    def _at_most_one_strategy(self) -> WatchSpec:
        chosen = [f for f in STRATEGY_FIELDS if getattr(self, f) is not None]
        if len(chosen) > 1:
            raise ValueError(f"set at most one strategy, got {', '.join(to_camel(f) for f in chosen)}")
        return self

    @property
    def strategy_type(self) -> str:
        """The gateway's `type` for this watch; no strategy means poll."""
        return next((f for f in STRATEGY_FIELDS if getattr(self, f) is not None), "poll")


_RESOURCE = config.ResourceConfig


class ResourceWatchSpec(_Spec):
    """The resource (or resource template) to serve, where reads of it go, and how changes to it are noticed."""

    name: str | None = Field(
        default=None,
        description=described_as(_RESOURCE, "name", then="Unset: the ResourceWatch's own name."),
        examples=["reports-folder"],
    )
    description: str = Field(default="", description=described_as(_RESOURCE, "description"))
    uri: str | None = Field(
        default=None,
        description=described_as(_RESOURCE, "uri", then="Set exactly one of uri and uriTemplate."),
        examples=["drive://folder/reports"],
    )
    uri_template: str | None = Field(
        default=None,
        description=described_as(config.ResourceTemplateConfig, "uri_template"),
        examples=["mail://inbox/{subject_id}"],
    )
    mime_type: str | None = Field(
        default=None, description=described_as(_RESOURCE, "mime_type"), examples=["application/json"]
    )
    read_policy: str | None = Field(
        default=None,
        description=described_as(_RESOURCE, "read_policy"),
        examples=['"finance" in subscriber.groups'],
    )
    subject_id: str | None = Field(
        default=None, description=described_as(_RESOURCE, "subject_id", then="For a uri only."), examples=["alice"]
    )
    backend: BackendSpec = Field(description=described_as(_RESOURCE, "backend"))
    watch: WatchSpec | None = None
    """How changes are noticed and whom to tell; omitted, a poll every 60 s."""

    @model_validator(mode="after")
    def _one_uri_form(self) -> ResourceWatchSpec:
        if (self.uri is None) == (self.uri_template is None):
            raise ValueError("set exactly one of uri (one resource) or uriTemplate (a resource template)")
        if self.uri_template is not None and self.subject_id is not None:
            raise ValueError("subjectId is for a uri; a uriTemplate takes its subject from its {subject_id} variable")
        if self.uri_template is not None and self.watch is not None and self.watch.webhook is not None:
            raise ValueError(
                "a webhook token selects exactly one URI, so a uriTemplate cannot use the webhook strategy"
            )
        return self

    @property
    def address(self) -> str:
        return self.uri if self.uri is not None else str(self.uri_template)


class WebhookTokenSecretRef(_Spec):
    """The Secret in this namespace that holds the token."""

    name: ObjectName = Field(examples=["reports-webhook"])
    """The Secret's name. Edit its token to rotate."""
    key: DataKey = "token"
    """The key in the Secret's data holding the token (`token` by default)."""


class WebhookTokenSpec(_Spec):
    """Where the token is kept, and how a replaced one is retired."""

    secret_ref: WebhookTokenSecretRef
    """The Secret that holds the current token; the token never appears in this object or its status."""
    generate: bool = False
    """When the Secret does not exist, create it (owned by this WebhookToken) with a random 256-bit token. Off by
    default: the WebhookToken waits for the Secret."""
    grace_period_seconds: int = Field(default=0, ge=0, le=2_592_000)
    """Seconds a replaced token stays accepted after the gateway rollout carrying the new one has completed (0 by
    default, at most 30 days), for senders that switch late."""


# --- statuses: what the operator writes (statuses.py builds them as dicts; a unit test validates those here) ---------


class Condition(_Spec):
    """One condition (`metav1.Condition`): `Ready`, `Reconciling`, `Stalled` (present only while true), and the
    kind's own (`TokenAccepted`, `ClientsAuthorized`)."""

    type: str = Field(examples=["Ready"])
    """The condition's type, unique in the list."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str | None = None
    """A CamelCase word saying why, for tools and `kubectl get` (e.g. `Served`, `RollingOut`, `InvalidSpec`)."""
    message: str | None = None
    """The reason in a sentence for a person (at most 1024 characters); never holds a token."""
    observed_generation: int | None = None
    """The metadata.generation this condition was computed from."""
    last_transition_time: str | None = None
    """When status last changed (RFC 3339)."""


class GatewayPort(_Spec):
    """A port of the gateway's Service."""

    name: str = Field(examples=["http"])
    """The port's name: `http` (MCP and webhooks) or `admin` (metrics, health, the admin API)."""
    port: int = Field(examples=[8080])
    """The port number."""


class GatewayAddress(_Spec):
    """Where the namespace's gateway is reached in the cluster."""

    service: str = Field(examples=["mcpg-gateway.shop.svc"])
    """The gateway Service's in-cluster DNS name."""
    url: str = Field(examples=["http://mcpg-gateway.shop.svc:8080/mcp"])
    """The MCP endpoint clients connect to (Streamable HTTP)."""
    ports: list[GatewayPort] = Field(default_factory=list)
    """The Service's ports."""


WEBHOOK_PATH_DESCRIPTION = (
    "The path a webhook sender POSTs to on the gateway's http port; `{token}` is a placeholder for the token, which "
    "is a secret and never appears in a status."
)


class _Status(_Spec):
    observed_generation: int | None = None
    """The metadata.generation the operator last acted on."""
    conditions: list[Condition] = Field(default_factory=list)
    """The latest observations of the object's state; `Ready` says whether it works, and its message why not."""


class ResourceWatchStatus(_Status):
    """What the operator observed: whether the gateway serves the watch, and where clients and senders go."""

    strategy: str | None = Field(default=None, examples=["poll"])
    """The watch strategy in effect (`poll` when none is set)."""
    uri: str | None = Field(default=None, examples=["drive://folder/reports"])
    """The URI (or URI template) served."""
    config_hash: str | None = None
    """The first 16 hex digits of the SHA-256 of this watch's entry in the gateway configuration: it changes when
    this watch's serving does, not when another watch is edited; unset while not served."""
    gateway: GatewayAddress | None = None
    """Where the namespace's gateway is reached; set while the watch is served."""
    webhook_path: str | None = Field(
        default=None, description=WEBHOOK_PATH_DESCRIPTION, examples=["/webhooks/resource-updated/{token}"]
    )
    webhook_token_secret: str | None = Field(default=None, examples=["reports-webhook/token"])
    """`<secret-name>/<key>` of the Secret holding the token senders present; webhook watches only."""


class RetiringToken(_Spec):
    """A replaced token still accepted, shown by digest only."""

    digest: str
    """The first 12 hex digits of the token's SHA-256."""
    replaced_at: str
    """When the token was replaced (RFC 3339)."""
    retire_after: str | None = None
    """When it stops being accepted (RFC 3339): the rollout's completion plus gracePeriodSeconds; unset while the
    rollout carrying the new token is under way."""


class WebhookTokenStatus(_Status):
    """Where the rotation stands: which token is current, which old ones are still accepted, where senders go."""

    phase: Literal["Pending", "Rolling", "Retiring", "Ready", "Unused", "Error"] | None = None
    """`Pending`: no token yet (the Secret is missing). `Rolling`: the gateway is rolling out the current token.
    `Retiring`: accepted everywhere, old tokens still valid. `Ready`: only the current token is accepted. `Unused`:
    no served watch uses this token. `Error`: the spec or the Secret is invalid."""
    current_digest: str | None = None
    """The first 12 hex digits of the current token's SHA-256."""
    current_accepted_at: str | None = None
    """Since when every available gateway pod accepts the current token (RFC 3339); unset during a rollout."""
    retiring_count: int | None = None
    """How many replaced tokens are still accepted."""
    retiring: list[RetiringToken] = Field(default_factory=list)
    """The replaced tokens still accepted."""
    gateway: GatewayAddress | None = None
    """Where the namespace's gateway is reached; set while a served watch uses this token."""
    webhook_path: str | None = Field(
        default=None, description=WEBHOOK_PATH_DESCRIPTION, examples=["/webhooks/resource-updated/{token}"]
    )
