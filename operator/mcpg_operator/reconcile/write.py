"""The write phase of a reconcile: perform a decision's writes, stage by stage, and nothing else.

The order, and why:

1. `TOKEN_SECRETS`: Secrets generated for WebhookTokens (`generate: true`). A pass that creates one writes
   nothing else; the next pass (at once) reads it back and promotes it like any edited Secret.
2. `ROTATION_STATE`: each changed rotation-state Secret, always before the Deployment changes. The state is what
   a configuration is rendered from, so after a restart a promotion is neither repeated nor lost, and a
   retirement is never rolled out without being recorded.
3. `GATEWAY`: the bus credentials Secret (managed bus) and the configuration Secret (written in place, after
   the rotation state it was rendered from), so both exist before any pod template names them, then the
   ServiceAccount, the Role and RoleBinding that let the pods read their configuration, and the Deployment
   (server-side apply).
4. `COLLECT`: an older operator's configuration Secrets that neither the applied template, the template as read,
   nor any ReplicaSet mounts, and bus credentials no longer used. After the Deployment, so a Secret is never
   deleted before the template stops naming it. The Service last of all (`gateway_objects._service_last`): the API
   server may refuse it for reasons outside the namespace (a node port another holds), and nothing must wait
   behind it.
5. `STATUS`: status merge-patches of ResourceWatches and WebhookTokens, once what they report has been written.
6. `EVENTS`: Events last, so an Event never announces a change that a failed write did not make.

Within the last two stages each write is about one object and none depends on another, so they are sent at once
(`AT_ONCE`): a pass then waits one round trip for its statuses and one for its Events, not one per object (at 500
namespaces of 10 watches, the statuses and Events sent one after the other were most of each pass's time, and
passes wait their turn: `scheduler.Turns`). Every other stage keeps its writes in order.

A write that fails raises: the pass stops there, and the next pass (with backoff) reads again and redoes
whatever is still needed, since every write is idempotent. A failed write before the statuses (stages 1 to 4)
raises `ApplyFailed` when asked (a namespace's reconcile asks): it says what failed and whether retrying can
help, so the reconcile reports it on every object of the namespace before the retry. The exception is a write
made for one object (`about`) that the API server refuses: that object alone is at fault, so the refusal is
returned to be reported on it, and the other writes go on.

Each change is logged as it is made, naming the object (never a body: a Secret's data stays out of the log).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Iterable, Sequence

from kubernetes_asyncio.client.exceptions import ApiException

from mcpg_operator import actions as w
from mcpg_operator.kube import Client, NamespaceTerminating, Refused, ns_path, refusal

logger = logging.getLogger(__name__)

KINDS = {
    "secrets": "Secret",
    "serviceaccounts": "ServiceAccount",
    "services": "Service",
    "deployments": "Deployment",
    "resourcewatches": "ResourceWatch",
    "webhooktokens": "WebhookToken",
    "poddisruptionbudgets": "PodDisruptionBudget",
    "networkpolicies": "NetworkPolicy",
    "roles": "Role",
    "rolebindings": "RoleBinding",
    "mcpgateways": "McpGateway",
}


class ApplyFailed(Exception):
    """A write the namespace as a whole depends on failed; `failure` is what its objects' statuses report."""

    def __init__(self, failure: w.Failure, cause: Exception) -> None:
        super().__init__(failure.message)
        self.failure, self.cause = failure, cause

    @property
    def expected(self) -> bool:
        """An answer of the API server, or the network failing: the message says it all, a traceback would not."""
        if isinstance(self.cause, ApiException | OSError | TimeoutError):
            return True
        # The client's transport (aiohttp) raises its own errors; named by module, since the operator's layers
        # keep aiohttp, a gateway dependency, out of its imports (.importlinter).
        return type(self.cause).__module__.split(".")[0] == "aiohttp"


async def execute(
    kube: Client, namespace: str, todo: Iterable[w.Write], describe_failure: bool = False
) -> list[w.Refusal]:
    """Perform `todo` in order; the refusals of writes made for one object. `describe_failure`: a failed write
    before the statuses raises `ApplyFailed` (what failed, to report) instead of the error itself."""
    refusals: list[w.Refusal] = []
    for stage, group in itertools.groupby(w.in_order(list(todo)), key=lambda x: x.stage):
        if stage in AT_ONCE:
            await _at_once(kube, namespace, list(group), describe_failure)
            continue
        for write in group:
            try:
                changed = await _one(kube, namespace, write)
            except Exception as e:
                refusals.append(_refused(write, e, describe_failure))
                continue
            if changed:
                _log(namespace, write)
    return refusals


AT_ONCE = frozenset({w.Stage.STATUS, w.Stage.EVENTS})
"""The stages whose writes are sent at once (see the module docstring)."""


async def _at_once(kube: Client, namespace: str, writes: Sequence[w.Write], describe_failure: bool) -> None:
    """Send `writes` together; once all have ended, raise the first one's error (in decided order), if any."""
    results = await asyncio.gather(*(_one(kube, namespace, x) for x in writes), return_exceptions=True)
    for write, result in zip(writes, results, strict=True):
        if isinstance(result, Exception):
            raise _failed(write, result, describe_failure) from result
        if isinstance(result, BaseException):
            raise result  # NotLeading (or a cancellation): never a failure to report
        if result:
            _log(namespace, write)


