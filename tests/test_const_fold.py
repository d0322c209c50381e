"""Constant folding at load: instructions on constants run once, and nothing about the results changes."""

from __future__ import annotations

import numpy as np
import pytest

import pterun.interp.method as method_module
import pterun.kernels.random as random_kernels
from fixtures_util import FIXTURES, load_calls, mlp_with_randn, portable_fixture_names
from kernel_nodes import needs_litert
from pterun import KernelError, Runtime
from pterun.config import Settings
from pterun.format.schema import KERNEL_CALL, ExecutionPlan
from pterun.interp.method import MethodRunner
from pterun.kernels import KERNELS
from pterun.kernels.registry import Kernel
from pterun.profile import profile


#: load settings with every portable operator a step of its own (see _load)
NUMPY = Settings(engine="numpy")


def _load(name: str, *, fold: bool, monkeypatch, method: str = "forward"):
    if fold:
        monkeypatch.delenv("PTERUN_NO_FOLD", raising=False)
    else:
        monkeypatch.setenv("PTERUN_NO_FOLD", "1")
    data = {"data_path": FIXTURES / f"{name}.ptd"} if (FIXTURES / f"{name}.ptd").exists() else {}
    # the NumPy engine: under "auto" a portable program's runs of operators compile into LiteRT programs, which
    # fold what they hold themselves (test_merge_kernels.py)
    return Runtime(engine="numpy").load_program(FIXTURES / f"{name}.pte", **data).load_method(method)


def _steps(m) -> int:
    return sum(len(c.steps) for c in m._runner.chains)


def _run(runner: MethodRunner, inputs: list) -> list:
    runner.set_inputs(inputs)
    runner.run()
    return runner.collect_outputs()


@pytest.mark.parametrize("name", portable_fixture_names())
def test_folded_programs_give_the_same_outputs_as_unfolded(name, monkeypatch):
    calls = load_calls(name)
    for method in sorted({c["method"] for c in calls}):
        folded = _load(name, fold=True, monkeypatch=monkeypatch, method=method)
        plain = _load(name, fold=False, monkeypatch=monkeypatch, method=method)
        assert not plain._runner.folded
        for call in (c for c in calls if c["method"] == method):
            for got, want in zip(folded.execute(call["inputs"]), plain.execute(call["inputs"])):
                if not isinstance(want, np.ndarray):
                    assert got == want
                elif want.dtype.kind == "f":
                    # a folded permute is the weight's transposed view, not a contiguous copy: for a one-row
                    # matmul BLAS may then add in another order, so the last bits can differ (nothing more)
                    assert got.dtype == want.dtype
                    scale = float(np.max(np.abs(want), initial=1.0))
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * scale, err_msg=f"{name}.{method}")
                else:
                    np.testing.assert_array_equal(got, want, err_msg=f"{name}.{method}")


def _assert_same_up_to_summation_order(got, want):
    # the folded program multiplies by a transposed view of the weight where the plain one multiplies by a
    # contiguous copy: BLAS may then add the products in another order, which changes the last bits only
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * float(np.max(np.abs(want), initial=1.0)))


def test_the_folded_mlp_gives_the_unfolded_outputs(monkeypatch):
    folded = _load("mlp", fold=True, monkeypatch=monkeypatch)
    plain = _load("mlp", fold=False, monkeypatch=monkeypatch)
    call = load_calls("mlp")[0]
    got = folded.execute(call["inputs"])[0]
    _assert_same_up_to_summation_order(got, plain.execute(call["inputs"])[0])
    np.testing.assert_allclose(got, call["outputs"][0], rtol=1e-5, atol=1e-6)


def test_the_weights_permutes_leave_the_mlp(monkeypatch):
    folded = _load("mlp", fold=True, monkeypatch=monkeypatch)
    plain = _load("mlp", fold=False, monkeypatch=monkeypatch)
    assert [n for _, _, n in folded._runner.folded] == ["aten::permute_copy.out"] * 3
    assert _steps(folded) == _steps(plain) - 3
    (chain,) = folded._runner.chains
    steps, info = chain.steps, chain.info
    assert len(steps) == len(info) and "aten::permute_copy.out" not in [n for n, *_ in info]
    rows = profile(folded, load_calls("mlp")[0]["inputs"], repeat=2)
    assert "aten::permute_copy.out" not in {r.name for r in rows}


