"""TCP sockets: listening, connecting, and the kernel facts the client needs."""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import socket
import struct
import time
from typing import Any

from ..description.client_options import ClientOptions
from ..description.options import CONNECT_RETRY_SECONDS, CONNECT_TIMEOUT_SECONDS
from ..errors import SimpleperfError
from . import socket_options, tcpinfo

SIOCOUTQ = 0x5411  # bytes in the send queue not yet acknowledged by the peer
SIOCINQ = 0x541B  # bytes received and not yet read
WAKE_UP_SECONDS = 0.5
SETTLE_MIN_SECONDS = 0.02  # a 1000-byte-read Python peer empties a 6 MB buffer in ~15 ms
SETTLE_MAX_SECONDS = 0.25  # how often a blocked read or write looks up to check for a stop


def endpoint(address: tuple[Any, ...]) -> str:
    """'10.0.0.2:52326' for IPv4 (also when it reached a dual-stack socket), '[::1]:5201' for
    IPv6."""
    host, port = address[0], address[1]
    ip = ipaddress.ip_address(host.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return f"{ip.ipv4_mapped}:{port}"
    return f"[{host}]:{port}" if ip.version == 6 else f"{host}:{port}"


AVAILABLE_CONGESTION = "/proc/sys/net/ipv4/tcp_available_congestion_control"
CURRENT_CONGESTION = "/proc/sys/net/ipv4/tcp_congestion_control"


def system_congestion() -> str | None:
    """What TCP uses unless told otherwise (new network namespaces inherit it)."""
    try:
        with open(CURRENT_CONGESTION) as current:
            return current.read().strip()
    except OSError:
        return None


def available_congestion() -> list[str]:
    """The congestion controls the kernel has loaded (a socket may ask for any of them)."""
    try:
        with open(AVAILABLE_CONGESTION) as available:
            return available.read().split()
    except OSError:
        return []


def set_congestion(sock: socket.socket, name: str | None) -> None:
    """Choose the congestion control of one socket (TCP_CONGESTION); works for any algorithm
    the kernel has, also where the system default cannot be changed."""
    if name is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as error:
        choices = available_congestion()
        reason = (f"available: {', '.join(choices)}" if error.errno == errno.ENOENT and choices
                  else error.strerror or str(error))
        raise SimpleperfError(f"cannot use congestion control '{name}' ({reason})") from None


def set_window(sock: socket.socket, window: int | None) -> None:
    """Fix both socket buffers (Linux then stops autotuning them). Set before listen() or
    connect(), so that the window scale is negotiated from it."""
    if window is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, window)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)


IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
SOL_MPTCP, MPTCP_INFO = 284, 1  # linux/mptcp.h
MPTCP_INFO_FLAG_FALLBACK = 1
MPTCP_UNAVAILABLE = ("MPTCP is not available here: the kernel lacks it, or "
                     "net.mptcp.enabled is 0 (sysctl -w net.mptcp.enabled=1)")


def stream_socket(family: int, mptcp: bool = False) -> socket.socket:
    """A TCP socket, or with `mptcp` a Multipath TCP one (-m/--mptcp): it talks plain TCP to
    a peer without MPTCP, falling back on its own."""
    if not mptcp:
        return socket.socket(family, socket.SOCK_STREAM)
    try:
        return socket.socket(family, socket.SOCK_STREAM, IPPROTO_MPTCP)
    except OSError as error:
        if error.errno in (errno.EPROTONOSUPPORT, errno.ENOPROTOOPT, errno.EINVAL):
            raise SimpleperfError(MPTCP_UNAVAILABLE) from None
        raise


def bind_device(sock: socket.socket, device: str | None) -> None:
    """--bind-dev: the socket sends and receives through this interface only
    (SO_BINDTODEVICE)."""
    if device is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
    except OSError as error:
        sock.close()
        reason = "no interface has that name" if error.errno == errno.ENODEV else (
            error.strerror or str(error)).lower()
        raise SimpleperfError(f"cannot bind to device {device}: {reason}") from None


def bound_device(sock: socket.socket) -> str | None:
    """The interface a socket is bound to (--bind-dev), None when any."""
    try:
        name = sock.getsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, 16)
    except OSError:
        return None
    return name.rstrip(b"\0").decode() or None


