"""Running the system's tools (ip, tc, iptables, ethtool) and facts about processes."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ...transport import tcp

NETNS_DIR = "/run/netns"


class CommandError(RuntimeError):
    """A system command failed; the message says which and why, in one line."""


def require_tools(*names: str) -> None:
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        raise CommandError(f"missing tools: {', '.join(missing)} (Debian: apt-get install "
                           "iproute2 iptables ethtool)")


def run(command: Sequence[str], stdin: str | None = None, check: bool = True
        ) -> subprocess.CompletedProcess:
    done = subprocess.run(list(command), input=stdin, capture_output=True, text=True)
    if check and done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise CommandError(f"{' '.join(command[:4])}: {detail[0] if detail else 'failed'}")
    return done


def namespace_inode(name: str) -> int | None:
    try:
        return os.stat(os.path.join(NETNS_DIR, name)).st_ino
    except OSError:
        return None


def existing_namespaces() -> set[str]:
    try:
        return set(os.listdir(NETNS_DIR))
    except OSError:
        return set()


def process_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of a process (clock ticks since boot): with the pid it names
    one process for good, even after the pid is reused."""
    return _start_time(process_stat(pid))


def _start_time(fields: list[str] | None) -> int | None:
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def is_same_process(pid: int, start_time: int | None) -> bool:
    return start_time is not None and process_start_time(pid) == start_time


def is_running(pid: int, start_time: int | None) -> bool:
    """The same process, and not a zombie that no parent has reaped (it runs nothing)."""
    fields = process_stat(pid)  # read once: the start time and the state
    return (fields is not None and start_time is not None
            and _start_time(fields) == start_time and fields[0] not in ("Z", "X"))


def processes_in_namespaces(inodes: set[int]) -> dict[int, str]:
    """pid -> command name of every process whose network namespace is one of `inodes`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{entry}/ns/net")
            if int(link[link.index("[") + 1:-1]) in inodes:
                with open(f"/proc/{entry}/comm") as comm:
                    found[int(entry)] = comm.read().strip()
        except (OSError, ValueError):
            continue
    return found


def system_congestion_control() -> str:
    """What TCP uses unless told otherwise; new network namespaces inherit it."""
    return tcp.system_congestion() or "unknown"


def require_congestion(names: set[str]) -> None:
    """Every named TCP congestion control is in the kernel, loading its module (tcp_NAME)
    where it is built as one; else one line naming those the kernel has."""
    missing = sorted(set(names) - set(tcp.available_congestion()))
    for name in missing:
        if shutil.which("modprobe"):
            subprocess.run(["modprobe", "-q", f"tcp_{name}"], capture_output=True, check=False)
    missing = sorted(set(missing) - set(tcp.available_congestion()))
    if missing:
        raise CommandError(f"this kernel has no TCP congestion control {', '.join(missing)} "
                           f"(it has: {', '.join(tcp.available_congestion()) or 'none listed'})")


ALLOWED_CONGESTION = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def namespace_default_allowed(name: str) -> bool:
    """Whether a network namespace may default to congestion control `name` (the kernel
    lets one other than the first default only to an allowed one)."""
    try:
        with open(ALLOWED_CONGESTION) as listed:
            return name in listed.read().split()
    except OSError:
        return False


def require_namespace_congestion(wanted: dict[str, str]) -> None:
    """wanted: node -> the congestion control its namespace is to default to. The kernel
    lets a namespace other than the first default only to an allowed one (a process with
    CAP_NET_ADMIN may still pick any per socket, as flows' `congestion` does)."""
    require_congestion(set(wanted.values()))
    try:
        with open(ALLOWED_CONGESTION) as listed:
            allowed = listed.read().split()
    except OSError:
        return
    for node, name in sorted(wanted.items()):
        if name not in allowed:
            raise CommandError(
                f"node {node}: congestion {name} cannot be a network namespace's default: the "
                f"kernel allows only net.ipv4.tcp_allowed_congestion_control ({' '.join(allowed)})"
                f"; add {name} there (sysctl -w net.ipv4.tcp_allowed_congestion_control="
                f"\"{' '.join([*allowed, name])}\") or name it on the flows (congestion = "
                f"\"{name}\")")


def module_command(module: str, *arguments: str) -> tuple[list[str], dict[str, str]]:
    """`python -m module` as a command and the environment it needs: the lab's helper
    processes import this very package, wherever it was installed or run from."""
    package_root = str(Path(__file__).resolve().parents[3])
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root,
                                                              environment.get("PYTHONPATH")]))
    return [sys.executable, "-m", module, *arguments], environment


def await_ready(process: subprocess.Popen, log: Path, what: str, seconds: float = 10) -> None:
    """Wait for a helper's "ready" line; if it does not come, its log's last line says why."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    line = process.stdout.readline() if ready else b""
    process.stdout.close()
    if line.strip() not in (b"ready", "ready"):
        reason = log.read_text().strip().splitlines()
        raise CommandError(f"{what} did not start: "
                           + (reason[-1] if reason else f"no answer within {seconds:g} s"))


def queue_drops(pid: int) -> dict[int, int]:
    """Per NFQUEUE queue number of process `pid`'s namespace, the packets the kernel dropped
    because its reader did not take them in time (/proc/net/netfilter/nfnetlink_queue: a
    full queue, and a full netlink socket); empty where there are none, or no such file."""
    try:
        lines = Path(f"/proc/{pid}/net/netfilter/nfnetlink_queue").read_text().splitlines()
    except OSError:
        return {}
    drops = {}
    for line in lines:
        fields = line.split()
        if len(fields) >= 7 and fields[0].isdigit():
            drops[int(fields[0])] = int(fields[5]) + int(fields[6])
    return drops