def test_a_folded_permute_is_a_read_only_view_of_the_weight(monkeypatch):
    runner = _load("mlp", fold=True, monkeypatch=monkeypatch)._runner
    for ci, pc, _ in runner.folded:
        weight, _, out = runner.plan.chains[ci][pc][2][:3]
        w, t = runner.values[weight].array, runner.values[out].array
        assert np.shares_memory(t, w), "the transposed weight should be a view, not a copy"
        np.testing.assert_array_equal(t, w.T)
        assert not t.flags.writeable
        assert not np.shares_memory(t, runner.arenas[1])


def test_folded_values_survive_repeated_calls(monkeypatch):
    folded = _load("mlp", fold=True, monkeypatch=monkeypatch)
    plain = _load("mlp", fold=False, monkeypatch=monkeypatch)
    runner = folded._runner
    before = [runner.values[out].array.copy() for ci, pc, _ in runner.folded
              for out in runner.plan.chains[ci][pc][2][-1:]]
    rng = np.random.default_rng(1)
    x = load_calls("mlp")[0]["inputs"][0]
    for _ in range(4):  # the arena the permutes were planned in is overwritten by every call
        xi = rng.standard_normal(x.shape).astype(x.dtype)
        _assert_same_up_to_summation_order(folded.execute([xi])[0], plain.execute([xi])[0])
    after = [runner.values[out].array for ci, pc, _ in runner.folded for out in runner.plan.chains[ci][pc][2][-1:]]
    for b, a in zip(before, after):  # the folded values themselves are never written again: bit for bit
        np.testing.assert_array_equal(a, b)


def test_computed_results_get_memory_of_their_own(monkeypatch):
    runner = _load("q_static_cnn", fold=True, monkeypatch=monkeypatch)._runner
    dequantized = [runner.plan.chains[ci][pc][2][-1] for ci, pc, n in runner.folded if "dequantize" in n]
    assert dequantized, "the weights' dequantize ops should be folded"
    for j in dequantized:
        a = runner.values[j].array
        assert not a.flags.writeable and not np.shares_memory(a, runner.arenas[1])
        assert a.dtype == np.float32 and np.isfinite(a).all()


def test_the_budget_limits_copies_but_not_views(monkeypatch):
    monkeypatch.setattr(method_module, "FOLD_BUDGET", 0)
    assert not _load("q_static_cnn", fold=True, monkeypatch=monkeypatch)._runner.folded
    assert len(_load("mlp", fold=True, monkeypatch=monkeypatch)._runner.folded) == 3


def test_random_kernels_are_never_folded():
    random_ops = {name for name, k in KERNELS.items() if k.fn.__module__ == random_kernels.__name__}
    assert random_ops and not any(KERNELS[name].foldable for name in random_ops)
    assert not KERNELS["aten::empty.out"].foldable and KERNELS["aten::add.out"].foldable


def test_a_randn_of_constant_arguments_still_draws_on_every_call():
    program = Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte")
    plan = program._plan("forward")
    kind = plan.chains[0][0].kind
    assert kind == KERNEL_CALL and plan.operators[plan.chains[0][0][1]] == "aten::permute_copy.out"
    # the first weight's permute replaced by a randn of the same shape: every argument is a constant
    runner = MethodRunner(program._pf, mlp_with_randn(program), NUMPY, shared_arenas={})
    assert "aten::randn.out" not in [n for _, _, n in runner.folded]
    assert [n for _, _, n in runner.folded] == ["aten::permute_copy.out"] * 2
    x = load_calls("mlp")[0]["inputs"]
    first, second = _run(runner, x)[0], _run(runner, x)[0]
    assert not np.array_equal(first, second)


def test_a_constant_computation_returned_as_output_is_still_returned():
    program = Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte")
    plan = program._plan("forward")
    # the last permute's output (its arena bytes are not reused after it) becomes a method output too: it
    # stays a step, and callers get their own copy
    pc = max(i for i, (_, op, _) in enumerate(plan.chains[0]) if plan.operators[op] == "aten::permute_copy.out")
    weight, _, out = plan.chains[0][pc][2][:3]
    out_plan = ExecutionPlan(plan.name, plan.values, plan.inputs, (*plan.outputs, out), plan.chains, plan.operators,
                    plan.delegates, plan.buffer_sizes)
    runner = MethodRunner(program._pf, out_plan, NUMPY, shared_arenas={})
    folded = [p for _, p, _ in runner.folded]
    assert folded and pc not in folded
    x = load_calls("mlp")[0]["inputs"]
    for _ in range(2):
        result, transposed = _run(runner, x)
        np.testing.assert_array_equal(transposed, runner.values[weight].array.T)
        assert transposed.flags.writeable and not np.shares_memory(transposed, runner.values[weight].array)
        np.testing.assert_allclose(result, load_calls("mlp")[0]["outputs"][0], rtol=1e-4, atol=1e-5)


