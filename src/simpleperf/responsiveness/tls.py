"""The server's TLS: a certificate and key given (--cert, --key), or a self-signed pair
made at start (ECDSA P-256, for the server's addresses and localhost, a year long), whose
SHA-256 fingerprint the server prints so that a user can check what a client shows.
ALPN offers h2, then http/1.1. The pair is made with `cryptography` (the `rpm` extra), and
the certificate's files written for ssl only for as long as it loads them."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import socket
import ssl
import tempfile

from ..errors import SimpleperfError, UsageError

ALPN = ("h2", "http/1.1")
SELF_SIGNED_DAYS = 365


class ServerTls:
    """The context every TLS connection of the server is served with, and what to tell
    of its certificate."""

    def __init__(self, cert: str | None, key: str | None, names: list[str]) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.set_alpn_protocols(list(ALPN))
        if cert is not None:
            try:
                self.context.load_cert_chain(cert, key)
                with open(cert, "rb") as handle:
                    pem = handle.read()
            except (OSError, ssl.SSLError, ValueError):
                raise UsageError(check_pair(cert, key) or f"--cert {cert}: unreadable") \
                    from None
            self.self_signed = False
        else:
            pem, key_pem = self_signed(names)
            _load_pair(self.context, pem, key_pem)
            self.self_signed = True
        self.fingerprint = _fingerprint(pem)


def check_pair(cert: str, key: str | None) -> str | None:
    """Why this certificate and key cannot serve HTTPS, in one line; None when they can."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except OSError as error:
        return f"--cert {cert}: {error.strerror or error}"
    except (ssl.SSLError, ValueError):
        return (f"--cert {cert}{f' --key {key}' if key else ''}: not a certificate (PEM) "
                "and its private key")
    return None


def tls_names(bind: str | None) -> list[str]:
    """The names a self-signed certificate is for: the address listened on (else this
    host's loopback addresses), localhost and the host's name."""
    names = [bind] if bind not in (None, "0.0.0.0", "::") else ["127.0.0.1", "::1"]
    return [name for name in (*names, "localhost", socket.gethostname()) if name]


def self_signed(names: list[str]) -> tuple[bytes, bytes]:
    """A self-signed certificate and its key (PEM) for these names and addresses."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise SimpleperfError("HTTPS needs a certificate: give --cert and --key, or install "
                              "cryptography (pip install 'simpleperf[rpm]') for a "
                              "self-signed one") from None
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "simpleperf responsiveness")])
    alternatives: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternatives.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
                   .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
                   .sign(key, hashes.SHA256()))
    return (certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _load_pair(context: ssl.SSLContext, pem: bytes, key_pem: bytes) -> None:
    """ssl loads a pair from files only: written to a private folder, loaded, removed."""
    with tempfile.TemporaryDirectory(prefix="simpleperf-tls-") as folder:
        cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        for path, data in ((cert_path, pem), (key_path, key_pem)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
        context.load_cert_chain(cert_path, key_path)


def _fingerprint(pem: bytes) -> str:
    """The first certificate's SHA-256 fingerprint, as browsers and openssl show it."""
    der = ssl.PEM_cert_to_DER_cert(pem.decode("ascii", "replace"))
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))