def mptcp_subflows(sock: socket.socket) -> int | None:
    """How many subflows an MPTCP connection has (0: it fell back to plain TCP, the peer
    having no MPTCP); None for a plain TCP socket."""
    if sock.proto != IPPROTO_MPTCP:
        return None
    try:
        info = sock.getsockopt(SOL_MPTCP, MPTCP_INFO, 96)
    except OSError:  # EOPNOTSUPP: a fallen-back connection has no MPTCP state
        return 0
    if len(info) < 12 or struct.unpack_from("I", info, 8)[0] & MPTCP_INFO_FLAG_FALLBACK:
        return 0
    return info[0] + 1  # mptcpi_subflows counts those beyond the first


def open_listener(bind: str | None, port: int, backlog: int = socket.SOMAXCONN,
                  window: int | None = None, congestion: str | None = None,
                  mptcp: bool = False, device: str | None = None) -> socket.socket:
    """Listen on `bind`, or on every IPv4 and IPv6 address when no address is given (with
    `mptcp`, for Multipath TCP clients and plain ones alike). The backlog is the kernel's
    most (somaxconn caps it): a burst of connects (--connect-only, many clients at once)
    waits to be accepted rather than having its SYNs dropped and retried a second later."""
    if bind is None:
        candidates = [(socket.AF_INET6, "::", True), (socket.AF_INET, "0.0.0.0", False)]
    else:
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        candidates = [(family, bind, False)]
    last_error: OSError | None = None
    for family, host, dual_stack in candidates:
        sock = stream_socket(family, mptcp)
        bind_device(sock, device)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            set_window(sock, window)
            set_congestion(sock, congestion)
            if family == socket.AF_INET6:  # "::" given (-6) is IPv6 only, as with iperf3
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack else 1)
            sock.bind((host, port))
            sock.listen(backlog)
            return sock
        except SimpleperfError:
            sock.close()
            raise
        except OSError as error:
            sock.close()
            last_error = error
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                break
    assert last_error is not None
    where = f"{bind} port {port}" if bind else f"port {port}"
    if last_error.errno == errno.EADDRINUSE:
        raise SimpleperfError(f"cannot listen on {where}: the port is already in use")
    if last_error.errno == errno.EADDRNOTAVAIL:
        raise SimpleperfError(f"cannot listen on {where}: no interface has that address")
    raise SimpleperfError(f"cannot listen on {where}: {last_error.strerror}")


def set_tos(sock: socket.socket, tos: int) -> None:
    """The IP TOS byte (DSCP and ECN bits) of what the socket sends, over IPv4 or IPv6 (an
    IPv6 socket may carry IPv4: both are set where the kernel takes them)."""
    options = [(socket.IPPROTO_IP, socket.IP_TOS)]
    if sock.family == socket.AF_INET6:
        options.append((socket.IPPROTO_IPV6, socket.IPV6_TCLASS))
    for level, option in options:
        try:
            sock.setsockopt(level, option, tos)
        except OSError as error:
            if sock.family == socket.AF_INET:
                raise SimpleperfError(f"cannot set the TOS byte to {tos}: "
                                      f"{(error.strerror or str(error)).lower()}") from None


# <linux/in6.h>: a flow label is leased (IPV6_FLOWLABEL_MGR, struct in6_flowlabel_req:
# destination, label, action, share, flags, expires, linger, pad) before packets carry it
IPV6_FLOWLABEL_MGR, IPV6_FLOWINFO_SEND = 32, 33
IPV6_FL_A_GET, IPV6_FL_S_ANY, IPV6_FL_F_CREATE = 0, 255, 1
_FLOWLABEL_REQ = struct.Struct("=16s4sBBHHHI")


def set_flow_label(sock: socket.socket, address: tuple, label: int) -> tuple:
    """iperf3's -L: the socket's packets to `address` (an IPv6 one) carry `label`; the
    address to connect to, with it. Other families, or no label: as it was."""
    if not label or sock.family != socket.AF_INET6:
        return address
    request = _FLOWLABEL_REQ.pack(socket.inet_pton(socket.AF_INET6, address[0]),
                                  struct.pack("!I", label), IPV6_FL_A_GET, IPV6_FL_S_ANY,
                                  IPV6_FL_F_CREATE, 0, 0, 0)
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWLABEL_MGR, request)
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO_SEND, 1)
    except OSError as error:
        raise SimpleperfError(f"cannot set the IPv6 flow label {label:#x}: "
                              f"{(error.strerror or str(error)).lower()}") from None
    return (address[0], address[1], label, *address[3:])


