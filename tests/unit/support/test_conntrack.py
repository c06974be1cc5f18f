"""Reading kube-proxy's choice of pod from conntrack: the listing's lines, parsed, and the addresses to send from.

The lines are real `conntrack -L -p tcp -d 10.0.0.12 -o extended` output (conntrack-tools 1.4.7) of connections
DNATed by an iptables rule, as kube-proxy's are, from 10.0.0.12:80 to a "pod" at 10.88.0.7:8080: two closed ones,
and one to a port no rule translated, which nothing answered.
"""

from __future__ import annotations

import ipaddress

import pytest

from mcpg_testing import conntrack
from mcpg_testing.conntrack import Flow
from mcpg_testing.nodeconfig import NODE_IP, POD_CIDR

CLOSED = (
    "ipv4     2 tcp      6 9 CLOSE src=10.88.0.1 dst=10.0.0.12 sport=60305 dport=80 src=10.88.0.7 dst=10.88.0.1 "
    "sport=8080 dport=60305 [ASSURED] mark=0 use=1"
)
OTHER_CLOSED = (
    "ipv4     2 tcp      6 9 CLOSE src=10.88.0.1 dst=10.0.0.12 sport=33707 dport=80 src=10.88.0.7 dst=10.88.0.1 "
    "sport=8080 dport=33707 [ASSURED] mark=0 use=1"
)
UNREPLIED = (
    "ipv4     2 tcp      6 119 SYN_SENT src=10.88.0.1 dst=10.0.0.12 sport=41172 dport=81 [UNREPLIED] src=10.0.0.12 "
    "dst=10.88.0.1 sport=81 dport=41172 mark=0 use=1"
)
SUMMARY = "conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown."


def test_a_translated_connection_names_its_client_its_service_and_the_pod_that_answered() -> None:
    flow = conntrack.parse_line(CLOSED)
    assert flow == Flow(client="10.88.0.1:60305", target="10.0.0.12:80", answered_by="10.88.0.7")
    assert flow.translated


def test_each_connection_is_told_apart_by_its_clients_port() -> None:
    flows = [conntrack.parse_line(line) for line in (CLOSED, OTHER_CLOSED)]
    assert [f.client for f in flows if f] == ["10.88.0.1:60305", "10.88.0.1:33707"]


def test_a_connection_no_rule_translated_is_parsed_but_names_no_pod() -> None:
    flow = conntrack.parse_line(UNREPLIED)
    assert flow is not None
    assert flow.answered_by == "10.0.0.12"
    assert not flow.translated


@pytest.mark.parametrize("line", [SUMMARY, "", CLOSED.split(" src=10.88.0.7")[0]])
def test_a_line_without_both_tuples_is_no_flow(line: str) -> None:
    assert conntrack.parse_line(line) is None


def test_the_listing_asks_for_the_services_tcp_connections_by_original_destination() -> None:
    argv = conntrack.list_command("10.0.0.12", 80)
    assert argv == ["conntrack", "-L", "-p", "tcp", "-d", "10.0.0.12", "--dport", "80", "-o", "extended"]


def test_spare_addresses_are_distinct_in_the_pod_range_and_far_from_its_start() -> None:
    addresses = conntrack.spare_addresses(64)
    network = ipaddress.ip_network(POD_CIDR)
    assert len(set(addresses)) == 64
    assert all(ipaddress.ip_address(a) in network for a in addresses)
    assert NODE_IP not in addresses
    assert network.broadcast_address not in {ipaddress.ip_address(a) for a in addresses}
    # host-local hands pod addresses out from the bottom of the range: these are all in its last /24
    assert min(int(ipaddress.ip_address(a)) for a in addresses) > int(network.broadcast_address) - 256
