"""Recording the fields pterun's flatbuffer reader touches in a fixture (tools/fuzz.py): the positions a ``field``
mutation picks from, and the subset (``semantic``) a ``value`` mutation picks from."""

from __future__ import annotations

import json
import os
import random
import struct

import numpy as np
from fuzz_cases import Target, run_file  # first: it puts src/ on sys.path

from pterun.errors import PterunError
from pterun.format import flatbuffer as fb


# -- recording the fields the reader touches ----------------------------------------------------------------------
def _address(obj) -> int:
    return np.frombuffer(obj, np.uint8).ctypes.data if len(obj) else 0


_PATCHED = ("__init__", "_scalar", "_indirect", "_vector", "values", "array", "union")


class _Notes:
    """The fields read inside one file: ``found`` maps (position, role) to (position, size, role, context)."""

    def __init__(self, data: bytes):
        self.base, self.end, self.size = _address(data), _address(data) + len(data), len(data)
        self.found: dict[tuple, tuple] = {}
        self.bases: dict[int, int] = {}

    def absolute(self, buf, pos: int) -> int | None:
        b = self.bases.get(id(buf.data))
        if b is None:
            b = self.bases[id(buf.data)] = _address(buf.data)
        a = b + pos
        return a - self.base if self.base <= a < self.end else None

    def note(self, buf, pos, size, role, ctx, typed=False):
        a = self.absolute(buf, pos)
        if a is not None and a + size <= self.size:
            if typed:  # a typed read (values/array) says more than the untyped offset-vector guess
                self.found[(a, role)] = (a, size, role, ctx)
            else:
                self.found.setdefault((a, role), (a, size, role, ctx))


def _table_hooks(note, saved: dict) -> dict:
    """Stand-ins for the reader's table, scalar, offset and vector reads that note what they read."""

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

    return {"__init__": init, "_scalar": scalar, "_indirect": indirect, "_vector": vector}


def _typed_hooks(note, saved: dict) -> dict:
    """Stand-ins for the reader's typed vector reads and union tags that note what they read."""

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

    return {"values": values, "array": array, "union": union}


def record(target: Target) -> None:
    """Run ``target`` once with the flatbuffer reader instrumented; fill ``target.fields`` and ``.semantic``."""
    notes = _Notes(target.data)
    T = fb.Table
    saved = {k: getattr(T, k) for k in _PATCHED}
    hooks = {**_table_hooks(notes.note, saved), **_typed_hooks(notes.note, saved)}
    for k in _PATCHED:
        setattr(T, k, hooks[k])
    try:
        run_file(target, target.data, random.Random(0))
    except PterunError:
        pass  # a fixture made to fail (bundled_bad, ext_mlp_wrong) still shows what the reader reads
    finally:
        for k, fn in saved.items():
            setattr(T, k, fn)
    target.fields = sorted(notes.found.values())
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


