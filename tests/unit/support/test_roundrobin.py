"""The round-robin proxy: connections go to the backends in turn, bytes flow both ways, closing cuts everything."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from mcpg_testing import BOUND_S
from mcpg_testing.roundrobin import RoundRobin


@contextlib.asynccontextmanager
async def named_echo(name: str) -> AsyncIterator[asyncio.Server]:
    """A backend that answers each line with `name: line`, until the client closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(f"{name}: ".encode() + line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server


def address(server: asyncio.Server) -> tuple[str, int]:
    return "127.0.0.1", int(server.sockets[0].getsockname()[1])


async def ask(port: int, line: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(line)
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()


async def test_each_connection_goes_to_the_next_backend_in_turn_and_is_recorded() -> None:
    async with (
        named_echo("a") as a,
        named_echo("b") as b,
        named_echo("c") as c,
        RoundRobin([address(a), address(b), address(c)]) as proxy,
    ):
        async with asyncio.timeout(BOUND_S):
            answers = [await ask(proxy.port, f"hello {i}\n".encode()) for i in range(5)]
    assert answers == [b"a: hello 0\n", b"b: hello 1\n", b"c: hello 2\n", b"a: hello 3\n", b"b: hello 4\n"]
    assert proxy.chosen == [0, 1, 2, 0, 1]


async def test_a_half_closed_client_still_gets_the_whole_answer() -> None:
    async with named_echo("a") as a, RoundRobin([address(a)]) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"one\ntwo\n")
        writer.write_eof()
        async with asyncio.timeout(BOUND_S):
            assert await reader.read() == b"a: one\na: two\n"
        writer.close()


async def test_a_dead_backend_closes_the_client_connection_and_the_next_one_is_served() -> None:
    async with named_echo("live") as live:
        dead = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        dead_address = address(dead)
        dead.close()
        await dead.wait_closed()
        async with RoundRobin([dead_address, address(live)]) as proxy, asyncio.timeout(BOUND_S):
            assert await ask(proxy.port, b"x\n") == b""
            assert await ask(proxy.port, b"y\n") == b"live: y\n"
    assert proxy.chosen == [0, 1]


async def test_closing_cuts_open_connections_and_stops_accepting() -> None:
    async with named_echo("a") as a:
        proxy = RoundRobin([address(a)])
        await proxy.start()
        port = proxy.port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        async with asyncio.timeout(BOUND_S):
            assert await reader.readline() == b"a: ping\n"
            await proxy.close()
            assert await reader.read() == b""  # cut: end of stream
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)


def test_a_proxy_needs_a_backend() -> None:
    with pytest.raises(ValueError, match="at least one backend"):
        RoundRobin([])
