"""The capture analysis against Wireshark itself: synthetic TCP conversations (losses,
reordering, duplicate ACKs, retransmissions, drawn by hypothesis) written as pcap files and
read by both tshark and simpleperf; every count must be the same. Plus UDP's witness and
files that are not captures."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
from pathlib import Path

import dpkt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simpleperf.lab.analysis import packets, tcp, udp

pytestmark = pytest.mark.capture
CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 5201)
MSS = 1000
FIELDS = {"retransmission": "retransmissions", "fast_retransmission": "fast_retransmissions",
          "spurious_retransmission": "spurious_retransmissions",
          "out_of_order": "out_of_order", "lost_segment": "lost_segments",
          "duplicate_ack": "duplicate_acks"}


def _frame(source, destination, seq, ack, flags, payload=0, window=500) -> bytes:
    segment = dpkt.tcp.TCP(sport=source[1], dport=destination[1], seq=seq & 0xFFFFFFFF,
                           ack=ack & 0xFFFFFFFF, flags=flags, win=window, off=5,
                           data=b"\0" * payload)
    ip = dpkt.ip.IP(src=socket.inet_aton(source[0]), dst=socket.inet_aton(destination[0]),
                    p=6, ttl=64, data=segment)
    ip.len = 20 + len(bytes(segment))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip))


def _write(path: Path, frames: list[tuple[float, bytes]], pcapng: bool = False) -> None:
    with open(path, "wb") as out:
        writer = dpkt.pcapng.Writer(out) if pcapng else dpkt.pcap.Writer(out, nano=True)
        for when, frame in frames:
            writer.writepkt(frame, ts=when)


def _conversation(events: list[tuple[str, int]], isn: int, gap_us: int) -> list:
    """A handshake, then data segments sent in the order `events` gives (each segment once
    or again, or skipped), each followed by the receiver's cumulative ACK, then FIN."""
    client_isn, server_isn = isn, 1000
    frames = [(0, CLIENT, SERVER, client_isn, 0, 0x02, 0),
              (500, SERVER, CLIENT, server_isn, client_isn + 1, 0x12, 0),
              (1000, CLIENT, SERVER, client_isn + 1, server_isn + 1, 0x10, 0)]
    now, received, highest = 1000, set(), 0
    for action, number in events:
        now += gap_us
        seq = client_isn + 1 + number * MSS
        if action != "drop":
            frames.append((now, CLIENT, SERVER, seq, server_isn + 1, 0x18, MSS))
            received.add(number)
        highest = max(highest, number)
        cumulative = 0
        while cumulative in received:
            cumulative += 1
        now += gap_us // 3
        frames.append((now, SERVER, CLIENT, server_isn + 1,
                       client_isn + 1 + cumulative * MSS, 0x10, 0))
    now += gap_us
    end = client_isn + 1 + (highest + 1) * MSS
    frames.append((now, CLIENT, SERVER, end, server_isn + 1, 0x11, 0))
    return [(1_700_000_000 + t / 1e6, _frame(a, b, s, k, f, n))
            for t, a, b, s, k, f, n in frames]


def _tshark_counts(path: Path) -> dict[tuple, dict[str, int]]:
    columns = ["tcp.srcport", "tcp.dstport", "tcp.len"] + [f"tcp.analysis.{f}"
                                                           for f in FIELDS]
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields"]
                         + [x for c in columns for x in ("-e", c)],
                         capture_output=True, text=True, check=True).stdout
    counts: dict[tuple, dict[str, int]] = {}
    for line in out.splitlines():
        cells = line.split("\t")
        row = counts.setdefault((int(cells[0]), int(cells[1])),
                                dict.fromkeys(["packets", "data", *FIELDS], 0))
        row["packets"] += 1
        row["data"] += int(cells[2]) > 0
        for name, cell in zip(FIELDS, cells[3:], strict=True):
            row[name] += bool(cell)
    return counts


def _our_counts(path: Path) -> dict[tuple, dict[str, int]]:
    counts = {}
    for d in tcp.analyze(packets.read(path).packets):
        counts[(d.source_port, d.destination_port)] = {
            "packets": d.packets, "data": d.data_segments} | {
            name: getattr(d, attribute) for name, attribute in FIELDS.items()}
    return counts


events = st.lists(st.tuples(st.sampled_from(["send", "send", "send", "drop", "again"]),
                            st.integers(0, 12)), min_size=1, max_size=40)


@pytest.mark.slow  # tshark reads 40 files: about 12 s
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events, isn=st.sampled_from([1, 2**31, 2**32 - 3000]),
       gap_us=st.sampled_from([100, 2000, 30000]))
