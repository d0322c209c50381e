"""Load-time fast paths for the hottest kernels: the specializers that kernel families declare with
``register(name, specialize=...)``.

When every argument of an instruction is fixed at load (static shapes and dtypes, constant scalars), the
interpreter asks the kernel's :meth:`~pterun.kernels.registry.Kernel.specialize` for a zero-argument step,
which calls a specializer here as ``spec(general, *args)`` (``general``: the registered kernel function).
The steps compute straight into the planned output array (``out``), skipping per-call promotion and the
copy-back, and store whatever they do not compute in place through :func:`~pterun.kernels._common.write_out`'s
convention, as the interpreter stores a general kernel's result; what a step returns is ignored (a JumpFalseCall
is not a step but a record the loop asks where to go). Each one applies only in the plain case where
the result is identical to the general kernel's — same dtype throughout, shapes that already match — and
returns None otherwise, so the general kernel runs. This module imports no kernel family and no registry.

Example::

    >>> import numpy as np
    >>> from pterun.kernels import KERNELS
    >>> a, b, o = np.ones(3, np.float32), np.ones(3, np.float32), np.empty(3, np.float32)
    >>> step = KERNELS["aten::add.out"].specialize(a, b, 1, o)
    >>> _ = step()
    >>> o
    array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

from functools import partial

import numpy as np

from pterun import threads
from pterun.kernels._common import write_out, write_out_step
from pterun.numerics import ERFC_NEGLIGIBLE, ERFCX_P, ERFCX_Q

try:  # the clip ufunc itself, without np.clip's Python-level argument handling
    from numpy._core.umath import clip as _clip
except ImportError:  # NumPy 1.x
    _clip = np.clip
# NumPy 1.x's clip turns -0.0 into +0.0 (NumPy 2's passes it through): there relu keeps the general kernel
_CLIP_KEEPS_NEGATIVE_ZERO = bool(np.signbit(_clip(np.float32(-0.0), np.float32(0), np.float32(np.inf))))

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
_FLOATS = (F32, F64)


def _step_of(fn, *args):
    """A step running ``fn(*args)``: a ``functools.partial``, called from C without a Python frame, with the
    output array passed positionally (a keyword ``out=`` costs more per call). Such a step returns what ``fn``
    returns, which the interpreter's loop ignores."""
    return partial(fn, *args)


def _same_float(*arrays) -> bool:
    d = arrays[0].dtype
    return d in _FLOATS and all(isinstance(a, np.ndarray) and a.dtype == d for a in arrays)


def _broadcasts_to(out, *arrays) -> bool:
    try:
        return np.broadcast_shapes(*(a.shape for a in arrays)) == out.shape
    except ValueError:
        return False


def _same_integer(*arrays) -> bool:
    d = arrays[0].dtype
    return d.kind in "iu" and all(isinstance(a, np.ndarray) and a.dtype == d for a in arrays)


def binary(ufunc, integers: bool = False):
    """Tensor-tensor arithmetic (add, sub, mul, div; minimum, maximum) with alpha 1, one float dtype throughout, or
    with ``integers`` one integer dtype (wrapping as the general kernel's NumPy arithmetic does), no broadcast of
    out."""
    def spec(general, self, other, *rest):
        out = rest[-1]
        alpha = rest[0] if len(rest) == 2 else 1
        if alpha != 1 or not isinstance(other, np.ndarray):
            return None
        if not (_same_float(self, other, out) or integers and _same_integer(self, other, out)):
            return None
        if not _broadcasts_to(out, self, other):
            return None
        if ufunc in (np.minimum, np.maximum):  # NumPy 2 deprecates their positional out
            return partial(ufunc, self, other, out=out)
        return _step_of(ufunc, self, other, out)
    return spec


def binary_scalar(ufunc):
    """Tensor-scalar arithmetic with alpha 1: the scalar in the tensor's float type, as the general kernel."""
    def spec(general, self, other, *rest):
        out = rest[-1]
        alpha = rest[0] if len(rest) == 2 else 1
        if alpha != 1 or isinstance(other, bool) or not isinstance(other, (int, float)):
            return None
        if not _same_float(self, out) or self.shape != out.shape:
            return None
        scalar = self.dtype.type(other)  # the scalar in the tensor's float type, as the general kernel
        return _step_of(ufunc, self, scalar, out)
    return spec


def relu(general, self, out):
    # clip(x, 0, inf) is the general kernel's where(x < 0, 0, x) exactly (NaN and -0.0 pass through), and
    # NumPy's maximum with a scalar runs 2-3x slower than the clip ufunc
    if not _CLIP_KEEPS_NEGATIVE_ZERO or not _same_float(self, out) or self.shape != out.shape:
        return None
    return _step_of(_clip, self, self.dtype.type(0), self.dtype.type(np.inf), out)


