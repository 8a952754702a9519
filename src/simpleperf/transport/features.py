"""What this kernel offers the measurement, found by trying each on a scratch socket: what
`simpleperf -v` prints, so that a user can tell which paths a test takes."""

from __future__ import annotations

import os
import platform
import socket

from . import compiled, tcpinfo, udp


def _udp_option(option: int, value: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.setsockopt(udp.SOL_UDP, option, value)
        except OSError:
            return False
    return True


def _tcp_info() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        info = tcpinfo.read(sock)
    if info is None:
        return "no"
    return "yes" if info.snd_wnd is not None else "yes (without the peer's window)"


def report() -> str:
    """Lines naming the kernel and each feature the tool uses where it exists."""
    yes = {True: "yes", False: "no"}
    features = {
        "UDP GSO (sends many datagrams in one call)": yes[_udp_option(udp.UDP_SEGMENT, 1400)],
        "UDP GRO (receives them coalesced)": yes[_udp_option(udp.UDP_GRO, 1)],
        "TCP_INFO (retransmits, cwnd, RTT)": _tcp_info(),
        "sendfile from a memory file (-Z)": yes[hasattr(os, "memfd_create")],
        "compiled fast path (UDP and TCP loops)": compiled.status(compiled.fastpath),
    }
    lines = [f"kernel {platform.system()} {platform.release()}, Python "
             f"{platform.python_version()}"]
    lines += [f"  {name:<45} {value}" for name, value in features.items()]
    lines.append("  the lab's links: `simpleperf lab probe` (root) says netem or the own shaper")
    return "\n".join(lines)
