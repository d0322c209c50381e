"""Merging neighbouring XNNPACK delegate calls into one LiteRT graph (pterun.interp.merge and
pterun.delegates.xnnpack.merge): which runs are found, how graphs join (and when they must not), the mean node on
both engines. On a real exported LLM: test_merge_llm.py."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from merge_util import add_later, find_runs_in, mean_values, merge_over, run_plan, slots
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.merge import CannotMerge
from pterun.delegates.xnnpack.numpy_engine import compile_graph
from pterun.interp.merge import Absorbed, DelegatePart
from pterun.errors import DelegateError
from pterun.interp.tensor import Tensor
from xnn_payloads import Graph, out_tensor, tensor

HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
needs_litert = pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")
RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def default_settings(monkeypatch):
    monkeypatch.delenv("PTERUN_ENGINE", raising=False)
    monkeypatch.delenv("PTERUN_NO_MERGE", raising=False)




# -- graphs: x + y -> mean over the last dim -> * w ------------------------------------------------------------
def _add_graph(dims):
    g = Graph()
    a, b, o = g.input(dims), g.input(dims), g.output(dims)
    g.node("Add", input1_id=a, input2_id=b, output_id=o)
    return G.Graph.read(*g.blob())


def _mul_graph(dims_a, dims_b):
    g = Graph()
    a, b, o = g.input(dims_a), g.input(dims_b), g.output(dims_b)
    g.node("Multiply", input1_id=a, input2_id=b, output_id=o)
    return G.Graph.read(*g.blob())




def _merged(read_outside=(13,), mul_in=(2, 3, 1)):
    graphs = {0: _add_graph([2, 3, 4]), 1: _mul_graph(list(mul_in), [2, 3, 5])}
    parts = (DelegatePart(0, (1, 2, 10)), Absorbed("mean", (10,), (11,), {"axes": (2,), "keepdim": True}),
             DelegatePart(1, (11, 12, 13)))
    tensors = slots({1: (2, 3, 4), 2: (2, 3, 4), 10: (2, 3, 4), 11: (2, 3, 1), 12: (2, 3, 5), 13: (2, 3, 5)})
    return merge_over(parts, graphs, lambda s: s in read_outside, tensors)




def test_merged_graph_joins_values_and_keeps_only_what_outside_reads():
    graph, args = _merged()
    assert args == (1, 2, 12, 13)  # the run's inputs in first-read order, then what outside reads
    assert [n.name for n in graph.nodes] == ["Add", "Mean", "Multiply"]
    assert [v.external_id for v in graph.inputs] == [0, 1, 2] and [v.external_id for v in graph.outputs] == [3]
    add, mean, mul = graph.nodes
    assert mean.input_id == add.output_id and mul.input1_id == mean.output_id  # joined, not copied through memory
    assert graph.values[mean.output_id].external_id is None and graph.values[add.output_id].external_id is None

    graph2, args2 = _merged(read_outside=(10, 13))  # the sum is read later: it stays an output
    assert args2 == (1, 2, 12, 10, 13)
    assert [v.external_id for v in graph2.outputs] == [3, 4]


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
def test_a_small_program_constant_becomes_part_of_the_merged_graph(engine):
    graphs = {0: _add_graph([2, 3, 4]), 1: _mul_graph([2, 3, 1], [2, 3, 5])}
    parts = (DelegatePart(0, (1, 2, 10)), Absorbed("mean", (10,), (11,), {"axes": (2,), "keepdim": True}),
             DelegatePart(1, (11, 12, 13)))
    tensors = slots({1: (2, 3, 4), 2: (2, 3, 4), 10: (2, 3, 4), 11: (2, 3, 1), 13: (2, 3, 5)})
    w = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    tensors[12] = tensor(w)
    tensors[12].freeze(tensors[12].array.copy())  # read-only, as the program's constants are
    graph, args = merge_over(parts, graphs, lambda s: s == 13, tensors)
    assert args == (1, 2, 13)  # w is no input: it is in the graph
    (const,) = [v for v in graph.values.values() if v.data is not None]
    assert np.array_equal(np.frombuffer(const.data, np.float32).reshape(2, 3, 5), w)
    x, y = RNG.standard_normal((2, 3, 4), np.float32), RNG.standard_normal((2, 3, 4), np.float32)
    if engine == "numpy":
        plan = compile_graph(graph)
    else:
        from pterun.delegates.xnnpack import litert_engine as L
        plan = L.build(graph, 1)
    (got,) = run_plan(plan, [(2, 3, 4), (2, 3, 4), (2, 3, 5)], [x, y])
    np.testing.assert_allclose(got, _reference(x, y, w), rtol=1e-6, atol=1e-6)
    tensors[12] = tensor(w)  # writable: it could change between calls, so it stays an input
    assert merge_over(parts, graphs, lambda s: s == 13, tensors)[1] == (1, 2, 12, 13)


def _reference(x, y, w):
    return (x + y).mean(axis=2, keepdims=True) * w


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
def test_merged_graph_with_a_mean_runs_on_both_engines(engine):
    graph, args = _merged()
    x, y, w = RNG.standard_normal((2, 3, 4), np.float32), RNG.standard_normal((2, 3, 4), np.float32), \
        RNG.standard_normal((2, 3, 5), np.float32)
    if engine == "numpy":
        plan = compile_graph(graph)
    else:
        from pterun.delegates.xnnpack import litert_engine as L
        plan = L.build(graph, 1)
    (got,) = run_plan(plan, [(2, 3, 4), (2, 3, 4), (2, 3, 5), (2, 3, 5)], [x, y, w])
    np.testing.assert_allclose(got, _reference(x, y, w), rtol=1e-6, atol=1e-6)


def _mean_graph(dims, axes, keepdim):
    """A merged graph of one mean (the Absorbed form) between an Add and its reader outside."""
    out = tuple(1 if a in axes else d for a, d in enumerate(dims)) if keepdim else \
        tuple(d for a, d in enumerate(dims) if a not in axes)
    parts = (DelegatePart(0, (1, 2, 10)), Absorbed("mean", (10,), (11,), {"axes": axes, "keepdim": keepdim}))
    tensors = slots({1: dims, 2: dims, 10: dims, 11: out})
    graph, _ = merge_over(parts, {0: _add_graph(list(dims))}, lambda s: s == 11, tensors)
    return graph, out


@pytest.mark.parametrize("dims, axes, keepdim", [((4, 576), (1,), True), ((1, 8, 300), (2,), False),
                                                 ((2, 6, 5, 7), (2, 3), True), ((2, 6, 5), (0, 2), False)],
                         ids=["rmsnorm", "300", "pool", "leading"])
def test_the_numpy_engines_mean_node_sums_left_to_right_as_the_portable_kernel(dims, axes, keepdim):
    # its fallback for a merged graph gives the interpreter's own numbers; NumPy's reduce adds pairwise
    from pterun.kernels.reduction import mean_out

    graph, out = _mean_graph(dims, axes, keepdim)
    plan = compile_graph(graph)
    pairwise = 0
    for trial in range(8):
        x = (RNG.standard_normal(dims) * 10.0 ** (trial - 3) + 3).astype(np.float32)
        y = (RNG.standard_normal(dims) * 10.0 ** RNG.uniform(-2, 2, dims)).astype(np.float32)
        (got,) = run_plan(plan, [dims, dims, out], [x, y])
        want = mean_out(x + y, list(axes), keepdim, None, np.empty(out, np.float32))
        assert got.shape == out and np.array_equal(got, want)
        s = np.add.reduce(x + y, axis=axes, dtype=np.float32, keepdims=keepdim)
        pairwise += not np.array_equal(s / np.float32(np.prod([dims[a] for a in axes])), want)
    assert pairwise  # the test tells the orders apart


@needs_litert
@pytest.mark.parametrize("dims", [(4, 576), (1, 8, 300), (2, 3, 768)])
def test_an_rmsnorm_mean_stays_on_xnnpack_and_is_the_portable_kernel_s_bit_for_bit(dims):
    # a running sum on LiteRT's builtin kernels (CUMSUM) split an 8da4w Llama's decode graphs at every RMSNorm
    # (2.9 -> 4.2 ms a step); a matrix product with a row of ones adds left to right on XNNPACK itself
    import pterun.delegates.xnnpack as X
    from pterun.delegates.xnnpack import litert_engine as L
    from pterun.kernels.reduction import mean_out

    last = (len(dims) - 1,)
    graph, out = _mean_graph(dims, last, True)
    X._check_rounding(graph, exact=True)
    assert "bitwise" not in graph.nodes[1].fields
    plan = L.build(graph, 1)
    assert plan.engine == "litert"
    pairwise = 0
    for trial in range(8):
        x = (RNG.standard_normal(dims) * 10.0 ** (trial - 3) + 3).astype(np.float32)
        y = (RNG.standard_normal(dims) * 10.0 ** RNG.uniform(-2, 2, dims)).astype(np.float32)
        (got,) = run_plan(plan, [dims, dims, out], [x, y])
        assert np.array_equal(got, mean_out(x + y, list(last), True, None, np.empty(out, np.float32)))
        s = np.add.reduce(x + y, axis=last, dtype=np.float32, keepdims=True)
        pairwise += not np.array_equal(s / np.float32(dims[-1]), got)
    assert pairwise  # the test tells the orders apart


def test_joins_must_agree_exactly():
    with pytest.raises(CannotMerge, match=r"slot 11: dims \[2, 3, 1\] meet \[3, 1\]"):
        _merged(mul_in=(3, 1))  # the same numbers, another shape: a reshape the merged graph would not have


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
def test_a_one_element_value_joins_a_delegate_that_reads_it_at_another_rank(engine):
    """A rank-0 float written in the run and read by a delegate that declares it [1] (a BERT mask's scalar held
    as a kernel): one element, so the join is a reshape."""
    graphs = {0: _add_graph([]), 1: _mul_graph([1], [1])}
    parts = (DelegatePart(0, (1, 2, 10)), DelegatePart(1, (10, 12, 13)))
    tensors = slots({1: (), 2: (), 10: (), 12: (1,), 13: (1,)})
    graph, args = merge_over(parts, graphs, lambda s: s == 13, tensors)
    assert [n.name for n in graph.nodes] == ["Add", "StaticReshape", "Multiply"]
    x, y, w = (np.array(v, np.float32) for v in (1.5, -0.25, [3.0]))
    if engine == "numpy":
        plan = compile_graph(graph)
    else:
        from pterun.delegates.xnnpack import litert_engine as L
        plan = L.build(graph, 1)
    (got,) = run_plan(plan, [(), (), (1,), (1,)], [x, y, w])
    np.testing.assert_array_equal(got, np.array([3.75], np.float32))
    with pytest.raises(CannotMerge, match=r"slot 10: dims \[\] meet \[2\]"):  # two elements: no join
        merge_over(parts, {0: graphs[0], 1: _mul_graph([2], [2])}, lambda s: s == 13,
                   slots({1: (), 2: (), 10: (), 12: (2,), 13: (2,)}))


# -- finding runs on a synthetic plan ---------------------------------------------------------------------------


def test_runs_hold_delegate_calls_and_absorbable_operators_and_end_on_a_call():
    from pterun.format.schema import DelegateCall, FreeCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), KernelCall(0, (1, 10, 12, 13, 14, 14)), FreeCall(0), DelegateCall(1, (14, 2)),
               KernelCall(0, (2, 10, 12, 13, 3, 3)),  # a trailing mean: not part of the run
               KernelCall(1, (3, 2, 4)),  # not absorbable (the test backend absorbs only what absorbed_op makes)
               DelegateCall(2, (4, 5)), DelegateCall(9, (5, 6)), DelegateCall(3, (5, 7))]]  # 9: no merging backend
    runs, outside = find_runs_in(chains, outputs=(7,))
    assert [(r.start, r.stop, [type(p).__name__ for p in r.parts]) for r in runs] == [
        (0, 4, ["DelegatePart", "Absorbed", "DelegatePart"])]
    (run,) = runs
    assert run.parts[1] == Absorbed("mean", (1,), (14,), {"axes": (2,), "keepdim": True})
    assert [s for s in (0, 1, 2, 14) if outside(run, s)] == [2]  # the trailing mean and the add read 2


def test_a_run_ends_before_the_delegate_that_would_take_it_past_the_backend_s_bytes():
    """A merged call's model holds a copy of its weights until XNNPACK has packed them all: runs are bounded, so
    a model is packed and given back a piece at a time (the first delegate of a run always fits)."""
    from pterun.format.schema import DelegateCall
    chains = [[DelegateCall(i, (i, i + 1)) for i in range(4)]]
    spans = lambda runs: [(r.start, r.stop) for r in runs]  # noqa: E731
    assert spans(find_runs_in(chains, outputs=(4,))[0]) == [(0, 4)]
    sizes = {0: 40, 1: 30, 2: 30, 3: 100}.__getitem__
    assert spans(find_runs_in(chains, outputs=(4,), sizes=sizes, max_bytes=100)[0]) == [(0, 3)]  # 40+30+30
    assert spans(find_runs_in(chains, outputs=(4,), sizes=sizes, max_bytes=99)[0]) == [(0, 2)]  # 2 and 3: 130
    assert spans(find_runs_in(chains, outputs=(4,), sizes={0: 40, 1: 30, 2: 30, 3: 30}.__getitem__,
                              max_bytes=70)[0]) == [(0, 2), (2, 4)]
    # 3 alone is 100 bytes: it would start a run, but nothing joins one over 60 bytes
    assert spans(find_runs_in(chains, outputs=(4,), sizes=sizes, max_bytes=60)[0]) == [(1, 3)]


def test_a_mean_with_a_dim_that_changes_at_run_time_is_not_absorbed():
    from pterun.format.schema import DelegateCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), KernelCall(0, (1, 10, 12, 13, 14, 14)), DelegateCall(1, (14, 2))]]
    assert len(find_runs_in(chains)[0]) == 1 and find_runs_in(chains, volatile=(11,))[0] == []


def test_method_outputs_and_other_chains_count_as_outside():
    from pterun.format.schema import DelegateCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), DelegateCall(1, (1, 2)), DelegateCall(2, (2, 5))], [KernelCall(1, (2, 3, 4))]]
    (run,), outside = find_runs_in(chains, outputs=(1,))
    assert [s for s in (0, 1, 2, 5) if outside(run, s)] == [1, 2]  # a method output; read by chain 1


def test_an_instruction_the_backend_cannot_hold_is_deferred_when_nothing_later_in_the_run_needs_it():
    from pterun.format.schema import DelegateCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), KernelCall(1, (1, 2, 3)), DelegateCall(1, (4, 5))]]
    (run,), outside = find_runs_in(chains, outputs=(5,), later=add_later)
    assert (run.start, run.stop, run.deferred) == (0, 3, (1,))
    assert [type(p).__name__ for p in run.parts] == ["DelegatePart", "DelegatePart"]
    assert outside(run, 1) and not outside(run, 4)  # the deferred add reads what the first call wrote
    assert find_runs_in(chains, outputs=(5,))[0] == []  # without ``later`` nothing is deferred


@pytest.mark.parametrize("second, why", [((3, 5), "reads what the deferred add writes"),
                                         ((4, 2), "writes what the deferred add reads"),
                                         ((4, 3), "writes what the deferred add writes")])
def test_an_instruction_is_not_deferred_past_a_call_it_depends_on(second, why):
    from pterun.format.schema import DelegateCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), KernelCall(1, (1, 2, 3)), DelegateCall(1, second)]]
    assert find_runs_in(chains, outputs=(5,), later=add_later)[0] == [], why


def test_an_instruction_is_not_deferred_past_a_call_that_writes_its_memory():
    """The memory plan may put a later output where the deferred instruction's input was: moving the instruction
    after the merged call would read the new value."""
    from pterun.format.schema import DelegateCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), KernelCall(1, (1, 2, 3)), DelegateCall(1, (4, 5))]]
    values, tags = mean_values()
    values[5] = Tensor(values[1].dtype, values[1].shape, (0, 1, 2), values[1].storage)  # slot 5 reuses 1's memory
    assert find_runs_in(chains, outputs=(5,), later=add_later, values=(values, tags))[0] == []
    # read by nothing outside, or only by a later part of the run: slot 5 never reaches memory, the add may move
    (run,), _ = find_runs_in(chains, outputs=(), later=add_later, values=(values, tags))
    assert run.deferred == (1,)
    chains[0].append(DelegateCall(2, (5, 6)))
    (run,), _ = find_runs_in(chains, outputs=(6,), later=add_later, values=(values, tags))
    assert (run.start, run.stop, run.deferred) == (0, 4, (1,))


# -- views, slices and squeezes in a merged graph ------------------------------------------------------------------
def _rope_like_parts(t_max=4):
    """Delegate 0: x + y [1, T, 8]; then view [1, T, 4, 2], the odd elements ([..., 1:2], squeezed); delegate 1:
    times w [4]. T changes at run time (the view's size is symbolic there)."""
    g0 = Graph()
    a, b, o = g0.input([1, t_max, 8]), g0.input([1, t_max, 8]), g0.output([1, t_max, 8])
    g0.node("Add", input1_id=a, input2_id=b, output_id=o)
    g1 = Graph()
    x, w, o = g1.input([1, t_max, 4]), g1.input([4]), g1.output([1, t_max, 4])
    g1.node("Multiply", input1_id=x, input2_id=w, output_id=o)
    graphs = {0: G.Graph.read(*g0.blob()), 1: G.Graph.read(*g1.blob())}
    parts = (DelegatePart(0, (1, 2, 10)), Absorbed("view", (10,), (11,), {"size": (1, None, 4, 2)}),
             Absorbed("slice", (11,), (12,), {"dim": 3, "start": 1, "end": 2}),
             Absorbed("squeeze", (12,), (13,), {"dims": (3,)}), DelegatePart(1, (13, 3, 14)))
    tensors = [None] * 15
    for slot, shape in {1: (1, t_max, 8), 2: (1, t_max, 8), 10: (1, t_max, 8), 11: (1, t_max, 4, 2),
                        12: (1, t_max, 4, 1), 13: (1, t_max, 4), 14: (1, t_max, 4)}.items():
        tensors[slot] = out_tensor(shape, np.float32, capacity=shape)
    tensors[3] = out_tensor((4,), np.float32)
    return parts, graphs, tensors


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
def test_views_slices_and_squeezes_join_a_merged_graph_at_every_run_time_size(engine):
    parts, graphs, tensors = _rope_like_parts()
    graph, args = merge_over(parts, graphs, lambda s: s == 14, tensors)
    assert args == (1, 2, 3, 14)
    assert [n.name for n in graph.nodes] == ["Add", "StaticReshape", "StaticSlice", "StaticReshape", "Multiply"]
    assert graph.nodes[1].new_shape == [1, 0, 4, 2] and graph.nodes[3].new_shape == [1, 0, 4]  # 0: the run-time dim
    if engine == "numpy":
        plan = compile_graph(graph)
    else:
        from pterun.delegates.xnnpack import litert_engine as L
        plan = L.build(graph, 1, load_dims=lambda ext, dims: (1, 1, 8) if dims == (1, 4, 8) else None)
    for t in (1, 4, 2):
        x, y = RNG.standard_normal((1, t, 8), np.float32), RNG.standard_normal((1, t, 8), np.float32)
        w = RNG.standard_normal(4).astype(np.float32)
        out = out_tensor((1, t, 4), np.float32, capacity=(1, 4, 4))
        plan.execute([tensor(x), tensor(y), tensor(w), out])
        np.testing.assert_array_equal(out.array, (x + y).reshape(1, t, 4, 2)[..., 1] * w)


def test_a_squeeze_or_slice_is_not_merged_where_the_dim_that_changes_is_unknown():
    parts, graphs, tensors = _rope_like_parts()
    # without the view, the slice reads the first delegate's output: which of its dims changes is not known
    parts = (parts[0], Absorbed("slice", (10,), (12,), {"dim": 2, "start": 1, "end": 2}), parts[4])
    with pytest.raises(CannotMerge, match=r"slice of \[1, 4, 8\]: which dims change at run time is not known"):
        merge_over(parts, graphs, lambda s: s == 14, tensors)


def test_an_absorbed_operator_must_give_the_program_tensor_its_shape():
    parts, graphs, tensors = _rope_like_parts()
    tensors[13] = out_tensor((1, 2, 8), np.float32, capacity=(1, 2, 8))  # a program that says otherwise
    with pytest.raises(CannotMerge, match=r"squeeze of \[1, 4, 4, 1\] gives \[1, 4, 4\], the program's tensor "
                                          r"has \[1, 2, 8\]"):
        merge_over(parts, graphs, lambda s: s == 14, tensors)


def test_a_view_with_two_sizes_known_only_at_run_time_is_not_absorbed():
    from pterun.format.schema import INT, INT_LIST, TENSOR
    from pterun.delegates.xnnpack import XnnpackBackend
    from pterun.interp.merge import absorbed_op
    values = [out_tensor((1, 4, 8), np.float32, capacity=(1, 4, 8)), (2, 3, 4, 5), 1, 4, 4, 2,
              out_tensor((1, 4, 4, 2), np.float32, capacity=(1, 4, 4, 2))]
    tags = [TENSOR, INT_LIST, INT, INT, INT, INT, TENSOR]
    name = "executorch_prim::et_view.default"
    form = XnnpackBackend.absorbed_forms[name]
    assert absorbed_op(form, (0, 1, 6), values, tags, {3}) == Absorbed("view", (0,), (6,), {"size": (1, None, 4, 2)})
    values[4] = -1  # a fixed -1 is the out tensor's declared size there
    assert absorbed_op(form, (0, 1, 6), values, tags, {3}).attrs == {"size": (1, None, 4, 2)}
    assert absorbed_op(form, (0, 1, 6), values, tags, {3, 5}) is None
    # view_copy copies: a reshape, written to its own memory where read outside, never replayed
    assert absorbed_op(XnnpackBackend.absorbed_forms["aten::view_copy.out"], (0, 1, 6), values, tags, {3}).op == \
        "reshape"


def test_a_reshape_read_outside_is_an_output_of_the_merged_graph_and_a_view_is_not():
    parts, graphs, tensors = _rope_like_parts()
    reshape = parts[1]._replace(op="reshape")
    for first, outputs in ((parts[1], (14,)), (reshape, (11, 14))):
        _, args = merge_over((parts[0], first) + parts[2:], graphs, lambda s: s in (11, 14), tensors)
        assert args[3:] == outputs  # the view's slot 11 is the replayed view's to bind, not the graph's to write


@needs_litert
def test_litert_takes_a_slice_to_the_end_of_a_run_time_dim_as_a_split():
    from pterun.delegates.xnnpack import litert_engine as L
    from pterun.delegates.xnnpack.litert_engine.translate import Unsupported

    def sliced(offset, size):
        g = Graph()
        x, o = g.input([1, 4, 6]), g.output([1, 4, size])
        g.node("StaticSlice", num_dims=3, offsets=[0, 0, offset], sizes=[0, 0, size], input_id=x, output_id=o)
        return G.Graph.read(*g.blob())

    plan = L.build(sliced(4, 2), 1, load_dims=lambda ext, dims: (1, 1, 6))  # the last of three pieces
    for t in (1, 3):
        x = RNG.standard_normal((1, t, 6), np.float32)
        out = out_tensor((1, t, 2), np.float32, capacity=(1, 4, 2))
        plan.execute([tensor(x), out])
        np.testing.assert_array_equal(out.array, x[..., 4:6])
    with pytest.raises(Unsupported, match="did not take SLICE"):  # [1:3] of 6 is no piece of an even split
        L.build(sliced(1, 2), 1)


# -- memory: dynamic inputs are prepared small --------------------------------------------------------------------
def test_load_dims_shrink_the_dynamic_bound_of_dynamic_inputs_only():
    from pterun.delegates.xnnpack import load_dims
    dims = load_dims({127}, lambda ext: ext != 1)
    assert dims(0, (1, 127, 64)) == (1, 1, 64) and dims(1, (1, 127, 64)) is None and dims(0, (4, 8)) == (4, 8)
    assert load_dims(frozenset(), lambda ext: True) is None  # a method without dynamic inputs: declared dims
    # 128 tokens of 128 features: which dim changes is not known, and a feature dim prepared at 1 cannot reshape
    assert load_dims({128}, lambda ext: True)(0, (1, 128, 128)) is None


@needs_litert
def test_load_dims_litert_refuses_fall_back_to_the_declared_ones():
    from pterun.delegates.xnnpack import litert_engine as L
    g = Graph()
    x = g.input([2, 6, 4])
    o = g.output([2, 3, 8])
    g.node("StaticReshape", num_dims=3, new_shape=[2, 3, 8], input_id=x, output_id=o)  # fixed sizes: only 48 fit
    graph = G.Graph.read(*g.blob())
    plan = L.build(graph, 1, load_dims=lambda ext, dims: (2, 1, 4))
    assert plan._shapes == {plan.inputs[0][1]: (2, 6, 4)}
    x = RNG.standard_normal((2, 6, 4), np.float32)
    (got,) = run_plan(plan, [(2, 6, 4), (2, 3, 8)], [x])
    assert np.array_equal(got, x.reshape(2, 3, 8))


# -- select along a dim the run decides (a Pick node): an LLM's last token, inside its merged call ----------------
def _pick_graph(index: int, bound: int = 8):
    """A merged graph: Add over [1, S, 4] (S up to ``bound``, dynamic), select ``index`` along dim 1, Multiply."""
    graphs = {0: _add_graph([1, bound, 4]), 1: _mul_graph([1, 4], [1, 4])}
    x = out_tensor((1, bound, 4), np.float32, capacity=(1, bound, 4))
    tensors = slots({1: (1, bound, 4), 2: (1, bound, 4), 11: (1, 4), 12: (1, 4), 13: (1, 4)})
    tensors[1] = tensors[2] = tensors[10] = x
    pick = Absorbed("select", (10,), (11,), {"dim": 1, "index": index})
    parts = (DelegatePart(0, (1, 2, 10)), pick, DelegatePart(1, (11, 12, 13)))
    return merge_over(parts, graphs, lambda s: s == 13, tensors)


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
@pytest.mark.parametrize("index", [-1, -3, 0, 2])
def test_a_select_along_the_dim_the_run_decides_picks_from_the_call_s_size(engine, index):
    graph, args = _pick_graph(index)
    assert [n.name for n in graph.nodes] == ["Add", "Pick", "Multiply"] and args == (1, 2, 12, 13)
    if engine == "numpy":
        plan = compile_graph(graph)
    else:
        from pterun.delegates.xnnpack import litert_engine as L
        plan = L.build(graph, 1, load_dims=lambda ext, dims: (1, 1, 4) if len(dims) == 3 else None)
        assert plan.engine == "litert"
    for s in (3, 5, 8):  # the size the call brings, after the one the graph was prepared at
        x, y, w = (RNG.standard_normal(shape).astype(np.float32) for shape in ((1, s, 4), (1, s, 4), (1, 4)))
        out = out_tensor((1, 4), np.float32)
        plan.execute([tensor(x), tensor(y), tensor(w), out])
        np.testing.assert_array_equal(out.array, (x + y)[:, index] * w)


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
def test_a_select_past_the_call_s_size_raises(engine):
    graph, _ = _pick_graph(-4)
    if engine == "numpy":
        plan = compile_graph(graph)
    else:
        from pterun.delegates.xnnpack import litert_engine as L
        plan = L.build(graph, 1, fallback=lambda: compile_graph(graph))
    x = RNG.standard_normal((1, 3, 4)).astype(np.float32)
    with pytest.raises((DelegateError, IndexError)):
        plan.execute([tensor(x), tensor(x), tensor(x[:, 0]), out_tensor((1, 4), np.float32)])


def test_a_select_whose_other_dims_change_or_whose_index_is_outside_a_fixed_dim_is_not_merged():
    from pterun.delegates.xnnpack.merge import _pick_node
    assert _pick_node({"dim": 1, "index": -1}, (1, 8, 4), (False, True, False))[1] == (1, 4)
    with pytest.raises(CannotMerge, match="another dim changes"):
        _pick_node({"dim": 1, "index": -1}, (2, 8, 4), (True, True, False))
    with pytest.raises(CannotMerge, match="select 8 along dim 1"):
        _pick_node({"dim": 1, "index": 8}, (1, 8, 4), (False, False, False))


def test_a_select_is_read_with_a_fixed_dim_and_index_and_merged_only_where_the_dim_that_changes_is_known():
    from pterun.format.schema import INT, TENSOR
    from pterun.interp.merge import absorbed_op
    values = [out_tensor((1, 8, 4), np.float32, capacity=(1, 8, 4)), 1, -1, out_tensor((1, 4), np.float32)]
    tags = [TENSOR, INT, INT, TENSOR]
    op = absorbed_op("select", (0, 1, 2, 3), values, tags, set())
    assert (op.op, op.inputs, op.outputs, op.attrs) == ("select", (0,), (3,), {"dim": 1, "index": -1})
    assert absorbed_op("select", (0, 1, 2, 3), values, tags, {2}) is None  # an index set while the method runs
    # the selected row itself changes with the call: which dim of the delegate's output changes is not known
    graphs = {0: _add_graph([1, 8, 4]), 1: _mul_graph([1, 4], [1, 4])}
    x = out_tensor((1, 8, 4), np.float32, capacity=(1, 8, 4))
    tensors = slots({1: (1, 8, 4), 2: (1, 8, 4), 12: (1, 4), 13: (1, 4)})
    tensors[1] = tensors[2] = tensors[10] = x
    tensors[11] = out_tensor((1, 4), np.float32, capacity=(1, 4))
    parts = (DelegatePart(0, (1, 2, 10)), Absorbed("select", (10,), (11,), {"dim": 1, "index": -1}),
             DelegatePart(1, (11, 12, 13)))
    with pytest.raises(CannotMerge, match=r"select of \[1, 8, 4\]: which dims change at run time is not known"):
        merge_over(parts, graphs, lambda s: s == 13, tensors)
