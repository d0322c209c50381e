"""The layering, checked on the source with ``ast``:

* no module outside ``pterun/interp`` touches an underscore attribute of an object from elsewhere (``obj._name``
  where ``obj`` is not ``self``/``cls`` and ``_name`` is not defined in that module), nor imports an underscore
  name from a module of another package;
* the imports among ``src/pterun`` modules have no cycle, at any depth (inside functions and ``if TYPE_CHECKING:``
  too: a lazy import is still an arrow of the design), and none runs back up the layers (:data:`LAYERS`);
* only ``pterun/config.py`` reads the environment.

Each check is a function of the source text, so the tests below also run it on planted violations to show it can
fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "pterun"

#: underscore attributes that are public API of the object that has them
ALLOWED_ATTRS = {
    "_replace", "_asdict", "_fields", "_field_defaults", "_make",  # namedtuple's API (underscored so fields cannot clash)
}
#: (module, attribute) pairs allowed anyway, each with the reason
ALLOWED_AT = {
    # LiteRT's Interpreter has no public way to list which ops its XNNPACK delegate took; the engine must know
    # (a model partly on LiteRT's builtin kernels rounds differently), so it reads the op details LiteRT's own
    # tests read. A third-party object, not pterun's.
    ("pterun.delegates.xnnpack.litert_engine.adapter", "_get_ops_details"),
    # LiteRT's Python Interpreter addresses subgraph 0 only and refuses to invoke while arrays over its memory
    # exist; its own wrapper object does neither (see the adapter's docstring): the one module that reaches it
    ("pterun.delegates.xnnpack.litert_engine.adapter", "_interpreter"),
    # os._exit is the standard library's documented way to leave without the interpreter's teardown: the pterun
    # executable leaves so once LiteRT's CompiledModel ran, whose C++ teardown logs to stderr
    ("pterun.cli", "_exit"),
    # a C library's symbol, not a Python object's private name: glibc's and musl's exit-handler registration, which
    # keeps LiteRT's teardown lines off stderr (env.quiet_native_teardown)
    ("pterun.delegates.xnnpack.litert_engine.env", "__cxa_atexit"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _sources() -> dict[str, tuple[Path, str]]:
    return {_module_name(p): (p, p.read_text()) for p in sorted(PKG.rglob("*.py"))}


def _own_names(tree: ast.AST) -> set[str]:
    """Every name the module binds: functions, classes, assignments (also ``x._attr = ...``), parameters,
    imports, ``__slots__`` entries."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            names.update(c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return names


def _exported(module: str) -> set[str]:
    """The names a pterun module lists in its ``__all__`` (public by declaration, underscore or not: ExecuTorch's
    pybindings spell ``_load_for_executorch`` so, and pterun.module keeps the spelling)."""
    path = SRC / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = SRC / module.replace(".", "/") / "__init__.py"
    if not path.is_file():
        return set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return set()


def private_access(module: str, path: Path, text: str) -> list[str]:
    """``module``'s reaches into other modules' underscore names (empty inside pterun.interp)."""
    if module == "pterun.interp" or module.startswith("pterun.interp."):
        return []
    tree = ast.parse(text)
    own = _own_names(tree)
    package = _package(module, path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if name in own or name in ALLOWED_ATTRS or (module, name) in ALLOWED_AT:
                continue
            found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pterun") \
                and node.level == 0:
            source_package = node.module if (SRC / node.module.replace(".", "/")).is_dir() \
                else node.module.rpartition(".")[0]
            if source_package == package and package != "pterun":
                continue  # a subpackage's modules share their private helpers; pterun's own modules do not
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") \
                        and alias.name not in _exported(node.module):
                    found.append(f"{module}:{node.lineno}: from {node.module} import {alias.name}")
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _module_level_imports(tree: ast.Module):
    """Import statements run when the module is imported: top level, and inside top-level if/try/with blocks,
    but not under ``if TYPE_CHECKING:`` nor inside functions or classes."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                todo.extend(node.body)
            todo.extend(node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        elif isinstance(node, ast.With):
            todo.extend(node.body)


def _all_imports(tree: ast.Module):
    """Every import statement of a module, wherever it is (functions, classes, ``if TYPE_CHECKING:``)."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def import_graph(sources: dict[str, tuple[Path, str]], any_depth: bool = False) -> dict[str, set[str]]:
    """module -> the pterun modules it imports at module level, or anywhere with ``any_depth`` (``from pkg import
    sub`` counts as the submodule ``pkg.sub``; ``from pkg import name`` as ``pkg`` itself)."""
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, (path, text) in sources.items():
        package = _package(module, path)
        tree = ast.parse(text)
        for node in _all_imports(tree) if any_depth else _module_level_imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: resolve against the package
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]
            graph[module].update(t for t in targets if t in sources and t != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


#: the layers of the package, lowest first: a module imports only modules of its own layer or below (the longest
#: prefix names a module's layer)
LAYERS = (
    ("pterun.errors", "pterun._log", "pterun._fpstate", "pterun._record", "pterun.config", "pterun.numerics",
     "pterun.dtypes"),
    ("pterun.threads", "pterun.format"),
    ("pterun.kernels", "pterun.delegates"),
    ("pterun.interp",),
    ("pterun.sources", "pterun.convert", "pterun.meta", "pterun.runtime", "pterun.bundled"),
    ("pterun.summary", "pterun.profile", "pterun.trace", "pterun.llm"),
    ("pterun.module",),
    ("pterun",),
    ("pterun.cli", "pterun.llm.cli", "pterun.__main__"),
)


def layer(module: str) -> int:
    best, found = -1, None
    for k, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), k
    if found is None:
        raise AssertionError(f"{module} is in no layer of LAYERS")
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports that run from a module up to a higher layer."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer(b) > layer(a))


