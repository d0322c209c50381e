"""How each XNNPACK node becomes TFLite operators (a mixin of the translator in :mod:`.translate`).

Facts checked against ExecuTorch's outputs: XNNPACK's NHWC values and OHWI / [1, H, W, C*M] / [out, in] filters
are TFLite's own layouts; explicit convolution padding becomes PAD + VALID (XNNPACK fuses it back); pools need
VALID or SAME (or PAD + VALID after a ReLU); dynamic int8 (``qdint8``) activations are not a TFLite type, so the
fp32 -> qdint8 Convert is dropped and the fully-connected layer gets the float input with int8 / int4 weights,
which XNNPACK then quantizes per row exactly as ExecuTorch does; static int8 biases get the scale TFLite requires
(input scale x weight scale; XNNPACK reads only the ints).
"""

from __future__ import annotations

import math

import numpy as np

from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack import quant as Q
from pterun.delegates.xnnpack.litert_engine.exact import row_sum

__all__ = ["NodeRules"]

F32 = np.float32
_UNARY = {"Abs": "ABS", "Negate": "NEG", "Floor": "FLOOR", "Ceiling": "CEIL", "Square": "SQUARE",
          "SquareRoot": "SQRT", "ReciprocalSquareRoot": "RSQRT", "Log": "LOG", "Exp": "EXP", "Sin": "SIN",
          "Cos": "COS", "Tanh": "TANH", "Sigmoid": "LOGISTIC", "Hardswish": "HARD_SWISH"}
_BINARY = {"Add": ("ADD", "AddOptions"), "Subtract": ("SUB", "SubOptions"), "Multiply": ("MUL", "MulOptions"),
           "Div": ("DIV", "DivOptions"), "Maximum": ("MAXIMUM", None), "Minimum": ("MINIMUM", None),
           "PReLU": ("PRELU", None)}