def connect_to_server(options: ClientOptions, stream: int | None = None) -> socket.socket:
    """A client's connection to its server, as its options say (--connect-timeout, -4/-6,
    -B, --connect-retries); data stream number `stream`'s also with its socket options (-w,
    -C, -M) and, with --cport, from that port plus the stream's number less one
    (--tcp-write-prefetch: its unsent limit)."""
    for retry in range(options.connect_retries, -1, -1):
        try:
            return _connect_to_server(options, stream)
        except ConnectFailed as failure:
            if not retry:
                tries = options.connect_retries + 1
                raise ConnectFailed(str(failure) + (
                    f" ({tries} tries, {CONNECT_RETRY_SECONDS:g} s apart)" if tries > 1
                    else "")) from None
            time.sleep(CONNECT_RETRY_SECONDS)
    raise AssertionError("unreachable")


def _connect_to_server(options: ClientOptions, stream: int | None) -> socket.socket:
    if stream is None:
        control = connect(options.host, options.port, options.connect_timeout,
                          family=options.family, local=options.local, device=options.bind_dev,
                          flowlabel=options.flowlabel)
        if options.control_keepalive is not None:
            keep_alive(control, options.control_keepalive)
        return control
    test = options.test
    sock = connect(options.host, options.port, options.connect_timeout, window=test.window,
                   congestion=test.congestion, family=options.family, local=options.local,
                   mss=test.mss, local_port=stream_port(options, stream), tos=test.tos,
                   mptcp=options.mptcp, device=options.bind_dev, flowlabel=options.flowlabel)
    socket_options.apply(sock, options, "tcp")
    return sock


def keep_alive(sock: socket.socket, timing: tuple[int, int, int] | None) -> None:
    """--cntl-ka: TCP keepalive on the control connection, idle seconds before the first
    probe, seconds between probes, probes unanswered before it is given up (0: the
    kernel's)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in zip((socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT),
                             timing or (0, 0, 0), strict=True):
        if value:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def stream_port(options: ClientOptions, stream: int) -> int:
    """Our end's port for data stream `stream` (1, 2, ...): --cport's, or any (0)."""
    return options.cport + stream - 1 if options.cport else 0


def connect(host: str, port: int, timeout: float = CONNECT_TIMEOUT_SECONDS,
            window: int | None = None, congestion: str | None = None,
            family: int = socket.AF_UNSPEC, local: str | None = None,
            mss: int | None = None, local_port: int = 0, tos: int = 0,
            mptcp: bool = False, device: str | None = None,
            flowlabel: int = 0) -> socket.socket:
    """A connected socket, trying each address of `host` in turn; `local` and `local_port`
    bind our end; `tos` marks it from its SYN on (a DiffServ class sees the whole flow);
    `mptcp`: Multipath TCP; `flowlabel`: IPv6's flow label on every packet (-L)."""
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except socket.gaierror:
        raise SimpleperfError(f"cannot resolve server name '{host}'") from None
    last_error: OSError | None = None
    for family, _, _, _, address in infos:
        sock = stream_socket(family, mptcp)
        bind_device(sock, device)
        try:
            prepare(sock, window, congestion, mss, tos, local, local_port)
            address = set_flow_label(sock, address, flowlabel)
            sock.settimeout(timeout)
            sock.connect(address)
        except SimpleperfError:
            sock.close()
            raise
        except OSError as error:
            sock.close()
            last_error = error
            continue
        sock.settimeout(None)
        return sock
    assert last_error is not None
    reason = {
        errno.ECONNREFUSED: "connection refused (is a simpleperf server running there?)",
        errno.ENETUNREACH: "network is unreachable",
        errno.EHOSTUNREACH: "host is unreachable",
    }.get(last_error.errno or 0)
    if isinstance(last_error, TimeoutError) or last_error.errno == errno.ETIMEDOUT:
        reason = f"no answer within {timeout:g} s"
    raise ConnectFailed(f"cannot connect to {host} port {port}: "
                        f"{reason or last_error.strerror or last_error}")


class ConnectFailed(SimpleperfError):
    """No address of the server took the connection (--connect-retries tries again)."""


