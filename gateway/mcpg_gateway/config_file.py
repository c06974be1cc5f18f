"""The configuration file, followed: read again on SIGHUP and whenever it changes, and offered to `reconfigure.py`.

A change is seen by polling the file's status (`os.stat`, following symlinks: a Kubernetes volume swaps its
`..data` link, a deploy tool renames a new file into place, an editor writes in place) every `POLL_S`; no
dependency and no inotify, and a second is as fast as anyone edits a file. A reload of the same content changes
nothing: the digest decides (`reconfigure.Reconfigurer.offer`). A file that cannot be read is logged and the
configuration served stays.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

POLL_S = 1.0
"""How often the file's status is looked at."""

Offer = Callable[[str], Awaitable[Any]]
Stamp = tuple[int, int, int, int] | None
"""What says a file changed: (device, inode, size, modification time in ns); None while it cannot be read."""


def stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class FileFollower:
    def __init__(self, path: Path, offer: Offer, hangup: asyncio.Event | None = None, poll_s: float = POLL_S) -> None:
        """`offer`: given the file's text; `hangup`: set (by the SIGHUP handler) to read the file now."""
        self._path, self._offer, self._hangup, self._poll_s = path, offer, hangup, poll_s
        self._seen = stamp(path)

    async def run(self) -> None:
        """Until cancelled: offer the file's text after each SIGHUP and each change of its status."""
        while True:
            hung_up = await self._wait()
            now = stamp(self._path)
            if hung_up or (now is not None and now != self._seen):
                self._seen = now
                await self._read_and_offer("SIGHUP" if hung_up else "a change of the file")

    async def _wait(self) -> bool:
        """Until the next poll, or a SIGHUP first (True)."""
        if self._hangup is None:
            await asyncio.sleep(self._poll_s)
            return False
        try:
            async with asyncio.timeout(self._poll_s):
                await self._hangup.wait()
        except TimeoutError:
            return False
        self._hangup.clear()
        return True

    async def _read_and_offer(self, why: str) -> None:
        try:
            text = self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            logger.warning("configuration %s not read after %s (%s); serving what was served", self._path, why, e)
            return
        logger.info("reading configuration %s again after %s", self._path, why)
        await self._offer(text)
