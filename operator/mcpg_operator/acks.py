"""Ask each gateway pod what it serves: the read phase's only I/O outside the Kubernetes API.

The gateway's pods are listed by label (`objects.SELECTOR`); each one with an IP that is Ready or not being deleted
(`observed.Pod.asked`: one that may be counted, or may say why it is not Ready) is asked for its acknowledgement
(`contract.acknowledgement`, on its admin port, no token), all of them concurrently, each within `TIMEOUT_S`. A
pod that does not answer, or answers something that is not an acknowledgement, is one whose acknowledgement is
missing: the error's kind is kept, never a body (it is read only to parse it). The fetcher is an argument
(`Fetch`), so the unit tests answer from a table of acknowledgements.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import aiohttp
from pydantic import ValidationError

from mcpg_gateway.contract import acknowledgement
from mcpg_gateway.contract.acknowledgement import Acknowledgement
from mcpg_operator import objects, observed
from mcpg_operator.kube import Client, ns_path

TIMEOUT_S = 1.0
"""How long one pod has to answer: a gateway answers from memory, so a slower one is as good as silent."""
MAX_BYTES = 1024 * 1024
"""The most of an answer read: digests, paths and reasons, never near this."""
SELECTOR = ",".join(f"{k}={v}" for k, v in objects.SELECTOR.items())

Fetch = Callable[[str], Awaitable[Acknowledgement]]
"""Pod IP -> the acknowledgement it serves; raises when it gives none."""


class Unacknowledged(Exception):
    """A pod's answer was not an acknowledgement; the message is a kind, never the body."""


async def read(kube: Client, namespace: str, fetch: Fetch | None = None) -> list[observed.Pod]:
    """The gateway's pods in `namespace`, each that may be counted with its acknowledgement or why it is missing."""
    found = await kube.list(ns_path(namespace, "pods"), SELECTOR)
    pods = [observed.pod(obj) for obj in found]
    asked = [(obj, p) for obj, p in zip(found, pods, strict=True) if p.asked]
    if not asked:
        return pods
    answers = await answers_of([p.ip or "" for _, p in asked], fetch)
    by_name = {p.name: observed.pod(obj, answer) for (obj, p), answer in zip(asked, answers, strict=True)}
    return [by_name.get(p.name, p) for p in pods]


async def answers_of(ips: Sequence[str], fetch: Fetch | None) -> list[Acknowledgement | str]:
    """Each address's acknowledgement, or the kind of error that took its place, asked concurrently."""
    if fetch is not None:
        return list(await asyncio.gather(*(_one(fetch, ip) for ip in ips)))
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(_one(_over_http(session), ip) for ip in ips)))


async def _one(fetch: Fetch, ip: str) -> Acknowledgement | str:
    try:
        async with asyncio.timeout(TIMEOUT_S):
            return await fetch(ip)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # isolation boundary: one pod's silence is that pod's missing acknowledgement
        return str(e) if isinstance(e, Unacknowledged) else type(e).__name__


def _over_http(session: aiohttp.ClientSession) -> Fetch:
    async def fetch(ip: str) -> Acknowledgement:
        host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod address
        url = f"http://{host}:{objects.ADMIN_PORT}{acknowledgement.PATH}"
        async with session.get(url, allow_redirects=False) as response:
            if response.status != 200:
                raise Unacknowledged(f"HTTP {response.status}")
            body = await response.content.read(MAX_BYTES + 1)
        return parse(body)

    return fetch


def parse(body: bytes) -> Acknowledgement:
    """An acknowledgement from a pod's answer; `Unacknowledged` (naming no value) if it is not one."""
    if len(body) > MAX_BYTES:
        raise Unacknowledged("answer too large")
    try:
        return Acknowledgement.model_validate_json(body)
    except ValidationError:
        raise Unacknowledged("not an acknowledgement") from None
