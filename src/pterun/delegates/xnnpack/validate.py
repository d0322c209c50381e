"""Load-time checks of an XNNPACK graph's geometry against the shapes its values declare.

Every number in a node that drives work or memory — kernel and pooling sizes, strides, dilations, padding,
fully-connected and matrix-product dimensions, slice/pad/concat/transpose extents — is checked here against
the dims of the values the node reads and writes, so a corrupt payload fails when the method is loaded, with a
:class:`~pterun.errors.DelegateError` that names the node and the field, instead of running for minutes or
allocating gigabytes at ``execute``. The XNNPACK runtime rejects such graphs when it is created, too.

Shapes are propagated as the XNNPACK runtime does it: graph inputs and constants have the dims they declare
(upper bounds for dynamic inputs), and every node's outputs get the dims its inputs and fields give, which
later nodes are checked against. No value may end up larger than it declares or, when its declared dims are
only a placeholder, than ``GROWTH_LIMIT`` times the largest input, output or constant of the graph (the sizes
the program vouches for), and no internal value may declare more than that either: work and memory stay
proportional to the program. :func:`validate` is called by :func:`.payload.read_graph` on every graph it reads.

Example::

    >>> validate(read_graph(blob, named_data))   # doctest: +SKIP
"""

from __future__ import annotations

import math

import numpy as np

from pterun.errors import DelegateError

#: XNNPACK keeps sizes in size_t but no real window, stride or padding comes near this.
MAX_GEOMETRY = 1 << 24

#: A value may hold up to this many times the elements of the graph's largest input, output or constant.
GROWTH_LIMIT = 64

_FLAG_SAME = 4
_FLAG_KEEP_DIMS = 0x40
_FLAG_TRANSPOSE = 1

_SAME_SHAPE = frozenset({
    "Softmax", "Sigmoid", "Clamp", "Floor", "Convert", "Copy", "SquareRoot", "Ceiling", "Hardswish", "Negate",
    "Square", "Abs", "ReciprocalSquareRoot", "Log", "Gelu", "Tanh", "Exp", "Sin", "Cos", "LeakyReLU", "ELU"})
_BINARY = frozenset({"Add", "Subtract", "Multiply", "Div", "Minimum", "Maximum"})


class _Node:
    """One node under check: its fields, the dims of the values it names (as propagated), and what it makes."""

    def __init__(self, graph, node, shapes: dict, work_limit: int = 1 << 62):
        self.graph, self.node, self.shapes, self.work_limit = graph, node, shapes, work_limit
        self.made: dict[str, tuple] = {}  # output field -> dims this node gives it

    def fail(self, what: str) -> DelegateError:
        return DelegateError(f"XNNPACK payload: {self.node.describe()}: {what}")

    def dims(self, field: str) -> tuple | None:
        """Dims of the value named by ``field`` (None when the id is undefined: the compiler reports that)."""
        vid = getattr(self.node, field)
        got = self.shapes.get(vid)
        if got is not None:
            return got
        v = self.graph.values.get(vid)
        return None if v is None else tuple(v.dims)

    def desc(self, field: str) -> str:
        vid = getattr(self.node, field)
        v = self.graph.values.get(vid)
        if v is None:
            return field
        return f"{field} {v.describe()}" if self.shapes.get(vid, v.dims) == tuple(v.dims) else \
            f"{field} value {vid} (dims {list(self.shapes[vid])} here)"

    def positive(self, *fields: str, zero_means_one: bool = False) -> tuple:
        out = []
        for f in fields:
            x = getattr(self.node, f)
            if zero_means_one and x == 0:
                x = 1
            if not 1 <= x <= MAX_GEOMETRY:
                raise self.fail(f"{f} is {x}; it must be between 1 and {MAX_GEOMETRY}")
            out.append(x)
        return tuple(out)

    def bounded(self, *fields: str) -> tuple:
        out = []
        for f in fields:
            x = getattr(self.node, f)
            if x > MAX_GEOMETRY:
                raise self.fail(f"{f} is {x}, above the limit of {MAX_GEOMETRY}")
            out.append(x)
        return tuple(out)

    def expect(self, field: str, want: tuple, why: str) -> None:
        """``field``'s value gets dims ``want`` from this node."""
        self.made[field] = tuple(int(d) for d in want)
        self.why = why

    def rank(self, field: str, n: int) -> tuple | None:
        d = self.dims(field)
        if d is not None and len(d) != n:
            raise self.fail(f"{self.desc(field)} must be {n}-D")
        return d


