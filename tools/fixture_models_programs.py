"""Portable fixture models 7-13, program features: dynamic shapes, mutable buffers, control flow,
several methods, many ops, unplanned I/O and channels-last dim order.

Importing this module registers their builders in fixture_models_base.FIXTURES (in this order).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from fixture_models_base import Fixture, MethodSpec, fixture, seeded


# --------------------------------------------------------------------------------------
# 7. dynamic
# --------------------------------------------------------------------------------------


class DynamicModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))
        self.b = nn.Parameter(torch.randn(4))

    def forward(self, x):  # x: [b, 6]
        b = x.shape[0]
        h = torch.softmax(x @ self.w + self.b, dim=-1)  # [b, 4]
        col_sum = h.sum(0)  # [4], reduces over the dynamic dim
        flat = h.reshape(b * 2, 2)  # view with the batch dim
        both = torch.cat([h, x[:, :2]], dim=1)  # [b, 6]
        stacked = torch.cat([x, x * 2], dim=0)  # [2b, 6]
        return h, col_sum, flat, both, stacked.mean(1), b


@fixture("dynamic")
def make_dynamic() -> Fixture:
    seeded(7)
    model = DynamicModel().eval()
    batch = torch.export.Dim("b", min=1, max=8)
    x_example = torch.randn(4, 6)
    x3 = torch.randn(3, 6)
    x7 = torch.randn(7, 6)
    return Fixture(
        description=(
            "Dynamic batch x f32[b,6], b = Dim('b', 1..8): softmax(x@W+b), sum over batch, reshape(b*2,2), "
            "cat along dim 1 and dim 0, mean; last output is x.shape[0] as an Int. Two calls: batch 3 then 7."
        ),
        methods={"forward": MethodSpec(model, (x_example,), dynamic_shapes=({0: batch},))},
        calls=[("forward", [x3]), ("forward", [x7])],
    )


# --------------------------------------------------------------------------------------
# 8. stateful
# --------------------------------------------------------------------------------------


class StatefulModel(nn.Module):
    def __init__(self):
        super().__init__()
        # ``count`` and ``acc`` start at zero and are NOT serialized (the runtime
        # must zero-initialise planned memory); ``scale`` has a non-zero initial
        # value that IS serialized (mutable_data_segments, et_init_buffer).
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("acc", torch.zeros(2, 3))
        self.register_buffer("scale", torch.arange(1.0, 4.0))

    def forward(self, x):
        self.count.add_(1)
        self.acc.add_(x)
        self.scale.mul_(0.5)
        return self.acc * self.scale + self.count, self.count.clone()


@fixture("stateful")
def make_stateful() -> Fixture:
    seeded(8)
    model = StatefulModel().eval()
    xs = [torch.randn(2, 3) for _ in range(3)]
    return Fixture(
        description=(
            "Buffers updated in place each call: count (zeros, +1), acc (zeros, += x), scale (initialised to "
            "[1,2,3] and serialized via InitializedMutableBufferPass, *= 0.5). Returns (acc*scale+count, count). "
            "Three calls in order; count/acc start at zero (NOT serialized: the runtime zero-initialises)."
        ),
        methods={"forward": MethodSpec(model, (torch.zeros(2, 3),))},
        calls=[("forward", [x]) for x in xs],
        init_buffers=["scale"],
    )


# --------------------------------------------------------------------------------------
# 9. cond
# --------------------------------------------------------------------------------------


class CondModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        def true_fn(x):
            return torch.sigmoid(self.lin(x)) * 2.0

        def false_fn(x):
            return torch.tanh(x) - 1.0

        y = torch.cond(x.sum() > 0, true_fn, false_fn, (x,))
        return y + 0.5


@fixture("cond")
def make_cond() -> Fixture:
    seeded(9)
    model = CondModel().eval()
    xp = torch.rand(3, 4) + 0.1  # sum > 0 -> true branch
    xn = -torch.rand(3, 4) - 0.1  # sum < 0 -> false branch
    return Fixture(
        description=(
            "torch.cond(x.sum() > 0, sigmoid(Linear(x))*2, tanh(x)-1) + 0.5 on f32[3,4]; two calls: first takes "
            "the true branch, second the false branch."
        ),
        methods={"forward": MethodSpec(model, (xp,))},
        calls=[("forward", [xp]), ("forward", [xn])],
    )


# --------------------------------------------------------------------------------------
# 10. multi_method
# --------------------------------------------------------------------------------------


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x, y):
        return self.lin(x) * y, (x * y.sum()).amax(dim=1)


@fixture("multi_method")
def make_multi_method() -> Fixture:
    seeded(10)
    head = Head().eval()
    enc = Encoder().eval()
    x = torch.randn(2, 8)
    y = torch.randn(2, 3)
    x2 = torch.randn(5, 8)
    consts = {"get_max_seq_len": 128, "get_scale": 0.5, "use_kv_cache": True}
    return Fixture(
        description=(
            "Program with methods forward(x f32[2,8], y f32[2,3]) -> (Linear(x)*y, amax(x*sum(y),1)), "
            "encode(x f32[5,8]) -> tanh(Linear(x)), and constant methods get_max_seq_len=128 (Int), "
            "get_scale=0.5 (Double), use_kv_cache=True (Bool) called with no inputs."
        ),
        methods={"forward": MethodSpec(head, (x, y)), "encode": MethodSpec(enc, (x2,))},
        constant_methods=consts,
        calls=[("forward", [x, y]), ("encode", [x2])] + [(name, []) for name in consts],
    )


# --------------------------------------------------------------------------------------
# 11. ops_misc
# --------------------------------------------------------------------------------------


class OpsMisc(nn.Module):
    """Many common portable ops on small tensors, several outputs of several dtypes."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5))
        self.bias = nn.Parameter(torch.randn(5))
        self.emb = nn.Embedding(10, 4)
        self.ln = nn.LayerNorm(5)

    def forward(self, x, y, idx):
        # x f32[3,4], y f32[2,3,4], idx i64[3]
        a = torch.addmm(self.bias, x, self.w)  # [3,5]
        b = torch.bmm(y, y.transpose(1, 2))  # [2,3,3]
        c = torch.mm(x, x.t())  # [3,3]
        d = (a - 1.5) * a / (a.abs() + 2.0)  # sub/mul/div with scalars and tensors
        d = d - torch.sigmoid(a) + torch.tanh(a) * F.silu(a) / torch.exp(-a.abs())
        d = torch.clamp(d, -3.0, 3.0)
        ls = F.log_softmax(d, dim=1)
        sm = torch.softmax(c, dim=0)
        red = d.mean(dim=1, keepdim=True) + d.sum(dim=0, keepdim=True) - d.amax(dim=1, keepdim=True)
        am = torch.argmax(d, dim=1)  # i64
        cs = torch.cumsum(x, dim=1)
        # topk on the unclamped values: ExecuTorch breaks ties with std::nth_element, whose order is
        # implementation-defined, so a fixture with ties could not pin indices down
        tv, ti = torch.topk(a, 2, dim=1)  # f32 / i64
        wh = torch.where(d > 0, d, torch.zeros_like(d) - 1.0)
        cmp = (x == x.round()) | (x > 0.5) | (x < -0.5)  # eq/gt/lt with scalars
        cmp2 = torch.logical_not(torch.gt(x, cs))  # tensor-tensor compare
        anyv = torch.any(cmp2, dim=1)  # bool
        full = torch.full((2, 2), 3.5) + torch.full_like(c[:2, :2], 0.25)
        sl = y[:, 1:3, ::2]  # slice with step
        se = y.select(1, 0)  # [2,4]
        p1, p2 = torch.split(y, [1, 3], dim=2)
        sq = p1.squeeze(2).unsqueeze(0)  # [1,2,3]
        pe = y.permute(2, 0, 1)  # [4,2,3]
        ex = x[:, :1].expand(3, 4)
        cat = torch.cat([sl.reshape(2, -1), se, p2.flatten(1)], dim=1)
        ln = self.ln(d)
        em = self.emb(idx)  # [3,4]
        half = (em * 2).to(torch.float16)  # f16 output
        return (
            red,  # f32 [3,5]
            ls,
            sm,
            b,
            am,  # i64
            tv,
            ti,  # i64
            wh,
            cmp,  # bool
            anyv,  # bool
            full,
            sq,
            pe + 1.0,
            ex * ex,
            cat,
            ln,
            em,
            half,  # f16
            cs,
        )


