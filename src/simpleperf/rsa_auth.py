"""iperf3's RSA authentication, as iperf3 3.12 to 3.21 do it (their iperf_auth.c): the
client encrypts "user: NAME\\npwd:  PASSWORD\\nts:   SECONDS" with the server's RSA public
key (OAEP, or PKCS #1 v1.5 with --use-pkcs1-padding), base64 without line breaks, and sends
it as the `authtoken` parameter; the server decrypts it with its private key and accepts
the test when the time is within --time-skew-threshold seconds of its own and the user's
line in --authorized-users-path ("NAME,HEX", HEX the SHA-256 of "{NAME}PASSWORD"; lines
starting with # are comments) matches.

The RSA part comes from the `cryptography` library (the `rsa` extra), imported only here
and only when a key is used: the rest of the tool needs nothing beyond the standard
library."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from .errors import SimpleperfError, UsageError

DEFAULT_SKEW_SECONDS = 10  # iperf3's --time-skew-threshold default
MAX_TOKEN = 4096  # characters of an authtoken parameter (a 16384-bit key's is 2732)
MAX_USERS_FILE = 1_000_000  # bytes
PASSWORD_ENV = "IPERF3_PASSWORD"  # where iperf3's client reads the password first
_TEXT = re.compile(r"user: (\S+)\npwd:  (\S+)\nts:   (-?\d+)")
_INSTALL = "iperf3's RSA authentication needs the cryptography library: " \
    "pip install 'simpleperf[rsa]' (Debian: python3-cryptography)"


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding
    except ImportError:
        raise SimpleperfError(_INSTALL) from None
    return hashes, serialization, padding


def _padding(pkcs1: bool) -> Any:
    hashes, _, padding = _crypto()
    if pkcs1:
        return padding.PKCS1v15()
    return padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(),
                        label=None)  # OpenSSL's RSA_PKCS1_OAEP_PADDING


def load_public_key(path: str) -> Any:
    _, serialization, _ = _crypto()
    try:
        with open(path, "rb") as file:
            return serialization.load_pem_public_key(file.read(65536))
    except OSError as error:
        raise UsageError(f"--rsa-public-key-path: cannot read {path}: "
                         f"{(error.strerror or str(error)).lower()}") from None
    except ValueError:
        raise UsageError(f"--rsa-public-key-path: {path} is not a PEM RSA public key") from None


def load_private_key(path: str) -> Any:
    _, serialization, _ = _crypto()
    try:
        with open(path, "rb") as file:
            return serialization.load_pem_private_key(file.read(65536), password=None)
    except OSError as error:
        raise UsageError(f"--rsa-private-key-path: cannot read {path}: "
                         f"{(error.strerror or str(error)).lower()}") from None
    except (ValueError, TypeError):
        raise UsageError(f"--rsa-private-key-path: {path} is not a PEM RSA private key "
                         "without a passphrase") from None


def make_token(username: str, password: str, public_key: Any, pkcs1: bool = False,
               now: float | None = None) -> str:
    """The client's authtoken."""
    seconds = int(time.time() if now is None else now)
    text = f"user: {username}\npwd:  {password}\nts:   {seconds}".encode()
    try:
        encrypted = public_key.encrypt(text, _padding(pkcs1))
    except ValueError:
        raise SimpleperfError("the user name and password are too long for the server's RSA "
                              "key") from None
    return base64.b64encode(encrypted).decode()


@dataclass(frozen=True)
class Authorizer:
    """A server's check of iperf3 clients' tokens."""

    private_key: Any
    users_file: str
    skew: int = DEFAULT_SKEW_SECONDS
    pkcs1: bool = False

    def refusal(self, token: object, now: float | None = None) -> str | None:
        """Why this authtoken does not authorize a test; None when it does."""
        if not isinstance(token, str) or not token:
            return "no authentication token (the server requires --username)"
        if len(token) > MAX_TOKEN:
            return "an authentication token too long"
        try:
            encrypted = base64.b64decode(token, validate=True)
            text = self.private_key.decrypt(encrypted, _padding(self.pkcs1)).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            return "an authentication token the server's key cannot read"
        match = _TEXT.fullmatch(text)
        if match is None:
            return "an authentication token not in iperf3's form"
        username, password, stamp = match.group(1), match.group(2), int(match.group(3))
        skew = int(time.time() if now is None else now) - stamp  # whole seconds, as iperf3
        if abs(skew) > self.skew:
            return (f"the client's clock is {abs(skew)} s "
                    f"{'behind' if skew > 0 else 'ahead of'} the server's (at most "
                    f"{self.skew} s, --time-skew-threshold)")
        if not self._known(username, password):
            return f"user '{username}' is not authorized (wrong name or password)"
        return None

    def _known(self, username: str, password: str) -> bool:
        wanted = hashlib.sha256(f"{{{username}}}{password}".encode()).hexdigest()
        try:
            with open(self.users_file, encoding="utf-8", errors="replace") as file:
                lines = file.read(MAX_USERS_FILE).splitlines()
        except OSError:
            return False
        for line in lines:
            if not line or line.startswith("#") or "," not in line:
                continue
            name, _, digest = line.partition(",")
            if name == username and hmac.compare_digest(digest.split(",")[0], wanted):
                return True
        return False


def password(prompt: bool = True) -> str:
    """The client's password: $IPERF3_PASSWORD, else asked on the terminal."""
    given = os.environ.get(PASSWORD_ENV)
    if given is not None:
        return given
    if not prompt or not os.isatty(0):
        raise UsageError(f"--username needs a password: set ${PASSWORD_ENV} (no terminal to "
                         "ask on)")
    import getpass

    return getpass.getpass("Password: ")


def users_line(username: str, password_text: str) -> str:
    """A line of an authorized-users file for this user (as iperf3's docs make one)."""
    return f"{username},{hashlib.sha256(f'{{{username}}}{password_text}'.encode()).hexdigest()}"
