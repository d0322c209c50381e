"""Portable operators held as themselves in merged XNNPACK graphs (``kernel`` nodes): each lowering against the
portable kernel on both engines, the arguments that keep an operator outside, outputs a kernel node does not
produce, and whole programs that become one LiteRT invocation per call."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures_util import FIXTURES, load_calls
from kernel_nodes import F32, B, Const, Given, Out, needs_litert, rng
from kernel_nodes import absorbed as _absorbed
from kernel_nodes import call_args as _call_args
from kernel_nodes import graph_of as _graph_of
from kernel_nodes import program as _program
from kernel_nodes import rand as _x
from kernel_nodes import run_graph as _run
from merge_util import merge_over
from xnn_payloads import out_tensor

from pterun import Runtime
from pterun.delegates import KernelArg
from pterun.delegates.xnnpack import XnnpackBackend
from pterun.delegates.xnnpack.kernel_ops import BITWISE, KERNEL_OPS, supports
from pterun.delegates.xnnpack.merge import CannotMerge
from pterun.format.schema import DELEGATE_CALL, DOUBLE, TENSOR
from pterun.interp.merge import Absorbed, kernel_op
from pterun.kernels import KERNELS

_M = _x(2, 4, 8)
_MASK = rng.random((2, 4, 8)) < 0.5
I64 = np.int64
_I = rng.integers(-20, 20, (4, 6))
#: operator -> its arguments (every lowering of litert_engine.lower, at least once)
CASES = [
    ("aten::add.out", [_M, _x(1, 4, 1), 1, Out((2, 4, 8))]),
    ("aten::sub.out", [_M, _x(8), 1, Out((2, 4, 8))]),
    ("aten::mul.out", [_M, _x(2, 1, 8), Out((2, 4, 8))]),
    ("aten::div.out", [_M, _x(2, 4, 8) + 3, Out((2, 4, 8))]),
    ("aten::add.Scalar_out", [_M, 0.25, 1, Out((2, 4, 8))]),
    ("aten::sub.Scalar_out", [_M, 3, 1, Out((2, 4, 8))]),
    ("aten::mul.Scalar_out", [_M, 0.5946035575013605, Out((2, 4, 8))]),
    ("aten::div.Scalar_out", [_M, 7.0, Out((2, 4, 8))]),
    ("aten::eq.Scalar_out", [np.where(_MASK, -np.inf, _M).astype(F32), -np.inf, Out((2, 4, 8), B)]),
    ("aten::ne.Scalar_out", [np.where(_MASK, 0, _M).astype(F32), 0, Out((2, 4, 8), B)]),
    ("aten::lt.Scalar_out", [_M, 0.1, Out((2, 4, 8), B)]),
    ("aten::le.Scalar_out", [np.round(_M), 0.0, Out((2, 4, 8), B)]),
    ("aten::gt.Scalar_out", [_M, -0.1, Out((2, 4, 8), B)]),
    ("aten::ge.Scalar_out", [np.round(_M), 1.0, Out((2, 4, 8), B)]),
    ("aten::logical_not.out", [_MASK, Out((2, 4, 8), B)]),
    ("aten::any.out", [_MASK & (rng.random((2, 4, 8)) < 0.1), -1, True, Out((2, 4, 1), B)]),
    ("aten::any.dims_out", [_MASK & (rng.random((2, 4, 8)) < 0.1), (0, 2), False, Out((4,), B)]),
    ("aten::where.self_out", [_MASK[:, :, :1], np.zeros((2, 4, 8), F32), _M, Out((2, 4, 8))]),
    ("aten::full_like.out", [_M, 0, None, Out((2, 4, 8))]),
    ("aten::full_like.out", [_MASK, True, None, Out((2, 4, 8), B)]),
    ("aten::expand_copy.out", [_M, (2, 4, 8), False, Out((2, 4, 8))]),
    ("aten::expand_copy.out", [_x(4, 1), (3, 4, 5), False, Out((3, 4, 5))]),
    ("aten::unsqueeze_copy.out", [_M, 1, Out((2, 1, 4, 8))]),
    ("aten::select_copy.int_out", [_M, 1, -1, Out((2, 8))]),
    ("aten::permute_copy.out", [_M, (2, 0, 1), Out((8, 2, 4))]),
    ("aten::_softmax.out", [_M * 4, -1, False, Out((2, 4, 8))]),
    ("aten::native_layer_norm.out", [_M * 3 + 1, (8,), _x(8), _x(8), 1e-5, Out((2, 4, 8)), Out((2, 4, 1)),
                                     Out((2, 4, 1))]),
    ("aten::native_layer_norm.out", [_M, (4, 8), None, None, 1e-5, Out((2, 4, 8)), Out((2, 1, 1)),
                                     Out((2, 1, 1))]),
    ("aten::exp.out", [_M, Out((2, 4, 8))]),
    ("aten::tanh.out", [_M, Out((2, 4, 8))]),
    ("aten::sigmoid.out", [_M, Out((2, 4, 8))]),
    ("aten::neg.out", [_M, Out((2, 4, 8))]),
    ("aten::sqrt.out", [np.abs(_M), Out((2, 4, 8))]),
    ("aten::rsqrt.out", [np.abs(_M) + 0.1, Out((2, 4, 8))]),
    ("aten::abs.out", [_M, Out((2, 4, 8))]),
    ("aten::relu.out", [_M, Out((2, 4, 8))]),
    ("aten::hardtanh.out", [_M * 4, 0.0, 6.0, Out((2, 4, 8))]),
    ("aten::hardtanh.out", [_M, -0.5, 0.75, Out((2, 4, 8))]),
    ("aten::gelu.out", [_M, "none", Out((2, 4, 8))]),
    ("aten::gelu.out", [_M, "tanh", Out((2, 4, 8))]),
    ("aten::convolution.out", [_x(2, 3, 9, 9), Const(_x(4, 3, 3, 3)), Const(_x(4)), (2, 2), (1, 1), (1, 1), False,
                               (0, 0), 1, Out((2, 4, 5, 5))]),
    ("aten::convolution.out", [_x(1, 4, 8, 8), Const(_x(8, 1, 3, 3)), None, (1,), (2,), (2,), False, (0,), 4,
                               Out((1, 8, 8, 8))]),
    ("aten::convolution.out", [_x(2, 16, 20), Const(_x(8, 16, 3)), Const(_x(8)), (2,), (1,), (1,), False, (0,), 1,
                               Out((2, 8, 10))]),
    ("aten::convolution.out", [_x(1, 4, 12), Const(_x(4, 1, 3)), None, (1,), (2,), (2,), False, (0,), 4,
                               Out((1, 4, 12))]),
    ("dim_order_ops::_clone_dim_order.out", [_M, False, None, Out((2, 4, 8))]),
    ("aten::alias_copy.out", [_M, Out((2, 4, 8))]),
    ("aten::detach_copy.out", [_M, Out((2, 4, 8))]),
    ("aten::_native_batch_norm_legit_no_training.out", [_x(2, 4, 3, 3), Const(_x(4)), Const(_x(4)), Const(_x(4)),
                                                        Const(np.abs(_x(4)) + 0.5), 0.1, 1e-5, Out((2, 4, 3, 3)),
                                                        Out((0,)), Out((0,))]),
    ("aten::max_pool2d_with_indices.out", [_x(1, 3, 8, 8), (3, 3), (2, 2), (1, 1), (1, 1), False, Out((1, 3, 4, 4)),
                                           Out((1, 3, 4, 4), np.int64)]),
    ("aten::avg_pool2d.out", [_x(1, 3, 8, 8), (2, 2), (2, 2), (0, 0), False, True, None, Out((1, 3, 4, 4))]),
    ("aten::addmm.out", [_x(5), _x(3, 16), Const(_x(16, 5)), 1, 1, Out((3, 5))]),
    ("aten::addmm.out", [_x(1, 5), _x(3, 16), _x(16, 5), 1, 1, Out((3, 5))]),
    ("aten::mm.out", [_x(3, 16), _x(16, 5), Out((3, 5))]),
    ("aten::bmm.out", [_x(2, 3, 16), _x(2, 16, 5), Out((2, 3, 5))]),
    # int64 index arithmetic (a T5 encoder's relative-position buckets): exact on LiteRT's builtin kernels
    ("aten::add.out", [_I, _I[:1] * 3, 1, Out((4, 6), I64)]),
    ("aten::sub.out", [_I, _I.T[:1].T, 1, Out((4, 6), I64)]),
    ("aten::add.Scalar_out", [_I, 7, 1, Out((4, 6), I64)]),
    ("aten::sub.Scalar_out", [_I, -3, 1, Out((4, 6), I64)]),
    ("aten::minimum.out", [_I, np.full((1, 6), 9, I64), Out((4, 6), I64)]),
    ("aten::maximum.out", [_I, np.full((4, 1), -5, I64), Out((4, 6), I64)]),
    ("aten::where.self_out", [_I > 0, _I, _I * 2, Out((4, 6), I64)]),
    ("aten::full_like.out", [_I, 15, None, Out((4, 6), I64)]),
    # float32 -> int64 truncates toward zero, as the portable kernel's cast (-2.7 -> -2)
    ("dim_order_ops::_to_dim_order_copy.out", [_x(4, 6) * 20, False, None, Out((4, 6), I64)]),
    ("aten::embedding.out", [Const(_x(32, 4)), rng.integers(0, 32, (6, 6)), -1, False, False, Out((6, 6, 4))]),
    # the caller's ids: the merged call checks them before it runs (.checked)
    ("aten::embedding.out", [Const(_x(32, 4)), Given(rng.integers(0, 32, (6,))), -1, False, False, Out((6, 4))]),
]


def test_every_operator_held_as_a_kernel_has_a_lowering_and_a_case():
    from pterun.delegates.xnnpack.litert_engine.lower import EMIT

    assert set(EMIT) == KERNEL_OPS
    assert {n for n, _ in CASES} == KERNEL_OPS
    forms = XnnpackBackend.absorbed_forms.items()
    assert {n for n, form in forms if "kernel" in (form if isinstance(form, tuple) else (form,))} == KERNEL_OPS


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
@pytest.mark.parametrize("name, args", CASES, ids=[f"{n.split('::')[1]}-{k}" for k, (n, _) in enumerate(CASES)])
def test_a_kernel_node_gives_the_portable_kernels_numbers(name, args, engine):
    op, values = _absorbed(name, args)
    assert op is not None and XnnpackBackend().absorbs(op)
    graph, slots = _graph_of(op, values)
    assert [n.name for n in graph.nodes] == ["Kernel"]
    plan, got = _run(graph, slots, values, engine)
    assert plan.engine == engine
    want = KERNELS[name].fn(*_call_args(args))
    out_dtype = np.dtype(args[[k for k, a in enumerate(args) if isinstance(a, Out)][0]].dtype)
    want = np.asarray(want[0] if isinstance(want, tuple) else want).astype(out_dtype)  # as the out tensor holds it
    assert got.dtype == out_dtype
    if engine == "numpy" or name in BITWISE:  # what kernel_ops claims bit for bit, checked here
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("name, args, why", [
    ("aten::add.out", [_M, _M, 2, Out((2, 4, 8))], "alpha 2"),
    ("aten::_softmax.out", [_M, 1, False, Out((2, 4, 8))], "softmax other than float32 over the last dim"),
    ("aten::eq.Scalar_out", [_M, 0.0, Out((2, 4, 8))], "a comparison of float32 into float32"),
    ("aten::logical_not.out", [_M, Out((2, 4, 8))], "tensors other than bool"),
    ("aten::add.out", [_I, _M[0, :, :6], 1, Out((4, 6))], "tensors other than float32"),
    ("aten::add.Scalar_out", [_I, 0.5, 1, Out((4, 6))], "tensors other than float32"),
    ("aten::add.Scalar_out", [_I, True, 1, Out((4, 6), I64)], "an int64 tensor with the scalar True"),
    ("aten::minimum.out", [_M, _M, Out((2, 4, 8))], "tensors other than int64"),
    ("aten::select_copy.int_out", [_I, 0, 1, Out((6,), I64)], "a copy of int64 values"),
    ("dim_order_ops::_to_dim_order_copy.out", [_M, False, None, Out((2, 4, 8))],
     "a copy other than float32 to int64 in the same dim order"),
    ("aten::embedding.out", [Const(_x(70000, 4)), rng.integers(0, 32, (6,)), -1, False, False, Out((6, 4))],
     "an embedding other than int64 indices into a constant float32 table of at most 1048576 bytes"),
])
def test_arguments_without_a_lowering_keep_the_operator_outside(name, args, why):
    op, _ = _absorbed(name, args)
    assert op is not None
    assert supports(name, op.attrs["args"]) == why
    assert not XnnpackBackend().absorbs(op)


def test_operators_whose_arguments_change_at_run_time_or_lack_a_fixed_dtype_are_not_held():
    values, tags, slots = _program([_M, 0.5, Out((2, 4, 8))])
    assert kernel_op(KERNELS["aten::mul.Scalar_out"], tuple(slots), values, tags, {1}) is None  # a volatile scalar
    values, tags, slots = _program([_M.astype(np.float64), 0.5, Out((2, 4, 8), np.float64)])
    assert kernel_op(KERNELS["aten::mul.Scalar_out"], tuple(slots), values, tags, set()) is None
    values, tags, slots = _program([_M, 0.5, Out((2, 4, 8))])
    values[2] = out_tensor((2, 4, 8), F32, capacity=(4, 4, 8))  # a dynamic out
    assert kernel_op(KERNELS["aten::mul.Scalar_out"], tuple(slots), values, tags, set()) is None
    op = kernel_op(KERNELS["aten::mul.Scalar_out"], tuple(slots[:2]) + (slots[2],) * 2,
                   *_program([_M, 0.5, Out((2, 4, 8))])[:2], set())  # the return slot is the out
    assert op is not None and op.attrs["args"][2] == KernelArg(True, 0, (2, 4, 8), np.dtype(F32))


def _layer_norm_then(reader_reads_mean: bool):
    """A layer norm (slots 0-10) and a mul.Scalar reading its output or its mean (slots 11-13)."""
    args = [_M, (8,), None, None, 1e-5, Out((2, 4, 8)), Out((2, 4, 1)), Out((2, 4, 1))]
    values, tags, slots = _program(args)
    ln = kernel_op(KERNELS["aten::native_layer_norm.out"], tuple(slots), values, tags, set())
    src = slots[6] if reader_reads_mean else slots[5]
    values += [0.5, out_tensor((2, 4, 1) if reader_reads_mean else (2, 4, 8), F32)]
    tags += [DOUBLE, TENSOR]
    mul = kernel_op(KERNELS["aten::mul.Scalar_out"], (src, len(values) - 2, len(values) - 1), values, tags, set())
    return ln, mul, values, slots


def test_a_kernel_nodes_other_outputs_are_never_read_from_the_merged_graph():
    ln, mul, values, slots = _layer_norm_then(reader_reads_mean=False)
    graph, args = merge_over([ln, mul], {}, lambda s: s == len(values) - 1, values)
    assert [n.op for n in graph.nodes] == ["aten::native_layer_norm.out", "aten::mul.Scalar_out"]
    assert args == (slots[0], len(values) - 1)
    ln, mul, values, slots = _layer_norm_then(reader_reads_mean=True)
    with pytest.raises(CannotMerge, match="which the merged graph does not produce"):
        merge_over([ln, mul], {}, lambda s: True, values)
    ln, _, values, slots = _layer_norm_then(reader_reads_mean=False)
    with pytest.raises(CannotMerge, match=f"slot {slots[6]} is read outside the run"):
        merge_over([ln], {}, lambda s: s in (slots[5], slots[6]), values)


@needs_litert
@pytest.mark.parametrize("threads", [1, 2])
def test_the_transformer_fixture_runs_as_one_litert_invocation_per_call(threads):
    # 7 delegates with layer norms, the safe softmax's mask ops, selects and scalings between and after them
    method = Runtime(num_threads=threads).load_program(FIXTURES / "xnn_transformer.pte").load_method("forward")
    runner = method._runner
    (run,) = [m.run for m in runner.merged.values()]
    assert (run.start, run.stop) == (0, len(runner.plan.chains[0]))
    assert sum(1 for p in run.parts if getattr(p, "op", None) == "kernel") == 17
    # the mask's full_like reads only a static shape: folded at load, before the merge, and not in the graph
    assert [e.name for e in method.folded] == ["aten::full_like.out"]
    for call in load_calls("xnn_transformer"):
        (got,) = method.execute(call["inputs"])
        want = call["outputs"][0]
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    off = Runtime(merge_delegates=False).load_program(FIXTURES / "xnn_transformer.pte").load_method("forward")
    assert not off._runner.merged


def test_bytes_a_dropped_output_held_earlier_can_be_written_and_read_again():
    # the memory plan reuses a layer norm's rstd bytes for a later value (Whisper's encoder): reading that value
    # reads what the later part wrote, not the statistic the graph never produced
    from pterun.interp.tensor import Tensor

    ln, mul, values, slots = _layer_norm_then(reader_reads_mean=False)
    later = len(values) - 1  # mul's out, over the bytes the rstd had
    values[slots[7]] = Tensor(np.dtype(F32), (2, 4, 1), (0, 1, 2), values[later].storage[:32])
    values.append(out_tensor((2, 4, 8), F32))
    mul2 = Absorbed("kernel", (later,), (len(values) - 1,), mul.attrs)  # the same scaling, once more
    graph, args = merge_over([ln, mul, mul2], {}, lambda s: s == len(values) - 1, values)
    assert [n.name for n in graph.nodes] == ["Kernel"] * 3 and args == (slots[0], len(values) - 1)
    with pytest.raises(CannotMerge, match=f"slot {slots[7]} reads what a kernel wrote"):
        merge_over([ln, Absorbed("kernel", (slots[7],), (len(values) - 1,), mul.attrs)], {}, lambda s: True,
                   values)


@needs_litert
def test_runs_begin_at_the_operators_right_before_their_first_call():
    method = Runtime().load_program(FIXTURES / "multimodal" / "whisper.pte").load_method("text_decoder")
    runs = [m.run for m in method._runner.merged.values()]
    leading = [r for r in runs if isinstance(r.parts[0], Absorbed)]
    assert leading and all(r.parts[0].op == "kernel" for r in leading)
    chain = method._runner.plan.chains[0]
    assert all(chain[r.start].kind != DELEGATE_CALL for r in leading)


@needs_litert
def test_a_run_declined_with_its_kernels_is_merged_again_without_them(monkeypatch):
    import pterun.delegates.xnnpack as X

    def decline(graph, exact):
        if any(n.name == "Kernel" for n in graph.nodes):
            raise CannotMerge("declined")
    monkeypatch.setattr(X, "_check_rounding", decline)
    method = Runtime().load_program(FIXTURES / "xnn_transformer.pte").load_method("forward")
    (run,) = [m.run for m in method._runner.merged.values()]  # delegates 1 and 2 through a squeeze, as before
    assert (run.start, run.stop) == (2, 5) and [getattr(p, "op", "call") for p in run.parts] == \
        ["call", "squeeze", "call"]
    for call in load_calls("xnn_transformer"):
        (got,) = method.execute(call["inputs"])
        np.testing.assert_allclose(got, call["outputs"][0], rtol=1e-5, atol=1e-5)


@needs_litert
def test_rank_0_inputs_and_outputs_follow_every_call():
    # LiteRT hands a rank-0 tensor out as a NumPy scalar (a copy): the plan must read it again on every call
    op, values = _absorbed("aten::mul.Scalar_out", [np.array(1.5, F32), 3.0, Out(())])
    graph, slots = _graph_of(op, values)
    plan, got = _run(graph, slots, values, "litert")
    out = out_tensor((), F32)
    for x in (1.5, -2.0, 4.25):
        values[slots[0]].array[...] = x
        plan.execute([values[slots[0]], out])
        assert float(out.array) == x * 3.0
    op, values = _absorbed("aten::select_copy.int_out", [np.zeros(4, F32), 0, 2, Out(())])  # [4] -> a scalar
    graph, slots = _graph_of(op, values)
    plan, _ = _run(graph, slots, values, "litert")
    for x in (1.5, -2.0, 4.25):
        values[slots[0]].array[2] = x
        plan.execute([values[slots[0]], out])
        assert float(out.array) == x


def _conv_then_batch_norm(extra_reader: bool):
    """A convolution and a batch norm of its output (and, with ``extra_reader``, a relu of the convolution's output
    too), as one merged graph; its outputs' slots and the NumPy kernels' results."""
    x, w, b = _x(1, 3, 8, 8), _x(6, 3, 3, 3), _x(6)
    stats = [_x(6), _x(6), _x(6), np.abs(_x(6)) + 0.5]
    values, tags, slots = _program([x, Const(w), Const(b), (1, 1), (1, 1), (1, 1), False, (0, 0), 1,
                                    Out((1, 6, 8, 8))])
    conv = kernel_op(KERNELS["aten::convolution.out"], tuple(slots), values, tags, set())
    y = slots[-1]
    more, more_tags, more_slots = _program([None] + [Const(a) for a in stats] + [0.1, 1e-5, Out((1, 6, 8, 8)),
                                                                                  Out((0,)), Out((0,))])
    base = len(values)
    values += more
    tags += more_tags
    bn_slots = (y,) + tuple(base + s for s in more_slots[1:])
    bn = kernel_op(KERNELS["aten::_native_batch_norm_legit_no_training.out"], bn_slots, values, tags, set())
    parts, reads = [conv, bn], [bn_slots[7]]
    y_conv = KERNELS["aten::convolution.out"].fn(x, w, b, (1, 1), (1, 1), (1, 1), False, (0, 0), 1, None)
    want = [KERNELS["aten::_native_batch_norm_legit_no_training.out"].fn(y_conv, *stats, 0.1, 1e-5, None, None,
                                                                         None)[0]]
    if extra_reader:
        values.append(out_tensor((1, 6, 8, 8), F32))
        tags.append(TENSOR)
        parts.append(kernel_op(KERNELS["aten::relu.out"], (y, len(values) - 1), values, tags, set()))
        reads.append(len(values) - 1)
        want.append(np.maximum(y_conv, 0))
    return parts, values, reads, want


@needs_litert
@pytest.mark.parametrize("extra_reader", [False, True])
def test_a_batch_norm_folds_into_the_convolution_before_it_where_nothing_else_reads_it(extra_reader):
    from pterun.delegates.xnnpack import litert_engine as L
    from pterun.delegates.xnnpack.litert_engine.translate import translate_part

    parts, values, reads, want = _conv_then_batch_norm(extra_reader)
    graph, args = merge_over(parts, {}, lambda s: s in reads, values)
    ops = translate_part(graph).writer.op_names
    assert ops.count("CONV_2D") == 1 and ("MUL" in ops) == extra_reader and ops.count("TRANSPOSE") == 1 + len(reads)
    plan = L.build(graph)
    outs = [out_tensor(values[s].shape, F32) for s in args[1:]]
    plan.execute([values[args[0]]] + outs)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got.array, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


@needs_litert
def test_portable_runs_with_more_weights_than_the_bound_stay_on_the_numpy_kernels(monkeypatch):
    import pterun.delegates.xnnpack as X

    assert X.PORTABLE_COMPILE_BYTES == 256 << 20
    method = Runtime().load_program(FIXTURES / "mlp.pte").load_method("forward")
    assert len(method._runner.merged) == 1  # the MLP's weights (tens of KB) compile
    monkeypatch.setattr(X, "PORTABLE_COMPILE_BYTES", 1000)
    method = Runtime().load_program(FIXTURES / "mlp.pte").load_method("forward")
    assert not method._runner.merged and all(ev.kind == "KernelCall" for ev in method.steps)
    for call in load_calls("mlp"):
        np.testing.assert_allclose(method.execute(call["inputs"])[0], call["outputs"][0], rtol=1e-5, atol=1e-6)


def _const_kernel(ins, outs, consts):
    args = tuple(KernelArg(False, k, (2, 2), np.dtype(F32), c) for k, c in enumerate(consts)) + \
        (KernelArg(True, 0, (2, 2), np.dtype(F32), False),)
    return Absorbed("kernel", tuple(ins), tuple(outs), {"name": "aten::mul.out", "args": args, "call": None})


def test_operators_on_constants_read_outside_are_replayed_with_what_they_read_in_the_run():
    from pterun.interp.merge import _replay_constants

    items = [(10, _const_kernel([1], [2], [True])),  # on a program constant
             (11, _const_kernel([2], [3], [False])),  # on what pc 10 computed: a constant too
             (12, _const_kernel([3, 7], [4], [False, False])),  # reads an input: not a constant
             (13, _const_kernel([1], [5], [True]))]  # a constant nothing outside reads
    deferred = set()
    out = _replay_constants(items, deferred, lambda slot: slot == 3)
    assert deferred == {10, 11}  # 11 is read outside, and replaying it needs 10
    assert [p.attrs.get("replayed", False) for _, p in out] == [True, True, False, False]
    assert [pc for pc, _ in out] == [10, 11, 12, 13] and items[0][1].attrs.get("replayed") is None  # a new list
    assert _replay_constants(items, set(), lambda slot: slot == 4) is items  # a non-constant read outside


@needs_litert
def test_a_weights_transpose_read_after_a_compiled_run_no_longer_keeps_the_run_apart():
    """const_reuse (tools/export_fold_fixture.py): permute_copy of a weight, mm, softmax, cumsum, mm with the same
    transpose. The compiled run used to be refused (its transpose, computed in the graph, is read after it)."""
    from fixtures_util import load_calls_from

    m = Runtime(engine="auto").load_program(FIXTURES / "const_reuse.pte").load_method("forward")
    steps = [info[0] for info in m._runner.chains[0].info]
    assert steps == ["delegate XnnpackBackend", "aten::cumsum.out", "delegate XnnpackBackend"]
    for call in load_calls_from(FIXTURES / "const_reuse.npz"):
        np.testing.assert_allclose(m.execute(call["inputs"])[0], call["outputs"][0], rtol=1e-5, atol=1e-6)


@needs_litert
def test_int64_index_arithmetic_and_a_small_embedding_join_the_merged_call():
    """xnn_int64_buckets (tools/export_fold_fixture.py): between two delegate calls, a mean, int64 bucket arithmetic
    on what the first computed from ``arange`` (a cast, add, full_like, minimum, where) and an embedding of a 16x8
    table. On LiteRT they are one merged call with the delegates (only the embedding's ``sum``, which merged graphs
    do not hold, stays a step); the ``arange`` is folded at load, not computed in the call. The numbers are
    ExecuTorch's, and the int64 values exactly the NumPy engine's (the same buckets pick the same rows)."""
    m = Runtime(engine="auto").load_program(FIXTURES / "xnn_int64_buckets.pte").load_method("forward")
    assert [e.name for e in m.steps] == ["delegate XnnpackBackend", "aten::sum.IntList_out",
                                         "delegate XnnpackBackend"]
    # arange, and the full_like inside the merged call's range, folded before the merge
    assert [e.name for e in m.folded] == ["aten::arange.start_out", "aten::lt.Scalar_out", "aten::full_like.out"]
    plain = Runtime(engine="numpy").load_program(FIXTURES / "xnn_int64_buckets.pte").load_method("forward")
    assert len(plain.steps) == 10
    for call in load_calls("xnn_int64_buckets"):
        got, ref = m.execute(call["inputs"])[0], plain.execute(call["inputs"])[0]
        np.testing.assert_allclose(got, call["outputs"][0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)


@needs_litert
def test_work_folded_at_load_between_two_delegate_calls_does_not_split_their_merged_call():
    """xnn_folded_between (tools/export_fold_fixture.py): a delegate call, then an int64 comparison of ``arange``
    and a ``where`` (a bias from constants alone, which merged graphs do not hold), a layer norm and a second delegate
    call. The bias is folded before the merge, which passes over it: one merged call, ExecuTorch's numbers. Merging
    off, the same folds leave the two delegate calls and the layer norm."""
    m = Runtime(engine="auto").load_program(FIXTURES / "xnn_folded_between.pte").load_method("forward")
    assert [e.name for e in m.steps] == ["delegate XnnpackBackend"]
    assert [e.name for e in m.folded] == ["aten::arange.start_out", "aten::scalar_tensor.out",
                                          "aten::scalar_tensor.out", "aten::ge.Scalar_out", "aten::where.self_out"]
    apart = Runtime(engine="auto", merge_delegates=False).load_program(FIXTURES / "xnn_folded_between.pte") \
        .load_method("forward")
    assert [e.name for e in apart.steps] == ["delegate XnnpackBackend", "aten::native_layer_norm.out",
                                             "delegate XnnpackBackend"]
    assert [e.name for e in apart.folded] == [e.name for e in m.folded]
    for call in load_calls("xnn_folded_between"):
        got = m.execute(call["inputs"])[0]
        np.testing.assert_allclose(got, call["outputs"][0], rtol=0, atol=1e-5)
        np.testing.assert_allclose(got, apart.execute(call["inputs"])[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("n", [5, 40])  # checked as a list, and with two reductions
def test_indices_a_merged_call_gathers_are_checked_as_the_kernel_checks_them(n):
    from pterun.kernels.indexing import check_range

    def check_indices(ids, rows):  # as the merged call's check (pterun.delegates.xnnpack.checked) makes it
        check_range(ids, rows, "embedding")

    ids = np.arange(n, dtype=np.int64) % 7
    check_indices(ids, 7)
    for bad in (7, -1):
        ids[n - 2] = bad
        with pytest.raises(IndexError, match=rf"^embedding index {bad} is out of range for size 7$"):
            check_indices(ids, 7)
        with pytest.raises(IndexError, match=rf"^embedding index {bad} is out of range for size 7$"):
            _call_kernel(ids)


def _call_kernel(ids):
    from pterun.kernels import KERNELS

    return KERNELS["aten::embedding.out"].fn(np.eye(7, dtype=np.float32), ids, -1, False, False, None)