def test_outputs_read_through_an_alias_are_not_folded(monkeypatch):
    # transformer.pte reads an expand_copy's output through a second value laid over the same arena bytes
    # (the exporter's alias of a view); folding it would leave that alias reading stale memory
    runner = _load("transformer", fold=True, monkeypatch=monkeypatch)._runner
    names = [n for _, _, n in runner.folded]
    assert "aten::permute_copy.out" in names and "aten::expand_copy.out" not in names


def test_an_output_written_again_through_another_value_before_it_is_read_is_not_folded():
    """Two values, one buffer: after mlp.pte's first permute, a ``neg`` writes a second value laid over the permute's
    output bytes; the matrix product then reads the permute's output, which holds the negated weight. Folding the
    permute would leave that product reading the un-negated constant."""
    from pterun.format.schema import TENSOR, KernelCall

    program = Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte")
    plan = program._plan("forward")
    _, _, (_, _, out, _) = plan.chains[0][0]
    assert plan.operators[plan.chains[0][0].op_index] == "aten::permute_copy.out"
    alias = len(plan.values)
    values = list(plan.values) + [(TENSOR, plan.values[out][1])]  # the same description: the same bytes
    chain = [plan.chains[0][0], KernelCall(len(plan.operators), (out, alias, alias))] + plan.chains[0][1:]
    changed = ExecutionPlan(plan.name, values, plan.inputs, plan.outputs, [chain],
                            plan.operators + ["aten::neg.out"], plan.delegates, plan.buffer_sizes)
    x = load_calls("mlp")[0]["inputs"]
    folded = MethodRunner(program._pf, changed, NUMPY._replace(fold=True), shared_arenas={})
    unfolded = MethodRunner(program._pf, changed, NUMPY._replace(fold=False), shared_arenas={})
    assert 0 not in [pc for _, pc, _ in folded.folded] and folded.folded  # the other permutes still fold
    want = _run(unfolded, x)[0]
    np.testing.assert_allclose(_run(folded, x)[0], want, rtol=1e-6, atol=1e-6)
    plain = _run(MethodRunner(program._pf, plan, NUMPY._replace(fold=False), shared_arenas={}), x)[0]
    assert np.abs(plain - want).max() > 1e-3  # the negated weight does change the outputs


def test_programs_with_jumps_are_not_folded(monkeypatch):
    assert not _load("cond", fold=True, monkeypatch=monkeypatch)._runner.folded


def _mlp_with_broken(op: str, monkeypatch):
    """The mlp fixture loaded (with folding) after ``op``'s kernel is replaced by one that always raises."""
    def broken(*args):
        raise FloatingPointError("boom")

    old = KERNELS[op]
    monkeypatch.setitem(KERNELS, old.name, Kernel(old.name, broken, old.schema))
    return _load("mlp", fold=True, monkeypatch=monkeypatch)


def test_a_kernel_failing_at_load_fails_at_run_time_as_before(monkeypatch):
    m = _mlp_with_broken("aten::permute_copy.out", monkeypatch)
    assert not m._runner.folded
    with pytest.raises(KernelError, match="aten::permute_copy.out failed at instruction 0") as e:
        m.execute(load_calls("mlp")[0]["inputs"])
    assert isinstance(e.value.__cause__, FloatingPointError)


def test_errors_name_the_programs_instruction_index_after_folding(monkeypatch):
    m = _mlp_with_broken("aten::relu.out", monkeypatch)
    assert m._runner.folded
    with pytest.raises(KernelError) as e:
        m.execute(load_calls("mlp")[0]["inputs"])
    pc = e.value.instruction
    assert m._runner.plan.operators[m._runner.plan.chains[0][pc][1]] == "aten::relu.out"