def test_every_count_is_wiresharks(tmp_path_factory, events, isn, gap_us) -> None:
    path = tmp_path_factory.mktemp("pcap") / "flow.pcap"
    _write(path, _conversation(events, isn, gap_us))
    assert _our_counts(path) == _tshark_counts(path)


def test_a_fast_retransmission_and_a_gap_are_named(tmp_path: Path) -> None:
    # 0 and 2..5 arrive, 1 is lost, then 1 again within 20 ms. The receiver answers every
    # event (the lost one too, as this generator does): the ACK of 0 is new, the next five
    # repeat it.
    path = tmp_path / "fast.pcap"
    _write(path, _conversation([("send", 0), ("drop", 1), ("send", 2), ("send", 3),
                                ("send", 4), ("send", 5), ("again", 1)], 7, 1000))
    data = next(d for d in tcp.analyze(packets.read(path).packets)
                if d.source_port == CLIENT[1])
    acks = next(d for d in tcp.analyze(packets.read(path).packets)
                if d.source_port == SERVER[1])
    assert (data.lost_segments, data.fast_retransmissions, data.retransmissions,
            data.resent) == (1, 1, 1, 1)
    assert acks.duplicate_acks == 5
    assert data.retransmission_ratio == pytest.approx(1 / 6)
    assert _our_counts(path) == _tshark_counts(path)


@pytest.mark.parametrize("flags,payload", [(0x11, 0), (0x19, 50)], ids=["fin", "data+fin"])
def test_a_fin_sent_again_soon_is_a_retransmission(tmp_path: Path, flags: int,
                                                   payload: int) -> None:
    # The server's last segment carries FIN and is sent again 5 ms later, inside the
    # handshake's 20 ms RTT: it ends where the highest segment ends once its FIN counts as a
    # byte, so Wireshark calls it a retransmission, not out-of-order (seen on a lossy link:
    # a control connection's close).
    client, server = 100, 1000
    frames = [(0, CLIENT, SERVER, client, 0, 0x02, 0),
              (500, SERVER, CLIENT, server, client + 1, 0x12, 0),
              (20000, CLIENT, SERVER, client + 1, server + 1, 0x10, 0),
              (30000, SERVER, CLIENT, server + 1, client + 1, flags, payload),
              (35000, SERVER, CLIENT, server + 1, client + 1, flags, payload),
              (36000, CLIENT, SERVER, client + 1, server + payload + 2, 0x11, 0)]
    path = tmp_path / "fin.pcap"
    _write(path, [(1_700_000_000 + t / 1e6, _frame(a, b, q, k, f, n))
                  for t, a, b, q, k, f, n in frames])
    closing = next(d for d in tcp.analyze(packets.read(path).packets)
                   if d.source_port == SERVER[1])
    assert (closing.retransmissions, closing.out_of_order) == (1, 0)
    assert _our_counts(path) == _tshark_counts(path)


def _datagram(number: int, sent: float) -> bytes:
    payload = struct.pack("!IIQ", int(sent), int((sent % 1) * 1e6), number) + b"\0" * 84
    datagram = dpkt.udp.UDP(sport=50000, dport=5201, ulen=8 + len(payload), data=payload)
    ip = dpkt.ip.IP(src=socket.inet_aton(CLIENT[0]), dst=socket.inet_aton(SERVER[0]), p=17,
                    data=datagram)
    ip.len = 20 + len(bytes(datagram))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip))


def test_udp_gaps_reordering_duplicates_and_one_way_delay(tmp_path: Path) -> None:
    sent = 1_700_000_000.0
    order = [1, 2, 4, 3, 6, 6, 7]  # 5 missing, 3 late, 6 twice
    frames = [(sent + n * 0.001 + 0.010 + (0.002 if n % 2 else 0), _datagram(n, sent + n * 0.001))
              for n in order]
    path = tmp_path / "udp.pcap"
    _write(path, frames)
    (flow,) = udp.analyze(packets.read(path).packets)
    assert (flow.datagrams, flow.gaps, flow.reordered, flow.duplicates) == (7, 1, 1, 1)
    assert min(flow.one_way_s) == pytest.approx(0.010, abs=2e-6)
    assert max(flow.one_way_s) == pytest.approx(0.012, abs=2e-6)
    assert flow.jitter_ms is not None and 0 < flow.jitter_ms < 2


@pytest.mark.parametrize("content,message", [
    (b"", "is not a pcap or pcapng capture"),
    (b"GIF89a not a capture at all" * 5, "is not a pcap or pcapng capture"),
])
def test_a_file_that_is_no_capture_is_one_line(tmp_path: Path, content: bytes,
                                               message: str) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(content)
    with pytest.raises(packets.CaptureFileError, match=message):
        packets.read(path)


