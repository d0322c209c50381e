"""The fuzzer's cases (tools/fuzz.py): the fixtures it mutates, running one file through pterun, and the
mutation each case applies. Case ``i`` of seed ``s`` is the same mutation whatever the process that runs it."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import struct
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import pterun  # noqa: E402
from pterun.errors import PterunError  # noqa: E402
from pterun.format.schema import TENSOR  # noqa: E402

CLASSES = ("field", "value", "flip", "truncate", "chunk")
MAX_INPUT_BYTES = 16 << 20  # inputs the fuzzer itself makes for a mutated method


# -- fixtures ---------------------------------------------------------------------------------------------------
class Target:
    """One file to mutate: ``kind`` is pte/ptd/bpte; ``companion`` the other half of a pte+ptd pair."""

    def __init__(self, name: str, kind: str, data: bytes, companion: bytes | None, calls: list):
        self.name, self.kind, self.data, self.companion, self.calls = name, kind, data, companion, calls
        self.fields: list[tuple] = []  # (pos, size, role, context) recorded by the reader
        self.semantic: list[tuple] = []  # the subset a ``value`` mutation picks from


def _calls(npz: Path) -> list:
    """Recorded calls of a fixture (method, inputs) from its .npz, when it has one."""
    if not npz.exists():
        return []
    try:
        with np.load(npz, allow_pickle=False) as z:
            if "__manifest__" not in z.files:
                return []
            manifest = json.loads(str(z["__manifest__"]))
            arrays = {k: z[k] for k in z.files if k != "__manifest__"}
    except (OSError, ValueError, KeyError):
        return []

    def decode(v):
        if "array" in v:
            return arrays[v["array"]]
        (kind, value), = v.items()
        return {"int": int, "float": float, "bool": bool, "none": lambda _: None}[kind](value)

    return [(c["method"], [decode(v) for v in c["inputs"]]) for c in manifest]


def discover(names: list[str] | None = None) -> list[Target]:
    """Every committed fixture under tests/fixtures (recursively) and the packaged demo model."""
    fixtures = ROOT / "tests" / "fixtures"
    files = sorted(p for p in fixtures.rglob("*") if p.suffix in (".pte", ".ptd", ".bpte"))
    demo = ROOT / "src" / "pterun" / "models" / "demo.pte"
    if demo.exists():
        files.append(demo)
    ptes = {p.stem: p for p in files if p.suffix == ".pte"}
    out = []
    for p in files:
        rel = p.relative_to(ROOT).as_posix()
        label = p.name if p.parent == fixtures else rel
        if names and p.stem not in names and p.name not in names and label not in names:
            continue
        companion = None
        if p.suffix == ".pte":
            ptd = p.with_suffix(".ptd")
            companion = ptd.read_bytes() if ptd.exists() else None
        elif p.suffix == ".ptd":  # ext_mlp_wrong.ptd goes with ext_mlp.pte: the longest .pte stem it starts with
            owner = max((s for s in ptes if p.stem.startswith(s)), key=len, default=None)
            if owner is None:
                continue
            companion = ptes[owner].read_bytes()
        out.append(Target(label, p.suffix[1:], p.read_bytes(), companion,
                          _calls(p.with_suffix(".npz")) if p.suffix == ".pte" else []))
    return out


# -- running one file ---------------------------------------------------------------------------------------------
def _make_inputs(method, calls: list, rng: random.Random) -> list:
    """The fixture's recorded inputs for this method when they still fit, else inputs made from its metadata."""
    for name, inputs in calls:
        if name == method.name:
            try:
                method._check_inputs(inputs)
                return inputs
            except PterunError:
                break
    out = []
    plan = method._runner.plan
    for tag, desc in (plan.values[j] for j in plan.inputs):
        if tag != TENSOR:  # Int/Double/Bool/String/None inputs only accept the value baked in
            out.append(desc)
            continue
        dtype = desc.dtype
        shape = tuple(desc.sizes)
        if math.prod(shape) * dtype.itemsize > MAX_INPUT_BYTES:
            out.append(np.zeros((1,), dtype))  # refused as a wrong shape: the point is the program, not us
        elif dtype.kind == "f" or dtype.kind == "c":
            out.append(np.asarray(np.random.default_rng(rng.getrandbits(32)).standard_normal(shape), dtype))
        elif dtype.kind == "b":
            out.append(np.random.default_rng(rng.getrandbits(32)).integers(0, 2, shape).astype(dtype))
        else:
            out.append(np.random.default_rng(rng.getrandbits(32)).integers(0, 4, shape).astype(dtype))
    return out


STAGE = ["load"]  # how far the current case got: "load" (program or methods) or "execute"


def run_file(target: Target, data: bytes, rng: random.Random) -> int:
    """load -> load_method -> execute every method of ``data`` (in place of ``target``'s file); returns how many
    methods executed. Raises whatever pterun raises."""
    rt = pterun.Runtime.get()
    executed = 0
    STAGE[0] = "load"
    if target.kind == "selftest":  # the harness checking itself: what a crash, hang, leak or stray error looks like
        return _selftest(data)
    if target.kind == "bpte":
        bp = rt.load_bundled_program(data)
        for name in sorted(bp.method_names):
            for idx in range(min(len(bp.test_cases(name)), 2)):
                STAGE[0] = "execute"
                bp.run(name, idx)
                executed += 1
        program = bp.program
    elif target.kind == "ptd":
        program = rt.load_program(target.companion, data_path=data)
    else:
        program = rt.load_program(data, data_path=target.companion)
    for name in sorted(program.method_names):
        m = program.load_method(name)
        inputs = _make_inputs(m, target.calls, rng)
        STAGE[0] = "execute"
        m.execute(inputs)
        executed += 1
    return executed


