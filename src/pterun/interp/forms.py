"""The forms in which a backend's merged graph holds a portable operator (:class:`Absorbed`), read from the
instruction's arguments at load: ``mean``, views, reshapes, squeezes and slices by their parameters, and any
other operator the backend lists as ``kernel`` as itself (:func:`kernel_op`: its arguments fixed at load, its
tensors described, and a call of the kernel for an engine that runs it as it is).

Example::

    >>> op = absorbed_op("mean", args, values, tags, volatile)   # doctest: +SKIP
    >>> op.op, op.attrs                                            # doctest: +SKIP
    ('mean', {'axes': (2,), 'keepdim': True})
"""

from __future__ import annotations

import numpy as np

from pterun._record import Fields
from pterun.delegates import KernelArg
from pterun.errors import InvalidProgramError
from pterun.format.schema import BOOL, DOUBLE, INT, INT_LIST, NULL, OPT_TENSOR_LIST, TENSOR, TENSOR_LIST
from pterun.interp.binding import Binder
from pterun.interp.checks import check as check_geometry
from pterun.interp.tensor import Tensor

__all__ = ["Absorbed", "KERNEL_DTYPES", "absorbed_op", "const_int", "kernel_op"]


class Absorbed(Fields):
    """An operator a backend may run inside a merged graph. ``op`` is the operation (``"mean"``; ``"kernel"``
    for an operator held as itself, :func:`kernel_op`); ``inputs`` and ``outputs`` are value slots; ``attrs`` its
    parameters resolved at load (``axes``, ``keepdim``)."""

    op: str
    inputs: tuple
    outputs: tuple
    attrs: dict


def absorbed_op(form: str, args: tuple, values: list, tags: list, volatile: set) -> Absorbed | None:
    """The :class:`Absorbed` record of a KernelCall on float32 tensors read in ``form`` (the form a backend names
    for its operator, :attr:`pterun.delegates.Backend.absorbed_forms`), or None when its arguments do not fit:
    ``mean`` (a ``mean.out`` over fixed dims, keepdim fixed), ``view`` (``et_view``, whose result aliases its
    input) and ``reshape`` (``view_copy``), both with ``size`` holding None for the one dim known only at run time
    (a fixed -1 is the out tensor's declared size there), ``squeeze`` (``squeeze_copy`` over fixed ``dims``),
    ``slice`` (``slice_copy`` along a fixed ``dim`` from a fixed ``start`` to ``end``, step 1) and ``select``
    (``select_copy`` of a fixed ``index`` along a fixed ``dim``: an LLM's last token); and an LLM's KV cache
    and attention (:func:`_update_cache`, :func:`_sdpa`), whose position is an int read at run time."""
    if form in _ATTENTION:
        return _ATTENTION[form](args, values, tags, volatile)
    reader = _READERS.get(form)
    if reader is None:
        return None
    arity, make = reader
    if len(args) not in (arity, arity + 1) or (len(args) == arity + 1 and args[-1] != args[arity - 1]):
        return None
    x, out = args[0], args[arity - 1]
    xt, ot = values[x], values[out]
    if tags[x] != TENSOR or tags[out] != TENSOR or not (isinstance(xt, Tensor) and isinstance(ot, Tensor)):
        return None
    if xt.dtype != np.float32 or ot.dtype != np.float32:
        return None
    attrs = make(args, values, tags, volatile, len(xt.shape))
    return None if attrs is None else Absorbed(attrs.pop("op"), (x,), (out,), attrs)


#: the dtypes of the tensors an operator held as a kernel may read and write
KERNEL_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int64)})


def _kernel_tensor(slot: int, values: list, tags: list, volatile: set, any_dtype: bool = False) -> Tensor | None:
    """The tensor at ``slot`` when a merged graph can hold it as a kernel's argument: static, row-major, float32,
    bool or int64 (``any_dtype``: any, for an output after the first, which the graph does not produce), and never
    retargeted while the method runs; else None."""
    t = values[slot] if tags[slot] == TENSOR and slot not in volatile else None
    if not isinstance(t, Tensor) or t.dynamic or not any_dtype and t.dtype not in KERNEL_DTYPES or \
            t.dim_order != tuple(range(len(t.shape))):
        return None
    return t


