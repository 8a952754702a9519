"""The classic Simpleperf banners and tables, character for character."""

from __future__ import annotations

from ..units import classic_unit, format_amount, format_mbps

SERVER_RULE = "-" * 45
CLIENT_RULE = "-" * 90
INTERVAL_RULE = "-" * 52
COLUMN = 20


def server_banner(port: int) -> str:
    return f"{SERVER_RULE}\nA simpleperf server is listening on port {port}\n{SERVER_RULE}"


def server_connected(client: str, server: str) -> str:
    return f"A simpleperf client with {client} is connected with {server}"


def client_banner(host: str, port: int) -> str:
    return (f"{CLIENT_RULE}\nA simpleperf client connecting to server {host}, port {port}\n"
            f"{CLIENT_RULE}")


def client_connected(host: str, port: int, local: str | None = None) -> str:
    """The single-connection line, or with -P the per-connection line naming our end."""
    if local is None:
        return f"Client connected with {host} port {port}"
    return f"Client {local} connected with {host} port {port}"


def header(amount_title: str) -> str:
    return _columns("ID", "Interval", amount_title, "Rate" if amount_title == "Received"
                    else "Bandwidth")


def row(stream_id: str, start: float, end: float, num_bytes: int, unit: str,
        note: str = "") -> str:
    line = _columns(stream_id, f"{start:.1f} - {end:.1f}",
                    format_amount(num_bytes, classic_unit(unit)),
                    format_mbps(num_bytes, end - start))
    return f"{line}  ({note})" if note else line


def _columns(*cells: str) -> str:
    # Every column is 20 wide and left-aligned; the last is not padded (no trailing blanks).
    return "".join(f"{cell:<{COLUMN}}" for cell in cells[:-1]) + cells[-1]
