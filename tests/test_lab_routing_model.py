"""Routed topologies as data: the routing fields' rules, the FRR configuration written from
them, and the kernel's routes read back (no namespaces, no root)."""

from __future__ import annotations

import ipaddress
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.lab.model import routing, theory, topology
from simpleperf.lab.model.topology import TopologyError
from simpleperf.lab.net.routing import config, tables

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

TWO_ROUTERS = """
routing = "ospf"
[hosts]
h1 = {{}}
h2 = {{}}
[routers]
r1 = {{ {r1} }}
r2 = {{ {r2} }}
[[links]]
a = "h1"
a_address = "10.0.1.2/24"
b = "r1"
b_address = "10.0.1.1/24"
[[links]]
name = "L1"
a = "r1"
a_address = "10.0.12.1/30"
b = "r2"
b_address = "10.0.12.2/30"
{link}
[[links]]
a = "r2"
a_address = "10.0.2.1/24"
b = "h2"
b_address = "10.0.2.2/24"
"""


def two_routers(r1: str = "", r2: str = "", link: str = "", top: str = "") -> str:
    return top + TWO_ROUTERS.format(r1=r1, r2=r2, link=link)


def test_multipath_is_per_flow_unless_asked_per_packet():
    assert topology.parse(two_routers()).routing.multipath == "per-flow"
    model = topology.parse(two_routers(top='multipath = "per-packet"\n'))
    assert model.routing.per_packet


