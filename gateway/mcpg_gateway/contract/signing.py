"""A webhook watch's `signature` block: which sender scheme signs its deliveries, and the secrets that verify them.

Part of the contract: the operator renders this block (and checks a WebhookToken's Secret with `secret_problem`
before it renders one), the gateway verifies with it (`mcpg_gateway.signatures`). Each scheme is its provider's
published algorithm; what differs between them that a configuration can get wrong is here: which secrets a scheme
can use, and which fields only `hmac` takes. A problem names the field and never holds a secret's characters.
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

Scheme = Literal["standard-webhooks", "github", "stripe", "slack", "gitlab", "hmac"]
SCHEMES: tuple[Scheme, ...] = ("standard-webhooks", "github", "stripe", "slack", "gitlab", "hmac")

MAX_SECRETS = 16
"""Secrets one block lists at most: the current one and those retiring. Each costs an HMAC per delivery."""
MAX_SECRET_CHARS = 1024
MAX_TOLERANCE_S = 3600
"""The widest timestamp window: a delivery id is remembered for twice this (`replays.py`), so it is bounded."""
DEFAULT_MAX_BODY_BYTES = 1_048_576
MAX_BODY_BYTES = 16 * 1_048_576
WHSEC_PREFIX = "whsec_"
WHSEC_MIN_BYTES, WHSEC_MAX_BYTES = 24, 64
"""The Standard Webhooks specification's bounds on a secret's decoded length."""
HMAC_ONLY = ("header", "algorithm", "encoding", "prefix")
HEADER_NAME_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""RFC 9110 `tchar`: what a header's name may hold."""


def whsec_key(secret: str) -> bytes | None:
    """The HMAC key of a Standard Webhooks secret (`whsec_` then base64), or None when it is not one."""
    if not secret.startswith(WHSEC_PREFIX):
        return None
    try:
        key = base64.b64decode(secret[len(WHSEC_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if WHSEC_MIN_BYTES <= len(key) <= WHSEC_MAX_BYTES else None


def secret_problem(scheme: Scheme, secret: str) -> str | None:
    """Why `secret` cannot verify `scheme`'s deliveries, or None. Says what is wrong, never which characters."""
    if len(secret) > MAX_SECRET_CHARS:
        return f"a signing secret has at most {MAX_SECRET_CHARS} characters; this one has {len(secret)}"
    if scheme == "standard-webhooks":
        if whsec_key(secret) is None:
            return (
                f"a standard-webhooks secret is `{WHSEC_PREFIX}` followed by the base64 of {WHSEC_MIN_BYTES} to "
                f"{WHSEC_MAX_BYTES} random bytes (`echo whsec_$(openssl rand -base64 32)` makes one); this one is not"
            )
        return None
    controls = sum(1 for char in secret if ord(char) < 0x20 or ord(char) == 0x7F)
    if controls:
        return f"a signing secret holds no control characters; this one has {controls}"
    if scheme == "gitlab" and (not secret.isascii() or secret != secret.strip()):
        # GitLab sends the secret itself as the X-Gitlab-Token header value: it must survive as one.
        return "a gitlab secret travels as a header value: ASCII, without leading or trailing spaces"
    return None


class WebhookSignature(BaseModel):
    """Require every delivery to be signed by the sender: it fires only if its signature verifies with one of
    `secrets`. The token in the path still selects the resource; a delivery that fails is answered 401 with the
    check that failed (never which secret), and an unknown token is still 404."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    scheme: Scheme
    """The sender's scheme: `standard-webhooks` (`webhook-id`, `webhook-timestamp`, `webhook-signature`), `github`
    (`X-Hub-Signature-256`), `stripe` (`Stripe-Signature`), `slack` (`X-Slack-Signature`,
    `X-Slack-Request-Timestamp`), `gitlab` (the secret itself in `X-Gitlab-Token`), or `hmac` (a generic HMAC of the
    body in `header`)."""
    secrets: list[SecretStr] = Field(min_length=1, max_length=MAX_SECRETS)
    """The secrets a delivery may be signed with: any one verifies, so a rotation lists the new and the old (an
    empty one is skipped, e.g. an unset `${env.OLD}`; at least one must not be). `standard-webhooks` takes `whsec_`
    base64 secrets; the others use the secret's bytes as they are (Stripe's `whsec_…` too, undecoded)."""
    tolerance_s: int = Field(default=300, ge=1, le=MAX_TOLERANCE_S)
    """Timestamped schemes (standard-webhooks, stripe, slack): a delivery signed further than this many seconds
    from now, either way, is refused as stale (300 by default, at most 3600)."""
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1, le=MAX_BODY_BYTES)
    """The largest body read to verify (1 MiB by default); a larger one is answered 413 before it is verified. The
    body is never passed on: a notification carries only the URI."""
    header: str | None = None
    """`hmac` only, required there: the request header that carries the signature, e.g. `X-Signature`."""
    algorithm: Literal["sha256", "sha512"] | None = None
    """`hmac` only: the HMAC's hash, `sha256` by default."""
    encoding: Literal["hex", "base64"] | None = None
    """`hmac` only: how the header writes the signature, `hex` by default."""
    prefix: str | None = Field(default=None, max_length=64)
    """`hmac` only: text before the signature in the header, e.g. `sha256=`; none by default."""

    @field_validator("secrets")
    @classmethod
    def _secrets_fit_the_scheme(cls, secrets: list[SecretStr], info: ValidationInfo) -> list[SecretStr]:
        if not any(s.get_secret_value() for s in secrets):
            raise ValueError("every secret is empty: list at least one the sender signs with")
        scheme = info.data.get("scheme")  # absent when the scheme itself was refused: that error is enough
        for i, secret in enumerate(secrets):
            value = secret.get_secret_value()
            if scheme is not None and value and (problem := secret_problem(scheme, value)):
                raise ValueError(f"entry {i}: {problem}")
        return secrets

    @field_validator("header")
    @classmethod
    def _header_name(cls, header: str | None) -> str | None:
        if header is not None and (not header or not set(header) <= HEADER_NAME_CHARS or len(header) > 256):
            raise ValueError("a header name of 1 to 256 token characters (letters, digits, `-`, …), e.g. X-Signature")
        return header

    @model_validator(mode="after")
    def _fits_the_scheme(self) -> WebhookSignature:
        # A model validator's error is placed at the block itself, so its message names the field first.
        if self.scheme == "hmac" and self.header is None:
            raise ValueError("header: scheme hmac needs the header that carries the signature, e.g. X-Signature")
        stray = [name for name in HMAC_ONLY if getattr(self, name) is not None]
        if self.scheme != "hmac" and stray:
            raise ValueError(f"{', '.join(stray)}: only for scheme hmac; scheme {self.scheme} fixes them")
        return self

    def usable_secrets(self) -> list[str]:
        """The listed secrets that are set, in order."""
        return [s.get_secret_value() for s in self.secrets if s.get_secret_value()]

    @property
    def timestamped(self) -> bool:
        return self.scheme in ("standard-webhooks", "stripe", "slack")