def kernel_op(kernel, args: tuple, values: list, tags: list, volatile: set,
              given: frozenset = frozenset()) -> Absorbed | None:
    """The ``kernel`` form of a KernelCall (:class:`Absorbed`), or None where its arguments do not fit: every
    argument but its tensors fixed at load, the tensors static float32, bool or int64 (:func:`_kernel_tensor`), no
    list of tensors. ``attrs`` holds ``name`` (the operator), ``args`` (its schema arguments, each tensor a
    :class:`pterun.delegates.KernelArg`, ``given`` where its slot is among ``given``: the method's inputs) and
    ``call``: ``call(*input arrays)`` runs the kernel itself and returns what it writes, one array per output in
    schema order (each written into fresh memory, never the program's)."""
    if kernel.raw or kernel.random or kernel.not_supported:
        return None
    schema = kernel.schema
    n = len(schema.args)
    if not schema.mutable or len(args) not in (n, n + 1):
        return None
    binder = Binder(values, tags, volatile, kernel.name)
    bound, ins, outs = [], [], []
    for arg, slot in zip(schema.args, args):
        if tags[slot] == TENSOR:
            t = _kernel_tensor(slot, values, tags, volatile, any_dtype=arg.mutable and bool(outs))
            if t is None:
                return None
            side = outs if arg.mutable else ins
            const = not arg.mutable and not t.array.flags.writeable
            bound.append(KernelArg(arg.mutable, len(side), tuple(t.shape), t.dtype, const, slot in given))
            side.append(slot)
            continue
        if arg.mutable or tags[slot] in (TENSOR_LIST, OPT_TENSOR_LIST) or slot in volatile:
            return None
        try:
            dyn, v = binder.bind(arg, slot)
        except InvalidProgramError:
            return None
        if dyn:
            return None
        bound.append(v)
    ret = args[n] if len(args) == n + 1 else None
    if ret is not None and ret not in outs and not (tags[ret] == TENSOR_LIST and tuple(values[ret]) == tuple(outs)):
        return None  # a return slot that is neither the out tensor nor the list of them
    # arguments that drive the work (a padding, a window) must give the out tensors' shapes, or the instruction
    # stays outside, where loading the method reports them (a corrupt padding must not size a LiteRT buffer)
    arrays = [values[s].array if isinstance(b, KernelArg) else b for b, s in zip(bound, args)]
    if check_geometry(kernel.name, arrays, [(values[s].shape, True) for s in outs]) is not None:
        return None
    return Absorbed("kernel", tuple(ins), tuple(outs),
                    {"name": kernel.name, "args": tuple(bound), "call": _kernel_call(kernel.fn, bound)})


def _kernel_call(fn, bound: list):
    """``call(*arrays)``: ``fn`` on ``bound`` with its inputs' arrays and fresh out arrays, its results as a tuple."""
    template = list(bound)
    ins = [p for p, a in enumerate(template) if isinstance(a, KernelArg) and not a.out]
    outs = [(p, a.shape, a.dtype) for p, a in enumerate(template) if isinstance(a, KernelArg) and a.out]

    def call(*arrays):
        a = template.copy()
        for p, x in zip(ins, arrays):
            a[p] = x
        for p, shape, dtype in outs:
            a[p] = np.empty(shape, dtype)
        r = fn(*a)
        return tuple(r) if isinstance(r, (tuple, list)) else (r,)
    return call


def const_int(slot: int, values: list, tags: list, volatile: set):
    """The int at ``slot`` when it is fixed at load, else None."""
    if tags[slot] != INT or slot in volatile or type(values[slot]) is not int:
        return None
    return values[slot]


def _const_ints(slot: int, values: list, tags: list, volatile: set):
    """The ints of the int list at ``slot`` when every one is fixed at load, else None."""
    if tags[slot] != INT_LIST or slot in volatile or not isinstance(values[slot], tuple):
        return None
    got = [const_int(j, values, tags, volatile) for j in values[slot]]
    return None if None in got else got


def _mean(args, values, tags, volatile, rank):
    _, dim, keep, dtype = args[:4]
    axes = _const_ints(dim, values, tags, volatile)
    if tags[keep] != BOOL or keep in volatile or tags[dtype] != NULL or not axes:
        return None
    if any(not -rank <= a < rank for a in axes):
        return None
    return {"op": "mean", "axes": tuple(sorted({a % rank for a in axes})), "keepdim": bool(values[keep])}


def _view(args, values, tags, volatile, rank):
    size = args[1]
    if tags[size] != INT_LIST or size in volatile or not isinstance(values[size], tuple):
        return None
    declared = values[args[2]].shape
    if len(declared) != len(values[size]):
        return None
    dims = []
    for j, bound in zip(values[size], declared):
        d = const_int(j, values, tags, volatile) if tags[j] == INT and j not in volatile else None
        if j not in volatile and (d is None or d < -1):
            return None
        dims.append(None if d is None else bound if d == -1 else d)  # None: the dim the run-time size decides
    if dims.count(None) > 1:
        return None
    return {"op": "view", "size": tuple(dims)}


def _reshape(args, values, tags, volatile, rank):
    got = _view(args, values, tags, volatile, rank)
    return None if got is None else {**got, "op": "reshape"}


def _squeeze(args, values, tags, volatile, rank):
    dims = _const_ints(args[1], values, tags, volatile) if tags[args[1]] == INT_LIST else \
        [const_int(args[1], values, tags, volatile)]
    if not dims or None in dims or any(not -rank <= d < rank for d in dims):
        return None
    return {"op": "squeeze", "dims": tuple(sorted({d % rank for d in dims}))}


