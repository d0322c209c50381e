#!/usr/bin/env python3
"""Structure-aware fuzzer: hostile programs and data files must end in pterun's documented errors.

For every fixture (``.pte``, ``.ptd``, ``.bpte``) it first runs load -> load_method -> execute once with the
flatbuffer reader instrumented, recording every field the reader touches: scalars, offsets, vector lengths and
elements, union tags, vtable entries, in the program and in the delegate payloads and data files inside it. Each
case then applies one mutation class to one fixture and runs load -> load_method -> execute on the result:

* ``field``: a recorded field set to a boundary value (0, 1, -1, the type's min/max, 2^31, the old value +- 1,
  doubled, a bit flipped), or an offset moved, a vector length grown, a union tag changed;
* ``value``: a mutation that usually keeps the file loadable, so the kernels and the delegate see hostile
  programs too: a tensor's sizes, a scalar argument (Int/Double), a value's dtype, an XNNPACK value's dims or
  datatype, a node's numeric fields;
* ``flip``: 1-4 random bytes; ``truncate``: the file cut short; ``chunk``: a chunk duplicated or deleted.

Cases run in forked worker processes (``--workers``) with an address-space cap (``RLIMIT_AS``): a worker that dies
is a crash, a case that takes more than ``--hang-s`` seconds is a hang (the worker is killed), a case that leaves
the worker above 1 GiB of RSS is a memory blow-up, and any exception that is not a ``pterun.errors.PterunError``
is undocumented. Case ``i`` of seed ``s`` is the same mutation whatever the worker count, so any finding is
reproduced with ``--case i``. One line per class, then the documented errors by class, the Python warnings that
escaped (reported, not failures), the slowest case and the largest worker RSS, then exactly ``fuzz: N cases, C
crashes, H hangs, U undocumented``; the exit status is 1 when any of those three (or a memory blow-up) is not zero.

Usage::

    python tools/fuzz.py --cases 200000 --workers 1            # every fixture, long campaign
    python tools/fuzz.py --cases 2000 --fixtures cond,xnn_mlp   # a quick slice
    python tools/fuzz.py --case 1234 --seed 1                  # replay one case here, with its traceback

Needs only NumPy and pterun (no torch). Linux/macOS (fork).
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one thread everywhere: workers are forked, the machine shared (before NumPy loads)
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PTERUN_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import pterun  # noqa: E402
from pterun.errors import PterunError  # noqa: E402
from pterun.format import flatbuffer as fb  # noqa: E402
from pterun.format.schema import TENSOR  # noqa: E402

CLASSES = ("field", "value", "flip", "truncate", "chunk")
GIB = 1 << 30
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


# -- recording the fields the reader touches ----------------------------------------------------------------------
def _address(obj) -> int:
    return np.frombuffer(obj, np.uint8).ctypes.data if len(obj) else 0


def record(target: Target) -> None:
    """Run ``target`` once with the flatbuffer reader instrumented; fill ``target.fields`` and ``.semantic``."""
    base, end = _address(target.data), _address(target.data) + len(target.data)
    found: dict[int, tuple] = {}
    bases: dict[int, int] = {}
    T = fb.Table
    saved = {k: getattr(T, k) for k in ("__init__", "_scalar", "_indirect", "_vector", "values", "array", "union")}

    def absolute(buf, pos: int) -> int | None:
        b = bases.get(id(buf.data))
        if b is None:
            b = bases[id(buf.data)] = _address(buf.data)
        a = b + pos
        return a - base if base <= a < end else None

    def note(buf, pos, size, role, ctx, typed=False):
        a = absolute(buf, pos)
        if a is not None and a + size <= len(target.data):
            if typed:  # a typed read (values/array) says more than the untyped offset-vector guess
                found[(a, role)] = (a, size, role, ctx)
            else:
                found.setdefault((a, role), (a, size, role, ctx))

    def init(self, buf, pos, kind="table"):
        saved["__init__"](self, buf, pos, kind)
        note(buf, pos, 4, "vtable", (kind, -1, "i"))
        for k in range(len(self.offs)):
            note(buf, self.vt + 4 + 2 * k, 2, "vtentry", (kind, 4 + 2 * k, "H"))

    def scalar(self, st, slot, default):
        p = self.field(slot)
        if p:
            note(self.buf, p, st.size, "scalar", (self.kind, slot, st.format[-1]))
        return saved["_scalar"](self, st, slot, default)

    def indirect(self, slot):
        p = self.field(slot)
        if p:
            note(self.buf, p, 4, "offset", (self.kind, slot, "I"))
        return saved["_indirect"](self, slot)

    def vector(self, slot, elem_size):
        start, n = saved["_vector"](self, slot, elem_size)
        if start:
            note(self.buf, start - 4, 4, "length", (self.kind, slot, "I"))
            if elem_size == 4 and n:  # vectors of offsets (tables, strings): each element is an offset
                for k in range(min(n, 64)):
                    note(self.buf, start + 4 * k, 4, "elem", (self.kind, slot, "I"))
        return start, n

    def values(self, slot, code):
        out = saved["values"](self, slot, code)
        start, n = saved["_vector"](self, slot, struct.calcsize(code)) if out else (0, 0)
        for k in range(min(n, 64)):
            note(self.buf, start + k * struct.calcsize(code), struct.calcsize(code), "elem", (self.kind, slot, code),
                 typed=True)
        return out

    def array(self, slot, dtype):
        out = saved["array"](self, slot, dtype)
        dt = np.dtype(dtype)
        start, n = saved["_vector"](self, slot, dt.itemsize) if len(out) else (0, 0)
        for k in range(min(n, 64)):
            note(self.buf, start + k * dt.itemsize, dt.itemsize, "elem", (self.kind, slot, dt.char), typed=True)
        return out

    def union(self, type_slot, slot, kind="union"):
        p = self.field(type_slot)
        if p:
            note(self.buf, p, 1, "tag", (self.kind, type_slot, "B"))
        return saved["union"](self, type_slot, slot, kind)

    for k, fn in (("__init__", init), ("_scalar", scalar), ("_indirect", indirect), ("_vector", vector),
                  ("values", values), ("array", array), ("union", union)):
        setattr(T, k, fn)
    try:
        run_file(target, target.data, random.Random(0))
    except PterunError:
        pass  # a fixture made to fail (bundled_bad, ext_mlp_wrong) still shows what the reader reads
    finally:
        for k, fn in saved.items():
            setattr(T, k, fn)
    target.fields = sorted(found.values())
    target.semantic = [f for f in target.fields if _semantic(f)]


_VALUE_KINDS = {
    ("EValue payload", 4, "q"), ("EValue payload", 4, "d"), ("EValue payload", 4, "b"), ("EValue payload", 8, "i"),
    ("EValue payload", 4, "B"), ("XNNTensorValue", 8, "I"), ("XNNTensorValue", 4, "h"), ("XNNQuantParams", 4, "f"),
}


def _semantic(field: tuple) -> bool:
    _, _, role, (kind, slot, code) = field
    if role not in ("scalar", "elem"):
        return False
    if (kind, slot, code) in _VALUE_KINDS:
        return True
    return kind == "XNode payload" and code in "If" or kind == "Value" and code in "qdb"


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


# -- workers ------------------------------------------------------------------------------------------------------
def _vm_size() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _worker(fd: int, seed: int, cases: list[int], targets, classes, as_cap: int, rss_limit: int) -> None:
    """Child: run ``cases`` in order, reporting 'S i' before and 'D i class outcome rss detail' after each."""
    import faulthandler

    faulthandler.disable()  # a crash is counted by the parent, not dumped by the child
    from pterun._fpstate import warning_rules
    from pterun.threads import set_num_threads

    set_num_threads(1)  # one thread per worker, BLAS included, whatever the forking process had set
    if as_cap:
        resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + as_cap, resource.RLIM_INFINITY))
    out = os.fdopen(fd, "w", buffering=1)
    for i in cases:
        out.write(f"S {i}\n")
        with warnings.catch_warnings(record=True) as caught:  # a library should not warn: counted, not shown
            warnings.simplefilter("always")
            warning_rules()  # pterun's own filter, as a user's process has it (simplefilter pushed it aside)
            t0 = time.perf_counter()
            cls, outcome, detail = run_case(seed, i, targets, classes)
            took = time.perf_counter() - t0
        warned = ",".join(sorted({w.category.__name__ for w in caught})) or "-"
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out.write(f"D {i} {cls} {outcome} {rss} {STAGE[0]} {warned}/{took:.4f} {json.dumps(detail)}\n")
        if rss > rss_limit:
            break  # the parent counts it and starts a fresh worker
    out.close()
    os._exit(0)


class Campaign:
    def __init__(self, targets, seed, n_cases, workers=1, hang_s=5.0, as_cap=2 * GIB, classes=CLASSES,
                 first=0, rss_limit=GIB, progress=0):
        self.targets, self.seed, self.workers, self.hang_s, self.as_cap = targets, seed, workers, hang_s, as_cap
        self.rss_limit = rss_limit
        self.progress = progress  # print a line to stderr every this many cases (0: never)
        self.done = 0
        self.classes = classes
        self.todo = list(range(first, first + n_cases))
        self.stats = {c: Counter() for c in classes}
        self.details: Counter = Counter()
        self.findings: list[str] = []
        self.max_rss = 0
        self.slowest = (0.0, -1)  # (seconds, case) of the slowest case that finished
        self.warnings: Counter = Counter()  # Python warnings that escaped pterun, by category

    def _spawn(self, cases):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                _worker(w, self.seed, cases, self.targets, self.classes, self.as_cap, self.rss_limit)
            finally:
                os._exit(70)
        os.close(w)
        return {"pid": pid, "fd": r, "buf": b"", "cases": cases, "pos": 0, "current": None, "since": time.monotonic()}

    def _finish(self, i: int, cls: str, outcome: str, detail: str = "") -> None:
        self.stats[cls][outcome] += 1
        self.stats[cls]["cases"] += 1
        if outcome != "ok":
            self.details[(cls, outcome, detail.split(":")[0])] += 1
        if outcome in ("crash", "hang", "undocumented", "memory"):
            target, _, _ = case_plan(self.seed, i, self.targets, self.classes)
            self.findings.append(f"case {i} ({cls}, {target.name}): {outcome} {detail}")
            if self.progress:
                print(f"FINDING  {self.findings[-1]}", file=sys.stderr, flush=True)
        self.done += 1
        if self.progress and self.done % self.progress == 0:
            t = self.totals()
            print(f"progress {self.done} cases, {t['crash']} crashes, {t['hang']} hangs, {t['undocumented']} "
                  f"undocumented, {t['memory']} memory, max RSS {self.max_rss >> 20} MiB, slowest "
                  f"{self.slowest[0]:.2f} s", file=sys.stderr, flush=True)

    def run(self) -> "Campaign":
        queues = [self.todo[w :: self.workers] for w in range(self.workers)]
        live = [self._spawn(q) for q in queues if q]
        while live:
            fds = [wk["fd"] for wk in live]
            ready, _, _ = select.select(fds, [], [], 0.25)
            now = time.monotonic()
            for wk in list(live):
                if wk["fd"] in ready:
                    chunk = os.read(wk["fd"], 65536)
                    if chunk:
                        wk["buf"] += chunk
                        self._lines(wk)
                        continue
                    self._ended(wk, live)
                elif wk["current"] is not None and now - wk["since"] > self.hang_s:
                    if select.select([wk["fd"]], [], [], 0)[0]:
                        continue  # it answered while this (starved) parent was not looking: read it first
                    os.kill(wk["pid"], signal.SIGKILL)
                    os.waitpid(wk["pid"], 0)
                    os.close(wk["fd"])
                    i = wk["current"]
                    self._finish(i, case_plan(self.seed, i, self.targets, self.classes)[1], "hang",
                                 f"over {self.hang_s:g} s")
                    self._restart(wk, live, wk["cases"].index(i) + 1)
        return self

    def _lines(self, wk) -> None:
        *lines, wk["buf"] = wk["buf"].split(b"\n")
        for line in lines:
            parts = line.decode().split(" ", 7)
            if parts[0] == "S":
                wk["current"], wk["since"] = int(parts[1]), time.monotonic()
            else:
                i, cls, outcome, rss, detail = int(parts[1]), parts[2], parts[3], int(parts[4]), json.loads(parts[7])
                if parts[5] == "execute":
                    self.stats[cls]["executed"] += 1
                warned = parts[6].split("/")[0]
                if warned != "-":
                    self.stats[cls]["warned"] += 1
                    self.warnings.update(warned.split(","))
                self.max_rss = max(self.max_rss, rss)
                if rss > self.rss_limit:
                    outcome, detail = "memory", f"worker RSS {rss >> 20} MiB after the case"
                self._finish(i, cls, outcome, detail)
                took = float(parts[6].split("/")[1])
                if took > self.slowest[0]:
                    self.slowest = (took, i)
                wk["current"] = None
                wk["pos"] = wk["cases"].index(i) + 1

    def _ended(self, wk, live) -> None:
        _, status = os.waitpid(wk["pid"], 0)
        os.close(wk["fd"])
        i = wk["current"]
        if i is not None:  # died inside a case
            why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            self._finish(i, case_plan(self.seed, i, self.targets, self.classes)[1], "crash", why)
            self._restart(wk, live, wk["cases"].index(i) + 1)
        elif wk["pos"] < len(wk["cases"]):  # stopped between cases (RSS over the limit): carry on
            self._restart(wk, live, wk["pos"])
        else:
            live.remove(wk)

    def _restart(self, wk, live, start: int) -> None:
        live.remove(wk)
        rest = wk["cases"][start:]
        if rest:
            live.append(self._spawn(rest))

    def totals(self) -> Counter:
        t = Counter()
        for c in self.stats.values():
            t.update(c)
        return t

    def report(self, out=sys.stdout, wall: float | None = None) -> None:
        for cls in self.classes:
            s = self.stats[cls]
            out.write(f"{cls:9s} {s['cases']:8d} cases: {s['ok']} ran, {s['executed']} reached execute, "
                      f"{s['error']} documented errors, "
                      f"{s['crash']} crashes, {s['hang']} hangs, {s['undocumented']} undocumented, "
                      f"{s['memory']} over {_size(self.rss_limit)}\n")
        t = self.totals()
        errors = Counter()
        for (_, outcome, name), v in self.details.items():
            if outcome == "error":
                errors[name] += v
        top = ", ".join(f"{name} {v}" for name, v in errors.most_common())
        out.write(f"errors   {top}\n")
        warned = sum(s["warned"] for s in self.stats.values())
        out.write(f"warnings {warned} cases let a Python warning escape"
                  + (f" ({', '.join(f'{k} {v}' for k, v in self.warnings.most_common())})\n" if warned else "\n"))
        for f in self.findings[:20]:
            out.write(f"FINDING  {f}\n")
        extra = f" in {wall:.0f} s" if wall is not None else ""
        took, which = self.slowest
        out.write(f"slowest  case {which}: {took:.2f} s (limit {self.hang_s:g} s)\n")
        out.write(f"rss      max {self.max_rss / (1 << 20):.0f} MiB in a worker{extra}; {t['memory']} cases over "
                  f"{_size(self.rss_limit)}\n")
        out.write(f"fuzz: {t['cases']} cases, {t['crash']} crashes, {t['hang']} hangs, {t['undocumented']} "
                  "undocumented\n")


def _size(n: int) -> str:
    return f"{n / GIB:g} GiB" if n % GIB == 0 else f"{n >> 20} MiB"


def record_isolated(target: Target) -> None:
    """:func:`record` in a forked child, so that the process the workers are forked from never loads a program
    (a native library such as LiteRT keeps threads and locks a forked child must not inherit)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            record(target)
            payload = json.dumps([target.fields, target.semantic]).encode()
            with os.fdopen(w, "wb") as out:
                out.write(payload)
        except BaseException:  # noqa: BLE001
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as inp:
        raw = inp.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not raw:
        raise RuntimeError(f"recording {target.name} failed (wait status {status})")
    fields, semantic = json.loads(raw)
    target.fields = [(a, b, c, tuple(d)) for a, b, c, d in fields]
    target.semantic = [(a, b, c, tuple(d)) for a, b, c, d in semantic]


