"""The harness's free ports never come from the kernel's ephemeral range, and none is handed out again before
the whole range has been: a port another process can be given by binding port 0 is one a gateway pod can lose
before it binds it."""

from __future__ import annotations

import socket
from pathlib import Path

from mcpg_testing import processes


def _ephemeral() -> range:
    low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return range(low, high + 1)


def test_no_port_is_one_the_kernel_would_hand_to_a_bind_of_port_0() -> None:
    ports = processes.free_ports(50)
    assert not set(ports) & set(_ephemeral())
    assert not set(ports) & set(range(30_000, 32_768))  # nor a NodePort


def test_a_port_is_handed_out_once_even_after_its_user_closed_it() -> None:
    first = processes.free_ports(20)
    second = processes.free_ports(20)  # the first twenty are all free again: nothing bound them
    assert len(set(first)) == 20
    assert not set(first) & set(second)


def test_a_port_bound_by_someone_else_is_skipped() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        port = processes.PORTS[processes._next[0] % len(processes.PORTS)]
        held.bind(("127.0.0.1", port))
        assert port not in processes.free_ports(5)
