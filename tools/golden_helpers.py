"""Helpers for the golden cases (tools/golden_cases.py): the Case record, the CASES list, and seeded input
builders.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I8, I16, I32, I64, U8, BOOL = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool
C64 = torch.complex64

# ----------------------------------------------------------------------------------------------------------
# Case description
# ----------------------------------------------------------------------------------------------------------
@dataclass
class Strided:
    """A tensor argument the test passes as a non-contiguous view ("T": last two dims stored transposed,
    "step": every other element of a larger buffer)."""

    t: torch.Tensor
    layout: str = "T"


@dataclass
class Case:
    op: str
    args: list
    name: str = ""
    check: str = "values"  # values | shape (undefined contents) | uniform | normal | dropout
    tol: float | None = None  # relative tolerance override (x output scale)
    expect: Any = None  # explicit expected outputs (prim ops, ExecuTorch-only ops)
    et: bool = True  # try ExecuTorch's kernel
    eager: Callable | None = None  # custom eager reference: fn(*args) -> outputs
    note: str = ""


CASES: list[Case] = []
_GEN = torch.Generator().manual_seed(0)


def case(op, *args, **kw):
    CASES.append(Case(op, list(args), **kw))


def seed(name: str) -> None:
    _GEN.manual_seed(zlib.crc32(name.encode()))


def r(*shape, dtype=F32, lo=-2.0, hi=2.0):
    """Uniform random tensor in [lo, hi) (integers: randint lo..hi-1); ``r(())`` is 0-d."""
    if len(shape) == 1 and isinstance(shape[0], tuple):
        shape = shape[0]
    if dtype in (F32, F64, F16, BF16):
        return (torch.rand(shape, generator=_GEN, dtype=F64) * (hi - lo) + lo).to(dtype)
    if dtype == BOOL:
        return torch.rand(shape, generator=_GEN) < 0.5
    if dtype == C64:
        return torch.complex(r(*shape, lo=lo, hi=hi), r(*shape, lo=lo, hi=hi))
    lo, hi = int(lo), int(hi)
    if dtype == U8:
        lo = max(lo, 0)
    return torch.randint(lo, max(hi, lo + 1), shape, generator=_GEN, dtype=I64).to(dtype)


def rn(*shape, dtype=F32):
    return torch.randn(shape, generator=_GEN, dtype=F64).to(dtype)


def T(t, layout="T"):
    return Strided(t, layout)


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 3.7, -3.7, 1e-30, 100.0, -100.0, math.inf, -math.inf,
           math.nan]


def special(dtype=F32):
    return torch.tensor(SPECIAL, dtype=F64).to(dtype)
