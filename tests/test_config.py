"""Configuration the Runtime owns and hands to every method: constant folding and the random generator."""

from __future__ import annotations

import numpy as np

from fixtures_util import FIXTURES, load_calls, mlp_with_randn
from pterun import Runtime
from pterun.config import Settings
from pterun.interp.method import MethodRunner


def test_fold_argument_beats_the_environment_variable(monkeypatch):
    monkeypatch.setenv("PTERUN_NO_FOLD", "1")
    assert not Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte").load_method("forward").folded
    forced = Runtime(fold=True, engine="numpy").load_program(FIXTURES / "mlp.pte").load_method("forward")
    assert [e.name for e in forced.folded] == ["aten::permute_copy.out"] * 3
    monkeypatch.delenv("PTERUN_NO_FOLD")
    assert len(Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte").load_method("forward").folded) == 3
    assert not Runtime(fold=False, engine="numpy").load_program(FIXTURES / "mlp.pte").load_method("forward").folded


def _randn_runner(seed):
    """mlp's forward with its first instruction replaced by a randn of the weight's shape (constant arguments)."""
    program = Runtime(seed=seed).load_program(FIXTURES / "mlp.pte")
    return MethodRunner(program.file, mlp_with_randn(program), Settings(seed=seed), shared_arenas={})


def _run(runner, x):
    runner.set_inputs(x)
    runner.run()
    return runner.collect_outputs()[0]


def test_a_seeded_method_draws_the_same_numbers_and_an_unseeded_one_does_not():
    x = load_calls("mlp")[0]["inputs"]
    a, b = _randn_runner(7), _randn_runner(7)
    first = _run(a, x)
    np.testing.assert_array_equal(first, _run(b, x))  # same seed: same draws, method by method
    assert not np.array_equal(first, _run(a, x))  # the generator advances from call to call
    assert not np.array_equal(_run(_randn_runner(None), x), _run(_randn_runner(None), x))


def test_the_runtime_hands_its_seed_to_every_method():
    m = Runtime(seed=11).load_program(FIXTURES / "mlp.pte").load_method("forward")
    assert m._runner.seed == 11 and m._runner.rng is None  # no random operator: no generator made