def _selftest(what: bytes) -> int:
    if what == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif what == b"hang":
        time.sleep(3600)
    elif what == b"undocumented":
        raise KeyError("not from pterun")
    elif what == b"documented":
        raise pterun.InvalidProgramError("from pterun")
    elif what.startswith(b"rss "):
        block = np.ones(int(what[4:]), np.uint8)  # touched: resident
        return int(block[-1])
    return 1


def selftest_targets() -> list[Target]:
    return [Target(w, "selftest", w.encode(), None, []) for w in
            ("crash", "hang", "undocumented", "documented", "ok", f"rss {120 << 20}")]


# -- mutations ----------------------------------------------------------------------------------------------------
_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _boundary(rng: random.Random, size: int, old: int) -> int:
    bits = 8 * size
    mask = (1 << bits) - 1
    choices = [0, 1, mask, mask >> 1, 1 << (bits - 1), old + 1, old - 1, old * 2, old + 16,
               old ^ (1 << rng.randrange(bits)),
               rng.getrandbits(bits)]
    if bits > 16:
        choices += [1 << 31, (1 << 31) - 1, 1 << 16, 65535, 0x10000000]
    return rng.choice(choices) & mask


def _put(buf: bytearray, pos: int, size: int, value: int) -> None:
    buf[pos : pos + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def _get(buf, pos: int, size: int) -> int:
    return int.from_bytes(bytes(buf[pos : pos + size]), "little")


def mutate(target: Target, cls: str, rng: random.Random) -> bytes:
    if target.kind == "selftest":
        return target.data
    data = bytearray(target.data)
    n = len(data)
    if cls == "field" and target.fields:
        pos, size, role, _ = rng.choice(target.fields)
        old = _get(data, pos, size)
        if role == "tag":
            new = rng.choice([0, 1, 2, 3, 5, 8, 11, 12, 13, 20, 47, 48, 100, 255])
        elif role in ("offset", "length") or (role == "elem" and size == 4):
            new = rng.choice([old + 4, old - 4, old + 8, old - 8, 0, 4, n, n - old, old * 2, 0x7FFFFFFF, 0xFFFFFFFF,
                              _boundary(rng, size, old)])
        else:
            new = _boundary(rng, size, old)
        _put(data, pos, size, new)
    elif cls == "value" and target.semantic:
        for _ in range(rng.choice((1, 1, 1, 2))):
            pos, size, role, (kind, slot, code) = rng.choice(target.semantic)
            if code in "fd":
                fmt = "<f" if code == "f" else "<d"
                old = struct.unpack_from(fmt, data, pos)[0]
                new = rng.choice([0.0, -1.0, 1.0, 0.5, 1e30, -1e30, float("inf"), float("nan"), old * 2, -old, 1e-30])
                struct.pack_into(fmt, data, pos, new)
                continue
            old = _get(data, pos, size)
            signed = code in "bhiq"
            if signed and old >= 1 << (8 * size - 1):
                old -= 1 << (8 * size)
            if (kind, slot) in (("EValue payload", 4), ("XNNTensorValue", 4)) and size <= 2:  # a dtype code
                new = rng.randrange(0, 16)
            else:
                new = rng.choice([old + 1, old - 1, old * 2, 0, 1, 2, -1, old + 7, old // 2, 3, 64, 1 << 16,
                                  (1 << 31) - 1])
            _put(data, pos, size, new)
    elif cls == "truncate":
        cut = rng.choice([rng.randrange(n), n - 1 - rng.randrange(min(n, 64)), rng.randrange(min(n, 256))])
        return bytes(data[:cut])
    elif cls == "chunk":
        a = rng.randrange(n)
        length = rng.choice([1, 2, 4, 8, 16, 64, rng.randrange(1, max(2, n // 10))])
        chunk = data[a : a + length]
        if rng.random() < 0.5:
            del data[a : a + length]
        else:
            b = rng.randrange(n)
            data[b:b] = chunk
    else:  # flip (and field/value on a file the reader recorded nothing for)
        for _ in range(rng.randrange(1, 5)):
            data[rng.randrange(n)] = rng.randrange(256)
    return bytes(data)


def case_plan(seed: int, i: int, targets: list[Target], classes=CLASSES) -> tuple[Target, str, random.Random]:
    rng = random.Random((seed << 40) ^ (i * 0x9E3779B1))
    target, cls = rng.choice(targets), rng.choice(classes)
    if target.kind == "selftest":  # each in turn
        target = targets[i % len(targets)]
    return target, cls, rng


def run_case(seed: int, i: int, targets: list[Target], classes=CLASSES) -> tuple[str, str, str]:
    """(class, outcome, detail): outcome is 'ok' (every method ran), 'error' (a PterunError) or
    'undocumented' (anything else, detail: the exception)."""
    target, cls, rng = case_plan(seed, i, targets, classes)
    data = mutate(target, cls, rng)
    try:
        run_file(target, data, rng)
        return cls, "ok", ""
    except PterunError as e:
        return cls, "error", type(e).__name__
    except BaseException as e:  # noqa: BLE001  (that is what is counted)
        if isinstance(e, KeyboardInterrupt):
            raise
        return cls, "undocumented", f"{type(e).__name__}: {str(e)[:200]}"

