"""The delay line's compiled queue reader (lab/net/shaping/_queue_reader.c) against the
pure-Python decoder (nfqueue.packets): the same packets from the same bytes, whatever the
bytes, and both on a real kernel queue in a namespace of its own."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.lab.net.shaping import delayline, nfqueue

reader = delayline.queue_reader
SLOT = delayline.QueueReader.SLOT


def test_the_delay_line_reader_is_built():
    assert reader is not None, (
        "simpleperf.lab.net.shaping._queue_reader is not built: install the package with pip "
        "on a machine with a C compiler and Python's headers (bash scripts/setup)")


def packet_message(packet_id: int, stamp: tuple[int, int] | None, extra: list[bytes]) -> bytes:
    """A queued-packet message as the kernel sends it: the packet header, other attributes,
    and (when the packet was stamped) its arrival time."""
    attributes = b"".join(extra)
    attributes = nfqueue._attribute(nfqueue.NFQA_PACKET_HDR,
                                    struct.pack("!IHB", packet_id, 0x0800, 0)) + attributes
    if stamp is not None:
        attributes += nfqueue._attribute(nfqueue.NFQA_TIMESTAMP, struct.pack("!QQ", *stamp))
    return nfqueue._message(nfqueue.NFQNL_MSG_PACKET, 3, attributes, 0, 0)


ATTRIBUTE = st.builds(nfqueue._attribute, st.integers(0, 0xFFFF).filter(
    lambda kind: kind & 0x3FFF not in (nfqueue.NFQA_PACKET_HDR, nfqueue.NFQA_TIMESTAMP)),
    st.binary(max_size=24))
MESSAGE = st.one_of(
    st.builds(packet_message, st.integers(0, 2**32 - 1),
              st.none() | st.tuples(st.integers(0, 2**40), st.integers(0, 999_999)),
              st.lists(ATTRIBUTE, max_size=3)),
    st.binary(max_size=60))  # anything at all: a hostile or damaged message


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(MESSAGE, min_size=1, max_size=3).map(b"".join), min_size=1,
                max_size=80),
       st.integers(0, 40))
def test_compiled_and_pure_decoders_agree(datagrams, cut):
    """Each datagram read whole or cut short by a small slot, as a long message would be."""
    slot = SLOT if cut < 30 else max(16, cut * 4)
    datagrams = [datagram[:slot] for datagram in datagrams]
    assert reader is not None
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with left, right:
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        for datagram in datagrams:
            left.send(datagram)
        found, drained = reader.drain(right.fileno(), bytearray(reader.MAX_MESSAGES * slot),
                                      slot)
    expected = [packet for datagram in datagrams for packet in nfqueue.packets(datagram)]
    assert found == expected
    assert drained


def test_bad_buffers_are_refused():
    assert reader is not None
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with left, right:
        with pytest.raises(ValueError):
            reader.drain(right.fileno(), bytearray(8), 16)
        with pytest.raises(TypeError):
            reader.drain(right.fileno(), b"read-only" * 100, 16)
        assert reader.drain(right.fileno(), bytearray(1024), 1024) == ([], True)
    with pytest.raises(OSError):
        reader.drain(right.fileno(), bytearray(1024), 1024)  # closed


def send_datagrams(namespace: str, count: int, size: int = 1) -> tuple[float, float]:
    """`count` UDP datagrams of `size` bytes to the namespace's own discard port; the
    wall-clock window."""
    began = time.time()
    subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c",
                    "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                    f"for _ in range({count}): s.sendto(b'x' * {size}, ('127.0.0.1', 9))"],
                   check=True, timeout=60)
    return began, time.time()


@pytest.mark.lab
@pytest.mark.root
@pytest.mark.own_shaper
def test_both_readers_take_every_packet_of_a_real_queue(empty_namespace, monkeypatch):
    """More packets than one compiled call returns: ids follow each other with none missed,
    and every one carries the kernel's arrival stamp from within the sending window."""
    number = 7
    subprocess.run(["ip", "netns", "exec", empty_namespace, "iptables", "-t", "raw", "-A",
                    "PREROUTING", "-i", "lo", "-p", "udp", "--dport", "9", "-j", "NFQUEUE",
                    "--queue-num", str(number)], check=True)
    stamper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the kernel stamps arrivals
    stamper.setsockopt(socket.SOL_SOCKET, delayline.SO_TIMESTAMP, 1)
    queue = delayline.open_queue_socket(empty_namespace, number)
    with stamper, queue:
        seen: list[nfqueue.Queued] = []
        for pure in (False, True):
            if pure:
                monkeypatch.setenv("SIMPLEPERF_PURE_PYTHON", "1")
            began, ended = send_datagrams(empty_namespace, 5000)
            time.sleep(0.2)  # the kernel queues them as they come
            read = delayline.QueueReader()
            assert (read.compiled is None) is pure
            batches = list(read.batches(queue))
            packets = [packet for batch in batches for packet in batch]
            assert len(packets) == 5000, pure
            if not pure:  # one call's limit, then the rest
                assert len(batches[0]) == reader.MAX_PACKETS < 5000
            ids = [packet_id for packet_id, *_ in packets]
            first = ids[0] if not seen else seen[-1][0] + 1
            assert ids == list(range(first, first + 5000))
            assert all(began - 0.001 <= stamp <= ended + 0.001 for _, stamp, *_ in packets
                       if stamp is not None)
            assert all(stamp is not None for _, stamp, *_ in packets)
            assert all(packet[2:] == (0, b"") for packet in packets)  # metadata only
            queue.send(nfqueue.verdict_up_to(number, ids[-1]))
            seen += packets


