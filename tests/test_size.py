"""Sizes that keep the code readable: no module of ``src/pterun`` over 500 lines, no function over 60."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "pterun"
MAX_MODULE, MAX_FUNCTION = 500, 60


def too_long(path: Path, text: str) -> list[str]:
    """What in one module is over the limits."""
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE:
        found.append(f"{path.name}: {lines} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION:
                found.append(f"{path.name}:{node.lineno} {node.name}: {n} lines")
    return found


def test_no_module_over_500_lines_and_no_function_over_60():
    found = [f for p in sorted(PKG.rglob("*.py")) for f in too_long(p.relative_to(PKG), p.read_text())]
    assert not found, "\n".join(found)


def test_the_check_finds_what_is_too_long():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert too_long(Path("m.py"), f"def f():\n{body}\n") == ["m.py:1 f: 62 lines"]
    assert too_long(Path("m.py"), "x = 1\n" * 501) == ["m.py: 501 lines"]
    assert too_long(Path("m.py"), "x = 1\n" * 500) == []
