"""Per-packet multipath's pure parts: the copies of the main table each mark is looked up
in, how they are rewritten, and which kernel notifications call for a rewrite. The copies at
work, in real routers, are tested in test_lab_routing.py."""

from __future__ import annotations

import struct

from simpleperf.lab.net.routing import perpacket

CONNECTED = {"dst": "10.10.1.0/24", "dev": "r1-eth0", "protocol": "kernel", "scope": "link",
             "prefsrc": "10.10.1.1", "flags": []}
TWO_WAYS = {"dst": "10.10.2.0/24", "nhid": 23, "protocol": "ospf", "metric": 20, "flags": [],
            "nexthops": [{"gateway": "10.10.12.2", "dev": "r1-eth1", "weight": 1, "flags": []},
                         {"gateway": "10.10.13.2", "dev": "r1-eth2", "weight": 1,
                          "flags": []}]}
ONE_WAY = {"dst": "10.10.23.0/30", "gateway": "10.10.12.2", "dev": "r1-eth1",
           "protocol": "ospf", "metric": 20, "flags": ["onlink"]}


def test_every_mark_gets_one_gateway_in_turn_and_every_other_route_as_it_is():
    wanted = perpacket.copies([TWO_WAYS, ONE_WAY, CONNECTED])
    assert len(wanted) == 3 * perpacket.WAYS
    gateways = [wanted[(perpacket.TABLE_BASE + mark, "10.10.2.0/24", 20)]
                for mark in range(1, perpacket.WAYS + 1)]
    assert sum("via 10.10.12.2 dev r1-eth1" in line for line in gateways) == perpacket.WAYS // 2
    assert sum("via 10.10.13.2 dev r1-eth2" in line for line in gateways) == perpacket.WAYS // 2
    assert "via 10.10.12.2" in gateways[1] and "via 10.10.13.2" in gateways[0]  # alternating
    table = perpacket.TABLE_BASE + 1
    assert wanted[(table, "10.10.1.0/24", 0)] == (f"10.10.1.0/24 table {table} dev r1-eth0 "
                                                  "scope link src 10.10.1.1 metric 0")
    assert wanted[(table, "10.10.23.0/30", 20)] == (f"10.10.23.0/30 table {table} via "
                                                    "10.10.12.2 dev r1-eth1 onlink metric 20")
    # A gateway must be reachable in its table when its route is added: connected first.
    assert list(wanted)[0] == (table, "10.10.1.0/24", 0)


def test_a_gateway_on_a_failed_link_is_never_copied():
    failed = dict(TWO_WAYS, nexthops=[dict(TWO_WAYS["nexthops"][0], flags=["linkdown"]),
                                      TWO_WAYS["nexthops"][1]])
    lines = perpacket.copies([failed]).values()
    assert lines and all("via 10.10.13.2" in line for line in lines)
    everything_down = dict(ONE_WAY, flags=["linkdown"])
    assert perpacket.copies([everything_down]) == {}  # left to the main table
    assert perpacket.copies([{"type": "blackhole", "dst": "10.9.0.0/16"}]) == {}


def test_a_rewrite_replaces_in_place_and_deletes_only_what_went():
    before = set(perpacket.copies([TWO_WAYS, ONE_WAY]))
    wanted = perpacket.copies([TWO_WAYS])
    script = perpacket.rewrite_script(before, wanted).splitlines()
    assert sum(line.startswith("route replace 10.10.2.0/24") for line in script) == 12
    deleted = [line for line in script if line.startswith("route del")]
    assert len(deleted) == 12 and all(" 10.10.23.0/30 " in line for line in deleted)
    assert script.index(deleted[0]) > max(i for i, line in enumerate(script)
                                          if line.startswith("route replace"))
    assert perpacket.rewrite_script(set(), {}) == ""


def notification(kind: int, table: int) -> bytes:
    body = bytes([2, 24, 0, 0, table, 3, 0, 1]) + bytes(4)  # rtmsg: family ... flags
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def test_only_changes_to_what_the_main_table_forwards_by_call_for_a_rewrite():
    concerns = perpacket._concerns_forwarding
    assert concerns(notification(perpacket.RTM_NEWROUTE, perpacket.RT_TABLE_MAIN))
    assert concerns(notification(perpacket.RTM_DELROUTE, perpacket.RT_TABLE_MAIN))
    assert not concerns(notification(perpacket.RTM_NEWROUTE, 252))  # a copy (table > 255)
    assert not concerns(notification(perpacket.RTM_NEWROUTE, 255))  # the local table
    assert concerns(notification(perpacket.RTM_NEWROUTE, 255)
                    + notification(perpacket.RTM_DELROUTE, perpacket.RT_TABLE_MAIN))
    assert concerns(notification(16, 0))  # RTM_NEWLINK: a link lost its carrier
    assert concerns(struct.pack("=IHHII", 4, 24, 0, 0, 0))  # malformed: rewrite to be safe


def test_setup_numbers_packets_in_turn_and_adds_a_rule_per_mark():
    commands = perpacket.setup_commands()
    nth = [c for c in commands if "--mode nth" in c]
    assert [c.split("--packet ")[1] for c in nth] == [f"{w} -j MARK --set-mark {w + 1}"
                                                      for w in range(perpacket.WAYS)]
    rules = [c for c in commands if c.startswith("ip rule")]
    assert len(rules) == perpacket.WAYS and all(
        int(c.split("pref ")[1].split()[0]) < 32766 for c in rules)
