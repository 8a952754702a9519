"""What real applications need for a run: a folder of its own holding the payload files
(random or sparse), the SSH host key and the client's key; removed with the run. The
applications themselves (scp to Debian's OpenSSH server, curl from Python's HTTP server, any
command pair) are kinds of flow whose runners are in kinds.py.

A transfer is timed from the synchronised start to the client's exit (connection set-up,
SSH's handshake included), and its goodput is the bytes moved over that time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CHUNK = 1 << 20


def which(program: str) -> str | None:
    """A program on PATH, or in the sbin folders a daemon lives in."""
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")


class Applications:
    def __init__(self, folder: Path, python: str = sys.executable) -> None:
        self.folder = folder
        self.python = python
        self.files: dict[tuple[int, str], Path] = {}

    def payload(self, size: int, content: str) -> Path:
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

    def host_key(self) -> Path:
        return self._keys()[0]

    def client_key(self) -> Path:
        return self._keys()[1]

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

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
