"""What topology and experiment files share: finding them, reading them, strict fields."""

from __future__ import annotations

import re
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ...units import parse_duration, parse_size

NO_TOML = ("reading topology and experiment files on Python 3.10 needs tomli: "
           "pip install 'simpleperf[lab]'")


MAX_FILE_BYTES = 1 << 20  # a topology or experiment file; anything larger is not one
MAX_TEXT = 200  # characters of a free-text field (a description, a step's name)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


MAX_MESSAGE = 300  # characters of an error line: a hostile value is cut, never printed whole


class DataFileError(ValueError):
    """A mistake in a topology or experiment file: one line that names where it is, with
    any value quoted from the file cut short."""

    def __init__(self, message: str) -> None:
        line = _CONTROL.sub(" ", message)
        if len(line) > MAX_MESSAGE:
            line = line[:MAX_MESSAGE - 5] + " ...'"
        super().__init__(line)


def read_bounded(path: Path, limit: int, error: type[Exception]) -> bytes:
    """A file's bytes, at most `limit` + 1 of them (more than `limit`: too large for what
    the caller takes); `error` with one line when it cannot be read."""
    try:  # a regular file only: opening a FIFO would hold the reader until a writer came
        if not stat.S_ISREG(Path(path).stat().st_mode):
            raise error(f"cannot read {path}: not a regular file")
        with open(path, "rb") as source:
            return source.read(limit + 1)
    except OSError as failure:
        raise error(f"cannot read {path}: {failure.strerror}") from None


def read(name_or_path: str, data_dir: Path, kind: str, error: type[Exception]
         ) -> tuple[str, Path]:
    """The text of a shipped file by name ('portfolio') or of a file by path: UTF-8 and at
    most MAX_FILE_BYTES, else `error` with one line."""
    if not name_or_path or _CONTROL.search(name_or_path):
        raise error(f"{kind} name {name_or_path!r} must be a shipped name or a path")
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = data_dir / f"{name_or_path}.toml"
        if not path.exists():
            shipped = ", ".join(sorted(p.stem for p in data_dir.glob("*.toml")))
            raise error(f"no {kind} named '{name_or_path}' (shipped: {shipped}; or give a path "
                        "to a .toml file)")
    data = read_bounded(path, MAX_FILE_BYTES, error)
    if len(data) > MAX_FILE_BYTES:
        raise error(f"{path} is not a {kind} file: larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8"), path
    except UnicodeDecodeError as failure:
        raise error(f"{path} is not a {kind} file: not UTF-8 text (byte "
                    f"{failure.start})") from None


def _toml() -> ModuleType | None:
    """Python's own TOML reader, or on Python 3.10 the same parser from PyPI (the `lab`
    extra); imported when a file is read, so that `simpleperf lab --help` works without."""
    try:
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
    except ImportError:
        return None
    module: ModuleType = tomllib
    return module


def parse_toml(text: str, error: type[Exception], origin: Path | None = None
               ) -> dict[str, Any]:
    """The TOML text as tables; `origin`, the file it came from, is named in the error."""
    tomllib = _toml()
    if tomllib is None:
        raise error(NO_TOML)
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as failure:
        raise error((f"{origin}: " if origin else "") + f"not valid TOML: {failure}") from None


def name(value: object, pattern: re.Pattern[str], where: str, rule: str,
         error: type[Exception]) -> str:
    """A name that will become a namespace, an interface or a folder: the whole of it must
    match (no trailing newline sneaks past a `$`)."""
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        shown = repr(value)[:40] if isinstance(value, str) else repr(type(value).__name__)
        raise error(f"{where} {shown} must be {rule}")
    return value


def text(value: object, where: str, error: type[Exception]) -> str:
    """Free text shown in tables and reports: one line, at most MAX_TEXT characters."""
    shown = str(value)
    if len(shown) > MAX_TEXT or _CONTROL.search(shown):
        raise error(f"{where} must be one line of at most {MAX_TEXT} characters")
    return shown


def only(table: dict[str, Any], allowed: set[str], where: str, error: type[Exception]) -> None:
    """Refuse unknown fields: a typo must not be silently ignored."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise error(f"{where}: unknown field '{unknown[0]}' (allowed: "
                    f"{', '.join(sorted(allowed)) or 'none'})")


def count(value: Any, where: str, low: int, high: int, error: type[Exception],
          unit: str = "") -> int:
    """A whole number (of `unit`) from low to high (not a bool, which TOML keeps apart)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        of = f" of {unit}" if unit else ""
        raise error(f"{where} must be a whole number{of} from {low} to {high}, not {value!r}")
    return value


def seconds(value: Any, where: str, error: type[Exception]) -> float:
    """A time: '25s', '200ms' or a number of seconds, above 0 and at most a day."""
    try:
        number = parse_duration(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise error(f"{where} = {value!r} is not a time such as '25s' or '200ms'") from None
    if isinstance(value, bool) or not 0 < number <= 86_400:
        raise error(f"{where} = {value!r} must be more than 0 and at most a day")
    return number


def size(value: Any, where: str, low: int, high: int, error: type[Exception]) -> int:
    """Bytes: '100M' or a whole number, from low to high."""
    try:
        number = parse_size(value) if isinstance(value, str) else value
    except ValueError:
        number = None
    if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= high:
        raise error(f"{where} = {value!r} must be a size such as '100M' ({low}..{high} bytes)")
    return number
