"""How each kind of flow runs, as Flent's runners do: one object per kind owns its server,
its client's command and the reading of what the client printed. The step (step.py) starts
the processes and never asks which kind a flow is; what a kind is (its fields, duration,
what theory assumes) is model/flows.py's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...protocol.native import WRITE_HEADER
from ...report import document
from ..model import theory
from ..model.flows import Flow, Timing
from ..model.outcomes import OUTPUT_CHARS, FlowOutcome
from ..net.system import CommandError
from .applications import Applications, which
from .launch import END_MARK

PYTHON = sys.executable
FALLBACK_UDP_RATE = 1e6  # when "auto" has no routed path to size itself, or a probe failed
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]


class KindRunner:
    """A kind that runs no server and whose client is a command of its own."""

    timed = False  # the launcher times the client to its exit (an application)
    stop_signal = signal.SIGINT  # what ends its server cleanly
    programs: tuple[str, ...] = ()  # what it needs installed, and Debian's packages for them
    packages = ""

    def server(self, flow: Flow, address: str, port: str) -> list[str] | None:
        return None

    def server_stderr(self) -> int:
        return subprocess.PIPE

    def ready(self, process: subprocess.Popen, seconds: float, port: str) -> bool:
        """Until the server listens; False if it ended instead."""
        return process.poll() is None

    def client(self, outcome: FlowOutcome, port: str, every: float, duration: float,
               timing: Timing) -> list[str]:
        raise NotImplementedError

    def read(self, outcome: FlowOutcome, lines: list[str], err: str, code: int) -> None:
        """What the client printed (after the launcher's start mark) into the outcome."""
        raise NotImplementedError

    def missing(self) -> str | None:
        """A line naming what is not installed, or None."""
        absent = [program for program in self.programs if which(program) is None]
        if not absent:
            return None
        return f"needs {', '.join(absent)} (Debian: apt-get install {self.packages})"


def failure(err: str, fallback: str) -> str:
    """The last line a failed client printed on stderr, for the outcome's error."""
    detail = [line for line in err.strip().splitlines() if line.strip()]
    return (detail[-1] if detail else fallback)[:200]


# tcp and udp flows' servers besides simpleperf's (flows.TOOLS): the command, and the
# client's flag for it; the program and its Debian package
TOOL_SERVERS = {"iperf3": (["iperf3", "-s"], "--iperf3", "iperf3"),
                "iperf2": (["iperf", "-s"], "--iperf2", "iperf")}


# /proc/PID/net/{tcp,udp}[6]: the sockets of the process's network namespace; a TCP socket
# that listens is in state 0A, a bound UDP socket in 07.
_SOCKET_TABLES = (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07"))


def bound(pid: int, port: int) -> bool:
    """Whether a socket in process `pid`'s namespace listens on (TCP) or is bound to (UDP)
    `port`."""
    wanted = f":{port:04X}"
    for table, state in _SOCKET_TABLES:
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[1].endswith(wanted) and fields[3] == state:
                return True
    return False


def until_bound(process: subprocess.Popen, seconds: float, port: str) -> bool:
    """Until its socket is bound to `port` in its node (a program's banner can wait in a
    pipe's buffer; a loaded machine can take seconds to start one); False if it ended."""
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        if bound(process.pid, int(port)):
            return True
        time.sleep(0.02)
    return process.poll() is None


class SimpleperfRunner(KindRunner):
    """tcp and udp: a simpleperf server in the target (or the flow's tool's: iperf3 -s,
    iperf -s); the client runs a test whose JSON carries both ends' view (what an iperf
    server tells). The lab's namespaces share one clock, so one-way delays are true:
    --trip-times where the server times them."""

    def server(self, flow: Flow, address: str, port: str) -> list[str]:
        # The window must be set on the listener, before connections are accepted.
        window = ["-w", str(flow.window)] if flow.window else []
        if flow.tool in TOOL_SERVERS:
            udp = ["-u"] if flow.tool == "iperf2" and flow.spec.paced else []
            return [*TOOL_SERVERS[flow.tool][0], "-p", port, *udp, *window]
        mptcp = ["-m"] if flow.mptcp else []
        return [PYTHON, "-m", "simpleperf", "-s", "-p", port, *window, *mptcp]

    def ready(self, process: subprocess.Popen, seconds: float, port: str) -> bool:
        return until_bound(process, seconds, port)

    def client(self, outcome: FlowOutcome, port: str, every: float, duration: float,
               timing: Timing) -> list[str]:
        flow = outcome.flow
        common = [PYTHON, "-m", "simpleperf", "-c", "-I", outcome.address, "-p", port, "-t",
                  f"{duration:g}", "-i", f"{every:g}", "-J", "--no-latency"]
        if flow.tool in TOOL_SERVERS:
            common.append(TOOL_SERVERS[flow.tool][1])
        timed = flow.tool == "simpleperf" or (flow.tool == "iperf2" and flow.spec.paced)
        if timed and (not flow.length or flow.length >= WRITE_HEADER.size):
            common.append("--trip-times")
        if flow.dscp is not None:
            common += ["--dscp", str(flow.dscp)]
        return common + self.arguments(outcome)

    def arguments(self, outcome: FlowOutcome) -> list[str]:
        raise NotImplementedError

    def read(self, outcome: FlowOutcome, lines: list[str], err: str, code: int) -> None:
        if code != 0:
            outcome.error = failure(err, f"exit status {code}")
            return
        try:
            read_result(outcome, json.loads("\n".join(lines)))
        except (ValueError, KeyError, TypeError):
            outcome.error = f"simpleperf gave no {outcome.flow.kind.upper()} result"


class TcpRunner(SimpleperfRunner):
    def arguments(self, outcome: FlowOutcome) -> list[str]:
        flow = outcome.flow
        native = ["--native"] if flow.tool == "simpleperf" else []
        return [*native, "-P", str(flow.parallel), *(["-m"] if flow.mptcp else []),
                *(["-w", str(flow.window)] if flow.window else []),
                *(["-l", str(flow.length)] if flow.length else []),
                *(["-C", flow.congestion] if flow.congestion else [])]


class UdpRunner(SimpleperfRunner):
    def arguments(self, outcome: FlowOutcome) -> list[str]:
        flow = outcome.flow
        length = ["-l", str(theory.datagram_bytes(flow.length))]
        if flow.frames is not None:  # video frames set their own rate
            return ["-u", f"--isochronous={flow.frames}", *length]
        if flow.l4s:  # CE marks set its rate; a rate given is its ceiling
            ceiling = ["-b", str(int(outcome.rate))] if outcome.rate else []
            return ["-u", "--l4s", *ceiling, *length]
        if outcome.rate is None:
            outcome.rate = FALLBACK_UDP_RATE
        return ["-u", "-b", str(int(outcome.rate)), *length]


class PingRunner(KindRunner):
    def client(self, outcome: FlowOutcome, port: str, every: float, duration: float,
               timing: Timing) -> list[str]:
        flow = outcome.flow
        marked = ["-Q", str(flow.dscp << 2)] if flow.dscp is not None else []  # the TOS byte
        return ["ping", "-n", "-c", str(flow.count or timing.ping_count), "-i",
                str(flow.interval or timing.ping_interval), *marked, outcome.address]

    def read(self, outcome: FlowOutcome, lines: list[str], err: str, code: int) -> None:
        outcome.rtts = ping_times("\n".join(lines))
        if code != 0 and not outcome.rtts:
            outcome.error = failure(err, f"exit status {code}")
            return
        outcome.ok = bool(outcome.rtts)
        outcome.error = None if outcome.ok else "no replies"


class ApplicationRunner(KindRunner):
    """A real program, timed by the launcher from the synchronised start to its exit; its
    server is ended with SIGTERM, which a shell's background jobs do not ignore."""

    timed = True
    stop_signal = signal.SIGTERM
    ready_text: str | None = None  # what its server prints once it listens
    ready_on_stderr = False

    def __init__(self, resources: Applications | None) -> None:
        self.resources = resources

    @property
    def files(self) -> Applications:
        assert self.resources is not None, "application flows need the run's folder"
        return self.resources

    def ready(self, process: subprocess.Popen, seconds: float, port: str) -> bool:
        if self.ready_text is not None:
            stream = process.stderr if self.ready_on_stderr else process.stdout
            assert stream is not None
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                line = stream.readline()
                if not line or self.ready_text in line:
                    break
        return process.poll() is None

    def read(self, outcome: FlowOutcome, lines: list[str], err: str, code: int) -> None:
        """The launcher's end mark gives the exit time and status; output lines precede
        it. A transfer's goodput is the bytes it moved over that time."""
        if not lines or not lines[-1].startswith(END_MARK) or outcome.started is None:
            outcome.error = failure(err, "timed out")
            return
        _, ended, status = lines[-1].split()
        outcome.seconds = float(ended) - outcome.started
        outcome.exit_status = int(status)
        outcome.output = "\n".join(lines[:-1])[:OUTPUT_CHARS]
        moved = outcome.flow.spec.bytes_moved(outcome.flow)
        if moved is not None and outcome.seconds > 0:
            outcome.throughput = moved * 8 / outcome.seconds
        outcome.ok = outcome.exit_status == 0
        if not outcome.ok:
            detail = [line for line in err.strip().splitlines() if line.strip()]
            outcome.error = (f"{outcome.flow.kind} exited with status {status}"
                             + (f": {detail[-1]}" if detail else ""))[:200]


class ScpRunner(ApplicationRunner):
    """scp of a file to Debian's OpenSSH server, with keys made for the run."""

    programs = ("sshd", "ssh-keygen", "scp")
    packages = "openssh-server openssh-client"
    ready_text = "Server listening on"
    ready_on_stderr = True

    def server(self, flow: Flow, address: str, port: str) -> list[str]:
        host = self.files.host_key()
        config = self.files.folder / f"sshd-{port}.conf"
        config.write_text("\n".join([
            f"Port {port}", f"ListenAddress {address}", f"HostKey {host}",
            f"AuthorizedKeysFile {self.files.folder / 'authorized_keys'}", "PidFile none",
            "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "Subsystem sftp internal-sftp", ""]))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
        return [which("sshd") or "sshd", "-D", "-e", "-f", str(config)]

    def client(self, outcome: FlowOutcome, port: str, every: float, duration: float,
               timing: Timing) -> list[str]:
        flow = outcome.flow
        assert flow.size is not None
        return ["scp", "-q", "-i", str(self.files.client_key()), *SSH_OPTIONS, "-P", port,
                str(self.files.payload(flow.size, flow.content)),
                f"root@{outcome.address}:/dev/null"]


class HttpRunner(ApplicationRunner):
    """curl fetching `objects` objects one after another from Python's HTTP server."""

    programs = ("curl",)
    packages = "curl"
    ready_text = "Serving HTTP on"

    def server(self, flow: Flow, address: str, port: str) -> list[str]:
        assert flow.size is not None
        served = self.files.folder / f"www-{port}"
        served.mkdir(parents=True, exist_ok=True)
        target = served / "object"
        target.unlink(missing_ok=True)
        target.symlink_to(self.files.payload(flow.size, flow.content))
        return [self.files.python, "-u", "-m", "http.server", port, "--bind", address,
                "--directory", str(served)]

    def server_stderr(self) -> int:
        return subprocess.DEVNULL  # it logs every request there, which nobody reads

    def client(self, outcome: FlowOutcome, port: str, every: float, duration: float,
               timing: Timing) -> list[str]:
        command = ["curl", "-s", "-S", "--fail"]
        for number in range(1, outcome.flow.objects + 1):
            command += ["-o", "/dev/null",
                        f"http://{outcome.address}:{port}/object?n={number}"]
        return command


# Cloudflare's mach (the crate cf-mach): on PATH, named by SIMPLEPERF_MACH, or the build
# beside the repository (../shared/tools/mach)
MACH_BESIDE = Path(__file__).resolve().parents[5] / "shared" / "tools" / "mach"


def mach() -> str | None:
    named = os.environ.get("SIMPLEPERF_MACH")
    if named:
        return named if os.access(named, os.X_OK) else None
    return which("mach") or (str(MACH_BESIDE) if os.access(MACH_BESIDE, os.X_OK) else None)


# nginx as Apple's responsiveness server (its published configuration, cut to one
# flow): TLS and HTTP/2, a sparse 8 GB large object, an upload location that reads the
# body (handed to an inner server that answers with the small object)
NGINX_CONF = """user root;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
events {{ worker_connections 1024; }}
http {{
  default_type application/octet-stream;
  access_log off;
  sendfile on; tcp_nodelay on;
  client_body_temp_path {folder}/tmp;
  server {{ listen unix:{folder}/inner.sock; location /files/ {{ root {folder}/root; }} }}
  server {{
    listen {listen} ssl http2;
    ssl_certificate {folder}/cert.pem; ssl_certificate_key {folder}/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    client_max_body_size 0;
    location /files/ {{ root {folder}/root; }}
    location = /slurp {{ client_max_body_size 0; client_body_buffer_size 1m;
      proxy_pass_request_body off; proxy_set_header Content-Length ""; proxy_method GET;
      proxy_pass http://unix:{folder}/inner.sock:/files/small; }}
    location = /.well-known/nq {{ default_type application/json; alias {folder}/root/config; }}
  }}
}}
"""
LARGE_OBJECT_BYTES = 8 * 10**9


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class RpmRunner(KindRunner):
    """rpm: a server of the responsiveness draft's endpoints in `to` (a simpleperf server,
    or nginx set up as Apple's), measured from `from` by simpleperf's client over HTTP/2
    and TLS (-c URL --rpm), its native protocol (-c HOST --rpm), or mach, which measures
    both directions one after the other, each for the flow's duration (the flow reads the
    one it names). The flow's congestion control is the simpleperf server's (-C: its
    connections inherit its listener's), so a download runs it, and simpleperf's client's
    (an upload); nginx and mach send with the node's default."""

    def __init__(self, resources: Applications | None) -> None:
        self.resources = resources

    def server(self, flow: Flow, address: str, port: str) -> list[str]:
        if flow.tool != "nginx":  # its listener's congestion control, its connections'
            congestion = ["-C", flow.congestion] if flow.congestion else []
            return [PYTHON, "-m", "simpleperf", "-s", "-p", port, *congestion]
        assert self.resources is not None, "nginx needs the run's folder"
        from ...responsiveness.tls import self_signed

        folder = self.resources.folder / f"nginx-{port}"
        (folder / "root" / "files").mkdir(parents=True, exist_ok=True)
        (folder / "tmp").mkdir(exist_ok=True)
        cert, key = self_signed([address])
        (folder / "cert.pem").write_bytes(cert)
        (folder / "key.pem").write_bytes(key)
        with open(folder / "root" / "files" / "large", "wb") as large:
            large.truncate(LARGE_OBJECT_BYTES)  # sparse
        (folder / "root" / "files" / "small").write_bytes(b"x")
        base = f"https://{_url_host(address)}:{port}"
        (folder / "root" / "config").write_text(json.dumps({"version": 1, "urls": {
            "small_download_url": f"{base}/files/small",
            "large_download_url": f"{base}/files/large", "upload_url": f"{base}/slurp"}}))
        (folder / "nginx.conf").write_text(NGINX_CONF.format(
            folder=folder, listen=f"{_url_host(address)}:{port}"))
        return [which("nginx") or "nginx", "-c", str(folder / "nginx.conf"), "-p",
                str(folder), "-g", "daemon off;"]

    def ready(self, process: subprocess.Popen, seconds: float, port: str) -> bool:
        return until_bound(process, seconds, port)

    def client(self, outcome: FlowOutcome, port: str, every: float, duration: float,
               timing: Timing) -> list[str]:
        flow = outcome.flow
        url = f"https://{_url_host(outcome.address)}:{port}/.well-known/nq"
        reverse = ["-R"] if flow.direction == "download" else []
        if flow.meter == "mach":
            return [mach() or "mach", "rpm", "--config", url, "--insecure",
                    "--disable-aim-scores", "--test-duration", str(int(duration * 1000))]
        target = ["-c", url, "--insecure"] if flow.meter == "simpleperf" else [
            "-c", outcome.address, "-p", port]
        congestion = ["-C", flow.congestion] if flow.congestion else []
        return [PYTHON, "-m", "simpleperf", *target, "--rpm", "-J", "-t", f"{duration:g}",
                *reverse, *congestion]

    def read(self, outcome: FlowOutcome, lines: list[str], err: str, code: int) -> None:
        try:
            result = json.loads("\n".join(lines))
        except ValueError:
            outcome.error = failure(err, f"exit status {code}")
            return
        try:
            if outcome.flow.meter == "mach":
                _read_mach(outcome, result)
            else:
                _read_rpm(outcome, result)
        except (KeyError, TypeError, ValueError):
            outcome.error = failure(err, f"{outcome.flow.meter} gave no responsiveness")
            return
        if code != 0 and outcome.error is None:
            outcome.error = failure(err, f"exit status {code}")
        outcome.ok = outcome.error is None and outcome.rpm is not None


def _read_rpm(outcome: FlowOutcome, result: dict[str, Any]) -> None:
    """simpleperf --rpm -J: the draft's result, its trimmed means and its intervals."""
    if "error" in result:
        outcome.error = str(result["error"])[:200]
    end = result["end"]["responsiveness"]
    outcome.rpm = end["rpm"]
    outcome.throughput = end["goodput"]
    trimmed = end["trimmed_ms"]
    foreign = [trimmed[kind] for kind in ("connect", "tls", "foreign") if kind in trimmed]
    outcome.rpm_detail = {
        "meter": outcome.flow.meter, "foreign_ms": sum(foreign) / len(foreign) if foreign
        else None, "loaded_ms": trimmed.get("loaded"), "confidence": end["confidence"],
        "connections": end["connections"], "idle_ms": end["idle_ms"]}
    interval = result["start"]["responsiveness"]["parameters"]["interval"]
    outcome.intervals = [(i["index"] * interval, (i["index"] + 1) * interval, i["goodput"])
                         for i in result["intervals"]]


def _read_mach(outcome: FlowOutcome, result: dict[str, Any]) -> None:
    """mach rpm's JSON: each direction's throughput, loaded latency and RPM; the flow's."""
    measured = result[outcome.flow.direction]
    outcome.rpm = float(measured["rpm"])
    outcome.throughput = float(measured["throughput"])
    outcome.rpm_detail = {"meter": "mach", "foreign_ms": None,
                          "loaded_ms": measured.get("loaded_latency_ms"),
                          "idle_ms": {"latency": result.get("unloaded_latency_ms")}}


class CommandRunner(ApplicationRunner):
    """Any command pair: {address} and {port} filled in."""

    def server(self, flow: Flow, address: str, port: str) -> list[str] | None:
        return ["sh", "-c", _fill(flow.server, address, port)] if flow.server else None

    def client(self, outcome: FlowOutcome, port: str, every: float, duration: float,
               timing: Timing) -> list[str]:
        assert outcome.flow.client is not None
        return ["sh", "-c", _fill(outcome.flow.client, outcome.address, port)]


def _fill(command: str, address: str, port: str) -> str:
    return command.replace("{address}", address).replace("{port}", port)


def runners(resources: Applications | None) -> dict[str, KindRunner]:
    """A runner for every kind of model/flows.KINDS (applications use `resources`)."""
    return {"tcp": TcpRunner(), "udp": UdpRunner(), "ping": PingRunner(),
            "rpm": RpmRunner(resources), "scp": ScpRunner(resources),
            "http": HttpRunner(resources),
            "command": CommandRunner(resources)}


def require_programs(kinds: set[str], tools: frozenset[str] | set[str] = frozenset(),
                     meters: frozenset[str] | set[str] = frozenset()) -> None:
    """Before anything is built: what the experiment's kinds (and tools, and rpm flows'
    meters) need is installed."""
    every = runners(None)
    for kind in sorted(kinds):
        missing = every[kind].missing()
        if missing:
            raise CommandError(f"{kind} flows {missing}")
    for tool in sorted(tools & TOOL_SERVERS.keys()):
        program = TOOL_SERVERS[tool][2]
        if which(program) is None:
            raise CommandError(f"flows with tool = \"{tool}\" need {program} (Debian: "
                               f"apt-get install {program})")
    if "nginx" in tools and which("nginx") is None:
        raise CommandError("rpm flows with tool = \"nginx\" need nginx (Debian: apt-get "
                           "install nginx)")
    if "mach" in meters and mach() is None:
        raise CommandError("rpm flows with meter = \"mach\" need Cloudflare's mach (cargo "
                           "install cf-mach; or SIMPLEPERF_MACH=PATH, or a build at "
                           f"{MACH_BESIDE})")


# ---------------------------------------------------------------- simpleperf's JSON


def read_result(outcome: FlowOutcome, result: dict[str, Any]) -> None:
    """Both ends' view comes back in the client's JSON; the receiver's intervals are the
    server's (ours for a reverse test, which lab flows are not)."""
    end = result["end"]
    totals = document.sums(end)
    outcome.sender_throughput = totals.sent_bps
    outcome.retransmits = totals.retransmits
    outcome.delivered_ce = totals.delivered_ce
    outcome.throughput = totals.received_bps
    outcome.connection_throughputs = [stream["receiver"]["bits_per_second"]
                                      for stream in end["streams"]]
    windows = [stream["sender"]["max_snd_wnd"] for stream in end["streams"]
               if stream["sender"].get("max_snd_wnd")]
    if windows:
        outcome.advertised_window = sum(windows) / len(windows)
    rtts = [stream["sender"]["min_rtt"] for stream in end["streams"]
            if stream["sender"].get("min_rtt")]
    if rtts:
        outcome.own_rtt_ms = sum(rtts) / len(rtts) / 1e3  # iperf3's microseconds
    if outcome.flow.mptcp:
        outcome.mptcp_subflows = sum(stream["sender"].get("mptcp_subflows", 0)
                                     for stream in end["streams"])
    if outcome.flow.spec.paced:  # a UDP test: its datagrams' jitter and loss
        outcome.jitter_ms, outcome.lost = totals.jitter_ms, totals.lost
        outcome.packets, outcome.host_dropped = totals.packets, totals.host_dropped
    outcome.one_way_ms = one_way(end["streams"])
    medians = document.receiver_delays(end["streams"])
    if medians:
        outcome.one_way_p50_ms = (sum(d["p50_ms"] * d["count"] for d in medians)
                                  / sum(d["count"] for d in medians))
    writes = one_way(end["streams"], "write_to_read_delay")
    outcome.write_delay_ms = (writes[1], writes[2]) if writes is not None else None
    receiver = end["streams"][0]["receiver"]
    if "frame_latency" in receiver:
        latency = receiver["frame_latency"]
        outcome.frames = (receiver["frames"], receiver["frames_lost"])
        outcome.frame_latency_ms = (latency.get("mean_ms"), latency.get("p99_ms"))
    outcome.sockets = [(c["local_host"], c["local_port"], c["remote_host"], c["remote_port"])
                       for c in result.get("start", {}).get("connected", [])]
    received = result.get("server_intervals") or result["intervals"]
    # On the flows' clock (0 = the step's agreed start), as events are: the test measures
    # from after its handshakes, which take several round trips.
    began = end.get("measurement_start", {}).get("monotonic")
    shift = began - outcome.started if began is not None and outcome.started else 0.0
    outcome.intervals = [(i["sum"]["start"] + shift, i["sum"]["end"] + shift,
                          i["sum"]["bits_per_second"]) for i in received]
    outcome.ok = "error" not in result


def one_way(streams: list[dict[str, Any]], key: str = "one_way_delay"
            ) -> tuple[float, float, float] | None:
    """The receivers' one-way delays (`key`: of the path, or write_to_read_delay) over all
    of a flow's connections: the least, the mean (weighted by what each timed) and the
    largest 99th percentile, ms."""
    delays = document.receiver_delays(streams, key)
    if not delays:
        return None
    count = sum(d["count"] for d in delays)
    return (min(d["min_ms"] for d in delays),
            sum(d["mean_ms"] * d["count"] for d in delays) / count,
            max(d["p99_ms"] for d in delays))


def ping_times(text: str) -> list[float]:
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", text)]
