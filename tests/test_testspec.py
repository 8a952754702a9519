"""The test description as one table (testspec.py): every field declares its rule and the
iperf3 parameters that carry it beside its default, and the native protocol checks a peer's
description against those rules alone. Descriptions drawn from the rules themselves cross
the wire and come back equal, so a field added to TestSpec is carried and checked without a
second list to keep; a field's iperf3 parameters and iperf2 header fields are the ones that
move when it does, and a field neither can carry refuses that peer's server in one line
where it would have to honour it."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.command_line.cli import READERS, build_parser, parse_args
from simpleperf.description.testspec import (
    FLAGS,
    RULES,
    UNCARRIED,
    UNCARRIED_IPERF2,
    Rule,
    TestSpec,
    beyond_iperf2,
    beyond_iperf3,
)
from simpleperf.description.transports import TCP, UDP
from simpleperf.errors import ProtocolError, UsageError
from simpleperf.protocol import iperf2, iperf3, native


def values(rule: Rule) -> st.SearchStrategy[Any]:
    """Any value the rule allows."""
    if rule.kind is bool:
        found: st.SearchStrategy[Any] = st.booleans()
    elif rule.kind is str:
        found = (st.sampled_from(rule.choices) if rule.choices
                 else st.from_regex(re.compile(r"[a-z0-9_]{1,15}"), fullmatch=True))
    elif rule.kind is int:
        assert rule.low is not None and rule.high is not None
        found = st.integers(int(rule.low) + rule.above, int(rule.high))
    else:
        found = st.floats(rule.low, rule.high, exclude_min=rule.above, allow_nan=False)
    return st.none() | found if rule.optional else found


def refused(rule: Rule) -> list[Any]:
    """Values just outside what the rule allows."""
    wrong: list[Any] = ["text" if rule.kind is not str else 7, [1]]
    if not rule.optional:
        wrong.append(None)
    if rule.kind is not bool:
        wrong.append(True)
    if rule.kind is bool:
        wrong.append(1)
    if rule.kind in (int, float):
        wrong += [math.nan, *([rule.low] if rule.above else []),
                  *([rule.low - 1] if rule.low is not None else []),
                  *([rule.high * 2 + 1] if rule.high is not None else [])]
    if rule.kind is int:
        wrong.append(float(rule.high or 1) - 0.5)
    if rule.kind is str:
        wrong.append("Not a word!" if rule.word else "neither")
    return wrong


def consistent(drawn: dict[str, Any]) -> dict[str, Any]:
    """The fields' own rules say nothing of each other: what parse_spec asks of them
    together (one of a duration and an amount, a datagram's size, L4S on steady UDP)."""
    fixed = dict(drawn)
    if (fixed["duration"] is None) == (fixed["num_bytes"] is None):
        fixed["num_bytes"] = None if fixed["duration"] is not None else 1000
    if fixed["protocol"] == UDP.name:
        fixed["length"] = min(max(fixed["length"], native.MIN_ISOCHRONOUS_UDP_LENGTH),
                              UDP.max_length)
    else:
        fixed["length"] = max(fixed["length"], native.WRITE_HEADER.size)
        fixed["l4s"] = False
    if fixed["l4s"]:
        fixed["frame_rate"] = 0.0
    return fixed


# Every field of the dataclass (not RULES, what parse_spec checks): a field it leaves out
# is lost on the way and fails the round trip.
specs = st.fixed_dictionaries({item.name: values(item.metadata["rule"])
                               for item in dataclasses.fields(TestSpec)}).map(
    consistent).map(lambda drawn: TestSpec(**drawn))


def test_every_field_of_the_test_description_declares_its_rule():
    for item in dataclasses.fields(TestSpec):
        assert isinstance(item.metadata.get("rule"), Rule), item.name
        assert item.metadata["rule"].allows(item.default), item.name


@settings(max_examples=300, deadline=None)
@given(specs)
def test_any_description_the_rules_allow_crosses_the_native_protocol_unchanged(spec):
    message = json.loads(native.encode(native.spec_message(spec))[4:])
    assert native.parse_spec(message) == spec


@pytest.mark.parametrize("name", [item.name for item in dataclasses.fields(TestSpec)])
def test_a_value_outside_a_fields_rule_is_refused_naming_the_field(name):
    good = native.spec_message(TestSpec())
    for wrong in refused(RULES[name]):
        with pytest.raises(ProtocolError, match=f"'{name}'"):
            native.parse_spec({**good, name: wrong})


def other_value(rule: Rule, default: Any) -> Any:
    """A value the rule allows that is not the default: its highest, another choice."""
    if rule.kind is bool:
        return not default
    if rule.kind is str:
        return next(word for word in rule.choices or ("reno", "cubic") if word != default)
    assert rule.high is not None
    return int(rule.high) if rule.kind is int else float(rule.high)


@pytest.mark.parametrize("item", dataclasses.fields(TestSpec), ids=lambda item: item.name)
def test_a_field_reaches_an_iperf3_peer_exactly_through_the_parameters_it_names(item):
    """A field that names iperf3 parameters changes one of them and what an iperf3 server
    reads; one that names none changes nothing an iperf3 peer is sent."""
    keys = item.metadata["iperf3"] if isinstance(item.metadata["iperf3"], tuple) else ()
    changed = dataclasses.replace(TestSpec(), **{item.name: other_value(
        item.metadata["rule"], item.default)})
    before = iperf3.parameters_message(TestSpec(), "3.12")
    after = iperf3.parameters_message(changed, "3.12")
    if not keys:
        assert after == before
        return
    moved = {key for key in {*before, *after} if before.get(key) != after.get(key)}
    assert moved & set(keys), (moved, keys)
    assert iperf3.parse_parameters(after) != iperf3.parse_parameters(before)


# The fields an iperf3 peer may ignore: the same test runs without them (our server's rows
# every `sample` seconds; our sender's whole-segment writes). A new field is added here
# only with that reason; otherwise it names the iperf3 parameters or an Uncarried.
IPERF3_MAY_IGNORE = {"sample", "whole_segments"}


def test_a_field_no_iperf3_parameter_carries_says_whether_an_iperf3_server_may_ignore_it():
    ignored = {item.name for item in dataclasses.fields(TestSpec)
               if item.metadata["iperf3"] == ()}
    assert ignored == IPERF3_MAY_IGNORE
    for name, uncarried in UNCARRIED.items():
        assert uncarried.flag.startswith("--") and uncarried.end in ("sender", "receiver",
                                                                      "both"), name


def changed_alone(item: dataclasses.Field, base: TestSpec) -> TestSpec:
    """`base` with this field alone away from its default (an amount replaces the time)."""
    value = other_value(item.metadata["rule"], item.default)
    extra = {"duration": None} if item.name == "num_bytes" else {}
    return dataclasses.replace(base, **{item.name: value}, **extra)


@pytest.mark.parametrize("item", dataclasses.fields(TestSpec), ids=lambda item: item.name)
@pytest.mark.parametrize("peer,beyond,uncarried", [("iperf3", beyond_iperf3, UNCARRIED),
                                                   ("iperf2", beyond_iperf2, UNCARRIED_IPERF2)])
def test_a_server_of_another_tool_is_refused_a_test_only_for_what_it_would_have_to_honour(
        item, peer, beyond, uncarried):
    """A field set alone away from its default refuses an iperf3 (iperf2) server in
    exactly the directions where it has the end that honours the field, naming the flag."""
    changed = changed_alone(item, TestSpec())
    field_uncarried = uncarried.get(item.name)
    server_end = {"forward": "receiver", "reverse": "sender"}
    for direction in ("forward", "reverse", "bidir"):
        test = dataclasses.replace(changed, direction=direction) \
            if item.name != "direction" else changed
        refused = beyond(test)
        honours = field_uncarried is not None and (
            field_uncarried.end in ("both", server_end.get(direction, field_uncarried.end)))
        if not honours:
            assert refused is None, (direction, refused)
            continue
        assert refused is not None and field_uncarried is not None
        needs, lacks = refused
        assert needs == f"{field_uncarried.flag} needs a simpleperf server"
        assert lacks == field_uncarried.lacks


def iperf2_parts(spec: TestSpec) -> dict[str, Any]:
    """What our client tells an iperf2 server of `spec`: the header's fields, and the
    socket's kind ("transport")."""
    header = iperf2.header_from_spec(spec, 5001, (1, 2))
    return {**dataclasses.asdict(header), "transport": spec.transport}


@pytest.mark.parametrize("item", dataclasses.fields(TestSpec), ids=lambda item: item.name)
def test_a_field_reaches_an_iperf2_peer_exactly_through_the_header_fields_it_names(item):
    """A field that names iperf2 header fields moves only those, in some test (TCP or UDP,
    either direction), and what an iperf2 server parses moves with them; a field that
    names none moves none of them. (One an iperf2 server is refused for where it would
    honour it may tell a receiving server something, as --isochronous's flag does: the
    refusal is the test above.)"""
    parts = item.metadata["iperf2"]
    if not isinstance(parts, tuple):
        assert item.name in UNCARRIED_IPERF2
        return
    moved_somewhere = False
    for protocol in (TCP.name, UDP.name):
        for direction in ("forward", "reverse"):
            base = dataclasses.replace(TestSpec(), protocol=protocol, direction=direction,
                                       length=1400)
            changed = changed_alone(item, base)
            before, after = iperf2_parts(base), iperf2_parts(changed)
            moved = {key for key in before if before[key] != after[key]}
            if not parts:
                assert not moved, (protocol, direction, moved)
                continue
            assert moved <= set(parts), (protocol, direction, moved, parts)
            if moved - {"transport"}:
                udp = changed.transport.datagrams
                assert iperf2.parse_header(iperf2.encode_header(
                    iperf2.header_from_spec(changed, 5001, (1, 2)), udp)) != \
                    iperf2.parse_header(iperf2.encode_header(
                        iperf2.header_from_spec(base, 5001, (1, 2)), udp))
            moved_somewhere = moved_somewhere or bool(moved)
    assert moved_somewhere or not parts, parts


def test_a_sending_iperf2_server_is_told_the_rate_over_tcp_too():
    """-R -b: an iperf2 server sending TCP reads its rate from the header (it was 0, and
    the server sent unlimited)."""
    spec = TestSpec(direction="reverse", rate=20e6)
    header = iperf2.parse_header(iperf2.encode_header(
        iperf2.header_from_spec(spec, 5001, (1, 2)), False))
    assert iperf2.spec_from_header(header, TCP, 1400).rate == 20e6
    forward = iperf2.header_from_spec(dataclasses.replace(spec, direction="forward"), 5001,
                                      (1, 2))
    assert forward.rate == 0  # our own sending: the bytes stay what they were


@pytest.mark.parametrize("argv,words", [
    (["--iperf2", "-R", "--tcp-congestion", "reno"],
     "--iperf2: -C/--congestion needs a simpleperf server: an iperf2 server is not told a "
     "congestion control"),
    (["--iperf2", "-A", "0,1"], "--iperf2: -A N,M needs a simpleperf server"),
    (["--iperf2", "-R", "-u", "--isochronous"], "--iperf2: --isochronous needs"),
    (["--iperf2", "-R", "--fq-rate", "10M"], "--iperf2: --fq-rate needs")])
def test_the_command_line_refuses_what_an_iperf2_server_would_drop(argv, words):
    with pytest.raises(UsageError, match="^" + re.escape(words)):
        parse_args(["-c", "h", *argv])
    forward = [word for word in argv if word != "-R"]
    if "-A" not in argv:  # where our end does it, the test runs
        assert parse_args(["-c", "h", *forward]).iperf2


def test_fields_an_iperf3_server_lacks_for_one_reason_are_named_together():
    test = TestSpec(trip_times=True, frame_rate=60.0)
    assert beyond_iperf3(test) == ("--trip-times and --isochronous need a simpleperf server",
                                   "measures no one-way delay")


# A text each reader of a declared flag takes, and the value it reads (cli.READERS)
SAMPLES = {"rate": ("50M", 50e6)}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_a_field_that_declares_its_flag_is_set_by_it_alone_and_on_a_client_only(name):
    """A field's own flag (testspec.Flag) is in --help's section of its family, sets the
    field of the client's test and nothing else, and is refused on a server: a switch for
    a bool field, else a value its reader checks (a bad one is one line naming the flag)."""
    flag = FLAGS[name]
    assert set(SAMPLES) == set(READERS)
    if flag.value is None:
        assert RULES[name].kind is bool and getattr(TestSpec(), name) is False
        words, value = [flag.name], True
    else:
        text, value = SAMPLES[flag.value]
        words = [flag.name, text]
        with pytest.raises(UsageError, match=f"^{re.escape(flag.name)} must be"):
            parse_args(["-c", "h", flag.name, "x"])
    parser = build_parser()
    section = next(group for group in parser._action_groups
                   if any(flag.name in action.option_strings for action in group._group_actions))
    assert section.title is not None and (flag.family in section.title or (
        flag.family == "native" and "native" in section.title))
    plain = parse_args(["-c", "h"]).test
    asked = parse_args(["-c", "h", *words]).test
    assert getattr(asked, name) == value and getattr(plain, name) != value
    assert dataclasses.replace(asked, **{name: getattr(plain, name)}) == plain
    with pytest.raises(UsageError, match=f"{re.escape(flag.name)} is a client option"):
        parse_args(["-s", *words])