def prepare(sock: socket.socket, window: int | None = None, congestion: str | None = None,
            mss: int | None = None, tos: int = 0, local: str | None = None,
            local_port: int = 0) -> None:
    """What a client socket is given before its handshake: window, congestion control,
    MSS, the TOS byte (from its SYN on) and our end's address and port."""
    set_window(sock, window)
    set_congestion(sock, congestion)
    if mss is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    if tos:
        set_tos(sock, tos)
    if local is not None or local_port:
        bind_local(sock, local, local_port)


def bind_local(sock: socket.socket, local: str | None, port: int = 0) -> None:
    """Bind our end to `local` (an address of this host, or any) and `port` (or any)."""
    if port:  # a port a previous test's connection left in TIME_WAIT is free to take
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((local or "", port))
    except OSError as error:
        what = " ".join(filter(None, [f"address {local}" if local else "",
                                      f"port {port}" if port else ""]))
        raise SimpleperfError(f"cannot bind to local {what}: "
                              f"{(error.strerror or str(error)).lower()}") from None


def set_wake_up(sock: socket.socket, seconds: float = WAKE_UP_SECONDS) -> None:
    """Let blocking reads and writes return now and then (EAGAIN), so a stop is noticed,
    without the extra poll() per call that Python's own socket timeouts cost."""
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)


def write_length(sock: socket.socket, length: int, whole_segments: bool) -> int:
    """`length`, or with `whole_segments` that rounded down to whole segments of this
    connection as it stands (at least one segment, never more than `length`). A write that
    does not end on a segment boundary sends a runt segment each time: on loopback, whose
    65483-byte segments are one packet each, a 262144-byte write is four full packets and
    one of 212 bytes, which cut four streams' rate by a quarter (#17)."""
    if not whole_segments:
        return length
    try:
        segment = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    except OSError:
        return length
    if segment <= 0 or length < segment:
        return length
    return length - length % segment


def unacknowledged_bytes(sock: socket.socket) -> int:
    """Bytes written and not yet acknowledged by the peer, sent or not (SIOCOUTQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0" * 4))[0]


def unread_bytes(sock: socket.socket) -> int:
    """Bytes the kernel holds for us that we have not read yet (SIOCINQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCINQ, b"\0" * 4))[0]


def wait_until_drained(sock: socket.socket, should_stop, stall_limit: float = 30.0) -> None:
    """Wait until the peer has acknowledged everything we sent (or should_stop()). Fails if
    nothing moves for `stall_limit` seconds."""
    last, last_change = unacknowledged_bytes(sock), time.monotonic()
    while last > 0 and not should_stop():
        time.sleep(0.0005 if last < 1 << 20 else 0.002)
        unacknowledged = unacknowledged_bytes(sock)
        now = time.monotonic()
        if unacknowledged != last:
            last, last_change = unacknowledged, now
        elif now - last_change > stall_limit:
            raise SimpleperfError(f"the server stopped reading ({last} bytes unacknowledged "
                                  f"for {stall_limit:g} s)")


def settle_time(sock: socket.socket) -> float:
    """How long to let the peer's application read what its kernel acknowledged.
    Acknowledged is not yet read, and the advertised window cannot tell the two apart
    (Linux stops announcing a window once it passes half the buffer): a few RTTs."""
    return min(SETTLE_MAX_SECONDS, max(SETTLE_MIN_SECONDS, 4 * tcpinfo.rtt_seconds(sock)))


# When TCP data reached this host (SO_TIMESTAMPNS, socket(7)): each read is stamped with the
# arrival of the newest segment it took bytes from, so a read that ends on a write's last byte
# says when that byte came, however long it then waited behind a lost segment.
SO_TIMESTAMPNS = 35  # SCM_TIMESTAMPNS is the same number
_TIMESPEC = struct.Struct("qq")
ARRIVAL_CONTROL = socket.CMSG_SPACE(_TIMESPEC.size)


