"""Pydantic mirrors of the CRDs in crds/ (camelCase on the wire, snake_case here).

The API server enforces the same rules first (schema + CEL); these models are what the operator trusts, and a
test proves every example manifest passes both. Anything the API server cannot know (a referenced Secret that
does not exist) is the reconciler's business, not the model's. Each field's docstring is its description in the
CRD and in docs/reference.md. These models are the only hand-written form of the CRDs: `hack/reference.py` writes
crds/ from them (`openapi.py`), bounds, defaults, CEL rules (`crd_rules`, `schema_markers.Rule`) and formats
included. A field that is the same thing as a gateway configuration field is declared `mirrored` from it, so its
description, default and bounds are written once, in the contract.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from mcpg_gateway.contract import backend_urls, config, signing
from mcpg_operator import conditions
from mcpg_operator import schema_markers as sm
from mcpg_operator.api_types import NAME_MAX, DataKey, Int32, Int64, ObjectName, Timestamp
from mcpg_operator.mirror import described_as, mirrored

GROUP, VERSION = "mcpg.dev", "v1alpha1"

# Lengths only the CRD bounds (the gateway takes any): what the API server stores at most, per kind of text.
URI_LENGTH, TEXT_LENGTH = 2048, 4096


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

    name: str = Field(min_length=1, max_length=256, examples=["Authorization"])
    """The header's name."""
    secret_key_ref: SecretKeyRef
    """The Secret key that holds the header's whole value (e.g. `Bearer …`); the value reaches only the gateway's
    configuration Secret, never a status or a log."""


_HTTP = config.HttpBackend


def _backend_url(url: str) -> str:
    if problem := backend_urls.problem(url):
        raise ValueError(problem)
    return url


def _method(method: str) -> str:
    if method.lower() not in config.HTTP_METHODS:
        raise ValueError(f"expected one of {', '.join(config.HTTP_METHODS)} (in any case)")
    return method.lower()  # rendered as the gateway configuration spells it


# The API server checks each with the same rule as the gateway (`backend_urls`, `config.HttpMethod`); the CRD says
# it in CEL, since an OpenAPI enum is case-sensitive and a pattern could not say what is wrong.
BackendUrl = Annotated[str, AfterValidator(_backend_url), sm.Rule(backend_urls.CEL_RULE, backend_urls.CEL_MESSAGE)]
METHOD_RULE = f"self.lowerAscii() in {list(config.HTTP_METHODS)}"
METHOD_MESSAGE = f"method must be one of {', '.join(config.HTTP_METHODS)}, in any case"
Method = Annotated[str, AfterValidator(_method), sm.Rule(METHOD_RULE, METHOD_MESSAGE)]


class HttpBackendSpec(_Spec):
    """Reads the resource with one HTTP request."""

    url: BackendUrl = mirrored(
        _HTTP,
        "url",
        max_length=TEXT_LENGTH,
        examples=["https://drive.example.com/api/folders/reports", "https://mail.example.com/inbox/{subject_id}"],
    )
    method: Method = mirrored(_HTTP, "method")
    headers: list[Header] = Field(
        default_factory=list,
        max_length=64,
        description=described_as(
            _HTTP, "headers", then="Each value comes from a Secret in this namespace, never inline."
        ),
    )
    body: str | None = mirrored(_HTTP, "body", max_length=65_536)
    expected_status_codes: list[config.StatusCode] = mirrored(
        _HTTP, "expected_status_codes", max_length=32, examples=[[200, 304]]
    )
    require_json_response: bool = mirrored(_HTTP, "require_json_response")
    timeout_ms: int = mirrored(_HTTP, "timeout_ms", then="In milliseconds.")
    # The two below have no default here nor in the CRD: unset, they are not rendered and the gateway's defaults
    # (the contract's, in one place) apply, so an operator upgrade renders what it rendered before and rolls no gateway.
    max_response_bytes: int | None = mirrored(
        _HTTP, "max_response_bytes", then="Unset: the gateway's default.", default=None
    )
    follow_redirects: bool | None = mirrored(
        _HTTP, "follow_redirects", then="Unset: the gateway's default (off).", default=None
    )


class BackendSpec(_Spec):
    """Where reads of the resource go."""

    http: HttpBackendSpec
    """An HTTP upstream, the only kind of backend."""


class PollSpec(_Spec):
    """Re-read through the backend on a cadence; fire when the SHA-256 of the response moves."""

    interval_ms: int = mirrored(config.PollStrategy, "interval_ms")
    ignore: list[Annotated[str, Field(max_length=1024)]] = mirrored(
        config.PollStrategy, "ignore", max_length=64, examples=[["/duration", "/jobs/*/updated_at"]]
    )


