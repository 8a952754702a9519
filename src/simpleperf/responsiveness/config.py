"""What a responsiveness client is pointed at: a configuration URL (`https://HOST[:PORT]
[/PATH]`, as networkQuality -C and mach --config take it; the path defaults to the draft's
`/.well-known/nq`) and the configuration document it serves, whose URLs name the small and
large objects and the upload sink. The draft's keys are read first, then the legacy
`*_https_*` ones older servers give. Standard library only: the command line checks a URL
here without loading HTTP/2."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass

from ..errors import SimpleperfError, UsageError

WELL_KNOWN = "/.well-known/nq"
SCHEMES = {"https": 443, "http": 80}  # http: cleartext HTTP/2 (h2c, prior knowledge)
MAX_CONFIG_BYTES = 64 * 1024  # a configuration is a few hundred bytes
# each URL the configuration must give: the draft's key, then the legacy one
URL_KEYS = (("small", ("small_download_url", "small_https_download_url")),
            ("large", ("large_download_url", "large_https_download_url")),
            ("upload", ("upload_url", "https_upload_url")))


@dataclass(frozen=True)
class Url:
    scheme: str
    host: str
    port: int
    path: str  # with its query, as the request's :path

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == SCHEMES[self.scheme] else f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"


def looks_like_url(text: str) -> bool:
    return "://" in text


def parse_url(text: str, what: str, default_path: str = "") -> Url:
    """An http(s) URL, or UsageError naming `what` it is."""
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise UsageError(f"{what} {text[:80]!r}: {error}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise UsageError(f"{what} {text[:80]!r}: not an https:// (or http://) URL")
    if not parts.hostname:
        raise UsageError(f"{what} {text[:80]!r}: names no host")
    path = parts.path if parts.path not in ("", "/") else default_path or "/"
    if parts.query:
        path += "?" + parts.query
    return Url(scheme, parts.hostname, port or SCHEMES[scheme], path)


def configuration_url(text: str) -> Url:
    """-c URL with --rpm: the configuration's URL (a bare host's path is the draft's)."""
    return parse_url(text, "-c/--client", WELL_KNOWN)


@dataclass(frozen=True)
class Endpoints:
    small: Url
    large: Url
    upload: Url


def parse_configuration(body: bytes, where: Url) -> Endpoints:
    """The configuration document's URLs, or SimpleperfError saying what is wrong in one
    line."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise SimpleperfError(f"{where} is not a responsiveness configuration (not JSON)"
                              ) from None
    urls = document.get("urls") if isinstance(document, dict) else None
    if not isinstance(urls, dict):
        raise SimpleperfError(f"{where} is not a responsiveness configuration (no \"urls\")")
    found: dict[str, Url] = {}
    for name, keys in URL_KEYS:
        value = next((urls[key] for key in keys if isinstance(urls.get(key), str)), None)
        if value is None:
            raise SimpleperfError(f"{where}: the configuration gives no {keys[0]}")
        try:
            found[name] = parse_url(value, f"its {keys[0]}")
        except UsageError as error:
            raise SimpleperfError(f"{where}: {error}") from None
    return Endpoints(**found)
