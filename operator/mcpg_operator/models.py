"""Pydantic mirrors of the CRDs in crds/ (camelCase on the wire, snake_case here).

The API server enforces the same rules first (schema + CEL); these models are what the operator trusts, and a
test proves every example manifest passes both. Anything the API server cannot know (a referenced Secret that
does not exist) is the reconciler's business, not the model's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

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


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class SecretKeyRef(_Spec):
    name: ObjectName
    key: DataKey


class Header(_Spec):
    name: str = Field(min_length=1)
    secret_key_ref: SecretKeyRef


class HttpBackendSpec(_Spec):
    url: str = Field(min_length=1)
    method: Literal["get", "post", "put", "patch", "delete", "head"] = "get"
    headers: list[Header] = Field(default_factory=list)
    body: str | None = None
    expected_status_codes: list[int] = Field(default_factory=lambda: [200])
    require_json_response: bool = False
    timeout_ms: int = Field(default=10_000, gt=0, le=300_000)
    # The two below have no default here nor in the CRD: unset, they are not rendered and the gateway's defaults
    # (the contract's, in one place) apply, so an operator upgrade renders what it rendered before and rolls no gateway.
    max_response_bytes: int | None = Field(default=None, ge=1)
    """The gateway's `max_response_bytes`: the largest body a read accepts, decompressed (10 MiB unless set)."""
    follow_redirects: bool | None = None
    """The gateway's `follow_redirects`: follow redirects within the url's origin (off unless set)."""


class BackendSpec(_Spec):
    http: HttpBackendSpec


class PollSpec(_Spec):
    interval_ms: int = Field(default=60_000, gt=0)
    ignore: list[str] = Field(default_factory=list)
    """JSON Pointers left out of the hash; the gateway's contract checks them (`watch.strategy.ignore`)."""


class LocalRef(_Spec):
    name: ObjectName


class WebhookSpec(_Spec):
    token_ref: LocalRef


class NatsTopicSpec(_Spec):
    subject: str = Field(min_length=1)
    url_secret_ref: SecretKeyRef | None = None


class PostgresListenNotifySpec(_Spec):
    url_secret_ref: SecretKeyRef
    channel: str = Field(min_length=1, max_length=63)


class SqlPollingSpec(_Spec):
    url_secret_ref: SecretKeyRef
    query: str = Field(min_length=1)
    interval_ms: int = Field(default=60_000, gt=0)


class PluginSpec(_Spec):
    kind: str = Field(min_length=1)
    config: dict[str, Any] = Field(default_factory=dict)


class NotificationFilterSpec(_Spec):
    scope: Literal["all", "subject_id", "expression"] = "all"
    expression: str | None = None


STRATEGY_FIELDS = ("poll", "webhook", "nats_topic", "postgres_listen_notify", "sql_polling", "plugin")


class WatchSpec(_Spec):
    poll: PollSpec | None = None
    webhook: WebhookSpec | None = None
    nats_topic: NatsTopicSpec | None = None
    postgres_listen_notify: PostgresListenNotifySpec | None = None
    sql_polling: SqlPollingSpec | None = None
    plugin: PluginSpec | None = None
    notification_filter: NotificationFilterSpec | None = None

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


class ResourceWatchSpec(_Spec):
    name: str | None = None
    description: str = ""
    uri: str | None = None
    uri_template: str | None = None
    mime_type: str | None = None
    read_policy: str | None = None
    subject_id: str | None = None
    backend: BackendSpec
    watch: WatchSpec | None = None

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
    name: ObjectName
    key: DataKey = "token"


class WebhookTokenSpec(_Spec):
    secret_ref: WebhookTokenSecretRef
    generate: bool = False
    grace_period_seconds: int = Field(default=0, ge=0, le=2_592_000)