@pytest.mark.lab
@pytest.mark.root
@pytest.mark.own_shaper
def test_a_queue_for_the_own_discipline_gives_lengths_and_headers(empty_namespace,
                                                                   monkeypatch):
    """Bound for headers, both readers give each packet's IP length and its first bytes (all
    of a short packet, HEADER_BYTES of a long one, whose full length the kernel states)."""
    number = 8
    subprocess.run(["ip", "netns", "exec", empty_namespace, "iptables", "-t", "raw", "-A",
                    "PREROUTING", "-i", "lo", "-p", "udp", "--dport", "9", "-j", "NFQUEUE",
                    "--queue-num", str(number)], check=True)
    queue = delayline.open_queue_socket(empty_namespace, number, headers=True)
    with queue:
        for pure, size in ((False, 1), (True, 1), (False, 1000), (True, 1000)):
            monkeypatch.setenv("SIMPLEPERF_PURE_PYTHON", "1" if pure else "0")
            send_datagrams(empty_namespace, 50, size)
            time.sleep(0.2)
            read = delayline.QueueReader()
            assert (read.compiled is None) is pure
            packets = [packet for batch in read.batches(queue) for packet in batch]
            assert len(packets) == 50
            length = 20 + 8 + size
            assert {p[2] for p in packets} == {length}
            shown = min(length, nfqueue.HEADER_BYTES)
            for _, _, _, header in packets:
                assert len(header) == shown
                assert header[0] == 0x45 and header[9] == 17  # IPv4, UDP
                assert struct.unpack("!H", header[2:4])[0] == length
                assert struct.unpack("!H", header[22:24])[0] == 9  # the destination port
            for packet_id, *_ in packets:
                queue.send(nfqueue.verdict(number, packet_id, accept=False))


def _kernel_applies(held: list[int], messages: list[bytes]) -> dict[int, tuple[bool, int | None]]:
    """What nfnetlink_queue does with verdict messages: one verdict takes its id (which it
    must hold), a batch verdict accepts every held id up to its own. The verdicts given,
    by id, in the order the kernel gave them (accepted packets leave in it); `held` keeps
    the rest, in order."""
    given: dict[int, tuple[bool, int | None]] = {}
    for message in messages:
        kind = struct.unpack_from("=H", message, 4)[0] & 0xFF
        verdict, packet_id = struct.unpack_from("!II", message, 16 + 4 + 4)
        mark = struct.unpack_from("!I", message, 16 + 4 + 12 + 4)[0] if len(message) > 32 \
            else None
        if kind == nfqueue.NFQNL_MSG_VERDICT_BATCH:  # in order, up to one after it
            taken = []
            for held_id in held:
                if (packet_id - held_id) & 0xFFFFFFFF >= 1 << 31:
                    break
                taken.append(held_id)
            assert taken, f"a batch verdict up to {packet_id} that takes nothing"
        else:
            assert packet_id in held, f"a verdict for {packet_id}, which is not held"
            taken = [packet_id]
        for held_id in taken:
            held.remove(held_id)
            given[held_id] = (verdict == nfqueue.NF_ACCEPT, mark)
    return given


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(1, 2**32 - 1), st.integers(2**32 - 300, 2**32 - 1)),
       st.lists(st.tuples(st.integers(0, 12), st.booleans(),
                          st.lists(st.integers(0, 30), max_size=12)), min_size=1, max_size=40),
       st.randoms(use_true_random=False))
def test_verdicts_release_exactly_the_packets_given_whatever_their_order(first, steps, rng):
    """The own discipline releases packets in any order, drops and marks some: the
    verdict messages (batches where the released ids make a prefix of what the kernel
    holds) give exactly those packets their verdicts, never one still waiting, whatever
    the order, the ids the kernel numbered but never delivered, and the ids' wrap at 2^32.
    No packet passes a marked one it was released after, nor falls behind one it was
    released before (a marked packet sent ahead of its batch reorders its flow)."""
    verdicts = nfqueue.Verdicts(7)
    held: list[int] = []  # in the kernel's queue, in id order
    waiting: list[int] = []  # held, and still in the discipline
    next_id = first
    for arriving, skip, picks in steps:
        if skip:
            next_id = (next_id + 3) % 2**32  # numbered, never delivered: not held
        ids = [(next_id + i) % 2**32 for i in range(arriving)]
        next_id = (next_id + arriving) % 2**32
        verdicts.arrived(ids)
        held += ids
        waiting += ids
        chosen = list(dict.fromkeys(waiting[pick % len(waiting)] for pick in picks)) \
            if waiting else []
        dropped = [i for i in chosen if rng.random() < 0.15]
        released = [(i, nfqueue.CE_MARK if rng.random() < 0.3 else None)
                    for i in chosen if i not in dropped]
        given = _kernel_applies(held, verdicts.messages(released, dropped))
        assert set(given) == set(chosen)
        assert all(given[i] == (False, None) for i in dropped)
        assert all(given[i] == (True, mark) for i, mark in released)
        sent = [i for i in given if i not in dropped]  # the order they left in
        for place, (packet_id, mark) in enumerate(released):
            if mark is not None:
                before = sent[:sent.index(packet_id)]
                assert set(before) == {i for i, _ in released[:place]}, (released, sent)
        waiting = [i for i in waiting if i not in chosen]
        assert held == [i for i in held if i in waiting] and len(held) == len(waiting)