def _refused(write: w.Write, error: Exception, describe_failure: bool) -> w.Refusal:
    """The refusal of a write made for one object; any other error, raised as `execute` says."""
    about = write.about if isinstance(write, w.CreateObject) else None
    if isinstance(error, NamespaceTerminating):
        raise error
    if isinstance(error, Refused) and about is not None:
        return w.Refusal(about, error.message)
    raise _failed(write, error, describe_failure) from error


def failure(write: w.Write, error: Exception) -> w.Failure:
    """What users are told when `write` failed with `error`: the API server's message, or the error's kind."""
    what = f"{_verb(write)} {describe(write)}"
    if isinstance(error, Refused):
        brief = f"{in_brief(error.message)} (refused: {what})"
        return w.Failure(f"the API server refused to {what}: {error.message}", permanent=True, brief=brief)
    if isinstance(error, ApiException):
        said = refusal(error.status or 0, error.body).message or str(error.reason)
        return w.Failure(f"could not {what} ({error.status}): {said}; retrying", permanent=False)
    return w.Failure(f"could not {what} ({type(error).__name__}); retrying", permanent=False)


def describe(write: w.Write) -> str:
    """`Kind name` of the object a write targets (an Event: what it is about)."""
    if isinstance(write, w.PostEvent):
        involved = write.body.get("involvedObject", {})
        return f"Event about {involved.get('kind')} {involved.get('name')}"
    return f"{KINDS.get(write.ref.plural, write.ref.plural)} {write.ref.name}"


def _failed(write: w.Write, error: Exception, describe_failure: bool) -> Exception:
    if not describe_failure or write.stage >= w.Stage.STATUS:
        return error  # a status or an Event: nothing more to report it on; the next pass writes it again
    return ApplyFailed(failure(write, error), error)


def _verb(write: w.Write) -> str:
    match write:
        case w.CreateObject():
            return "create"
        case w.ApplyObject():
            return "apply"
        case w.DeleteObject():
            return "delete"
        case w.MergePatchStatus():
            return "update the status of"
        case w.PostEvent():
            return "post"
        case _:
            return "patch"


def _log(namespace: str, write: w.Write) -> None:
    """One line per change the operator makes: the decision as it lands, not kopf's "Handler succeeded"."""
    if isinstance(write, w.PostEvent):
        # The Event tells `kubectl describe` about a change already logged (a status, a Secret): DEBUG, so a change
        # is one line at INFO.
        body = write.body
        logger.debug("namespace %s: %s %s: %s", namespace, body.get("type"), body.get("reason"), describe(write))
        return
    past = {"create": "created", "apply": "applied", "delete": "deleted", "patch": "patched"}
    verb = _verb(write)
    if isinstance(write, w.MergePatchStatus):
        logger.info("namespace %s: status of %s: %s", namespace, describe(write), _conditions(write.status))
        return
    logger.info("namespace %s: %s %s", namespace, past.get(verb, verb), describe(write))


def _conditions(status: dict[str, object]) -> str:
    """`Ready=True (Served)`-style summary of a status's conditions (no message: it can be long)."""
    conds = status.get("conditions")
    if not isinstance(conds, list):
        return "updated"
    parts = [f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in conds if isinstance(c, dict)]
    return ", ".join(parts) or "updated"


async def _one(kube: Client, namespace: str, write: w.Write) -> bool:
    """Perform `write`; False if there was nothing to do (it existed already, or its object is gone)."""
    match write:
        case w.CreateObject(ref=ref, body=body):
            return await kube.create(_path(namespace, ref, named=False), body) is not None  # an existing one stays
        case w.ApplyObject(ref=ref, body=body):
            await kube.apply(_path(namespace, ref), body)
        case w.MergePatch(ref=ref, patch=patch):
            return await kube.merge_patch(_path(namespace, ref), patch) is not None
        case w.DeleteObject(ref=ref):
            await kube.delete(_path(namespace, ref))
        case w.MergePatchStatus(ref=ref, status=status):
            return await kube.merge_patch(_path(namespace, ref) + "/status", {"status": status}) is not None
        case w.PostEvent(body=body):
            return await kube.create(ns_path(namespace, "events"), body) is not None
    return True


def _path(namespace: str, ref: w.Ref, named: bool = True) -> str:
    return ns_path(namespace, ref.plural, ref.name if named else None, group=ref.group)


_NAMED = re.compile(r'^[A-Za-z0-9.]+ "[^"]*" is (?:forbidden|invalid): ')
"""`services "mcpg-gateway" is forbidden: `: the object is named already, in what failed."""
_DENIED = re.compile(
    r"^(?:ValidatingAdmissionPolicy '(?P<policy>[^']*)' with binding '[^']*' denied request"
    r'|admission webhook "(?P<webhook>[^"]*)" denied the request): (?P<said>.*)$',
    re.S,
)
"""An admission policy's or webhook's refusal: its own message, the one its authors wrote for this user, last."""


def in_brief(message: str) -> str:
    """An API server's refusal for a status line, cause first: `services "x" is forbidden:
    ValidatingAdmissionPolicy 'p' with binding 'b' denied request: M` is `M (policy p)`, and `Service "x" is
    invalid: spec.ports[0].nodePort: ...` starts at the field."""
    message = _NAMED.sub("", message, count=1)
    denied = _DENIED.match(message)
    if denied is None:
        return message
    by = f"policy {denied['policy']}" if denied["policy"] is not None else f"webhook {denied['webhook']}"
    return f"{denied['said']} ({by})"
