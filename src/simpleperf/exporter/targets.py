"""Which targets the exporter may probe. An exporter that tests any address it is handed
is an amplifier (a scrape of a few bytes sends seconds of traffic anywhere), so a target
must match --allow: a network (10.0.0.0/8) or a host name given exactly. By default only
loopback. A name that is not allowed by itself is resolved once, every address it has must
be in an allowed network, and the probe goes to that address (a name that resolves
elsewhere the next time changes nothing).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

DEFAULT_ALLOW = ("127.0.0.0/8", "::1/128")
HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*\.?")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(ValueError):
    """A target the exporter will not probe: one line, and the HTTP status to answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Target:
    host: str  # as given
    address: str  # what the probe connects to
    port: int | None


@dataclass(frozen=True)
class Allowed:
    networks: tuple[Network, ...]
    names: frozenset[str]

    @classmethod
    def parse(cls, entries: list[str] | None) -> Allowed:
        """--allow's values (ValueError with one line for one that is neither)."""
        networks: list[Network] = []
        names: set[str] = set()
        for entry in entries or list(DEFAULT_ALLOW):
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if not HOST_NAME.fullmatch(entry):
                raise ValueError(f"--allow {entry!r} is neither a network (10.0.0.0/8) nor a "
                                 "host name")
            names.add(entry.lower().rstrip("."))
        return cls(tuple(networks), frozenset(names))

    def describe(self) -> str:
        return ", ".join([*map(str, self.networks), *sorted(self.names)])

    def check(self, given: str) -> Target:
        """The target `given` (HOST, HOST:PORT, [V6]:PORT) if it may be probed; Refused
        (400 when malformed, 403 when not allowed) otherwise."""
        host, port = split(given)
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            if not self._in(literal):
                raise Refused(f"target {host} is not in an allowed network "
                              f"({self.describe()}; --allow)", 403)
            return Target(host, str(literal), port)
        if host.lower().rstrip(".") in self.names:
            return Target(host, host, port)
        addresses = _resolve(host)
        outside = [a for a in addresses if not self._in(a)]
        if outside:
            raise Refused(f"target {host} resolves to {outside[0]}, which is not in an "
                          f"allowed network ({self.describe()}; --allow)", 403)
        return Target(host, str(addresses[0]), port)

    def _in(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(address in network for network in self.networks
                   if network.version == address.version)


def split(given: str) -> tuple[str, int | None]:
    """HOST[:PORT] or [V6][:PORT]; Refused (400) when it is not one."""
    text = given.strip()
    port_text = None
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not _is_address(host):
            raise Refused(f"target {given[:100]!r} is not HOST, HOST:PORT or [V6]:PORT", 400)
        if rest:
            if not rest.startswith(":"):
                raise Refused(f"target {given!r} is not HOST, HOST:PORT or [V6]:PORT", 400)
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host = text
    if not host or not (HOST_NAME.fullmatch(host) or _is_address(host)):
        raise Refused(f"target {given[:100]!r} is not HOST, HOST:PORT or [V6]:PORT", 400)
    if port_text is None:
        return host, None
    port = whole_number(port_text, 65535)
    if port is None or port < 1:
        raise Refused(f"target {given[:100]!r}: the port must be 1 to 65535", 400)
    return host, port


def whole_number(text: str, highest: int) -> int | None:
    """`text` as a whole number from 0 to `highest` in ASCII digits (not '²', '1_0' or
    5,000 digits, which int() would take or choke on); None if it is not one."""
    digits = len(str(highest))
    if not re.fullmatch(f"[0-9]{{1,{digits}}}", text) or int(text) > highest:
        return None
    return int(text)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _resolve(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise Refused(f"target {host} does not resolve", 400) from None
    return [ipaddress.ip_address(entry[4][0]) for entry in found]