def hardtanh(general, self, min_val, max_val, out):
    if not _same_float(self, out) or self.shape != out.shape:
        return None
    lo, hi = self.dtype.type(min_val), self.dtype.type(max_val)
    return _step_of(_clip, self, lo, hi, out)


def copy_of_view(general, self, *rest):
    """Copy kernels whose general form returns a view of ``self`` (permute, slice, squeeze, expand ...): the
    view is taken once at load, from the general kernel itself, and each call is one copy into ``out``."""
    out = rest[-1]
    if self.dtype != out.dtype or self.size == 0:
        return None
    try:
        view = general(self, *rest)
    except Exception:  # noqa: BLE001  (the general kernel raises its own error at run time)
        return None
    if not isinstance(view, np.ndarray) or view.shape != out.shape or not np.shares_memory(view, self):
        return None  # not a view of self: it would go stale, so compute it every call
    return write_out_step(out, view)


def copies_of_views(general, self, *rest):
    """Split kernels whose general form returns views of ``self``: each call copies them into the outs."""
    outs = rest[-1]
    if self.size == 0 or any(o.dtype != self.dtype for o in outs):
        return None
    try:
        views = general(self, *rest)
    except Exception:  # noqa: BLE001
        return None
    if len(views) != len(outs) or any(v.shape != o.shape or (v.size and not np.shares_memory(v, self))
                                      for v, o in zip(views, outs)):
        return None
    writes = [write_out_step(o, v) for o, v in zip(outs, views)]

    def step():
        for write in writes:
            write()
    return step


def float_unary(*ufuncs):
    """A chain of same-dtype ufuncs computed in place in ``out`` (the general kernel's exact float32 steps)."""
    def spec(general, self, out):
        if not _same_float(self, out) or self.shape != out.shape:
            return None

        if len(ufuncs) == 1:
            return _step_of(ufuncs[0], self, out)

        def step():
            ufuncs[0](self, out)
            for uf in ufuncs[1:]:
                uf(out, out)
        return step
    return spec


def sigmoid(general, self, out):
    # the general kernel computes 1 / (1 + exp(-x)) in x's float type; the same steps, in place
    if not _same_float(self, out) or self.shape != out.shape:
        return None
    one = self.dtype.type(1)

    def step():
        np.negative(self, out)
        np.exp(out, out)
        np.add(out, one, out)
        np.divide(one, out, out)
    return step


def _matmul_ok(out, *arrays) -> bool:
    return _same_float(*arrays, out) and not any(np.shares_memory(out, a) for a in arrays)


def _product(out):
    """The 2-D product to call: ``np.dot`` (BLAS on either memory order of its operands, about half of
    ``np.matmul``'s call overhead) when it can write ``out`` directly, which needs a C-contiguous ``out``."""
    return np.dot if out.ndim == 2 and out.flags.c_contiguous else np.matmul


def _gemm(a, b, out, bias=None):
    """The step for ``out = a @ b (+ bias)``, 2-D. A product large enough to repay it is split over pterun's
    threads (:func:`pterun.threads.split_dot`), decided per call since the thread count can change; ``bias``
    broadcasts to ``out``."""
    product = _product(out)
    if bias is None:
        whole = _step_of(product, a, b, out)
    else:
        def whole():
            product(a, b, out)
            np.add(out, bias, out)
    if product is not np.dot or not threads.splittable(a.shape[0], a.shape[1], b.shape[1]):
        return whole

    def step():
        if threads.num_threads() > 1:
            threads.split_dot(a, b, out)
            if bias is not None:
                np.add(out, bias, out)
        else:
            whole()
    return step


def mm(general, self, mat2, out):
    if self.ndim != 2 or mat2.ndim != 2 or not _matmul_ok(out, self, mat2):
        return None
    if (self.shape[0], mat2.shape[1]) != out.shape or self.shape[1] != mat2.shape[0]:
        return None
    return _gemm(self, mat2, out)


def bmm(general, self, mat2, out):
    if self.ndim != 3 or mat2.ndim != 3 or not _matmul_ok(out, self, mat2):
        return None
    if (self.shape[0], self.shape[1], mat2.shape[2]) != out.shape or self.shape[2] != mat2.shape[1] \
            or self.shape[0] != mat2.shape[0]:
        return None
    return _step_of(np.matmul, self, mat2, out)


def addmm(general, self, mat1, mat2, beta, alpha, out):
    if beta != 1 or alpha != 1 or mat1.ndim != 2 or mat2.ndim != 2 or not _matmul_ok(out, self, mat1, mat2):
        return None
    if (mat1.shape[0], mat2.shape[1]) != out.shape or mat1.shape[1] != mat2.shape[0]:
        return None
    if not _broadcasts_to(out, self, out):
        return None
    return _gemm(mat1, mat2, out, self)