class LocalRef(_Spec):
    """An object in the same namespace."""

    name: ObjectName
    """The object's name."""


_SIGNATURE = signing.WebhookSignature
HEADER_NAME_PATTERN = r"^[-!#$%&'*+.^_`|~0-9A-Za-z]+$"
"""RFC 9110 `tchar`s, as the contract checks a header's name (`signing.HEADER_NAME_CHARS`)."""


class WebhookHmacSpec(_Spec):
    """Where the generic `hmac` scheme finds the signature, and how it is made; for scheme hmac only."""

    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule("has(self.header)", "hmac.header: scheme hmac needs the header that carries the signature"),
    )
    header: Annotated[str, sm.Unlisted()] = Field(
        min_length=1,
        max_length=256,
        pattern=HEADER_NAME_PATTERN,
        examples=["X-Signature"],
        description=described_as(_SIGNATURE, "header"),
    )
    algorithm: Literal["sha256", "sha512"] | None = mirrored(_SIGNATURE, "algorithm")
    encoding: Literal["hex", "base64"] | None = mirrored(_SIGNATURE, "encoding")
    prefix: str | None = mirrored(_SIGNATURE, "prefix", examples=["sha256="])


HMAC_ONLY_MESSAGE = "hmac: only for scheme hmac; every other scheme fixes its header, algorithm and encoding"
HMAC_NEEDED_MESSAGE = "hmac: scheme hmac needs hmac.header, the request header that carries the signature"


class WebhookSignatureSpec(_Spec):
    """Require every delivery to be signed by its sender, with a signing secret a WebhookToken keeps and rotates."""

    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule(
            "has(self.secretRef)",
            "signature needs secretRef naming a WebhookToken in this namespace whose signatureScheme is the scheme",
        ),
        sm.Rule("self.scheme != 'hmac' || has(self.hmac)", HMAC_NEEDED_MESSAGE),
        sm.Rule("self.scheme == 'hmac' || !has(self.hmac)", HMAC_ONLY_MESSAGE),
    )
    scheme: signing.Scheme = mirrored(_SIGNATURE, "scheme")
    secret_ref: Annotated[LocalRef, sm.Unlisted()]
    """The WebhookToken in this namespace that holds the signing secret: its `signatureScheme` must be this scheme.
    Its current secret and those still retiring all verify, so a rotation refuses no delivery. One WebhookToken may
    sign the deliveries of several watches."""
    tolerance_seconds: int = mirrored(_SIGNATURE, "tolerance_s")
    max_body_bytes: int | None = mirrored(
        _SIGNATURE, "max_body_bytes", then="Unset: the gateway's default.", default=None
    )
    hmac: WebhookHmacSpec | None = None
    """Scheme hmac only, and required there: the header that carries the signature, and how it is made."""

    @model_validator(mode="after")
    def _hmac_with_its_scheme(self) -> WebhookSignatureSpec:
        if self.scheme == "hmac" and self.hmac is None:
            raise ValueError(HMAC_NEEDED_MESSAGE)
        if self.scheme != "hmac" and self.hmac is not None:
            raise ValueError(HMAC_ONLY_MESSAGE)
        return self


class WebhookSpec(_Spec):
    """Fire when a sender posts to `/webhooks/resource-updated/{token}` with the token of a WebhookToken (and, with
    `signature`, signs the delivery with a signing secret of another)."""

    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule("has(self.tokenRef)", "a webhook needs tokenRef naming a WebhookToken in this namespace"),
    )
    token_ref: Annotated[LocalRef, sm.Unlisted()]
    """The WebhookToken in this namespace whose token (and tokens still retiring) the sender presents: one without
    `signatureScheme` (a signing secret never travels in a URL path)."""
    signature: WebhookSignatureSpec | None = Field(
        default=None,
        description=described_as(
            config.WebhookStrategy,
            "signature",
            then="With a signature, the token need not be rotated to stay safe: a long-lived token routes, and "
            "the signing secret (a WebhookToken with `signatureScheme`) is the one to rotate.",
        ),
    )


class NatsTopicSpec(_Spec):
    """Fire on any message on a NATS subject; the payload is never inspected."""

    subject: str = mirrored(config.NatsTopicStrategy, "subject", max_length=1024, examples=["reports.updated"])
    url_secret_ref: SecretKeyRef | None = None
    """The Secret key holding the server URL (it may hold credentials); unset, the operator's default NATS server."""


