"""What the namespace's gateway pods serve, as one pass counts it. Pure.

A pod counts once it is Ready with an IP, and while it is being deleted only for as long as it still answers
(`observed.Pod.counted`). Something is served, or a token accepted, only when at least one pod counts and every
counted pod says it serves it: a pod that did not answer serves nothing as far as a decision goes, and a pod that
refused a configuration keeps serving the one before, so a refusal is never counted as done (Istio counted NACKs
as applied, and users believed refused configuration was live: notes/in-place.md). A pod that is not Ready counts
for nothing, but what it refused is shown like a counted pod's refusal: one that refused the configuration it
started on stays unready, and would otherwise leave every status waiting for a pod to be Ready, saying nothing. A
pod still without the current configuration `ACK_BOUND_S` after it was written is named in the statuses waiting on
it, and while any pod is without it the pass asks to be woken soon (`next_check`): the pods' acknowledgements
start no event.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mcpg_gateway.contract.acknowledgement import Refusal
from mcpg_operator import conditions as c
from mcpg_operator import observed

ACK_POLL_S = 0.1
"""How soon a pass waiting on a pod's acknowledgement looks again, for the first `ACK_BOUND_S`: a pod applies a
configuration within milliseconds of the Secret's write reaching it, so the first look again usually finds it."""
ACK_BOUND_S = 30.0
"""How long every pod has to acknowledge a configuration before the statuses waiting on it name it."""
LATE_POLL_S = 5.0
"""How often a pass still waiting after `ACK_BOUND_S` looks again."""
MIN_NAME = 16
"""Characters of a late pod's name worth showing (elided) in a message: less says nothing."""
SHOWN_DIGEST = 12
"""Hex digits of a configuration digest a status shows."""


@dataclass(frozen=True, slots=True)
class Pods:
    """The counted pods of one pass, against the configuration it decided (`digest`)."""

    counted: tuple[observed.Pod, ...]
    digest: str
    """`digests.document` of the configuration this pass decided."""
    written_at: float | None = None
    """When the configuration Secret got `digest` (as read); None: this pass writes it."""
    uncounted: tuple[observed.Pod, ...] = ()
    """Pods that answered without being counted (not Ready): their refusals are shown, nothing else is taken."""

    def serve(self, entries: Iterable[str]) -> bool:
        """At least one pod counts, and every counted pod serves each of these entry digests."""
        return bool(self.counted) and self.serving(entries) == len(self.counted)

    def serving(self, entries: Iterable[str]) -> int:
        """How many counted pods serve each of these entry digests (a pod that gave no acknowledgement, none)."""
        wanted = frozenset(entries)
        return sum(p.serving_digest is not None and wanted <= p.entries for p in self.counted)

    def only(self, entries: Iterable[str]) -> bool:
        """At least one pod counts, and every counted pod serves nothing but these entry digests."""
        allowed = frozenset(entries)
        return bool(self.counted) and all(p.serving_digest is not None and p.entries <= allowed for p in self.counted)

    def without(self, entries: Iterable[str]) -> list[observed.Pod]:
        """The counted pods that do not serve every one of these entry digests."""
        wanted = frozenset(entries)
        return [p for p in self.counted if p.serving_digest is None or not wanted <= p.entries]

    def refusals(self) -> list[tuple[str, Refusal]]:
        """(pod, its refusal) of each pod, counted or not, that refused this pass's configuration."""
        pods = (*self.counted, *self.uncounted)
        return [(p.name, r) for p in pods if (r := _refused(p)) is not None and r.digest == self.digest]

    def waiting(self) -> list[observed.Pod]:
        """Counted pods that neither serve this configuration nor refused it: the ones still to acknowledge it."""
        return [p for p in self.counted if p.serving_digest != self.digest and not _refuses(p, self.digest)]

    def late(self, pods: Sequence[observed.Pod], now: float) -> Late | None:
        """Who of `pods` (those a status waits on) is late with this configuration, once they are; else None."""
        if self.written_at is None or now - self.written_at < ACK_BOUND_S or not pods:
            return None
        return Late(int(now - self.written_at), tuple((p.name, self._why(p)) for p in pods))

    def _why(self, pod: observed.Pod) -> str:
        if _refuses(pod, self.digest):
            return "refused it"
        if pod.serving_digest is not None:
            return f"serves {pod.serving_digest[:SHOWN_DIGEST]}"
        return "no acknowledgement" + (f": {pod.missing}" if pod.missing else "")

    def next_check(self, now: float) -> float | None:
        """How soon to look again while a pod has not acknowledged this configuration; None when none is waited on.
        While no pod counts and some answered unready, every `LATE_POLL_S`: a pod that refused the configuration
        it started on is never Ready, so no Deployment event would bring the pass that hears it change its mind."""
        if not self.counted and self.uncounted:
            return LATE_POLL_S
        if not self.waiting():
            return None
        if self.written_at is None or now - self.written_at < ACK_BOUND_S:
            return ACK_POLL_S
        return LATE_POLL_S