def arrival_stamp(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The SO_TIMESTAMPNS stamp (wall clock, seconds) in a recvmsg's ancillary data, if
    the kernel gave one (a TCP read's, or a packet socket's packet's)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return seconds + nanoseconds * 1e-9
    return None


class Arrivals:
    """Reads of a TCP socket with the arrival time (wall clock, seconds) of the newest
    segment each took bytes from; None for a read the kernel did not stamp."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.receive = sock.recvmsg_into

    @classmethod
    def start(cls, sock: socket.socket) -> Arrivals | None:
        """Stamped reads of `sock`, or None where the kernel does not offer them."""
        try:
            return cls(sock)
        except OSError:
            return None

    def read(self, into: memoryview) -> tuple[int, float | None]:
        count, ancillary, _, _ = self.receive([into], ARRIVAL_CONTROL)
        return count, arrival_stamp(ancillary)


# The kernel's send time of TCP data (SO_TIMESTAMPING, Documentation/networking/
# timestamping.rst): for each send() call, the moment the segment holding its last byte
# entered the packet scheduler, queued on the socket's error queue with the byte's number.
SO_TIMESTAMPING = 37
SOF_TIMESTAMPING_TX_SCHED = 1 << 8
SOF_TIMESTAMPING_RX_SOFTWARE = 1 << 3
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
SOF_TIMESTAMPING_OPT_ID = 1 << 7
SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11
SCM_TSTAMP_SCHED = 1
_SCM_TIMESTAMPING = struct.Struct("qq")  # the first of three timespecs: software
# Room for SO_TIMESTAMPING's control message: three stamps, software, (deprecated), hardware
TIMESTAMPING_CONTROL = socket.CMSG_SPACE(3 * _TIMESPEC.size)
_EXTENDED_ERROR = struct.Struct("IBBBBII")  # struct sock_extended_err, without the address
_ERROR_ORIGIN_TIMESTAMPING = 4  # SO_EE_ORIGIN_TIMESTAMPING
_CONTROL_BYTES = 512


def software_stamp(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The software stamp (wall clock, seconds) in a recvmsg's SO_TIMESTAMPING message, if
    the kernel stamped the packet when it came. SO_TIMESTAMPNS cannot say that: for a
    packet that came before the kernel turned its stamping on (it does so a moment after
    the first socket asks, from a work queue), a datagram or packet socket is given the
    time of the read instead, as if it were the arrival."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING \
                and len(data) >= _SCM_TIMESTAMPING.size:
            seconds, nanoseconds = _SCM_TIMESTAMPING.unpack_from(data)
            if seconds or nanoseconds:
                return seconds + nanoseconds * 1e-9
    return None


class Departures:
    """When the bytes written to a TCP socket left it: `pending` says which byte ends a
    write (its count since stamping began), `read` gives the writes whose last byte the
    kernel has sent since the last call, with the wall-clock time it went (seconds)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        unacknowledged = unacknowledged_bytes(sock)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING,
                        SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_SOFTWARE
                        | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY)
        # The kernel numbers bytes from the oldest unacknowledged one at this moment.
        self.offset = unacknowledged
        self.writes: dict[int, int] = {}  # last byte's count -> the write's number

    @classmethod
    def start(cls, sock: socket.socket) -> Departures | None:
        """Stamping on `sock`, or None where the kernel does not offer it."""
        try:
            return cls(sock)
        except OSError:
            return None

    def pending(self, end: int, number: int) -> None:
        """Write `number` ends with the `end`-th byte written since stamping began."""
        self.writes[(end + self.offset - 1) & 0xFFFFFFFF] = number  # the kernel's is 32 bits
        if len(self.writes) > 65536:  # stamps the kernel dropped (a full error queue)
            self.writes.pop(next(iter(self.writes)))

    def read(self) -> list[tuple[int, float]]:
        """(write number, departure time) of every write whose stamp has arrived."""
        found: list[tuple[int, float]] = []
        while True:
            try:
                _, ancillary, _, _ = self.sock.recvmsg(0, _CONTROL_BYTES,
                                                       socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return found
            except OSError:
                return found
            stamp, key = software_stamp(ancillary), None
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING:
                    continue  # the stamp, read above
                if len(data) >= _EXTENDED_ERROR.size:
                    _, origin, _, _, _, info, data_ = _EXTENDED_ERROR.unpack_from(data)
                    if origin == _ERROR_ORIGIN_TIMESTAMPING and info == SCM_TSTAMP_SCHED:
                        key = data_
            if stamp is not None and key is not None:
                number = self.writes.pop(key, None)
                if number is not None:
                    found.append((number, stamp))