def prepare(names=None, max_bytes: int | None = None) -> list[Target]:
    targets = [t for t in discover(names) if max_bytes is None or len(t.data) <= max_bytes]
    for t in targets:
        record_isolated(t)
    return targets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="index of the first case (to resume a campaign)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--hang-s", type=float, default=5.0)
    ap.add_argument("--as-cap-gib", type=float, default=2.0, help="address space each worker may add")
    ap.add_argument("--fixtures", default="", help="comma-separated fixture names (default: all)")
    ap.add_argument("--max-bytes", type=int, default=None, help="only fixtures up to this size")
    ap.add_argument("--json", default="", help="also write the counts and findings to this file")
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--progress", type=int, default=10_000, help="a progress line on stderr every N cases (0: none)")
    ap.add_argument("--case", type=int, default=None, help="replay one case in this process, with its traceback")
    ap.add_argument("--save", default="", help="with --case: write the mutated file here")
    ap.add_argument("--trace-after", type=float, default=0, help="with --case: dump the stack and exit after this "
                    "many seconds (to see where a hang is)")
    args = ap.parse_args(argv)
    names = [n for n in args.fixtures.split(",") if n] or None
    classes = tuple(c for c in args.classes.split(",") if c)
    t0 = time.monotonic()
    targets = prepare(names, args.max_bytes)
    if not targets:
        print("fuzz: no fixtures found", file=sys.stderr)
        return 2
    if args.case is not None:
        target, cls, rng = case_plan(args.seed, args.case, targets, classes)
        data = mutate(target, cls, rng)
        print(f"case {args.case}: {cls} mutation of {target.name} ({len(data)} bytes)")
        if args.save:
            Path(args.save).write_bytes(data)
        if args.trace_after:
            import faulthandler

            faulthandler.dump_traceback_later(args.trace_after, exit=True)
        try:
            print(f"ran {run_file(target, data, rng)} method(s)")
        except PterunError as e:
            print(f"documented: {type(e).__name__}: {e}")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            return 1
        return 0
    fields = sum(len(t.fields) for t in targets)
    print(f"targets  {len(targets)} files, {fields} recorded fields, "
          f"{sum(len(t.semantic) for t in targets)} value fields", flush=True)
    c = Campaign(targets, args.seed, args.cases, args.workers, args.hang_s, int(args.as_cap_gib * GIB), classes,
                 args.first, progress=args.progress).run()
    c.report(wall=time.monotonic() - t0)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "targets": [{"name": t.name, "kind": t.kind, "fields": len(t.fields)} for t in targets],
            "stats": {cls: dict(s) for cls, s in c.stats.items()}, "totals": dict(c.totals()),
            "findings": c.findings, "max_rss": c.max_rss, "slowest": c.slowest}, indent=1))
    t = c.totals()
    return 1 if t["crash"] or t["hang"] or t["undocumented"] or t["memory"] else 0


if __name__ == "__main__":
    sys.exit(main())
