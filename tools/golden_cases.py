"""The golden cases for tools/gen_golden.py: at least two per operator, family by family. Declarative data only;
gen_golden.py runs them and records the outputs.

The families live in tools/golden_cases_*.py, grouped by kind of operator:

* ``golden_cases_elementwise``: binary arithmetic, unary math, comparisons and logic, activations;
* ``golden_cases_reduce``: reductions and linear algebra;
* ``golden_cases_shape``: shape ops, layout ops, indexing, tensor creation;
* ``golden_cases_nn``: normalization, convolution and pooling, image resampling, spectral ops;
* ``golden_cases_quant``: the quantized_decomposed operators;
* ``golden_cases_prim``: ExecuTorch's prim (scalar) operators.

``_FAMILIES`` fixes the order the families run in: each one reseeds the input generator from its own name, and
the order of ``CASES`` is the order of the cases in the written files. A new family goes into the module of its
kind and into ``_FAMILIES`` (or is registered with ``@family``, which appends it).
"""

from __future__ import annotations

import math  # noqa: F401  (re-exported: the names this module has always had)
from typing import Callable

import torch  # noqa: F401

from golden_cases_elementwise import activations, binary_arith, compare_logic, unary_math
from golden_cases_nn import conv_pools, images, norms, spectral_ops
from golden_cases_prim import prim_ops
from golden_cases_quant import _qadd, quantized_ops  # noqa: F401
from golden_cases_reduce import linalg, reductions
from golden_cases_shape import creation_ops, indexing_ops, layouts, shapes
from golden_helpers import (BF16, BOOL, C64, CASES, F16, F32, F64, I8, I16, I32, I64, U8, Strided,  # noqa: F401
                            T, _GEN, case, r, rn, seed, special)


# ----------------------------------------------------------------------------------------------------------
# The cases, family by family
# ----------------------------------------------------------------------------------------------------------
def build_cases():
    for fn in _FAMILIES:
        seed(fn.__name__)
        fn()


_FAMILIES: list[Callable] = [
    binary_arith, unary_math, compare_logic, activations,
    reductions, linalg,
    shapes, layouts, indexing_ops, creation_ops,
    norms, conv_pools, images, spectral_ops,
    quantized_ops, prim_ops,
]


def family(fn):
    """Register a further family (it runs after those above)."""
    _FAMILIES.append(fn)
    return fn
