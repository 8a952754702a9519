"""What topology and experiment files share: finding them, reading them, strict fields."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (the `lab` extra)
    import tomli as tomllib


def read(name_or_path: str, data_dir: Path, kind: str, error: type[Exception]
         ) -> tuple[str, Path]:
    """The text of a shipped file by name ('portfolio') or of a file by path."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = data_dir / f"{name_or_path}.toml"
        if not path.exists():
            shipped = ", ".join(sorted(p.stem for p in data_dir.glob("*.toml")))
            raise error(f"no {kind} named '{name_or_path}' (shipped: {shipped}; or give a path "
                        "to a .toml file)")
    try:
        return path.read_text(), path
    except OSError as failure:
        raise error(f"cannot read {path}: {failure.strerror}") from None


def parse_toml(text: str, error: type[Exception]) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as failure:
        raise error(f"not valid TOML: {failure}") from None


def only(table: dict[str, Any], allowed: set[str], where: str, error: type[Exception]) -> None:
    """Refuse unknown fields: a typo must not be silently ignored."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise error(f"{where}: unknown field '{unknown[0]}' (allowed: "
                    f"{', '.join(sorted(allowed)) or 'none'})")
