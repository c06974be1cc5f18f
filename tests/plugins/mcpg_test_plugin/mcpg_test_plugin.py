"""udp_datagram: an mcpg watch-strategy plugin that fires when a UDP datagram arrives on a loopback port.

It exists so the gateway's tests exercise the real plugin path (entry point, `kind()`, the whole spec handed
over) with a real event source. Spec fields: `port` (required) and `kinds` (optional): when given, only a
datagram whose first word is one of them fires, e.g. `kinds: [sms, voice]` fires on `sms +15550100`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base

HOST = "127.0.0.1"


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self, words: asyncio.Queue[str]) -> None:
        self._words = words

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        first = data.split(maxsplit=1)[:1]
        self._words.put_nowait(first[0].decode(errors="replace") if first else "")


class UdpDatagramWatch:
    @staticmethod
    def kind() -> str:
        return "udp_datagram"

    def __init__(self, spec: dict[str, Any], ctx: base.WatchContext) -> None:
        port = spec.get("port")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise StrategyError(f"udp_datagram needs a port between 1 and 65535, got {port!r}")
        self._port = port
        self._kinds = {str(k) for k in spec.get("kinds") or []}
        self._words: asyncio.Queue[str] = asyncio.Queue()
        self._transport: asyncio.DatagramTransport | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._transport, _ = await loop.create_datagram_endpoint(
                lambda: _Receiver(self._words), local_addr=(HOST, self._port)
            )
        except OSError as e:
            raise StrategyError(f"udp_datagram cannot listen on {HOST}:{self._port}: {e.strerror}") from e

    async def run(self, fire: base.Fire) -> None:
        while True:
            word = await self._words.get()
            if not self._kinds or word in self._kinds:
                await fire()

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