def test_a_capture_cut_inside_a_packet_gives_what_came_before(tmp_path: Path) -> None:
    path = tmp_path / "cut.pcap"
    _write(path, _conversation([("send", n) for n in range(10)], 5, 1000))
    whole = packets.read(path)
    path.write_bytes(path.read_bytes()[:-30])
    cut = packets.read(path)
    assert whole.damage is None
    assert cut.damage is not None and "ends inside packet" in cut.damage
    assert len(cut.packets) == len(whole.packets) - 1


def test_udp_witness_sets_the_capture_beside_the_receiver() -> None:
    from simpleperf.lab.results.tables import udp_witness

    flow = {"id": 7, "kind": "udp", "loss_percent": 1.0, "jitter_ms": 0.2}
    row = {"flow_id": 7, "datagrams": 99, "duplicates": 0, "gaps": 1, "jitter_ms": 0.25}
    other = dict(row, flow_id=8, datagrams=500)
    step = {"captures": [{"udp": [other, row]}]}
    assert udp_witness(step, flow) == {"capture_loss_percent": 1.0,
                                       "receiver_loss_percent": 1.0,
                                       "capture_jitter_ms": 0.25, "receiver_jitter_ms": 0.2}
    assert udp_witness(step, dict(flow, kind="tcp")) is None
    assert udp_witness({"captures": []}, flow) is None


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_damaged_capture_is_an_error_or_a_warning_never_a_crash(tmp_path_factory,
                                                                   data) -> None:
    """Bytes changed anywhere in a capture file (pcap or pcapng), and the file cut."""
    path = tmp_path_factory.mktemp("hostile") / "x.pcap"
    _write(path, _conversation([("send", n) for n in range(4)], 5, 1000),
           pcapng=data.draw(st.booleans()))
    original = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        original[data.draw(st.integers(0, len(original) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(original)))
    path.write_bytes(bytes(original[:cut]))
    try:
        found = packets.read(path)
    except packets.CaptureFileError as error:
        assert "\n" not in str(error)
        return
    tcp.analyze(found.packets)
    udp.analyze(found.packets)


def test_ecn_marks_and_echoes_are_counted_as_wireshark_shows_them(tmp_path: Path) -> None:
    """CE-marked packets (the IP ECN field), and ECE and CWR outside the handshake (where
    they negotiate ECN rather than echo a mark), per direction, against tshark's filters."""
    def frame(source, destination, flags, tos, payload=0):
        raw = bytearray(_frame(source, destination, 1, 1, flags, payload))
        raw[15] = tos  # the IP header's second byte, after Ethernet's 14
        checksum_free = dpkt.ethernet.Ethernet(bytes(raw))
        checksum_free.data.sum = 0  # recomputed when packed
        return bytes(checksum_free)

    plan = [(CLIENT, SERVER, 0x02 | 0x40 | 0x80, 0),  # SYN asking for ECN: neither counts
            (SERVER, CLIENT, 0x12 | 0x40, 0),  # SYN-ACK agreeing
            (CLIENT, SERVER, 0x18, 2, MSS), (CLIENT, SERVER, 0x18, 3, MSS),  # ECT(0), CE
            (SERVER, CLIENT, 0x10 | 0x40, 0), (SERVER, CLIENT, 0x10 | 0x40, 0),  # echoes
            (CLIENT, SERVER, 0x18 | 0x80, 3, MSS),  # CWR, and marked again
            (CLIENT, SERVER, 0x18, 1, MSS)]  # ECT(1)
    path = tmp_path / "ecn.pcap"
    _write(path, [(1_700_000_000 + i / 1e3, frame(*row)) for i, row in enumerate(plan)])
    ours = {(d.source_port, d.destination_port): (d.ce_marked, d.ece_flags, d.cwr_flags)
            for d in tcp.analyze(packets.read(path).packets)}

    def tshark(expression: str) -> dict[tuple[int, int], int]:
        out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", expression, "-T",
                              "fields", "-e", "tcp.srcport", "-e", "tcp.dstport"],
                             capture_output=True, text=True, check=True).stdout
        found: dict[tuple[int, int], int] = {}
        for line in out.splitlines():
            ends = tuple(int(x) for x in line.split("\t"))
            found[ends] = found.get(ends, 0) + 1  # type: ignore[index]
        return found

    theirs = [tshark("ip.dsfield.ecn == 3"),
              tshark("tcp.flags.ece == 1 && tcp.flags.syn == 0"),
              tshark("tcp.flags.cwr == 1 && tcp.flags.syn == 0")]
    for ends, counts in ours.items():
        assert counts == tuple(found.get(ends, 0) for found in theirs), ends
    assert ours[(CLIENT[1], SERVER[1])] == (2, 0, 1)
    assert ours[(SERVER[1], CLIENT[1])] == (0, 2, 0)