def _slice(args, values, tags, volatile, rank):
    dim, start, end = (const_int(a, values, tags, volatile) for a in args[1:4])
    if dim is None or not -rank <= dim < rank or const_int(args[4], values, tags, volatile) != 1:
        return None
    if (start is None and tags[args[2]] != NULL) or (end is None and tags[args[3]] != NULL):
        return None
    return {"op": "slice", "dim": dim % rank, "start": start, "end": end}


def _select(args, values, tags, volatile, rank):
    dim, index = (const_int(a, values, tags, volatile) for a in args[1:3])
    if dim is None or index is None or not -rank <= dim < rank:
        return None
    return {"op": "select", "dim": dim % rank, "index": index}


# form -> (arguments up to and including ``out``, attributes maker)
_READERS = {"mean": (5, _mean), "view": (3, _view), "reshape": (3, _reshape), "squeeze": (3, _squeeze),
            "slice": (6, _slice), "select": (4, _select)}


def _cache(slot: int, values: list, tags: list) -> Tensor | None:
    """The KV cache at ``slot`` when a merged graph can hold it in place: a static, row-major float32 tensor
    ``[1, positions, heads, head dim]``; else None."""
    t = values[slot] if tags[slot] == TENSOR else None
    if not isinstance(t, Tensor) or t.dynamic or t.dtype != np.float32 or len(t.shape) != 4 or t.shape[0] != 1 or \
            t.dim_order != (0, 1, 2, 3) or 0 in t.shape:
        return None
    return t


def _rows(slot: int, values: list, tags: list, cache: Tensor) -> Tensor | None:
    """The float32 ``[1, S, heads, head dim]`` tensor at ``slot`` whose rows fit ``cache``, else None."""
    t = values[slot] if tags[slot] == TENSOR else None
    if not isinstance(t, Tensor) or t.dtype != np.float32 or len(t.shape) != 4 or t.dim_order != (0, 1, 2, 3) or \
            t.shape[0] != 1 or t.shape[2:] != cache.shape[2:] or not 0 < t.shape[1] <= cache.shape[1]:
        return None
    return t


def _update_cache(args, values, tags, volatile) -> Absorbed | None:
    """``llama::update_cache.out(value, cache, start_pos, out)``: ``inputs`` (value, cache, start_pos), ``outputs``
    (cache,): the rows are written into the cache in place, at the position the int ``start_pos`` holds when the
    method runs. ``out`` is a placeholder the kernel never writes."""
    if len(args) not in (4, 5):
        return None
    value, cache, pos = args[:3]
    c = _cache(cache, values, tags)
    if c is None or _rows(value, values, tags, c) is None or tags[pos] != INT:
        return None
    return Absorbed("update_cache", (value, cache, pos), (cache,), {})


def _sdpa(args, values, tags, volatile) -> Absorbed | None:
    """``llama::custom_sdpa.out(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, out)`` without a
    mask or dropout, ``is_causal`` and ``scale`` fixed at load: ``inputs`` (query, key cache, value cache,
    start_pos), ``outputs`` (out,); ``attrs`` ``causal`` and ``scale`` (None: 1/sqrt(head dim))."""
    if len(args) not in (9, 10) or (len(args) == 10 and args[9] != args[8]):
        return None
    q, k, v, pos, mask, drop, causal, scale, out = args[:9]
    kc, vc = _cache(k, values, tags), _cache(v, values, tags)
    if kc is None or vc is None or kc.shape != vc.shape or tags[pos] != INT or tags[mask] != NULL:
        return None
    qt, ot = values[q], values[out]
    if not isinstance(qt, Tensor) or not isinstance(ot, Tensor) or qt.dtype != np.float32 or \
            ot.dtype != np.float32 or len(qt.shape) != 4 or qt.dim_order != (0, 1, 2, 3) or \
            ot.dim_order != (0, 1, 2, 3) or tuple(qt.shape) != tuple(ot.shape) or qt.shape[0] != 1 or \
            qt.shape[3] != kc.shape[3] or qt.shape[2] % kc.shape[2] or not 0 < qt.shape[1] <= kc.shape[1]:
        return None
    if tags[drop] != DOUBLE or drop in volatile or values[drop] != 0.0 or tags[causal] != BOOL or \
            causal in volatile:
        return None
    if tags[scale] == DOUBLE and scale not in volatile and isinstance(values[scale], float):
        s = values[scale]
    elif tags[scale] == NULL:
        s = None
    else:
        return None
    return Absorbed("sdpa", (q, k, v, pos), (out,), {"causal": bool(values[causal]), "scale": s})


#: forms of the KV cache and attention (their reading differs from the one-tensor forms of :data:`_READERS`)
_ATTENTION = {"update_cache": _update_cache, "sdpa": _sdpa}