class PostgresListenNotifySpec(_Spec):
    """Fire on any PostgreSQL NOTIFY on a channel, over one dedicated connection per watch."""

    url_secret_ref: SecretKeyRef
    """The Secret key holding the PostgreSQL connection URL (`postgresql://…`)."""
    channel: str = mirrored(config.PostgresListenNotifyStrategy, "channel", examples=["reports_changed"])


class SqlPollingSpec(_Spec):
    """Run a scalar tracking query on a cadence; fire when the value advances."""

    # Required, said in words: the API server's "Required value" would not say what the field is for.
    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule("has(self.query) && size(self.query) > 0", "sqlPolling needs a scalar tracking query"),
        sm.Rule(
            "has(self.urlSecretRef)", "sqlPolling needs urlSecretRef naming the Secret key that holds the database URL"
        ),
    )
    url_secret_ref: Annotated[SecretKeyRef, sm.Unlisted()]
    """The Secret key holding the database connection URL (`postgresql://…`)."""
    query: Annotated[str, sm.Unlisted()] = mirrored(
        config.SqlPollingStrategy, "query", max_length=16_384, examples=["select max(updated_at) from reports"]
    )
    interval_ms: int = mirrored(config.SqlPollingStrategy, "interval_ms")
    timeout_ms: int = mirrored(config.SqlPollingStrategy, "timeout_ms", then="In milliseconds.")


class PluginSpec(_Spec):
    """Hand the watch to an installed strategy plugin."""

    kind: str = mirrored(config.PluginStrategy, "kind", max_length=NAME_MAX)
    config: dict[str, Any] = Field(default_factory=dict)
    """Handed to the plugin as the rest of its strategy spec; the plugin defines and checks it."""


class NotificationFilterSpec(_Spec):
    """Who among a URI's subscribers is told when it fires. Not an access control: that is `readPolicy`."""

    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule(
            "self.scope != 'expression' || (has(self.expression) && size(self.expression) > 0)",
            "scope expression needs an expression",
        ),
    )
    scope: config.FilterScope = mirrored(config.NotificationFilter, "scope")
    expression: str | None = mirrored(
        config.NotificationFilter, "expression", max_length=TEXT_LENGTH, examples=['"ops" in subscriber.groups']
    )


STRATEGY_FIELDS = ("poll", "webhook", "nats_topic", "postgres_listen_notify", "sql_polling", "plugin")