def _pcapng_with(block: bytes, path: Path) -> None:
    """A pcapng file of four good packets, then `block` (an Enhanced Packet Block body's
    fields given whole), then one more good packet."""
    _write(path, _conversation([("send", n) for n in range(1)], 5, 1000), pcapng=True)
    data = path.read_bytes()
    path.write_bytes(data + block + data[-(len(data) - data.rfind(b"\x06\x00\x00\x00")):])


def _epb(interface: int, captured: int, frame: bytes) -> bytes:
    body = struct.pack("<IIIII", interface, 0, 0, captured, len(frame)) + frame
    body += b"\0" * (-len(body) % 4)
    length = 12 + len(body)
    return struct.pack("<II", 6, length) + body + struct.pack("<I", length)


def _tshark_says(path: Path) -> str:
    done = subprocess.run(["tshark", "-n", "-r", str(path)], capture_output=True, text=True)
    return done.stderr + done.stdout


def test_corrupt_records_are_named_as_tshark_names_them(tmp_path: Path) -> None:
    """A pcap record claiming 0xFFFFFFF0 bytes, a pcapng packet claiming as many, and one
    naming interface 99: tshark calls each file corrupt, and so do we, with the packets
    before the bad record read and the file's problem said (lab analyze exits 1)."""
    frame = _frame(CLIENT, SERVER, 1, 1, 0x10)
    good = _conversation([("send", n) for n in range(2)], 5, 1000)
    pcap = tmp_path / "huge.pcap"
    _write(pcap, good)
    pcap.write_bytes(pcap.read_bytes() + struct.pack("<IIII", 1, 0, 0xFFFFFFF0, 60) + frame)
    huge = tmp_path / "huge.pcapng"
    _pcapng_with(_epb(0, 0xFFFFFFF0, frame), huge)
    stranger = tmp_path / "interface.pcapng"
    _pcapng_with(_epb(99, len(frame), frame), stranger)
    for path, words in ((pcap, "claims 4294967280 captured bytes"),
                        (huge, "claims 4294967280 captured bytes"),
                        (stranger, "names interface 99")):
        assert "corrupt" in _tshark_says(path), path
        found = packets.read(path)
        assert found.damage is not None and "is corrupt" in found.damage, path
        assert words in found.damage and "cut short" not in found.damage
        assert found.packets and found.read == len(found.packets)
        done = subprocess.run([sys.executable, "-m", "simpleperf", "lab", "analyze", str(path)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "is corrupt" in done.stderr, done


def test_packets_too_short_for_their_headers_are_malformed_not_a_cut(tmp_path: Path) -> None:
    """Zero-length records and a frame cut inside its IP header, in a file that is whole:
    Wireshark marks them malformed; we count them and say so, not "cut short"."""
    good = _conversation([("send", n) for n in range(3)], 5, 1000)
    frames = good[:2] + [(good[2][0], b"")] * 1000 + [(good[2][0], good[2][1][:20])] + good[2:]
    path = tmp_path / "short.pcap"
    _write(path, frames)
    found = packets.read(path)
    assert found.damage is not None and "1001 packets are too short" in found.damage
    assert "the first is packet 3" in found.damage and "cut short" not in found.damage
    assert len(found.packets) == len(good) and found.read == len(frames)
    assert "Malformed" in subprocess.run(["tshark", "-n", "-r", str(path)], capture_output=True,
                                         text=True).stdout


def test_a_capture_from_a_pipe_is_one_line(tmp_path: Path) -> None:
    """A pipe can be read only once, front to back: a file is asked for, in one line."""
    path = tmp_path / "piped.pcap"
    _write(path, _conversation([("send", n) for n in range(3)], 5, 1000))
    with open(path, "rb") as source:
        feeder = subprocess.Popen(["cat"], stdin=source, stdout=subprocess.PIPE)
        done = subprocess.run([sys.executable, "-m", "simpleperf", "lab", "analyze",
                               "/dev/stdin"], stdin=feeder.stdout, capture_output=True,
                              text=True, timeout=60)
        feeder.wait(10)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("simpleperf lab: error: /dev/stdin is not a file (a pipe?): "
                                   "give a capture file")
