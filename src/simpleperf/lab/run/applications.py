"""Real applications as flows: scp to Debian's OpenSSH server, HTTP fetches from Python's
HTTP server with curl, and any command pair. Each server runs in the target node, started
and recorded by the runner like every other process; the keys, the host key and the files
are made for the run in a folder of its own and removed with it.

A transfer is timed from the synchronised start to the client's exit (connection set-up,
SSH's handshake included), and its goodput is the bytes moved over that time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..model.experiment import Flow
from ..model.outcomes import OUTPUT_CHARS, FlowOutcome
from ..net.system import CommandError
from .launch import END_MARK

REQUIRED = {"scp": (("sshd", "ssh-keygen", "scp"), "openssh-server openssh-client"),
            "http": (("curl",), "curl")}
CHUNK = 1 << 20
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]
READY = {"scp": "Server listening on", "http": "Serving HTTP on"}


def require_programs(kinds: set[str]) -> None:
    for kind in sorted(kinds & set(REQUIRED)):
        programs, packages = REQUIRED[kind]
        missing = [p for p in programs if _which(p) is None]
        if missing:
            raise CommandError(f"{kind} flows need {', '.join(missing)} (Debian: apt-get "
                               f"install {packages})")


def _which(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")


class Applications:
    def __init__(self, folder: Path, python: str = sys.executable) -> None:
        self.folder = folder
        self.python = python
        self.files: dict[tuple[int, str], Path] = {}

    def _payload(self, size: int, content: str) -> Path:
        """A file of `size` bytes: random (what compression cannot shrink) or sparse."""
        key = (size, content)
        if key not in self.files:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"payload-{content}-{size}"
            with open(path, "wb") as out:
                if content == "sparse":
                    out.truncate(size)
                else:
                    left = size
                    while left:
                        out.write(os.urandom(min(CHUNK, left)))
                        left -= min(CHUNK, left)
            self.files[key] = path
        return self.files[key]

    def _keys(self) -> tuple[Path, Path]:
        """A host key and a client key made for this run; the client's is authorised."""
        host, client = self.folder / "ssh_host_ed25519_key", self.folder / "client_key"
        if not host.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            for path in (host, client):
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                                str(path)], check=True, capture_output=True)
            shutil.copy(client.with_suffix(".pub"), self.folder / "authorized_keys")
        return host, client

    def server(self, flow: Flow, address: str, port: str) -> list[str] | None:
        if flow.kind == "scp":
            host, _ = self._keys()
            config = self.folder / f"sshd-{port}.conf"
            config.write_text("\n".join([
                f"Port {port}", f"ListenAddress {address}", f"HostKey {host}",
                f"AuthorizedKeysFile {self.folder / 'authorized_keys'}", "PidFile none",
                "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                "Subsystem sftp internal-sftp", ""]))
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
            return [_which("sshd") or "sshd", "-D", "-e", "-f", str(config)]
        if flow.kind == "http":
            assert flow.size is not None
            served = self.folder / f"www-{port}"
            served.mkdir(parents=True, exist_ok=True)
            target = served / "object"
            target.unlink(missing_ok=True)
            target.symlink_to(self._payload(flow.size, flow.content))
            return [self.python, "-u", "-m", "http.server", port, "--bind", address,
                    "--directory", str(served)]
        if flow.kind == "command" and flow.server:
            return ["sh", "-c", _fill(flow.server, address, port)]
        return None

    def client(self, flow: Flow, address: str, port: str) -> list[str]:
        if flow.kind == "scp":
            assert flow.size is not None
            _, key = self._keys()
            return ["scp", "-q", "-i", str(key), *SSH_OPTIONS, "-P", port,
                    str(self._payload(flow.size, flow.content)), f"root@{address}:/dev/null"]
        if flow.kind == "http":
            command = ["curl", "-s", "-S", "--fail"]
            for number in range(1, flow.objects + 1):
                command += ["-o", "/dev/null", f"http://{address}:{port}/object?n={number}"]
            return command
        assert flow.client is not None
        return ["sh", "-c", _fill(flow.client, address, port)]

    def bytes_moved(self, flow: Flow) -> int | None:
        return (flow.size or 0) * flow.objects if flow.kind in READY else None

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _fill(command: str, address: str, port: str) -> str:
    return command.replace("{address}", address).replace("{port}", port)


def wait_listening(process: subprocess.Popen, kind: str, seconds: float) -> bool:
    """Until the server says it listens (sshd on stderr, Python's HTTP server on stdout);
    False if it ended instead."""
    ready = READY.get(kind)
    if ready is not None:
        stream = process.stderr if kind == "scp" else process.stdout
        assert stream is not None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = stream.readline()
            if not line or ready in line:
                break
    return process.poll() is None


def read_application(outcome: FlowOutcome, lines: list[str], err: str,
                     moved: int | None) -> None:
    """The launcher's end mark gives the exit time and status; output lines precede it."""
    if not lines or not lines[-1].startswith(END_MARK) or outcome.started is None:
        detail = [line for line in err.strip().splitlines() if line.strip()]
        outcome.error = (detail[-1] if detail else "timed out")[:200]
        return
    _, ended, status = lines[-1].split()
    outcome.seconds = float(ended) - outcome.started
    outcome.exit_status = int(status)
    outcome.output = "\n".join(lines[:-1])[:OUTPUT_CHARS]
    if moved is not None and outcome.seconds > 0:
        outcome.throughput = moved * 8 / outcome.seconds
    outcome.ok = outcome.exit_status == 0
    if not outcome.ok:
        detail = [line for line in err.strip().splitlines() if line.strip()]
        outcome.error = (f"{outcome.flow.kind} exited with status {status}"
                         + (f": {detail[-1]}" if detail else ""))[:200]
