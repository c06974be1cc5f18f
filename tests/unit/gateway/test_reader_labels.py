"""What callers choose never becomes gateway state without a bound: the hosts a read goes to, pause rows.

A resource template whose backend url had a variable in its host (`http://{tenant}.api.example/...`) reached as
many hosts as callers named values, each with the backend's headers: labelled by the host requested, 1,500 reads
made 3,000 series, and `0x{n}` named any IPv4 address (`0x7f000001` is 127.0.0.1). The contract now refuses a
variable in a backend url's host, port or user (`contract.backend_urls`), so the hosts a gateway reads are its
configuration's; metrics are still labelled by the upstream as configured, and the pauses remembered are bounded.
"""

from __future__ import annotations

import pytest

from mcpg_gateway import upstream_pauses
from mcpg_gateway.contract import check
from mcpg_gateway.contract.errors import ConfigError
from mcpg_testing.configs import gateway_config


def test_a_template_whose_backend_host_is_a_variable_is_refused_before_it_can_read() -> None:
    # `0x{n}` named any IPv4 address a caller chose (`0x7f000001` is 127.0.0.1), with the backend's headers.
    templates = [
        {
            "name": "t",
            "uri_template": "t://host/{n}",
            "backend": {"kind": "http", "url": "http://0x{n}:8080/limited"},
        }
    ]
    with pytest.raises(ConfigError, match=r"resource_templates\[0\]\.backend\.url: has a \{variable\} in its host"):
        check.load(gateway_config(templates=templates), environ={})


def test_the_pauses_keep_at_most_a_bounded_number_of_upstreams_and_drop_the_one_ending_first() -> None:
    now = [0.0]
    pauses = upstream_pauses.UpstreamPauses(lambda: now[0])
    keys = [upstream_pauses.key_for(f"https://t{i}.api.example/", {}) for i in range(upstream_pauses.MAX_KEYS + 5)]
    for i, key in enumerate(keys):
        now[0] = float(i)  # each pause begins (and so ends) a second after the one before
        pauses.record(key, None)
    rows = pauses.snapshot()
    assert len(rows) == upstream_pauses.MAX_KEYS
    assert {row.upstream for row in rows} == {key.upstream for key in keys[5:]}