@fixture("ops_misc")
def make_ops_misc() -> Fixture:
    seeded(11)
    model = OpsMisc().eval()
    x = torch.randn(3, 4)
    x[0, 0] = 1.0  # exercise eq(x, round(x))
    y = torch.randn(2, 3, 4)
    idx = torch.tensor([1, 7, 3], dtype=torch.int64)
    return Fixture(
        description=(
            "One model with many common portable ops (addmm, bmm, mm, sub/mul/div tensor+scalar, abs, sigmoid, "
            "tanh, silu, exp, clamp, log_softmax, softmax, mean/sum/amax keepdim, argmax, cumsum, topk, where, "
            "eq/gt/lt, logical_or, logical_not, any, full/full_like/zeros_like, slice with step, select, split, "
            "squeeze/unsqueeze, permute, expand, cat, layer_norm, embedding, to(float16)); inputs x f32[3,4], "
            "y f32[2,3,4], idx i64[3]; 19 outputs including i64, bool and f16 tensors."
        ),
        methods={"forward": MethodSpec(model, (x, y, idx))},
        calls=[("forward", [x, y, idx])],
    )


# --------------------------------------------------------------------------------------
# 12. unplanned_io: inputs and outputs left out of the memory plan
# --------------------------------------------------------------------------------------


class AddMul(nn.Module):
    def forward(self, x, y):
        z = x + y
        return z * y, z.sum()


@fixture("unplanned_io")
def make_unplanned_io() -> Fixture:
    seeded(12)
    model = AddMul().eval()
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    return Fixture(
        description="x + y then (z * y, z.sum()) with MemoryPlanningPass(alloc_graph_input=False, "
        "alloc_graph_output=False): the runtime must provide memory for inputs and outputs itself",
        methods={"forward": MethodSpec(model, (x, y))},
        calls=[("forward", [x, y]), ("forward", [torch.randn(3, 5), torch.randn(3, 5)])],
        plan_inputs=False,
        plan_outputs=False,
    )


# --------------------------------------------------------------------------------------
# 13. channels_last: an input and an output in dim order [0, 2, 3, 1]
# --------------------------------------------------------------------------------------


class ChannelsLastNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        y = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        return self.conv(y)


@fixture("channels_last")
def make_channels_last() -> Fixture:
    seeded(13)
    model = ChannelsLastNet().eval().to(memory_format=torch.channels_last)
    x = torch.randn(1, 2, 3, 4).to(memory_format=torch.channels_last)
    return Fixture(
        description="nearest upsample x2 and a conv on a channels-last input (dim order [0, 2, 3, 1])",
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )
