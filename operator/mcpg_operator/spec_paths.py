"""Gateway configuration paths in a ResourceWatch's words: `backend.url` is `spec.backend.http.url`. Pure.

The gateway's check names the fields of the configuration file (`mcp.capabilities.resources[3].backend.url`); a
user edits a ResourceWatch, a WebhookToken or the chart's values. `render` writes each watch into a known place
(`render._entry`), so the way back is a function of the entry's path and the watch's strategy alone.
"""

from __future__ import annotations

import re

from pydantic.alias_generators import to_camel

_IN_ENTRY = re.compile(r"^mcp\.capabilities\.(?:resources|resource_templates)\[\d+\]\.?(.*)$")
"""A path inside one rendered entry, and the entry's own part of it (`render._ENTRY_PATH` is the same shape)."""
_STEP = re.compile(r"([^.\[]+)((?:\[\d+\])*)")

_ENTRY = {
    "name": "spec.name",
    "description": "spec.description",
    "uri": "spec.uri",
    "uri_template": "spec.uriTemplate",
    "mime_type": "spec.mimeType",
    "read_policy": "spec.readPolicy",
    "subject_id": "spec.subjectId",
    "backend": "spec.backend.http",
    "watch": "spec.watch",
}
_SIGNATURE = {"secrets": "secretRef", "tolerance_s": "toleranceSeconds"}
_HMAC = frozenset({"header", "algorithm", "encoding", "prefix"})
_FROM_A_SECRET = frozenset({"url"})
"""Strategy fields the operator fills from a Secret the ResourceWatch names (`urlSecretRef`)."""
_TOKENS = frozenset({"token", "previous_tokens"})
"""A webhook's tokens come from the WebhookToken that `tokenRef` names."""
_WORDS = (("set url here or gateway.nats.url", "set urlSecretRef or the chart's gateway.natsUrl"),)
"""Gateway configuration names in a problem's text, and what a ResourceWatch's user sets instead: a nats_topic
watch without `urlSecretRef` gets the operator's default server (`MCPG_GATEWAY_NATS_URL`, the chart's value)."""


_CHART = (
    ("gateway.nats.url", "the chart's gateway.natsUrl"),
    ("gateway.server.allowed_origins", "the chart's gateway.allowedOrigins"),
    ("gateway.server.server_card", "the chart's gateway.serverCard"),
    ("gateway.auth", "Secret mcpg-gateway-auth key auth.yaml"),
    ("gateway", "the chart's gateway"),  # limits, subscriptions, liveness, bus: the chart uses the gateway's keys
)
"""The gateway section's paths (`render._gateway_config`) -> what sets each: a chart value, or the auth Secret."""


def section_field(path: str) -> str:
    """What a user edits for `path`, a field of the rendered gateway section (`gateway.nats.url`): the chart's value
    (`the chart's gateway.natsUrl`), or the namespace's auth Secret; `path` itself when it is in no known place."""
    for prefix, meant in _CHART:
        rest = _below(path, prefix)
        if rest is None:
            continue
        if prefix == "gateway.auth" and rest:  # a field inside the Secret's YAML, not a path below its key
            return f"{meant}: {rest.lstrip('.')}"
        return meant + rest
    return path


def _below(path: str, prefix: str) -> str | None:
    """What `path` adds below `prefix` (`.x`, `[1]`, or nothing for `prefix` itself); None if it is not below it."""
    if path == prefix:
        return ""
    if path.startswith(prefix) and path[len(prefix)] in ".[":
        return path[len(prefix) :]
    return None


def spec_field(path: str, strategy: str) -> str:
    """The ResourceWatch field behind `path`, a field of one rendered entry (`backend.headers.Authorization`, or
    empty for the entry itself); `strategy` is the watch's (`poll`, `webhook`, ...), as `render.Verdict` has it."""
    steps = [m.group(0) for m in _STEP.finditer(path)] if path else []
    if not steps:
        return "spec"
    head, rest = _split(steps[0])
    if head == "backend":
        return _backend(steps[1:]) if len(steps) > 1 else "spec.backend.http"
    if head == "watch":
        return _watch(steps[1:], strategy)
    return _ENTRY.get(head, f"spec.{to_camel(head)}") + rest


def in_spec_words(path: str, message: str, strategy: str) -> str:
    """A gateway check's problem (`path: message`, path within the entry) as a ResourceWatch's user reads it."""
    return f"{spec_field(path, strategy)}: {_reworded(message)}"


def in_user_words(path: str, message: str, strategy: str | None) -> str:
    """A problem a gateway pod found in the whole configuration file (`mcp.capabilities.resources[3].backend.url`):
    in an entry, as its ResourceWatch's field (`strategy`: that watch's, None when no watch owns the entry); in the
    gateway section, as the chart's value or the auth Secret that sets it."""
    entry = _IN_ENTRY.match(path)
    if entry is not None and strategy is not None:
        return in_spec_words(entry[1], message, strategy)
    return f"{section_field(path)}: {_reworded(message)}"


_ENTRY_NAMED = re.compile(r"^resource(?: template)? '[^']*', ")
"""The entry a CEL problem names first (`resource 'f', line 1, column 11: ...`): in a ResourceWatch's status the
entry is the object itself, and the room goes to the cause (`undeclared reference to 'subscriber.trust_levl'`)."""


def _reworded(message: str) -> str:
    message = _ENTRY_NAMED.sub("", message)
    for said, meant in _WORDS:
        message = message.replace(said, meant)
    return message


def _backend(steps: list[str]) -> str:
    name, index = _split(steps[0])
    if name == "kind":
        return "spec.backend.http"
    if name == "headers":  # rendered as a mapping by header name; the spec lists them
        return "spec.backend.http.headers"
    return f"spec.backend.http.{to_camel(name)}{index}"


def _watch(steps: list[str], strategy: str) -> str:
    if not steps:
        return "spec.watch"
    name, _ = _split(steps[0])
    if name == "notification_filter":
        inner = _join(steps[1:])
        return "spec.watch.notificationFilter" + (f".{inner}" if inner else "")
    where = f"spec.watch.{to_camel(strategy)}"
    return _strategy(where, steps[1:], strategy)


def _strategy(where: str, steps: list[str], strategy: str) -> str:
    if not steps:
        return where
    name, index = _split(steps[0])
    if strategy == "webhook":
        return _webhook(where, name, steps[1:])
    if strategy == "plugin" and name not in ("type", "kind"):
        return f"{where}.config.{name}{index}"
    if name in _FROM_A_SECRET:
        return f"{where}.urlSecretRef"
    if name == "type":
        return where
    return f"{where}.{to_camel(name)}{index}"


def _webhook(where: str, name: str, rest: list[str]) -> str:
    if name in _TOKENS:
        return f"{where}.tokenRef"
    if name != "signature":
        return where
    signature = f"{where}.signature"
    if not rest:
        return signature
    field, index = _split(rest[0])
    if field in _HMAC:
        return f"{signature}.hmac.{field}"
    return f"{signature}.{_SIGNATURE.get(field, to_camel(field))}" + ("" if field == "secrets" else index)


def _split(step: str) -> tuple[str, str]:
    """`ignore[2]` -> (`ignore`, `[2]`)."""
    name, bracket, index = step.partition("[")
    return name, bracket + index


def _join(steps: list[str]) -> str:
    return ".".join(to_camel(name) + index for name, index in map(_split, steps))