class WatchSpec(_Spec):
    """How the gateway learns that the resource changed (at most one strategy), and whom it tells. Omitted, or
    with no strategy set: a poll every 60 s."""

    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule(
            "[has(self.poll), has(self.webhook), has(self.natsTopic), has(self.postgresListenNotify), "
            "has(self.sqlPolling), has(self.plugin)].filter(x, x).size() <= 1",
            "set at most one strategy: poll, webhook, natsTopic, postgresListenNotify, sqlPolling or plugin",
        ),
    )
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

    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule(
            "has(self.uri) != has(self.uriTemplate)",
            "set exactly one of uri (one resource) or uriTemplate (a resource template)",
        ),
        sm.Rule(
            "!has(self.uriTemplate) || !has(self.watch) || !has(self.watch.webhook)",
            "a webhook token selects exactly one URI, so a uriTemplate cannot use the webhook strategy",
        ),
        sm.Rule(
            "!has(self.uriTemplate) || !has(self.subjectId)",
            "subjectId is for a uri; a uriTemplate takes its subject from its {subject_id} variable",
        ),
    )
    name: str | None = mirrored(
        _RESOURCE,
        "name",
        then="Unset: the ResourceWatch's own name.",
        default=None,
        max_length=NAME_MAX,
        examples=["reports-folder"],
    )
    # No default in the CRD: the API server would store `description: ""` into every object that has none.
    description: Annotated[str, sm.NoDefault()] = mirrored(_RESOURCE, "description", max_length=TEXT_LENGTH)
    uri: str | None = mirrored(
        _RESOURCE,
        "uri",
        then="Set exactly one of uri and uriTemplate.",
        default=None,
        max_length=URI_LENGTH,
        examples=["drive://folder/reports"],
    )
    uri_template: str | None = mirrored(
        config.ResourceTemplateConfig,
        "uri_template",
        default=None,
        max_length=URI_LENGTH,
        examples=["mail://inbox/{subject_id}"],
    )
    mime_type: str | None = mirrored(_RESOURCE, "mime_type", max_length=255, examples=["application/json"])
    read_policy: str | None = mirrored(
        _RESOURCE, "read_policy", max_length=TEXT_LENGTH, examples=['"finance" in subscriber.groups']
    )
    subject_id: str | None = mirrored(
        _RESOURCE, "subject_id", then="For a uri only.", max_length=NAME_MAX, examples=["alice"]
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
    """The Secret in this namespace that holds the token (or the signing secret)."""

    name: ObjectName = Field(examples=["reports-webhook"])
    """The Secret's name. Edit its value to rotate."""
    key: DataKey = "token"
    """The key in the Secret's data holding the value (`token` by default)."""


SCHEME_FIXED = (
    "signatureScheme cannot change: the values this WebhookToken holds (current and retiring) keep the role they "
    "were made for; create another WebhookToken for another role or scheme"
)


class WebhookTokenSpec(_Spec):
    """Where the token (or signing secret) is kept, and how a replaced one is retired."""

    # A transition rule (it reads oldSelf), so the API server checks it on updates only and the model cannot:
    # a routing token turned signing secret (or back) would carry its retiring values into the other role.
    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (
        sm.Rule(
            "has(self.signatureScheme) == has(oldSelf.signatureScheme) && "
            "(!has(self.signatureScheme) || self.signatureScheme == oldSelf.signatureScheme)",
            SCHEME_FIXED,
        ),
    )

    secret_ref: WebhookTokenSecretRef
    """The Secret that holds the current value; it never appears in this object or its status."""
    generate: bool = False
    """When the Secret does not exist, create it (owned by this WebhookToken) with a random value: a 256-bit token,
    or with `signatureScheme` a signing secret in that scheme's format (standard-webhooks: `whsec_` and the base64
    of 32 random bytes; slack: 32 hex digits; the others: 64 hex digits). Off by default: the WebhookToken waits
    for the Secret."""
    grace_period_seconds: int = Field(default=0, ge=0, le=2_592_000)
    """Seconds a replaced value stays accepted after every gateway pod has acknowledged a configuration carrying the
    new one (0 by default, at most 30 days), for senders that switch late."""
    signature_scheme: signing.Scheme | None = Field(
        default=None,
        description="Unset (the default): the Secret holds a routing token, presented in the webhook path "
        "(`tokenRef`). Set: it holds a signing secret for this scheme, which a ResourceWatch's "
        "`watch.webhook.signature.secretRef` names and which never travels in a URL path; its value is checked as "
        f"the scheme requires. {described_as(_SIGNATURE, 'scheme')}",
    )


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
    message: str | None = Field(
        default=None,
        description=f"The reason in a sentence for a person (at most {conditions.MESSAGE_MAX} characters); never "
        "holds a token.",
    )
    observed_generation: Int64 | None = None
    """The metadata.generation this condition was computed from."""
    last_transition_time: Timestamp | None = None
    """When status last changed (RFC 3339)."""


class GatewayPort(_Spec):
    """A port of the gateway's Service."""

    name: str = Field(examples=["http"])
    """The port's name: `http` (MCP and webhooks) or `admin` (metrics, health, the admin API)."""
    port: Int32 = Field(examples=[8080])
    """The port number."""


class GatewayAddress(_Spec):
    """Where the namespace's gateway is reached in the cluster."""

    # Unlisted: a status is the operator's to write, and a partial status patch must never be refused.
    service: Annotated[str, sm.Unlisted()] = Field(examples=["mcpg-gateway.shop.svc"])
    """The gateway Service's in-cluster DNS name."""
    url: Annotated[str, sm.Unlisted()] = Field(examples=["http://mcpg-gateway.shop.svc:8080/mcp"])
    """The MCP endpoint clients connect to (Streamable HTTP)."""
    ports: list[GatewayPort] = Field(default_factory=list)
    """The Service's ports."""


WEBHOOK_PATH_DESCRIPTION = (
    "The path a webhook sender POSTs to on the gateway's http port; `{token}` is a placeholder for the token, which "
    "is a secret and never appears in a status."
)


CONDITIONS = sm.Schema(x_kubernetes_list_type="map", x_kubernetes_list_map_keys=["type"])
"""A list of conditions is a map keyed by type, as `metav1.Condition` lists are: a patch merges by type."""


class _Status(_Spec):
    observed_generation: Int64 | None = None
    """The metadata.generation the operator last acted on."""
    conditions: Annotated[list[Condition], CONDITIONS] = Field(default_factory=list)
    """The latest observations of the object's state; `Ready` says whether it works, and its message why not."""


class ResourceWatchStatus(_Status):
    """What the operator observed: whether the gateway serves the watch, and where clients and senders go."""

    strategy: str | None = Field(default=None, examples=["poll"])
    """The watch strategy in effect (`poll` when none is set)."""
    uri: str | None = Field(default=None, examples=["drive://folder/reports"])
    """The URI (or URI template) served."""
    config_hash: str | None = None
    """The digest of this watch's entry in the gateway configuration (16 hex digits), the one each gateway pod
    acknowledges serving: it changes when this watch's serving does, not when another watch is edited; unset while
    not served."""
    gateway: GatewayAddress | None = None
    """Where the namespace's gateway is reached; set while the watch is served."""
    webhook_path: str | None = Field(
        default=None, description=WEBHOOK_PATH_DESCRIPTION, examples=["/webhooks/resource-updated/{token}"]
    )
    webhook_token_secret: str | None = Field(default=None, examples=["reports-webhook/token"])
    """`<secret-name>/<key>` of the Secret holding the token senders present; webhook watches only."""
    signature_secret: str | None = Field(default=None, examples=["reports-signing/token"])
    """`<secret-name>/<key>` of the Secret holding the secret senders sign with; signed webhook watches only."""


class RetiringToken(_Spec):
    """A replaced token still accepted, shown by digest only."""

    digest: Annotated[str, sm.Unlisted()]
    """The first 12 hex digits of the token's SHA-256."""
    replaced_at: Annotated[Timestamp, sm.Unlisted()]
    """When the token was replaced (RFC 3339)."""
    retire_after: Timestamp | None = None
    """When it is left out of the gateway configuration (RFC 3339): the acceptance of the token that replaced it plus
    gracePeriodSeconds; unset until every gateway pod has acknowledged a configuration carrying that token."""
    removing: bool | None = None
    """True once it is left out of the configuration: listed until every gateway pod serves a configuration without
    it (until then a pod may still accept it)."""


class AcceptedToken(_Spec):
    """The current token, accepted by every gateway pod, and the version of its Secret it was read at."""

    # Unlisted, all: a status is the operator's to write, and a partial status patch must never be refused.
    digest: Annotated[str, sm.Unlisted()]
    """The first 12 hex digits of the token's SHA-256 (as `currentDigest`)."""
    secret_resource_version: str | None = None
    """The token Secret's metadata.resourceVersion it was read at. To wait for a new token after editing the
    Secret: `kubectl wait webhooktoken/NAME --for=jsonpath='{.status.accepted.secretResourceVersion}'=RV`, RV
    being the Secret's resourceVersion after your edit (`kubectl get secret NAME -o
    jsonpath='{.metadata.resourceVersion}'`). A Secret the operator has not read before gets its
    `mcpg.dev/watched=true` label from it, one more version: label a new Secret yourself, or read RV after that."""
    at: Annotated[Timestamp, sm.Unlisted()]
    """When every counted gateway pod first served a configuration carrying it (RFC 3339)."""


class WebhookTokenStatus(_Status):
    """Where the rotation stands: which token (or signing secret) is current, which old ones are still accepted,
    where senders go. A signing secret's status reads as a token's: `currentDigest` is the secret in use, `retiring`
    those still verifying, all by digest only."""

    phase: Literal["Pending", "Rolling", "Retiring", "Ready", "Unused", "Error"] | None = None
    """`Pending`: no token yet (the Secret is missing). `Rolling`: the gateway pods are taking the current token
    (not every one has acknowledged a configuration carrying it). `Retiring`: accepted everywhere, old tokens still
    valid. `Ready`: only the current token is accepted. `Unused`: no served watch uses this token. `Error`: the spec
    or the Secret is invalid."""
    current_digest: str | None = None
    """The first 12 hex digits of the current token's SHA-256."""
    current_accepted_at: Timestamp | None = None
    """Since when every counted gateway pod accepts the current token (RFC 3339); unset until then."""
    secret_resource_version: str | None = None
    """The token Secret's metadata.resourceVersion as the operator last read it: what the conditions describe."""
    accepted: AcceptedToken | None = None
    """Present only while the current token, read at `secretResourceVersion`, is accepted by every gateway pod.
    Once the operator has read an edit of the Secret it names the new token or is absent, never the old one: wait
    for `kubectl wait webhooktoken/NAME --for=jsonpath='{.status.accepted.secretResourceVersion}'=RV`, RV being the
    Secret's resourceVersion after your edit."""
    retiring_count: int | None = None
    """How many replaced tokens are still accepted."""
    retiring: list[RetiringToken] = Field(default_factory=list)
    """The replaced tokens still accepted."""
    gateway: GatewayAddress | None = None
    """Where the namespace's gateway is reached; set while a served watch uses this token."""
    webhook_path: str | None = Field(
        default=None,
        description=f"{WEBHOOK_PATH_DESCRIPTION} For a routing token only: a signing secret is never in a path.",
        examples=["/webhooks/resource-updated/{token}"],
    )
