"""The shape the code keeps: small functions and classes, and the layers in their order (the
measurement core never imports the lab, the protocols never touch sockets)."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "simpleperf"
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 200


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in SOURCE.rglob("*.py")]


def _imports(tree: ast.Module, path: Path) -> set[str]:
    """Absolute names of the modules a file imports, relative imports resolved."""
    package = path.relative_to(SOURCE.parent).with_suffix("").parts[:-1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_no_function_or_class_is_too_long_to_read():
    too_long = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None)
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                too_long.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}")
    assert too_long == []


def test_the_measurement_core_never_imports_the_lab():
    for path, tree in _modules():
        if "lab" in path.relative_to(SOURCE).parts or path.name == "__main__.py":
            continue
        lab = {name for name in _imports(tree, path) if name.startswith("simpleperf.lab")}
        assert lab == set(), path


def test_the_protocols_and_the_lab_model_touch_no_socket_and_run_nothing():
    pure = [SOURCE / "protocol", SOURCE / "lab" / "model"]
    for path, tree in _modules():
        if not any(folder in path.parents for folder in pure):
            continue
        forbidden = _imports(tree, path) & {"socket", "subprocess", "select", "os"}
        assert forbidden == set(), path


def _names_a_transport(node: ast.expr) -> bool:
    """A literal "tcp" or "udp", or a tuple, list or set that holds one."""
    if isinstance(node, ast.Constant):
        return node.value in ("tcp", "udp")
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(
        _names_a_transport(item) for item in node.elts)


def test_no_code_compares_a_name_with_tcp_or_udp_it_asks_the_transport():
    """What differs between TCP and UDP is a column of description/transports.py (or of a
    lab flow kind, an exporter prober): a comparison with the word is a branch that a new
    difference would have to find."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    _names_a_transport(side) for side in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    assert found == []
