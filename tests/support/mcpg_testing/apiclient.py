"""A small asyncio client of the API server for tests: get, patch, delete, and list-then-watch.

A test that drives the API faster than kubectl can (test_operator_under_load's edits, several a second) needs a
few calls and a watch that survives a dropped stream or an expired resourceVersion (it lists again); aiohttp with
a kubeconfig's token is all of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

logger = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 240
RETRY_S = 1.0


class ApiClient:
    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        self.server = config["clusters"][0]["cluster"]["server"]
        token = config["users"][0]["user"]["token"]
        # The control plane's apiserver serves a self-signed certificate (the kubeconfigs skip verifying it too).
        self.http = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"},
            connector=aiohttp.TCPConnector(ssl=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def close(self) -> None:
        await self.http.close()

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, or None if it does not exist."""
        async with self.http.get(self.server + path, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status == 404:
                return None
            resp.raise_for_status()
            body: dict[str, Any] = await resp.json()
            return body

    async def patch(self, path: str, body: dict[str, Any]) -> int:
        """A JSON merge patch; returns the HTTP status (404 and 409 are the caller's to judge)."""
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.http.patch(
            self.server + path, data=json.dumps(body), headers=headers, timeout=aiohttp.ClientTimeout(total=10)
        ) as resp:
            await resp.read()
            return resp.status

    async def delete(self, path: str, body: dict[str, Any]) -> int:
        async with self.http.delete(self.server + path, json=body, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            await resp.read()
            return resp.status

    async def watch(self, path: str, query: str = "") -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """("LIST", the list) then ("ADDED" | "MODIFIED" | "DELETED", object) from its watch, forever: again from
        a fresh list when the watch ends or fails. A consumer takes each LIST as the whole truth (an object missing
        from it was deleted meanwhile) and an ADDED of a known object as MODIFIED.
        """
        sep = "&" if query else ""
        while True:
            try:
                listed = await self.get(f"{path}?{query}")
                if listed is None:
                    raise aiohttp.ClientError(f"{path} not found")
                yield "LIST", listed
                version = listed["metadata"]["resourceVersion"]
                url = f"{self.server}{path}?{query}{sep}watch=1&resourceVersion={version}"
                url += f"&timeoutSeconds={WATCH_TIMEOUT_S}&allowWatchBookmarks=false"
                async with self.http.get(url) as resp:
                    resp.raise_for_status()
                    async for line in resp.content:
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                            break
                        yield event["type"], event["object"]
            except (TimeoutError, aiohttp.ClientError, ValueError) as e:
                logger.warning("watch of %s failed (%s); listing again", path, e)
                await asyncio.sleep(RETRY_S)
