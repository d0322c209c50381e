"""Docs that cannot drift: every file, module, class and function ``docs/architecture.md`` names exists, and every
module's docstring examples run as doctests (an example that needs a program file is marked ``+SKIP``)."""

from __future__ import annotations

import ast
import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "pterun"
DOC = ROOT / "docs" / "architecture.md"


def _modules() -> list[str]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        if p.name == "__main__.py":
            continue  # running it is the command
        parts = p.relative_to(SRC).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _definitions() -> dict[str, set[str]]:
    """Every name bound at module or class level in src/pterun (and the tests' helper modules): name -> where."""
    names: dict[str, set[str]] = {}
    for p in [*PKG.rglob("*.py"), ROOT / "tests" / "fixtures_util.py"]:
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.setdefault(node.name, set()).add(p.stem)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        names.setdefault(t.id, set()).add(p.stem)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.setdefault(node.target.id, set()).add(p.stem)
    return names


def _files() -> set[str]:
    """Every repository file, by its path relative to the root and to src/pterun."""
    out = set()
    for p in ROOT.rglob("*"):
        if ".venv" in p.parts or ".git" in p.parts or "__pycache__" in p.parts:
            continue
        rel = p.relative_to(ROOT).as_posix()
        out.add(rel + ("/" if p.is_dir() else ""))
        if rel.startswith("src/pterun/"):
            out.add(rel[len("src/pterun/"):] + ("/" if p.is_dir() else ""))
    return out


def unknown_names(text: str) -> list[str]:
    """The files and code names in a page of docs that the code does not have."""
    files, defs = _files(), _definitions()
    missing = []
    for token in sorted(set(re.findall(r"(?<![\w.])[\w/]+\.(?:py|md|sh|toml)\b", text))):
        if "NAME" in token:
            continue  # a placeholder
        if not any(f == token or f.endswith("/" + token) for f in files):
            missing.append(token)
    for token in sorted(set(re.findall(r"`([^`\s]+)`", text))):
        called = "(" in token
        token = token.split("(")[0]
        if not re.fullmatch(r"[A-Za-z_][\w.]*", token) or token.isupper() or token.startswith("__") or \
                token.split(".")[0] in _FOREIGN or token.rsplit(".", 1)[-1] in _SUFFIXES:
            continue  # operator names, variables, options, dunders, other libraries' names
        if "." not in token and not (token[0].isupper() or called):
            continue  # a parameter or a plain word
        if not _resolves(token, defs):
            missing.append(token)
    return missing


#: file name suffixes (a file is checked as a file)
_SUFFIXES = {"py", "md", "sh", "toml", "pte", "ptd", "bpte", "npz", "npy", "json"}
#: names of other libraries a page may mention
_FOREIGN = {"np", "numpy", "logging", "os", "sys", "torch", "ml_dtypes", "functools"}


def _resolves(token: str, defs: dict[str, set[str]]) -> bool:
    parts = token.split(".")
    if len(parts) == 1:
        return token in defs
    for k in range(len(parts), 0, -1):  # pterun.<module path>.<attributes>
        try:
            obj = importlib.import_module(".".join(["pterun", *parts[:k]]))
        except ImportError:
            continue
        try:
            for attr in parts[k:]:
                obj = getattr(obj, attr)
            return True
        except AttributeError:
            return False
    # Class.member, module.name or fixtures_util.name: the first part defined where the last is
    head, last = parts[0], parts[-1]
    return head in defs and last in defs or head in {Path(w).stem for ws in defs.values() for w in ws} and last in defs


def test_every_name_the_architecture_page_gives_exists():
    missing = unknown_names(DOC.read_text())
    assert not missing, f"docs/architecture.md names what the code does not have: {missing}"


def test_the_check_finds_a_name_that_is_not_there():
    assert unknown_names("`interp/loop.py`, `MethodRunner`, `config.resolve`, `interp.steps.build_steps`") == []
    assert unknown_names("`interp/gone.py`, `NoSuchRunner`, `config.no_such`, `interp.steps.nothing`") == \
        ["interp/gone.py", "NoSuchRunner", "config.no_such", "interp.steps.nothing"]


@pytest.mark.parametrize("module", _modules())
def test_module_docstring_examples_run(module):
    mod = importlib.import_module(module)
    failed, _ = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert failed == 0, f"{module}: {failed} docstring example(s) fail (python -m doctest -v on it shows which)"


def test_every_module_opens_with_a_docstring():
    missing = [m for m in _modules() if not ast.get_docstring(ast.parse(
        (PKG / Path(*m.split(".")[1:])).with_suffix(".py").read_text() if (PKG / Path(*m.split(".")[1:])).with_suffix(
            ".py").exists() else (PKG / Path(*m.split(".")[1:]) / "__init__.py").read_text()))]
    assert not missing, missing
