"""`simpleperf lab capture` and `simpleperf lab analyze`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .net import capture, lifecycle
from .net.system import CommandError


def capture_live(lab: str | None, where: str, write: str | None, bpf: str | None,
                 snaplen: int, duration: float | None, count: int | None) -> int:
    """Capture until Ctrl-C, --duration or --count: to a pcapng file, to standard output
    (`-w -`, for `| wireshark -k -i -`), or printed a packet per line by tshark."""
    lifecycle.require_root("capture inside a lab's network namespaces")
    capture.require_dumpcap()
    record = lifecycle.find(lab)
    if record.state != "up":
        raise lifecycle.LabError(f"lab {record.lab} is {record.state}, not up")
    model = lifecycle.model_of(record)
    point = capture.resolve(model, where)
    try:
        full_filter = capture.capture_filter(point, bpf)
    except CommandError as error:
        raise capture.CaptureError(str(error)) from None
    capture.check_filter(point, full_filter, bpf)
    print(f"capturing {point.describe}", file=sys.stderr, flush=True)
    command = ["ip", "netns", "exec", point.namespace, *capture.dumpcap_command(
        point, write or "-", snaplen, full_filter, duration=duration, count=count)]
    what = f"capture of {where}"
    if write is not None:
        return lifecycle.run_recorded(record, command, what)
    if shutil.which("tshark") is None:
        raise capture.CaptureError("printing packets needs tshark (apt-get install tshark), "
                                   "or write them: -w FILE")
    # dumpcap captures; tshark only prints what it is handed (it never touches the lab).
    reader = subprocess.Popen(["tshark", "-l", "-n", "-Q", "-r", "-", "-P"],
                              stdin=subprocess.PIPE)
    try:
        return lifecycle.run_recorded(record, command, what, stdout=reader.stdin)
    finally:
        assert reader.stdin is not None
        reader.stdin.close()
        reader.wait()


def analyze(path: Path) -> int:
    """Per TCP and UDP flow of a capture file; 1 when the file was damaged."""
    try:
        from .analysis import packets, text  # dpkt: only where captures are read
    except ImportError:
        raise capture.CaptureError(capture.NO_DPKT) from None
    try:
        found = packets.read(path)
    except packets.CaptureFileError as error:
        raise capture.CaptureError(str(error)) from None
    lines = [f"{path}: {len(found.packets)} TCP/UDP packets"]
    lines += text.tables(found.packets)
    print("\n".join(lines))
    if found.damage:
        print(f"simpleperf lab: warning: {found.damage}", file=sys.stderr)
        return 1
    return 0