_FUSABLE = {(-math.inf, math.inf): "NONE", (0.0, math.inf): "RELU", (0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}


class NodeRules:
    """The ``node_<Name>`` rules and their helpers; the translator provides tensors, operators and clamps."""

    def conv_pads(self, n: G.Node, x: int) -> tuple[int, str]:
        """(input tensor after any explicit PAD, padding name) for a convolution's padding."""
        if n.flags & G.FLAG_TENSORFLOW_SAME_PADDING:
            return x, "SAME"
        pads = (n.padding_top, n.padding_right, n.padding_bottom, n.padding_left)
        if not any(pads):
            return x, "VALID"
        return self.pad_zero(x, pads, "convolution"), "VALID"

    def bias_tensor(self, n: G.Node, x_vid: int, w_vid: int, required: bool = False) -> int:
        """The bias's tensor; -1 for none, or with ``required`` (LiteRT's convolutions refuse to prepare without
        one) a bias of zeros, which is what XNNPACK starts the sums from when a node has none."""
        if n.bias_id == G.INVALID_ID:
            return self.zero_bias(n, x_vid, w_vid) if required else -1
        bv = self.value(n.bias_id)
        if bv.data is None:
            raise self.no("run-time bias")
        if bv.quant is None:
            return self.tensor_of(n.bias_id)
        if bv.datatype not in (G.QINT32, G.QCINT32):
            raise self.no(f"quantized bias {bv.describe()} without a static int8 input and weights")
        self.tid[n.bias_id] = self.add_tensor([int(np.prod(bv.dims))], self.S.TensorType.INT32,
                                              self.buffer(bv.data), self.bias_quant(x_vid, w_vid, bv.describe()),
                                              f"v{bv.id}")
        return self.tid[n.bias_id]

    def bias_quant(self, x_vid: int, w_vid: int, what: str):
        """TFLite's rule for an int32 bias: scale = input scale x weight scale (per output channel)."""
        xq, wq = self.value(x_vid).quant, self.value(w_vid).quant
        if xq is None or wq is None or xq.kind != G.PER_TENSOR:
            raise self.no(f"quantized bias {what} without a static int8 input and weights")
        scale = (F32(xq.scale) * np.asarray(wq.scale, F32).reshape(-1)).astype(F32)
        quant = self.S.QuantizationParameters()
        quant.scale = scale
        quant.zeroPoint = np.zeros(scale.size, np.int64)
        quant.quantizedDimension = 0
        return quant

    def zero_bias(self, n: G.Node, x_vid: int, w_vid: int) -> int:
        dims = self.value(w_vid).dims  # a filter's output channels: OHWI's first dim, [1, H, W, C*M]'s last
        channels = dims[-1] if n.name == "DepthwiseConv2d" else dims[0]
        if self.value(w_vid).quant is None:
            return self.const(np.zeros(channels, F32), "FLOAT32")
        return self.const(np.zeros(channels, np.int32), "INT32", self.bias_quant(x_vid, w_vid, "of zeros"))

    def conv_weights(self, n: G.Node) -> int:
        w = self.value(n.filter_id)
        if w.data is None:
            raise self.no(f"filter {w.describe()} is not a constant")
        if w.datatype in (G.QCINT4, G.QBINT4):
            raise self.no("4-bit convolution weights")
        return self.tensor_of(n.filter_id)

    def input_for_gemm(self, n: G.Node) -> int:
        """The GEMM's input: a dropped dynamic-int8 Convert gives the float tensor it quantized."""
        x = self.value(n.input1_id)
        if x.datatype == G.QDINT8:
            w = self.value(n.filter_id)
            if w.datatype not in (G.QCINT8, G.QCINT4, G.QBINT4) or n.name != "FullyConnected":
                raise self.no(f"dynamic int8 input with {w.dtype_name} weights")
            src = self.dynamic_source.get(n.input1_id)
            if src is None:
                raise self.no("dynamic int8 input that no fp32 Convert produces")
            return self.tensor_of(src)
        return self.tensor_of(n.input1_id)

    def node_Convert(self, n: G.Node) -> None:
        src, dst = self.value(n.input_id), self.value(n.output_id)
        if dst.datatype == G.QDINT8:
            if src.datatype != G.FP32:
                raise self.no(f"dynamic int8 from {src.dtype_name}")
            if dst.external_id is not None:
                raise self.no("dynamic int8 graph output")
            q = dst.quant
            if q is not None and q.kind == G.PER_TOKEN and q.num_nonbatch_dims > 1:
                raise self.no(f"dynamic int8 over {q.num_nonbatch_dims} dims (TFLite quantizes rows)")
            for c in self.consumers.get(n.output_id, []):
                if c.name != "FullyConnected" or c.fields.get("input1_id") != n.output_id:
                    raise self.no(f"dynamic int8 value read by {c.describe()}")
            self.dynamic_source[n.output_id] = n.input_id
            return
        if (n.output_min, n.output_max) != (-math.inf, math.inf):
            raise self.no("clamped Convert")
        s, d = src.datatype, dst.datatype
        if s == G.FP32 and d in (G.QINT8, G.QUINT8):
            self.op("QUANTIZE", [self.tensor_of(src.id)], [self.tensor_of(dst.id)])
        elif s in (G.QINT8, G.QUINT8) and d == G.FP32:
            self.op("DEQUANTIZE", [self.tensor_of(src.id)], [self.tensor_of(dst.id)])
        elif s in (G.QINT8, G.QUINT8) and d in (G.QINT8, G.QUINT8):
            try:  # as for binary ops: a ratio XNNPACK refuses must not reach LiteRT's own kernel
                Q.RequantizeParams(src.quant.scale, src.quant.zero_point, dst.quant.scale, dst.quant.zero_point)
            except ValueError as e:
                raise self.no(str(e)) from None
            self.op("QUANTIZE", [self.tensor_of(src.id)], [self.tensor_of(dst.id)])
        else:
            raise self.no(f"Convert {src.dtype_name} -> {dst.dtype_name}")

    def node_FullyConnected(self, n: G.Node) -> None:
        x = self.input_for_gemm(n)
        w = self.value(n.filter_id)
        if w.data is None:
            raise self.no(f"run-time filter {w.describe()}")
        wt = self.transposed_weights(w) if n.flags & G.FLAG_TRANSPOSE_WEIGHTS else self.tensor_of(n.filter_id)
        b = self.bias_tensor(n, n.input1_id, n.filter_id)
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        keep = len(self.tensors[x].shape) != 2
        self.op("FULLY_CONNECTED", [x, wt, b], [self.output(n.output_id, residual)], "FullyConnectedOptions",
                fusedActivationFunction=act, keepNumDims=keep)

    def transposed_weights(self, w: G.Value) -> int:
        """Float weights stored [in, out] (XNNPACK's transposed-weights flag; GPT-2's Conv1D layers) as TFLite's
        [out, in], transposed as they are copied into the model: XNNPACK packs either layout into the same
        buffer, so the sums are the same."""
        dtype = {G.FP32: F32, G.FP16: np.float16}.get(w.datatype)
        if dtype is None or w.quant is not None or len(w.dims) != 2:
            raise self.no(f"transposed fully-connected weights {w.describe()}")
        data = np.ascontiguousarray(np.frombuffer(w.data, dtype).reshape(w.dims).T)
        return self.const(data, "FLOAT32" if dtype is F32 else "FLOAT16")

    def conv_common(self, n: G.Node):
        if n.kernel_height < 1 or n.kernel_width < 1 or n.subsampling_height < 1 or n.subsampling_width < 1:
            raise self.no("empty kernel or stride")
        x, padding = self.conv_pads(n, self.tensor_of(n.input1_id))
        wt = self.conv_weights(n)
        b = self.bias_tensor(n, n.input1_id, n.filter_id, required=True)
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        out = self.output(n.output_id, residual)
        return [x, wt, b], [out], dict(padding=getattr(self.S.Padding, padding), strideH=n.subsampling_height,
                                       strideW=n.subsampling_width, dilationHFactor=max(n.dilation_height, 1),
                                       dilationWFactor=max(n.dilation_width, 1), fusedActivationFunction=act)

    def node_Conv2d(self, n: G.Node) -> None:
        ins, outs, opts = self.conv_common(n)
        self.op("CONV_2D", ins, outs, "Conv2DOptions", **opts)

    def node_DepthwiseConv2d(self, n: G.Node) -> None:
        mult = n.group_output_channels // max(n.group_input_channels, 1)
        ins, outs, opts = self.conv_common(n)
        self.op("DEPTHWISE_CONV_2D", ins, outs, "DepthwiseConv2DOptions", depthMultiplier=mult, **opts)

    def node_ConvTranspose2d(self, n: G.Node) -> None:
        """TRANSPOSE_CONV with VALID padding at its full size, then a SLICE that crops XNNPACK's padding (an
        adjustment past the bottom/right padding becomes the output shape's extra rows, which LiteRT derives)."""
        if max(n.groups, 1) != 1 or max(n.dilation_height, 1) != 1 or max(n.dilation_width, 1) != 1:
            raise self.no("grouped or dilated transposed convolution")
        if n.flags & G.FLAG_TENSORFLOW_SAME_PADDING:
            raise self.no("transposed convolution with TensorFlow SAME padding")
        dims = self.value(n.input1_id).dims
        if len(dims) != 4:
            raise self.no("transposed convolution of a non-4-D input")
        (kh, kw), (sh, sw) = (n.kernel_height, n.kernel_width), (n.subsampling_height, n.subsampling_width)
        if min(kh, kw, sh, sw) < 1 or n.adjustment_height >= sh or n.adjustment_width >= sw:
            raise self.no("transposed convolution geometry")
        pt, pr, pb, pl = n.padding_top, n.padding_right, n.padding_bottom, n.padding_left
        full_h, full_w = (dims[1] - 1) * sh + kh, (dims[2] - 1) * sw + kw
        out_h, out_w = full_h + n.adjustment_height - pt - pb, full_w + n.adjustment_width - pl - pr
        shape = [dims[0], full_h + max(n.adjustment_height - pb, 0), full_w + max(n.adjustment_width - pr, 0),
                 n.group_output_channels]
        if out_h < 1 or out_w < 1:
            raise self.no("transposed convolution with an empty output")
        x = self.tensor_of(n.input1_id)
        wt = self.conv_weights(n)
        b = self.bias_tensor(n, n.input1_id, n.filter_id)
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        crop = shape[1:3] != [out_h, out_w]
        dst = self.tensors[self.tensor_of(n.output_id)]
        dst.shape = np.asarray([shape[0], out_h, out_w, shape[3]], np.int32)  # what XNNPACK will produce
        y = self.add_tensor(shape, dst.type, 0, dst.quantization) if crop else self.output(n.output_id, residual)
        self.op("TRANSPOSE_CONV", [self.i32(shape), wt, x, b], [y], "TransposeConvOptions",
                padding=self.S.Padding.VALID, strideH=sh, strideW=sw, fusedActivationFunction=act)
        if crop:
            self.op("SLICE", [y, self.i32([0, pt, pl, 0]), self.i32([shape[0], out_h, out_w, shape[3]])],
                    [self.output(n.output_id, residual)])
        self.fixed_shape = True  # the output shape is a constant of the model

    def pool(self, n: G.Node, name: str) -> None:
        ph, pw = n.pooling_height, n.pooling_width
        sh, sw = n.stride_height or ph, n.stride_width or pw
        if max(n.dilation_height, 1) != 1 or max(n.dilation_width, 1) != 1:
            raise self.no("dilated pooling")
        pads = (n.padding_top, n.padding_right, n.padding_bottom, n.padding_left)
        x = self.tensor_of(n.input_id)
        if n.flags & G.FLAG_TENSORFLOW_SAME_PADDING:
            padding = "SAME"
        elif not any(pads):
            padding = "VALID"
        elif name == "MAX_POOL_2D" and self.nonnegative(n.input_id) and max(pads) < min(ph, pw):
            # zero padding never wins the max of a ReLU's output (every window holds a real pixel): any size
            x, padding = self.pad_zero(x, pads), "VALID"
        else:  # TFLite's SAME pools read only real pixels, as XNNPACK's do: equal only at this input size
            shape = self.value(n.input_id).dims
            if len(shape) != 4 or pads != _same_pads(shape[1], shape[2], (ph, pw), (sh, sw)):
                raise self.no(f"pool padding {list(pads)} is neither VALID nor SAME")
            padding = "SAME"
            self.fixed_shape = True
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        self.op(name, [x], [self.output(n.output_id, residual)], "Pool2DOptions",
                padding=getattr(self.S.Padding, padding), strideH=sh, strideW=sw, filterHeight=ph,
                filterWidth=pw, fusedActivationFunction=act)

    def nonnegative(self, vid: int) -> bool:
        """True when value ``vid`` is produced with a fused clamp at or above 0 (a ReLU's output)."""
        p = self.producers.get(vid)
        lo = self.fused.get(p.index, (p.output_min,))[0] if p is not None else -math.inf
        return lo >= 0

    def pad_zero(self, x: int, pads: tuple, what: str = "pool") -> int:
        """``x`` (NHWC) padded by (top, right, bottom, left) with (real) zeros, before a ``what`` node."""
        pt, pr, pb, pl = pads
        src = self.tensors[x]
        if len(src.shape) != 4:
            raise self.no(f"padded {what} of a non-4-D input")
        shape = list(src.shape)
        shape[1] += pt + pb
        shape[2] += pl + pr
        padded = self.add_tensor(shape, src.type, 0, src.quantization)
        self.op("PAD", [x, self.i32([[0, 0], [pt, pb], [pl, pr], [0, 0]])], [padded])
        return padded

    def node_MaxPooling2d(self, n: G.Node) -> None:
        self.pool(n, "MAX_POOL_2D")

    def node_AvgPooling2d(self, n: G.Node) -> None:
        self.pool(n, "AVERAGE_POOL_2D")

    def node_GlobalAvgPooling2d(self, n: G.Node) -> None:
        rank = len(self.value(n.input_id).dims)
        if rank < 3:
            raise self.no("global average pool of fewer than 3 dims")
        residual = self.residual(n)
        self.op("MEAN", [self.tensor_of(n.input_id), self.i32(list(range(1, rank - 1)))],
                [self.output(n.output_id, residual)], "ReducerOptions", keepDims=bool(n.flags & G.FLAG_KEEP_DIMS))

    def node_Mean(self, n: G.Node) -> None:
        """pterun's mean node (a merged graph's RMSNorm mean). Over the last dim, kept: the portable kernel's
        numbers bit for bit, as a running sum and one division. XNNPACK's float32 matrix product adds its ``k``
        products one at a time into one accumulator, and a product by 1.0 is exact, so FULLY_CONNECTED with a
        row of ones sums left to right exactly as ExecuTorch's ``mean.out`` does, and DIV by the count is
        correctly rounded. Any other mean is TFLite's MEAN (XNNPACK's own order)."""
        residual = self.residual(n)
        x = self.tensor_of(n.input_id)
        shape = self.tensors[x].shape
        rank = len(shape)
        if rank >= 2 and tuple(n.axes) == (rank - 1,) and n.keepdim and self.value(n.input_id).datatype == G.FP32:
            count = int(shape[-1])
            total = row_sum(self, x, self.temp_like(n.output_id), count, rank)
            self.op("DIV", [total, self.const(np.array([count], F32), "FLOAT32")],
                    [self.output(n.output_id, residual)], "DivOptions",
                    fusedActivationFunction=self.S.ActivationFunctionType.NONE)
            return
        self.op("MEAN", [x, self.i32(list(n.axes))], [self.output(n.output_id, residual)], "ReducerOptions",
                keepDims=bool(n.keepdim))

    def node_Pick(self, n: G.Node) -> None:
        """pterun's select node: GATHER of the one index along ``dim`` (LiteRT's builtin kernel: a copy), from the
        end through REVERSE_V2 where the index is negative (the dim's size is known only when the call runs),
        then the dim dropped: the node's output dims are fixed (:func:`..merge._pick_node`)."""
        first = len(self.operators)
        x, d, index = self.tensor_of(n.input_id), int(n.dim), int(n.element)
        shape = [int(s) for s in self.tensors[x].shape]
        F = self.S.TensorType.FLOAT32
        if index < 0:
            rev = self.add_tensor(shape, F)
            self.op("REVERSE_V2", [x, self.i32([d])], [rev])
            x, index = rev, -index - 1
        picked = self.add_tensor([1 if a == d else s for a, s in enumerate(shape)], F)
        self.op("GATHER", [x, self.i32([index])], [picked], "GatherOptions", axis=d)
        out = self.tensor_of(n.output_id)
        self.op("RESHAPE", [picked, self.i32([int(s) for s in self.tensors[out].shape])], [out])
        self.allow_builtin(first)

    def node_binary(self, n: G.Node) -> None:
        name, options = _BINARY[n.name]
        vals = [self.value(v) for v in (n.input1_id, n.input2_id, n.output_id)]
        if n.name in ("Add", "Subtract", "Multiply") and all(v.datatype in (G.QINT8, G.QUINT8) for v in vals):
            try:  # parameters XNNPACK refuses would reach a LiteRT kernel that aborts the process on them
                Q.integer_binary_params(n.name, *((v.quant.scale, v.quant.zero_point) for v in vals))
            except ValueError as e:
                raise self.no(str(e)) from None
        ins = [self.tensor_of(n.input1_id), self.tensor_of(n.input2_id)]
        if options is None:
            self.op(name, ins, [self.output(n.output_id, self.residual(n))])
            return
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        self.op(name, ins, [self.output(n.output_id, residual)], options, fusedActivationFunction=act)

    def node_unary(self, n: G.Node) -> None:
        self.unary(_UNARY[n.name], n)

    def node_Gelu(self, n: G.Node) -> None:
        self.unary("GELU", n, "GeluOptions", approximate=False)

    def node_Softmax(self, n: G.Node) -> None:
        self.unary("SOFTMAX", n, "SoftmaxOptions", beta=1.0)

    def node_LeakyReLU(self, n: G.Node) -> None:
        self.unary("LEAKY_RELU", n, "LeakyReluOptions", alpha=float(np.float32(n.negative_slope)))

    def node_ELU(self, n: G.Node) -> None:
        if n.alpha != 1.0:
            raise self.no(f"ELU with alpha {n.alpha}")
        self.unary("ELU", n)

    def node_Clamp(self, n: G.Node) -> None:
        lo, hi = n.output_min, n.output_max
        name = _FUSABLE.get((lo, hi))
        if name == "NONE":
            return self.identity(n)
        if name is not None:
            self.op(name, [self.tensor_of(n.input_id)], [self.tensor_of(n.output_id)])
            return
        if self.value(n.output_id).datatype != G.FP32:
            src, dst = self.value(n.input_id), self.value(n.output_id)
            if src.datatype == dst.datatype and _same_quant(src.quant, dst.quant) and \
                    self.keeps_every_code(lo, hi, n.output_id):
                return self.identity(n)  # a copy: the clamp changes no code
            raise self.no(f"clamp [{lo}, {hi}] on a non-fp32 value")
        self.pending_clamp = (self.tensor_of(n.input_id), self.tensor_of(n.output_id), lo, hi)

    def node_Copy(self, n: G.Node) -> None:
        self.identity(n)

    def identity(self, n: G.Node) -> None:
        """out = in: the same tensor when the output is internal, else a RESHAPE that keeps any leading dim.
        XNNPACK in LiteRT refuses a RESHAPE to ``[-1]``, so a one-dim copy is the identity TRANSPOSE, which
        follows the input's run-time size as well (a 1-element graph output copied from an input, in swin_t)."""
        src, dst = self.value(n.input_id), self.value(n.output_id)
        if dst.external_id is None and n.output_id not in self.tid and (n.output_min, n.output_max) == (
                -math.inf, math.inf) and src.datatype == dst.datatype and _same_quant(src.quant, dst.quant):
            self.alias[n.output_id] = self.alias.get(n.input_id, n.input_id)
            return
        if len(dst.dims) == 1 and len(src.dims) == 1:
            self.simple(n, "TRANSPOSE", [self.i32([0])])
            return
        self.simple(n, "RESHAPE", [self.i32([-1] + list(dst.dims[1:]) if len(dst.dims) > 1 else list(dst.dims))])

    def node_StaticTranspose(self, n: G.Node) -> None:
        perm = list(n.perm)
        if sorted(perm) != list(range(len(perm))):
            raise self.no(f"perm {perm} is not a permutation")
        self.simple(n, "TRANSPOSE", [self.i32(perm)])

    def node_StaticReshape(self, n: G.Node) -> None:
        shape = [-1 if d == 0 else d for d in n.new_shape]
        if shape.count(-1) > 1:
            raise self.no("more than one inferred dim")
        self.simple(n, "RESHAPE", [self.i32(shape)])

    def node_StaticSlice(self, n: G.Node) -> None:
        piece = self.split_piece(n)
        if piece is not None:
            self.split(n, *piece)
            return
        sizes = [s if s else -1 for s in n.sizes]  # 0: to the end (of the run-time size)
        self.simple(n, "SLICE", [self.i32(list(n.offsets)), self.i32(sizes)])

    def split_piece(self, n: G.Node) -> tuple | None:
        """(dim, pieces, which) when the slice is one of 2-4 equal pieces along one dim and runs to the end of
        every other (a merged graph's ``x[..., 0]`` of rotary embeddings): XNNPACK takes SPLIT, while its SLICE
        needs every size fixed, which a dim that changes at run time does not allow. None otherwise."""
        dims = self.value(n.input_id).dims
        cut = [a for a, (o, s) in enumerate(zip(n.offsets, n.sizes)) if o or s]
        if len(cut) != 1 or any(n.sizes[a] for a in range(len(dims)) if a != cut[0]):
            return None
        d = cut[0]
        size, offset = n.sizes[d], n.offsets[d]
        if not size or dims[d] % size or offset % size or not 2 <= dims[d] // size <= 4:
            return None
        return d, dims[d] // size, offset // size

    def split(self, n: G.Node, d: int, pieces: int, which: int) -> None:
        out = self.output(n.output_id, self.residual(n))
        outs = [out if k == which else self.temp_like(n.output_id) for k in range(pieces)]
        self.op("SPLIT", [self.i32([d]), self.tensor_of(n.input_id)], outs, "SplitOptions", numSplits=pieces)

    def node_StaticConstantPad(self, n: G.Node) -> None:
        pads = [[a, b] for a, b in zip(n.pre_paddings, n.post_paddings)]
        v = self.value(n.output_id)
        zero = n.padding_value == 0.0 and v.datatype == G.FP32
        if v.quant is not None and v.quant.kind == G.PER_TENSOR:
            from pterun.delegates.xnnpack import quant as Q
            q = int(Q.quantize(np.array([n.padding_value], F32), v.quant.scale, v.quant.zero_point,
                               G.STORAGE_DTYPES[v.datatype])[0])
            zero = q == v.quant.zero_point
        if not zero:
            raise self.no(f"constant pad with value {n.padding_value}")
        self.simple(n, "PAD", [self.i32(pads)])

    def simple(self, n: G.Node, name: str, extra: list) -> None:
        self.op(name, [self.tensor_of(n.input_id)] + extra, [self.output(n.output_id, self.residual(n))])

    def concat(self, n: G.Node, k: int) -> None:
        ids = [n.input1_id, n.input2_id, n.input3_id, n.input4_id, n.input5_id][:k]
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        self.op("CONCATENATION", [self.tensor_of(i) for i in ids], [self.output(n.output_id, residual)],
                "ConcatenationOptions", axis=n.axis, fusedActivationFunction=act)

    def node_Concatenate2(self, n: G.Node) -> None:
        self.concat(n, 2)

    def node_Concatenate3(self, n: G.Node) -> None:
        self.concat(n, 3)

    def node_Concatenate4(self, n: G.Node) -> None:
        self.concat(n, 4)

    def node_Concatenate5(self, n: G.Node) -> None:
        self.concat(n, 5)

    def node_StaticResizeBilinear2D(self, n: G.Node) -> None:
        align = bool(n.flags & G.FLAG_ALIGN_CORNERS)
        legacy = bool(n.flags & G.FLAG_TENSORFLOW_LEGACY)
        self.op("RESIZE_BILINEAR", [self.tensor_of(n.input_id), self.i32([n.new_height, n.new_width])],
                [self.output(n.output_id, self.residual(n))], "ResizeBilinearOptions", alignCorners=align,
                halfPixelCenters=not (align or legacy))

    def node_BatchMatrixMultiply(self, n: G.Node) -> None:
        self.op("BATCH_MATMUL", [self.tensor_of(n.input1_id), self.tensor_of(n.input2_id)],
                [self.output(n.output_id, self.residual(n))], "BatchMatMulOptions",
                adjY=bool(n.flags & G.FLAG_TRANSPOSE_WEIGHTS))


def _same_quant(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (a.kind == b.kind == G.PER_TENSOR and float(a.scale) == float(b.scale)
            and a.zero_point == b.zero_point)


def _same_pads(h: int, w: int, kernel, stride) -> tuple[int, int, int, int]:
    """TensorFlow SAME padding (top, right, bottom, left) of a window over an h x w input."""
    (kh, kw), (sh, sw) = kernel, stride
    th = max((-(-h // sh) - 1) * sh + kh - h, 0)
    tw = max((-(-w // sw) - 1) * sw + kw - w, 0)
    return th // 2, tw - tw // 2, th - th // 2, tw // 2