@pytest.mark.parametrize("engine", ["numpy", "auto"])
def test_a_delegate_call_on_constants_is_computed_at_load(engine):
    """xnn_const_delegate: arange -> an XNNPACK delegate on constants only -> gt, a cast -> a second delegate with
    the input (tools/export_fold_fixture.py). The first delegate call leaves no step; the numbers do not change.
    (Merging is off: under "auto" it would join the whole program into one LiteRT call.)"""
    from fixtures_util import load_calls_from

    calls = load_calls_from(FIXTURES / "xnn_const_delegate.npz")
    folded = Runtime(engine=engine, merge_delegates=False).load_program(FIXTURES / "xnn_const_delegate.pte") \
        .load_method("forward")
    plain = Runtime(engine=engine, merge_delegates=False, fold=False).load_program(
        FIXTURES / "xnn_const_delegate.pte").load_method("forward")
    names = [name for _, _, name in folded._runner.folded]
    assert names.count("delegate XnnpackBackend") == 1, names
    assert "aten::arange.start_out" in names and "aten::gt.Scalar_out" in names
    steps = [info[0] for c in folded._runner.chains for info in c.info]
    assert steps.count("delegate XnnpackBackend") <= 1 and len(steps) < len(plain._runner.chains[0].steps)
    for _ in range(2):  # the folded bias stays put across calls
        for call in calls:
            got, ref = folded.execute(call["inputs"]), plain.execute(call["inputs"])
            np.testing.assert_array_equal(got[0], ref[0])
            np.testing.assert_allclose(got[0], call["outputs"][0], rtol=1e-5, atol=1e-6)


@needs_litert
def test_the_merge_leaves_work_on_constants_to_folding():
    """Under "auto" the delegate call on constants and the comparison and cast after it could join merged LiteRT
    calls, which would compute them on every call: the merge leaves them to folding (interp.fold.Folder.foreseen),
    so one delegate call is left, and the numbers stay ExecuTorch's."""
    from fixtures_util import load_calls_from

    m = Runtime(engine="auto").load_program(FIXTURES / "xnn_const_delegate.pte").load_method("forward")
    assert [e.name for e in m.steps] == ["delegate XnnpackBackend"]
    assert [e.name for e in m.folded] == ["aten::arange.start_out", "delegate XnnpackBackend",
                                          "aten::gt.Scalar_out", "dim_order_ops::_to_dim_order_copy.out"]
    for call in load_calls_from(FIXTURES / "xnn_const_delegate.npz"):
        np.testing.assert_allclose(m.execute(call["inputs"])[0], call["outputs"][0], rtol=1e-5, atol=1e-6)


def test_a_delegate_call_that_reads_the_input_is_not_folded():
    m = Runtime(engine="numpy").load_program(FIXTURES / "xnn_const_delegate.pte").load_method("forward")
    steps = [info[0] for c in m._runner.chains for info in c.info]
    assert steps == ["delegate XnnpackBackend"]  # the second call, on the input, still runs


def test_a_delegate_output_past_the_calls_arguments_is_left_to_run_as_a_step(monkeypatch):
    """A backend naming an output position the DelegateCall does not have (a corrupt payload) folds nothing and
    fails nowhere at load."""
    real = method_module.delegate_outputs
    monkeypatch.setattr(method_module, "delegate_outputs", lambda pf, plan, i: real(pf, plan, i) | {99})
    m = Runtime(engine="numpy", merge_delegates=False).load_program(FIXTURES / "xnn_const_delegate.pte") \
        .load_method("forward")
    names = [name for _, _, name in m._runner.folded]
    assert "delegate XnnpackBackend" not in names
    assert [info[0] for c in m._runner.chains for info in c.info].count("delegate XnnpackBackend") == 2


def test_full_like_of_a_run_time_tensor_is_folded_where_that_tensors_shape_is_static():
    # full_like reads only its input's shape (Kernel.shape_only): ops_misc's two read tensors the call computes
    from pterun.kernels import KERNELS

    assert KERNELS["aten::full_like.out"].shape_only == {0}
    static = Runtime(engine="numpy").load_program(FIXTURES / "ops_misc.pte").load_method("forward")
    assert [n for _, _, n in static._runner.steps.folded].count("aten::full_like.out") == 2
    assert not any(e.name == "aten::full_like.out" for e in static.steps)
    plain = Runtime(engine="numpy", fold=False).load_program(FIXTURES / "ops_misc.pte").load_method("forward")
    for call in load_calls("ops_misc"):
        for got, want in zip(static.execute(call["inputs"]), plain.execute(call["inputs"])):
            np.testing.assert_array_equal(got, want)
    dynamic = Runtime(engine="numpy").load_program(FIXTURES / "llm" / "nokv.pte").load_method("forward")
    assert [e.name for e in dynamic.steps].count("aten::full_like.out") == 2  # the token count varies by call