def environment_reads(module: str, text: str) -> list[str]:
    """Where a module other than pterun.config reads (or writes) ``os.environ`` / ``os.getenv``."""
    if module == "pterun.config":
        return []
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv") or \
                isinstance(node, ast.Name) and node.id in ("environ", "getenv"):
            found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    return found


# -- the checks on pterun itself ---------------------------------------------------------------------------------
def test_no_module_outside_interp_reaches_into_another_modules_private_names():
    found = [f for m, (p, t) in _sources().items() for f in private_access(m, p, t)]
    assert not found, "\n".join(found)


def test_the_module_level_import_graph_has_no_cycle():
    graph = import_graph(_sources())
    assert sum(map(len, graph.values())) > 100  # the graph was really read
    assert "pterun.interp.method" in graph["pterun.runtime"]
    assert not cycles(graph), cycles(graph)


def test_no_import_at_any_depth_makes_a_cycle_or_runs_up_the_layers():
    graph = import_graph(_sources(), any_depth=True)
    assert "pterun.delegates.xnnpack.litert_engine" in graph["pterun.delegates.xnnpack"]  # lazy imports were read
    assert not cycles(graph), cycles(graph)
    assert not upward(graph), "\n".join(upward(graph))


def test_only_config_reads_the_environment():
    found = [f for m, (_, t) in _sources().items() for f in environment_reads(m, t)]
    assert not found, "\n".join(found)


# -- each check can fail ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("def f(program):\n    return program._pf\n", ["pterun.summary:2: program._pf"]),
    ("from pterun.runtime import _open\n", ["pterun.summary:1: from pterun.runtime import _open"]),
    ("import numpy as np\nx = np._core\n", ["pterun.summary:2: np._core"]),
])
def test_private_access_finds_a_planted_violation(text, expected):
    assert private_access("pterun.summary", PKG / "summary.py", text) == expected


@pytest.mark.parametrize("text", [
    "class A:\n    def __init__(self):\n        self._x = 1\n    def g(self, other):\n        return other._x\n",
    "def _helper():\n    pass\nimport pterun.summary as s\ns._helper()\n",  # the name is defined here
    "from pterun.delegates.xnnpack.litert_engine.nodes import _BINARY\n",  # the same package
    "from pterun.module import _load_for_executorch\n",  # in pterun.module's __all__: ExecuTorch's spelling
    "x = (1, 2)\nfrom collections import namedtuple\nP = namedtuple('P', 'a b')\nP(1, 2)._replace(a=3)\n",
])
def test_private_access_accepts_what_is_allowed(text):
    assert private_access("pterun.delegates.xnnpack.litert_engine.translate",
                          PKG / "delegates/xnnpack/litert_engine/translate.py", text) == []
    if "self._x" in text:
        assert private_access("pterun.interp.steps", PKG / "interp/steps.py", "x = y._z\n") == []


def test_a_planted_import_cycle_is_found():
    sources = _sources()
    path, text = sources["pterun.config"]
    sources["pterun.config"] = (path, text + "\nfrom pterun import threads\n")  # threads imports config
    assert ["pterun.config", "pterun.threads"] in cycles(import_graph(sources))
    # imported only for type checking, or inside a function: not a cycle
    for planted in ("\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pterun import threads\n",
                    "\ndef f():\n    from pterun import threads\n"):
        sources["pterun.config"] = (path, text + planted)
        assert cycles(import_graph(sources)) == []


def test_a_planted_lazy_cycle_and_an_upward_import_are_found():
    sources = _sources()
    path, text = sources["pterun.config"]
    sources["pterun.config"] = (path, text + "\ndef f():\n    from pterun import threads\n")
    assert ["pterun.config", "pterun.threads"] in cycles(import_graph(sources, any_depth=True))
    assert "pterun.config -> pterun.threads" in upward(import_graph(sources, any_depth=True))
    path, text = sources["pterun.format.program"]
    sources["pterun.format.program"] = (path, text + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                              "    from pterun.interp.tensor import Tensor\n")
    assert "pterun.format.program -> pterun.interp.tensor" in upward(import_graph(sources, any_depth=True))


def test_a_planted_environment_read_is_found():
    assert environment_reads("pterun.cli", "import os\nos.environ['PTERUN_ENGINE'] = 'numpy'\n") == \
        ["pterun.cli:2: os.environ"]
    assert environment_reads("pterun.config", "import os\nos.environ.get('X')\n") == []
