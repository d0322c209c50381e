"""End to end: every recorded portable fixture runs and matches the reference runtime's outputs."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES, assert_matches, load_calls, portable_fixture_names
from pterun import Runtime


@pytest.mark.parametrize("name", portable_fixture_names())
def test_fixture_matches_reference(name):
    ptd = FIXTURES / f"{name}.ptd"  # programs exported with external weights carry them next to the .pte
    program = Runtime.get().load_program(FIXTURES / f"{name}.pte", data_path=ptd if ptd.exists() else None)
    calls = load_calls(name)
    assert calls, f"{name} records no calls"
    for k, call in enumerate(calls):
        outputs = program.load_method(call["method"]).execute(call["inputs"])
        assert len(outputs) == len(call["outputs"]), f"{name} call {k}: output count"
        for j, (got, want) in enumerate(zip(outputs, call["outputs"])):
            assert_matches(got, want, f"{name} call {k} ({call['method']}) output {j}")


def test_expected_fixtures_are_present():
    # the list: a missing fixture must fail loudly, not shrink the parametrized test
    required = {"mlp", "cnn", "transformer", "gru", "mobilenet_v2", "resnet_small", "dynamic", "stateful", "cond",
                "multi_method", "ops_misc"}
    assert required <= set(portable_fixture_names())


def test_dynamic_fixture_runs_two_sizes():
    sizes = {c["inputs"][0].shape for c in load_calls("dynamic")}
    assert len(sizes) == 2


def test_stateful_outputs_change_across_calls():
    calls = load_calls("stateful")
    assert len(calls) == 3
    firsts = [c["outputs"][0] for c in calls]
    assert not np.array_equal(firsts[0], firsts[1]) and not np.array_equal(firsts[1], firsts[2])


def test_stateful_state_resets_with_a_new_program():
    calls = load_calls("stateful")
    for _ in range(2):  # two independent loads each reproduce the recorded sequence from the start
        m = Runtime.get().load_program(FIXTURES / "stateful.pte").load_method("forward")
        for k, call in enumerate(calls):
            for j, (got, want) in enumerate(zip(m.execute(call["inputs"]), call["outputs"])):
                assert_matches(got, want, f"stateful call {k} output {j}")
