"""pterun's records: :class:`pterun._record.Fields` behaves as a named tuple, and importing pterun and loading
programs defines no class through ``collections.namedtuple`` or ``typing.NamedTuple`` (each costs 0.15-0.2 ms:
import time)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pterun._record import Fields, fields_type
from pterun.format.schema import FreeCall, KernelCall, EValue

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent


class Pair(Fields):
    """Two numbers."""

    left: int
    right: int = 0

    @property
    def total(self) -> int:
        return self.left + self.right


def test_fields_build_like_a_named_tuple():
    p = Pair(1)
    assert type(p) is Pair and isinstance(p, tuple)
    assert p == (1, 0) and Pair(1, right=2) == (1, 2) and Pair(left=3) == (3, 0)
    assert (p.left, p.right, p.total) == (1, 0, 1)
    assert repr(Pair(1, 2)) == "Pair(left=1, right=2)"
    assert Pair._fields == ("left", "right") and Pair._field_defaults == {"right": 0}
    assert Pair(1, 2)._replace(right=5) == Pair(1, 5) and type(Pair(1)._replace(left=2)) is Pair
    assert Pair._make([7, 8]) == Pair(7, 8) and Pair(7, 8)._asdict() == {"left": 7, "right": 8}
    assert pickle.loads(pickle.dumps(Pair(4, 5))) == Pair(4, 5)
    assert Pair.__doc__ == "Two numbers." and hash(Pair(1, 2)) == hash((1, 2))
    match Pair(6, 7):
        case Pair(a, b):
            assert (a, b) == (6, 7)


@pytest.mark.parametrize("make, message", [
    (lambda: Pair(), "Pair missing field 'left'"),
    (lambda: Pair(1, 2, 3), "Pair takes 2 fields, got 3"),
    (lambda: Pair(1, left=2), "Pair got field 'left' twice"),
    (lambda: Pair(1, other=2), "Pair got field 'other' it does not have"),
    (lambda: Pair(1)._replace(other=1), "Pair has no field 'other'"),
    (lambda: Pair._make([1]), "Pair takes 2 fields, got 1"),
])
def test_fields_refuse_what_a_named_tuple_refuses(make, message):
    with pytest.raises(TypeError) as e:
        make()
    assert str(e.value) == message


def test_fields_are_immutable_and_have_no_instance_dict():
    p = Pair(1, 2)
    with pytest.raises(AttributeError):
        p.left = 3
    with pytest.raises(AttributeError):
        p.other = 3
    assert not hasattr(p, "__dict__")


@pytest.mark.parametrize("body, message", [
    ("a: int = 0\n    b: int", "Bad: field 'b' without a default follows fields with defaults"),
    ("_a: int", "Bad: field names cannot start with an underscore: '_a'"),
])
def test_a_badly_declared_fields_class_is_refused(body, message):
    with pytest.raises(TypeError) as e:
        exec(f"class Bad(Fields):\n    {body}\n", {"Fields": Fields})
    assert str(e.value) == message
    with pytest.raises(TypeError, match="Pair2: a Fields class with fields cannot add fields"):
        type(Pair)("Pair2", (Pair,), {"__annotations__": {"extra": "int"}})


def test_fields_type_and_the_instruction_records():
    T = fields_type("T", "x y", __name__)
    assert T(1, 2).y == 2 and T.__module__ == __name__
    k = KernelCall(3, (0, 1))
    assert (k.kind, k.op_index, k.args) == (1, 3, (0, 1)) and k.KIND == 1
    assert KernelCall(op_index=3, args=(0, 1)) == k and pickle.loads(pickle.dumps(k)) == k
    assert FreeCall(4) == (5, 4) and repr(FreeCall(4)) == "FreeCall(kind=5, value_index=4)"
    with pytest.raises(TypeError, match="^FreeCall missing field 'value_index'$"):
        FreeCall()
    assert EValue(tag=1, val=2) == EValue(1, 2) == (1, 2)


def test_loading_programs_defines_no_namedtuple_class():
    """collections.namedtuple, which typing.NamedTuple calls too, is never reached from pterun's modules."""
    script = textwrap.dedent(f"""
        import collections, sys
        sys.path[:0] = [{str(SRC)!r}, {str(TESTS)!r}]
        made = []
        real = collections.namedtuple
        def counting(*args, **kwargs):
            f = sys._getframe(1)
            while f is not None and f.f_globals.get("__name__", "") in ("collections", "typing"):
                f = f.f_back
            made.append((f.f_globals.get("__name__", "") if f is not None else "", args[0]))
            return real(*args, **kwargs)
        collections.namedtuple = counting
        import pterun
        from pterun import Runtime
        from fixtures_util import load_calls
        for engine in ("numpy", "litert"):
            for name in ("cnn", "xnn_mlp", "xnn_8da4w", "xnn_transformer", "xnn_cnn", "xnn_qint8_cnn"):
                program = Runtime(engine=engine).load_program(f"{TESTS / 'fixtures'}/{{name}}.pte")
                for call in load_calls(name):
                    program.load_method(call["method"]).execute(call["inputs"])
            Runtime(engine=engine).load_program("{TESTS / 'fixtures' / 'llm' / 'kv_8da4w.pte'}").load_method("forward")
        print([m for m in made if m[0].startswith("pterun")])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_help_and_inspect_show_the_fields_a_call_takes():
    import inspect

    from pterun.delegates.xnnpack.payload import Value
    from pterun.module import IOInfo

    assert str(inspect.signature(Pair)) == "(left, right=0)"
    assert str(inspect.signature(IOInfo)) == "(name, kind, dtype, shape, dynamic)"
    assert str(inspect.signature(KernelCall)) == "(op_index, args)"  # ``kind`` is the class's
    assert str(inspect.signature(FreeCall)) == "(value_index)"
    assert str(inspect.signature(Value)).startswith("(id, datatype, dims,") and "dq_datatype=0" in str(
        inspect.signature(Value))