@dataclass(frozen=True, slots=True)
class Late:
    """The counted pods still without a configuration `ACK_BOUND_S` after it was written: each named, with what
    it does instead. A condition names the first (`brief`); its Event, every one (`detail`)."""

    since: int
    """Seconds since the configuration was written."""
    pods: tuple[tuple[str, str], ...]
    """(pod, what it does instead: `serves <digest>`, `refused it`, `no acknowledgement: <why>`)."""

    def brief(self, room: int) -> str:
        """`; late 45 s: <pod> (<what>) and N more`, in at most `room` characters: the pod's name elided, and
        what it does, then the pod itself, left to the Event when even that does not fit."""
        (pod, why), more = self.pods[0], len(self.pods) - 1
        why = why.partition(":")[0]  # a pod's own error text is for the Event
        tail = f" and {more} more" if more else ""
        for template in (f"; late {self.since} s: {{pod}} ({why}){tail}", f"; late {self.since} s: {{pod}}{tail}"):
            if room - len(template.format(pod="")) >= MIN_NAME:
                return c.fit(template, room, pod=pod)
        return c.clamp(f"; {len(self.pods)} pod(s) late {self.since} s", room)

    def detail(self) -> str:
        named = ", ".join(f"{pod} ({why})" for pod, why in self.pods)
        return f"not acknowledged {self.since} s after it was written by gateway pod(s): {named}"


@dataclass(frozen=True, slots=True)
class Refused:
    """What gateway pods refused of this pass's configuration that concerns one object (`ConfigRefused`): each
    problem in the user's words (`spec_paths.in_user_words`), with the pod that found it. The pods keep serving
    the configuration before, so the condition says the first problem and that; its Event says every one."""

    problems: tuple[tuple[str, str], ...]
    """(pod, problem), in the order found."""

    def message(self) -> str:
        distinct = list(dict.fromkeys(problem for _, problem in self.problems))
        return c.first_of(distinct, "; the gateway keeps its last configuration")

    def detail(self) -> str:
        found = "; ".join(f"{pod}: {problem}" for pod, problem in self.problems)
        return f"gateway pod(s) refused the configuration and keep serving the one before: {found}"


def plugin_kinds(heard: Sequence[observed.Pod], fallback: Sequence[str]) -> list[str]:
    """The plugin kinds every pod that answered (Ready or not) has installed; `fallback` (the settings) before any
    did. A pod not Ready counts too: one that refused a watch's plugin kind at start would never be Ready."""
    reported = [set(p.acknowledgement.plugins) for p in heard if p.acknowledgement is not None]
    if not reported:
        return list(fallback)
    return sorted(set.intersection(*reported))


def _refused(pod: observed.Pod) -> Refusal | None:
    return pod.acknowledgement.refused if pod.acknowledgement is not None else None


def _refuses(pod: observed.Pod, digest: str) -> bool:
    refused = _refused(pod)
    return refused is not None and refused.digest == digest