def linear(general, input, weight, bias, out):  # noqa: A002  (schema names)
    arrays = (input, weight) if bias is None else (input, weight, bias)
    if weight.ndim != 2 or input.ndim < 1 or not _matmul_ok(out, *arrays):
        return None
    if input.shape[:-1] + (weight.shape[0],) != out.shape or input.shape[-1] != weight.shape[1]:
        return None
    wt = weight.T
    if input.ndim == 2:
        return _gemm(input, wt, out, bias)
    if bias is None:  # N-d input: matmul (dot would contract it differently)
        return _step_of(np.matmul, input, wt, out)

    def step():
        np.matmul(input, wt, out)
        np.add(out, bias, out)
    return step


# erfc(|z|) as exp(-z*z) * P(|z|) / Q(|z|): numerics' rational for this path (accurate to 5e-12 relative on
# [0, 6], several times faster than the general erf's three-range series; see pterun.numerics)
# 0.5 * P: the gelu factor needs half of erfc
_HALF_ERFCX = np.array([[0.5 * c for c in ERFCX_P], ERFCX_Q])
# constants as 0-d arrays: ufuncs take them faster than Python or NumPy scalars
_HALF = np.array(0.5)
_SQRT_HALF = np.array(np.sqrt(0.5))
# from there on 1 - erfc(a) rounds to 1 in double, as erf does in the general kernel
_ERFC_TAIL = np.array(ERFC_NEGLIGIBLE)
_GELU_CHUNK = 2048  # elements per pass: the scratch (13 float64 rows) stays in cache


def _gelu_pass(x, out, scratch):
    """gelu of one flat float32 chunk: 0.5 * x * (1 + erf(x / sqrt(2))), with erf(|z|) as 1 - erfc(|z|) in
    float64, so that for x < 0 the factor rounds exactly as the general kernel's 1 + erf(z) does."""
    xd, powers, a, a2, a12, a2_row, a34, a1234, a4_row, a5678, pq, p, q, e = scratch
    # outputs passed positionally: a keyword out= costs more on every one of these small calls
    np.copyto(xd, x)  # float64 once: mixed-type ufuncs are slower than a cast and same-type ones
    np.absolute(xd, a)
    np.multiply(a, _SQRT_HALF, a)
    np.minimum(a, _ERFC_TAIL, out=a)  # NaN passes through; +-inf becomes the tail (out= by keyword: minimum
    # deprecates a positional one)
    np.multiply(a, a, a2)
    np.multiply(a2_row, a12, a34)  # a**3 and a**4 in one call
    np.multiply(a4_row, a1234, a5678)  # a**5 .. a**8
    np.dot(_HALF_ERFCX, powers, pq)
    np.exp(a2, e)
    np.multiply(e, q, e)
    np.divide(p, e, e)  # 0.5 * erfc(|z|)
    np.subtract(_HALF, e, e)  # 0.5 * erf(|z|)
    np.copysign(e, xd, e)
    np.add(e, _HALF, e)  # 0.5 * (1 + erf(z)); 0 for x = -inf, so -inf * 0 gives NaN as in the general kernel
    np.multiply(xd, e, e)
    write_out(out, e)  # one rounding of the float64 product to float32


def _gelu_scratch(n: int) -> tuple:
    powers = np.ones((len(ERFCX_P), n))  # row k holds a**k
    pq = np.empty((2, n))
    return (np.empty(n), powers, powers[1], powers[2], powers[1:3], powers[2:3], powers[3:5], powers[1:5],
            powers[4:5], powers[5:9], pq, pq[0], pq[1], np.empty(n))


def gelu(general, self, approximate, out):
    if approximate not in (None, "none") or self.dtype != F32 or out.dtype != F32 or self.shape != out.shape:
        return None
    if self.size == 0 or self.strides != out.strides:
        return None
    x, o = self.ravel(order="K"), out.ravel(order="K")
    if not (np.shares_memory(x, self) and np.shares_memory(o, out)):
        return None  # not contiguous in any order: the flat copies would go stale
    n = min(x.size, _GELU_CHUNK)
    full = _gelu_scratch(n)
    passes = []
    for start in range(0, x.size, n):
        w = min(n, x.size - start)
        scratch = full if w == n else _gelu_scratch(w)
        passes.append((x[start:start + w], o[start:start + w], scratch))
    if len(passes) == 1:
        return _step_of(_gelu_pass, *passes[0])

    def step():
        for args in passes:
            _gelu_pass(*args)
    return step
