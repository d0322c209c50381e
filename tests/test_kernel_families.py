"""A method's load imports only the kernel families of its operators (pterun.kernels.families): the table says
which family registers each operator, and a program run with only its families gives what it gives with all."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fixtures_util import FIXTURES, SRC, portable_fixture_names
from pterun.kernels import KERNELS
from pterun.kernels.families import FAMILIES, FAMILY_OF
from pterun.kernels.registry import load

KERNEL_DIR = SRC / "pterun" / "kernels"
NOT_FAMILIES = {"__init__", "registry", "families", "manifest", "fast"}  # modules that register no kernel


def _fresh(code: str) -> str:
    """stdout of ``code`` run in a fresh interpreter with this tree's pterun first on the path."""
    script = f"import sys\nsys.path.insert(0, {str(SRC)!r})\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_family_module_is_in_the_table():
    modules = {p.stem for p in KERNEL_DIR.glob("*.py") if not p.stem.startswith("_")} - NOT_FAMILIES
    assert modules == set(FAMILIES)


def test_each_family_alone_registers_exactly_its_names_in_the_table():
    # each family imported into a fresh registry: the names it registers (with those of the families it imports)
    out = _fresh(f"""
        import importlib, json
        got = {{}}
        for family in {sorted(FAMILIES)!r}:
            for m in [m for m in sys.modules if m.startswith("pterun.kernels")]:
                del sys.modules[m]
            registry = importlib.import_module("pterun.kernels.registry")
            importlib.import_module("pterun.kernels." + family)
            loaded = sorted(m.split(".")[-1] for m in sys.modules if m.startswith("pterun.kernels."))
            got[family] = [sorted(registry.KERNELS), loaded]
        print(json.dumps(got))
    """)
    for family, (names, loaded) in json.loads(out).items():
        expected = {n for f in loaded if f in FAMILIES for n in FAMILIES[f]}
        missing, extra = expected - set(names), set(names) - expected
        assert not missing and not extra, (f"family {family!r}: the table lists {sorted(missing)} it does not "
                                           f"register and misses {sorted(extra)} (pterun/kernels/families.py)")


def test_the_table_names_each_registered_operator_once():
    # pterun's own kernels (a test may have registered one of its own in this process)
    own = {name for name, k in KERNELS.items() if k.fn.__module__.startswith("pterun.kernels.")}
    assert sum(len(names) for names in FAMILIES.values()) == len(FAMILY_OF) == len(own) > 250
    assert set(FAMILY_OF) == own
    assert FAMILY_OF["aten::add.out"] == "elementwise" and FAMILY_OF["aten::convolution.out"] == "conv_pool"


def test_load_returns_the_registry_and_leaves_unknown_names_to_it():
    assert load(["aten::add.out", "no_such::op.out"]) is KERNELS
    assert "no_such::op.out" not in KERNELS


@pytest.mark.parametrize("name", portable_fixture_names() + ["xnn_mlp"])
def test_a_program_imports_only_its_families_and_computes_the_same(name):
    # run with only its families, then again with all of them: the same numbers, bit for bit (the same kernels on
    # the same machine), and no family imported beyond those of its operators and what they import
    out = _fresh(f"""
        import json
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from fixtures_util import load_calls
        import pterun
        data = {str(FIXTURES / name) + ".ptd" if (FIXTURES / f"{name}.ptd").exists() else None!r}

        def outputs():
            program = pterun.Runtime(engine="numpy").load_program({str(FIXTURES / name)!r} + ".pte", data_path=data)
            return [[np.asarray(o) for o in program.load_method(c["method"]).execute(c["inputs"])]
                    for c in load_calls({name!r})]

        lazy = outputs()
        families = sorted(m.split(".")[-1] for m in sys.modules if m.startswith("pterun.kernels."))
        from pterun.kernels import KERNELS
        whole = outputs()
        same = all(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
                   for x, y in zip(lazy, whole) for a, b in zip(x, y))
        from pterun.summary import describe
        operators = sorted({{op for m in describe({str(FIXTURES / name)!r} + ".pte")["methods"]
                             for op in m["operators"]}})
        print(json.dumps([same, len(lazy) == len(whole), families, operators]))
    """)
    same, complete, families, operators = json.loads(out.splitlines()[-1])
    assert same and complete
    needed, imported = {FAMILY_OF[op] for op in operators}, set(families) & set(FAMILIES)
    assert needed <= imported
    assert imported - needed <= {"unary"}  # activation imports unary (its sigmoid)


def test_registering_a_name_a_family_owns_fails_at_the_register_call():
    out = _fresh("""
        from pterun.kernels.registry import register
        try:
            @register("aten::add.out")
            def add(self, other, *, alpha=1, out):
                '''add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)'''
        except RuntimeError as e:
            print(e)
    """)
    assert out.strip() == ("operator 'aten::add.out' is registered twice (pterun.kernels.elementwise and "
                           "__main__)")
