"""The key the managed bus's account passwords are derived from (`bus.account_password`), kept in the bus namespace.

One Secret, `mcpg-bus-key`, that only the operator's namespace holds: tenants can neither read nor write it, so
no tenant can choose or learn another's password. It is created by whichever pass needs it first (a namespace
pass deriving its password, or the bus step) and read once per process: the namespace passes and the bus step
must derive the same passwords, and two operator replicas read the same Secret. Deleting it makes a new key
when the operator next starts (a running one keeps the key it read): every namespace's password changes then,
and its gateway pods roll to the new one (`bus.DIGEST_ENV`).
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import Callable
from typing import Any

from mcpg_operator import bus
from mcpg_operator.kube import Client, ns_path


class UnusableKey(Exception):
    """The key Secret exists but holds no usable key: an administrator's edit, never the operator's."""


class BusKey:
    """The key, read (or created) once and then held."""

    def __init__(self, kube: Client, namespace: str, new_key: Callable[[], bytes] | None = None) -> None:
        self._kube, self._namespace = kube, namespace
        self._new_key = new_key or (lambda: secrets.token_bytes(bus.KEY_BYTES))
        self._key: bytes | None = None
        self._lock = asyncio.Lock()  # concurrent first passes read or create it once

    async def password(self, gateway_namespace: str) -> str:
        return bus.account_password(await self.key(), gateway_namespace)

    async def key(self) -> bytes:
        async with self._lock:
            if self._key is None:
                self._key = await self._read_or_create()
            return self._key

    async def _read_or_create(self) -> bytes:
        path = ns_path(self._namespace, "secrets", bus.KEY_SECRET)
        found = await self._kube.get(path)
        if found is None:
            created = await self._kube.create(ns_path(self._namespace, "secrets"), self._secret(self._new_key()))
            found = created or await self._kube.get(path)  # None: another replica created it first
        return self._decoded(found)

    def _decoded(self, secret: dict[str, Any] | None) -> bytes:
        try:
            key = base64.b64decode((secret or {}).get("data", {}).get(bus.KEY_KEY, ""), validate=True)
        except ValueError:
            key = b""
        if len(key) < bus.KEY_BYTES:
            raise UnusableKey(
                f"the Secret {bus.KEY_SECRET} in namespace {self._namespace} holds no usable key (data.{bus.KEY_KEY}: "
                f"{bus.KEY_BYTES} or more random bytes). Delete it and the operator makes a new one; every "
                "namespace on the managed bus then gets a new password, and its gateway pods roll"
            )
        return key

    def _secret(self, key: bytes) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": bus.KEY_SECRET, "namespace": self._namespace, "labels": dict(bus.LABELS)},
            "type": "Opaque",
            "data": {bus.KEY_KEY: base64.b64encode(key).decode()},
        }