@pytest.mark.parametrize("text, message", [
    (two_routers().replace('"ospf"', '"rip"'),
     "routing = 'rip' must be one of: 'static', 'ospf'"),
    (two_routers(r1="asn = 65001").replace('routing = "ospf"', ""),
     "node r1: asn needs routing = 'ospf'"),
    (two_routers(r1="asn = 65001"),
     "node r2: asn is missing (when one router has an asn, every router needs one)"),
    (two_routers(r1="asn = 0", r2="asn = 65002"), "node r1: asn = 0 must be an AS number"),
    (two_routers(r1='asn = "65001"', r2="asn = 65002"), "node r1: asn = '65001' must be"),
    (two_routers(link="cost = 0"), "link L1: cost = 0 must be a whole number from 1 to 65535"),
    (two_routers(link="cost = 10").replace('routing = "ospf"', ""),
     "link L1: cost is an OSPF cost and needs routing = 'ospf'"),
    (two_routers(top="timers = { ospf_hello = 4, ospf_dead = 4 }\n"),
     "timers: ospf_dead (4 s) must be longer than ospf_hello (4 s)"),
    (two_routers(top="timers = { ospf_hello = '0.5s' }\n"),
     "timers: ospf_hello = '0.5s' must be a whole number of seconds"),
    (two_routers(top="timers = { bgp_keepalive = 2, bgp_hold = 5 }\n"),
     "timers: bgp_hold (5 s) must be at least 3 x bgp_keepalive (2 s)"),
    (two_routers(top="timers = { hello = 1 }\n"), "timers: unknown field 'hello'"),
    (two_routers(top="timers = { bfd_interval = '1ms' }\n"),
     "timers: bfd_interval = '1ms' must be a time from '10ms' to '60s'"),
    (two_routers(r1="frr = 5"), "node r1: frr must be text of FRR configuration commands"),
    (two_routers(r1="ospf = true"), "node r1: unknown field 'ospf'"),
    (two_routers().replace("h1 = {}", "h1 = { asn = 1 }"), "node h1: unknown field 'asn'"),
    (two_routers(top='multipath = "per-byte"\n'),
     "multipath = 'per-byte' must be one of: 'per-flow', 'per-packet'"),
    (two_routers(top='multipath = "per-packet"\n').replace('routing = "ospf"', ""),
     "multipath = 'per-packet' spreads the equal-cost routes of routing daemons: it needs "
     "routing = 'ospf'"),
])
def test_malformed_routing_fields_are_one_line_errors(text, message):
    with pytest.raises(TopologyError) as caught:
        topology.parse(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_as_split_in_two_is_refused_naming_it():
    text = two_routers(r1="asn = 65001", r2="asn = 65002").replace(
        "[routers]", "[routers]\nr3 = { asn = 65001 }").replace(
        '[[links]]\na = "r2"', '[[links]]\na = "r2"\nb_address = "10.0.23.2/30"\n'
        'b = "r3"\na_address = "10.0.23.1/30"\n[[links]]\na = "r2"', 1)
    with pytest.raises(TopologyError, match=r"AS 65001: r3 cannot reach r1 over links inside "
                                            r"the AS"):
        topology.parse(text)


def test_hosts_without_routes_send_to_the_first_router_on_their_subnet():
    model = topology.load("campus")
    assert [str(r) for r in model.nodes["h2"].routes] == ["default via 10.10.1.1"]
    assert [str(r) for r in model.nodes["h5"].routes] == ["default via 10.10.2.1"]
    static = topology.parse(two_routers().replace('routing = "ospf"', ""))
    assert static.nodes["h1"].routes == ()  # a static topology says what it means


def test_wan_configuration_peers_ebgp_across_ases_and_ibgp_inside():
    model = topology.load("wan")
    bgp = config.configs(model, "r2")["bgpd"]
    assert "router bgp 65001" in bgp
    assert " neighbor 172.16.13.2 remote-as 65003" in bgp
    assert " neighbor 172.16.12.2 remote-as 65002" in bgp
    assert " neighbor 10.1.1.1 remote-as 65001" in bgp  # r1, by its router id
    assert "  neighbor 10.1.1.1 next-hop-self" in bgp
    assert "  neighbor 172.16.13.2 next-hop-self" not in bgp
    ospf = config.configs(model, "r2")["ospfd"]
    assert "interface r2-eth0\n ip ospf area 0" in ospf  # A1, inside the AS
    assert "r2-eth1" not in ospf and "r2-eth2" not in ospf  # the eBGP links are not OSPF's
    assert config.daemons(model, "r3") == ["zebra", "ospfd", "bgpd"]
    assert config.router_id(model, "r1") == ipaddress.IPv4Address("10.1.1.1")


def test_campus_configuration_costs_passive_lans_and_timers():
    model = topology.load("campus")
    ospf = config.configs(model, "r1")["ospfd"]
    assert "interface r1-eth0\n ip ospf area 0\n ip ospf passive" in ospf  # announced, no hellos
    assert "interface r1-eth2\n ip ospf area 0\n ip ospf hello-interval 1\n" \
           " ip ospf dead-interval 4" in ospf
    assert " ip ospf network point-to-point\n ip ospf cost 30" in ospf  # B1
    assert config.daemons(model, "r1") == ["zebra", "ospfd"]
    bfd = topology.parse(model.source.replace('routing = "ospf"', 'routing = "ospf"\n'
                                              'timers = { bfd = true, bfd_interval = "50ms" }'))
    assert "bfdd" in config.daemons(bfd, "r1")
    assert "  receive-interval 50" in config.configs(bfd, "r1")["bfdd"]
    assert " ip ospf bfd\n ip ospf bfd profile lab" in config.configs(bfd, "r1")["ospfd"]


def test_kernel_routes_are_read_as_the_kernel_uses_them():
    entries = [
        {"dst": "default", "gateway": "10.0.0.1", "dev": "eth0", "protocol": "static"},
        {"dst": "10.1.0.0/24", "gateway": "10.0.0.9", "metric": 20, "protocol": "ospf"},
        {"dst": "10.1.0.0/24", "gateway": "10.0.0.7", "metric": 0, "protocol": "static"},
        {"dst": "10.2.0.0/24", "protocol": "ospf", "metric": 20, "nexthops": [
            {"gateway": "10.0.0.5", "flags": ["linkdown"]},
            {"gateway": "10.0.0.6", "flags": []}, {"gateway": "10.0.0.8"}]},
        {"dst": "10.3.0.0/24", "gateway": "10.0.0.5", "flags": ["linkdown"]},
        {"dst": "10.4.0.0/24", "type": "blackhole"},
        {"dst": "10.0.0.0/24", "dev": "eth0", "protocol": "kernel", "scope": "link"},
    ]
    found = {str(r.destination): ([str(g) for g in r.gateways], r.protocol)
             for r in tables.parse(entries)}
    assert found == {"0.0.0.0/0": (["10.0.0.1"], "static"),
                     "10.1.0.0/24": (["10.0.0.7"], "static"),
                     "10.2.0.0/24": (["10.0.0.6", "10.0.0.8"], "ospf")}


def test_theory_follows_installed_routes_not_the_file():
    """The routes a kernel holds replace the model's: a failover shows in theory's path."""
    model = topology.load("campus")
    via_r2 = {"r1": [tables.Installed(ipaddress.IPv4Network("10.10.2.0/24"),
                                      (ipaddress.IPv4Address("10.10.12.2"),), "ospf")],
              "r2": [tables.Installed(ipaddress.IPv4Network("10.10.2.0/24"),
                                      (ipaddress.IPv4Address("10.10.23.2"),), "ospf")]}
    direct = {"r1": [tables.Installed(ipaddress.IPv4Network("10.10.2.0/24"),
                                      (ipaddress.IPv4Address("10.10.13.2"),), "ospf")]}
    primary = theory.path(tables.installed(model, via_r2), "h1", "h4")
    backup = theory.path(tables.installed(model, direct), "h1", "h4")
    assert [link.name for link, _ in primary.hops if link.is_shaped] == ["C1", "C2"]
    assert [link.name for link, _ in backup.hops if link.is_shaped] == ["B1"]
    assert primary.bottleneck == 100e6 and backup.bottleneck == 50e6
    assert tables.unreachable(tables.installed(model, {})) != []  # no routes: r1 is stuck


_values = st.one_of(st.none(), st.integers(-5, 2**33), st.text(max_size=12),
                    st.floats(allow_nan=True), st.booleans(),
                    st.lists(st.text(max_size=8), max_size=3),
                    st.dictionaries(st.text(max_size=8), st.integers(0, 9), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["routing", "timers", "asn", "frr", "cost", "timer", "multipath"]),
       st.sampled_from(sorted(routing.TIMER_KEYS)), _values)
def test_any_routing_value_is_a_topology_or_a_one_line_error(field, timer, value):
    """Whatever a routing field holds: a topology whose routing makes sense, or one line."""
    data = tomllib.loads(topology.load("wan").source)
    if field in ("routing", "timers", "multipath"):
        data[field] = value
    elif field == "timer":
        data["timers"] = {timer: value}
    elif field == "cost":
        data["links"][3]["cost"] = value
    else:
        data["routers"]["r2"][field] = value
    try:
        model = topology.from_dict(data)
    except TopologyError as error:
        assert "\n" not in str(error) and len(str(error)) <= 300
        return
    assert model.routing.protocol in routing.PROTOCOLS
    assert model.routing.multipath in routing.MULTIPATH_MODES
    for router in model.routers():
        assert config.configs(model, router)["zebra"].startswith(f"hostname {router}\n")