def _window(n: _Node, x: int, pad_a: int, pad_b: int, k: int, stride: int, dil: int, axis: str,
            kfield: str) -> int:
    """Output extent of a 2-D window along one axis (VALID padding given explicitly)."""
    span = (k - 1) * dil + 1
    padded = x + pad_a + pad_b
    if span > padded:
        raise n.fail(f"{kfield} {k} (dilated to {span}) does not fit the padded input {axis} {padded} "
                     f"(input {x} + padding {pad_a} + {pad_b})")
    return (padded - span) // stride + 1


def _bounded_work(n: _Node, out: tuple, kh: int, kw: int) -> None:
    """A window op computes every output element from kh x kw taps: that work stays proportional to the graph
    (GROWTH_LIMIT^2 x its largest declared value), so a huge window over a huge padding cannot run for hours."""
    work = math.prod(out) * kh * kw
    if work > n.work_limit:
        raise n.fail(f"window {kh}x{kw} over an output of {list(out)} is {work} multiply-adds per channel, more "
                     f"than the {n.work_limit} this graph allows")


def _check_window(n: _Node, kind: str, in_field: str, out_field: str, khf: str, kwf: str, stride_fields,
                  dil_fields, out_channels) -> None:
    node = n.node
    kh, kw = n.positive(khf, kwf)
    sh, sw = n.positive(*stride_fields) if stride_fields else (kh, kw)
    dh, dw = n.positive(*dil_fields, zero_means_one=True) if dil_fields else (1, 1)
    pt, pr, pb, pl = n.bounded("padding_top", "padding_right", "padding_bottom", "padding_left")
    x = n.rank(in_field, 4)
    if x is None:
        return
    N, H, W, C = x
    if node.flags & _FLAG_SAME:  # TensorFlow SAME: the padding follows the input, the window must not dwarf it
        for k, d, size, f in ((kh, dh, H, khf), (kw, dw, W, kwf)):
            if (k - 1) * d + 1 > 2 * size + 1:
                raise n.fail(f"{f} {k} (dilated to {(k - 1) * d + 1}) is more than twice the input's {size} (SAME "
                             "padding)")
        oh, ow = -(-H // sh), -(-W // sw)
    else:
        oh = _window(n, H, pt, pb, kh, sh, dh, "height", khf)
        ow = _window(n, W, pl, pr, kw, sw, dw, "width", kwf)
    oc = C if out_channels is None else out_channels
    _bounded_work(n, (N, oh, ow, oc), kh, kw)
    n.expect(out_field, (N, oh, ow, oc), f"{kind} of input {list(x)} with window {kh}x{kw}, stride {sh}x{sw}, "
                                         f"dilation {dh}x{dw}, padding {[pt, pr, pb, pl]}")


def _conv(n: _Node) -> None:
    node = n.node
    depthwise = node.name == "DepthwiseConv2d"
    groups = n.positive("groups", zero_means_one=True)[0]
    gi, go = n.positive("group_input_channels", "group_output_channels")
    x = n.rank("input1_id", 4)
    if depthwise:  # groups = input channels; each makes group_output_channels / group_input_channels outputs
        if go < gi:
            raise n.fail(f"group_output_channels {go} is below group_input_channels {gi} (depth multiplier < 1)")
        if x is not None and groups != x[3]:
            raise n.fail(f"groups {groups} does not match the {x[3]} channels of {n.desc('input1_id')}")
        oc = groups * (go // gi)
    else:
        if x is not None and gi * groups != x[3]:
            raise n.fail(f"groups {groups} x group_input_channels {gi} = {gi * groups}, but "
                         f"{n.desc('input1_id')} has {x[3]} channels")
        oc = groups * go
    if node.name == "ConvTranspose2d":
        kh, kw = n.positive("kernel_height", "kernel_width")
        sh, sw = n.positive("subsampling_height", "subsampling_width")
        dh, dw = n.positive("dilation_height", "dilation_width", zero_means_one=True)
        pt, pr, pb, pl = n.bounded("padding_top", "padding_right", "padding_bottom", "padding_left")
        ah, aw = n.bounded("adjustment_height", "adjustment_width")
        if x is None:
            return
        N, H, W, _ = x
        oh = sh * (H - 1) + ah + (kh - 1) * dh + 1 - pt - pb
        ow = sw * (W - 1) + aw + (kw - 1) * dw + 1 - pl - pr
        if oh < 1 or ow < 1:
            raise n.fail(f"padding {[pt, pr, pb, pl]} leaves an empty {oh}x{ow} output")
        _bounded_work(n, (N, oh, ow, oc), kh, kw)
        n.expect("output_id", (N, oh, ow, oc), f"transposed convolution of input {list(x)}, kernel {kh}x{kw}, "
                                               f"stride {sh}x{sw}")
        return
    _check_window(n, "convolution", "input1_id", "output_id", "kernel_height", "kernel_width",
                  ("subsampling_height", "subsampling_width"), ("dilation_height", "dilation_width"), oc)


def _pool(n: _Node) -> None:
    name = n.node.name
    if name == "ArgMaxPooling2d":
        _check_window(n, "arg-max pooling", "input_id", "output_value_id", "pooling_height", "pooling_width",
                      None, None, None)
        v = n.made.get("output_value_id")
        if v is not None:
            n.expect("output_index_id", v, "the same dims as output_value_id")
        return
    _check_window(n, "pooling", "input_id", "output_id", "pooling_height", "pooling_width",
                  ("stride_height", "stride_width"), ("dilation_height", "dilation_width"), None)


def _fully_connected(n: _Node) -> None:
    w = n.rank("filter_id", 2)
    x, out = n.dims("input1_id"), n.dims("output_id")
    if w is None or x is None or out is None:
        return
    ic, oc = (w[0], w[1]) if n.node.flags & _FLAG_TRANSPOSE else (w[1], w[0])
    if not x or x[-1] != ic:
        raise n.fail(f"{n.desc('input1_id')} does not end in the filter's {ic} input channels "
                     f"({n.desc('filter_id')})")
    n.expect("output_id", tuple(x[:-1]) + (oc,), f"input {list(x)} times a {ic}x{oc} filter")


def _broadcast(n: _Node, a: tuple, b: tuple, what: str) -> tuple:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        p = a[-i] if i <= len(a) else 1
        q = b[-i] if i <= len(b) else 1
        if p != q and p != 1 and q != 1:
            raise n.fail(f"{what} {list(a)} and {list(b)} do not broadcast")
        out.append(max(p, q) if p and q else 0)
    return tuple(reversed(out))


def _bmm(n: _Node) -> None:
    a, b = n.dims("input1_id"), n.dims("input2_id")
    if a is None or b is None:
        return
    if len(a) < 2 or len(b) < 2:
        raise n.fail(f"{n.desc('input1_id')} and {n.desc('input2_id')} need at least 2 dims")
    m, k = a[-2], a[-1]
    kb, nn = (b[-1], b[-2]) if n.node.flags & _FLAG_TRANSPOSE else (b[-2], b[-1])
    if k != kb:
        raise n.fail(f"inner dims differ: {n.desc('input1_id')} has {k}, {n.desc('input2_id')} has {kb}")
    batch = _broadcast(n, a[:-2], b[:-2], "batch dims")
    n.expect("output_id", batch + (m, nn), f"[{m}, {k}] x [{k}, {nn}] over batch {list(batch)}")


def _binary(n: _Node) -> None:
    a, b = n.dims("input1_id"), n.dims("input2_id")
    if a is None or b is None:
        return
    n.expect("output_id", _broadcast(n, a, b, "inputs"), f"the broadcast of {list(a)} and {list(b)}")


def _concat(n: _Node) -> None:
    k = {"Concatenate2": 2, "Concatenate3": 3, "Concatenate4": 4, "Concatenate5": 5}[n.node.name]
    ins = [n.dims(f"input{i}_id") for i in range(1, k + 1)]
    if any(d is None for d in ins):
        return
    axis = n.node.axis
    first = ins[0]
    if axis >= len(first):
        raise n.fail(f"axis {axis} is out of range for {len(first)}-dim inputs")
    for i, d in enumerate(ins[1:], 2):
        if len(d) != len(first) or any(p != q for j, (p, q) in enumerate(zip(d, first)) if j != axis):
            raise n.fail(f"{n.desc(f'input{i}_id')} does not match {list(first)} outside axis {axis}")
    want = list(first)
    want[axis] = sum(d[axis] for d in ins)
    n.expect("output_id", tuple(want), f"concatenation along axis {axis}")


def _transpose(n: _Node) -> None:
    x, perm = n.dims("input_id"), tuple(n.node.perm)
    if x is None:
        return
    if sorted(perm) != list(range(len(x))):
        raise n.fail(f"perm {list(perm)} is not a permutation of the {len(x)} dims of {n.desc('input_id')}")
    n.expect("output_id", tuple(x[p] for p in perm), f"{list(x)} permuted by {list(perm)}")


def _reshape(n: _Node) -> None:
    x, shape = n.dims("input_id"), tuple(n.node.new_shape)
    if x is None:
        return
    total = math.prod(x)
    known = math.prod(d for d in shape if d)
    if shape.count(0) > 1 or (0 in shape and (known == 0 or total % known)) or (0 not in shape and known != total):
        raise n.fail(f"new_shape {list(shape)} (0: the one inferred dim) cannot hold the {total} elements of "
                     f"{n.desc('input_id')}")
    n.expect("output_id", tuple(d if d else total // known for d in shape), f"{list(x)} reshaped")


def _slice(n: _Node) -> None:
    x = n.dims("input_id")
    offsets, sizes = tuple(n.node.offsets), tuple(n.node.sizes)
    if x is None:
        return
    if len(offsets) != len(x) or len(sizes) != len(x):
        raise n.fail(f"offsets {list(offsets)} and sizes {list(sizes)} do not match the {len(x)} dims of "
                     f"{n.desc('input_id')}")
    for d, (o, s, dim) in enumerate(zip(offsets, sizes, x)):
        end = o + (s if s else dim - o)  # size 0: to the end, as XNNPACK reads it
        if o > dim or end > dim:
            raise n.fail(f"offsets[{d}] {o} + sizes[{d}] {s} runs past dim {d} ({dim}) of {n.desc('input_id')}")
    n.expect("output_id", tuple(s if s else dim - o for o, s, dim in zip(offsets, sizes, x)),
             f"a slice of {list(x)} at {list(offsets)}")


def _pad(n: _Node) -> None:
    vin, vout = n.graph.values.get(n.node.input_id), n.graph.values.get(n.node.output_id)
    if vin is not None and vout is not None:
        # XNNPACK defines a constant pad only between values of one datatype and, quantized, of one scale and
        # zero point; ExecuTorch's partitioner can emit an fp32 -> qint8 pad (PT2E static int8 Swin), which
        # XNNPACK then refuses to create (ExecuTorch fails to load the method), so it is refused here too
        if vin.datatype != vout.datatype:
            raise n.fail(f"input {vin.describe()} and output {vout.describe()} differ in datatype; XNNPACK pads "
                         f"within one datatype")
        qi, qo = vin.quant, vout.quant
        if qi is not None and qo is not None and not (np.array_equal(qi.scale, qo.scale)
                                                      and np.array_equal(qi.zero_point, qo.zero_point)):
            si, so = np.asarray(qi.scale, np.float32), np.asarray(qo.scale, np.float32)
            raise n.fail(f"input {vin.describe()} (scale {si!s}, zero point {qi.zero_point}) and output "
                         f"{vout.describe()} (scale {so!s}, zero point {qo.zero_point}) are quantized "
                         f"differently; XNNPACK pads within one quantization")
    x = n.dims("input_id")
    pre, post = tuple(n.node.pre_paddings), tuple(n.node.post_paddings)
    if x is None:
        return
    if not len(pre) == len(post) == len(x):
        raise n.fail(f"pre_paddings {list(pre)} and post_paddings {list(post)} do not cover the {len(x)} dims "
                     f"of {n.desc('input_id')}")
    for f, vals in (("pre_paddings", pre), ("post_paddings", post)):
        if any(p > MAX_GEOMETRY for p in vals):
            raise n.fail(f"{f} {list(vals)} exceed the limit of {MAX_GEOMETRY}")
    n.expect("output_id", tuple(d + a + b for d, a, b in zip(x, pre, post)), f"{list(x)} padded")


def _resize(n: _Node) -> None:
    h, w = n.positive("new_height", "new_width")
    x = n.rank("input_id", 4)
    if x is not None:
        n.expect("output_id", (x[0], h, w, x[3]), f"input {list(x)} resized to {h}x{w}")


def _global_pool(n: _Node) -> None:
    x = n.dims("input_id")
    if x is None:
        return
    if len(x) < 3:
        raise n.fail(f"{n.desc('input_id')} needs at least 3 dims")
    out = n.graph.values.get(n.node.output_id)
    flat = tuple(x[:-3]) + (x[-1],)
    n.expect("output_id", flat if out is not None and tuple(out.dims) == flat else tuple(x[:-3]) + (1, 1, x[-1]),
             f"the mean over H and W of {list(x)}")


def _same(n: _Node) -> None:
    x = n.dims("input_id")
    if x is not None:
        n.expect("output_id", x, "the same as its input")


def _prelu(n: _Node) -> None:
    x, slope = n.dims("input1_id"), n.dims("input2_id")
    if x is None or slope is None:
        return
    _broadcast(n, x, slope, "input and slope")
    n.expect("output_id", x, "the same as its input")


_CHECKS = {"Conv2d": _conv, "DepthwiseConv2d": _conv, "ConvTranspose2d": _conv, "MaxPooling2d": _pool,
           "AvgPooling2d": _pool, "ArgMaxPooling2d": _pool, "FullyConnected": _fully_connected,
           "BatchMatrixMultiply": _bmm, "Concatenate2": _concat, "Concatenate3": _concat, "Concatenate4": _concat,
           "Concatenate5": _concat, "StaticTranspose": _transpose, "StaticReshape": _reshape,
           "StaticSlice": _slice, "StaticConstantPad": _pad, "StaticResizeBilinear2D": _resize,
           "GlobalAvgPooling2d": _global_pool, "PReLU": _prelu}
_CHECKS.update({name: _binary for name in _BINARY})
_CHECKS.update({name: _same for name in _SAME_SHAPE})


_ZERO_POINT_RANGE = {3: (-128, 127), 4: (0, 255)}  # qint8, quint8
_SMALLEST_NORMAL = 1.1754943508222875e-38


def _check_quantization(graph) -> None:
    """Scales must be positive normal numbers and zero points inside their type, as XNNPACK requires when a
    quantized value is defined (a scale of 0 crashed a native engine)."""
    for v in graph.values.values():
        q = v.quant
        if q is None or q.kind == 3:  # per-token (qdint8): computed at run time
            continue
        scales = np.atleast_1d(np.asarray(q.scale, np.float64))
        bad = ~(np.isfinite(scales) & (scales >= _SMALLEST_NORMAL))
        if bad.any():
            raise DelegateError(f"XNNPACK payload: {v.describe()} has quantization scale "
                                f"{float(scales[np.argmax(bad)])!r}; scales must be positive normal numbers")
        lo_hi = _ZERO_POINT_RANGE.get(v.datatype)
        if q.kind == 2 and lo_hi is not None and not lo_hi[0] <= q.zero_point <= lo_hi[1]:
            raise DelegateError(f"XNNPACK payload: {v.describe()} has zero point {q.zero_point}, outside "
                                f"{list(lo_hi)}")


def validate(graph):
    """Return ``graph``; raise DelegateError at the first node whose geometry does not fit its inputs' dims or
    would make a value larger than the program allows, or at a quantized value with an impossible scale."""
    _check_quantization(graph)
    # the sizes the program vouches for: external values (bounded by the DelegateCall's tensors) and constants
    # (bytes in the file); an internal value's declared dims are only a placeholder an engine may plan memory by
    vouched = [math.prod(v.dims) for v in graph.values.values() if v.external_id is not None or v.data is not None]
    limit = GROWTH_LIMIT * max(vouched, default=1)
    for v in graph.values.values():
        if v.external_id is None and v.data is None and math.prod(v.dims) > limit:
            raise DelegateError(f"XNNPACK payload: {v.describe()} declares {math.prod(v.dims)} elements, more than "
                                f"the {limit} this graph allows ({GROWTH_LIMIT} x its largest input, output or "
                                "constant)")
    shapes: dict[int, tuple] = {}
    for node in graph.nodes:
        check = _CHECKS.get(node.name)
        if check is None:
            continue
        n = _Node(graph, node, shapes, GROWTH_LIMIT * limit)
        check(n)
        for field, dims in n.made.items():
            vid = getattr(node, field)
            v = graph.values.get(vid)
            size = math.prod(dims)
            if v is not None and size > max(math.prod(v.dims), limit):
                raise n.fail(f"{n.desc(field)} would get dims {list(dims)} ({n.why}): {size} elements, more than "
                             f"the {limit} this graph allows ({GROWTH_LIMIT} x its largest declared value)")
            shapes[vid] = dims
    return graph
