"""Bundled programs (.bpte): embedded program, test cases, verify with ExecuTorch's rule, pterun verify."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES
from pterun import (BundledProgram, InvalidArgumentError, InvalidProgramError, MethodNotFoundError, Runtime,
                    VerificationError)
from pterun.cli import main

GOOD = FIXTURES / "bundled.bpte"
BAD = FIXTURES / "bundled_bad.bpte"


def test_load_and_inspect_test_cases():
    bp = Runtime.get().load_bundled_program(GOOD)
    assert isinstance(bp, BundledProgram)
    assert bp.method_names == {"forward", "encode"}
    assert bp.program.method_names == {"forward", "encode"}
    assert len(bp.test_cases("forward")) == 3 and len(bp.test_cases("encode")) == 3
    case = bp.test_cases("forward")[0]
    assert all(isinstance(x, np.ndarray) for x in case.inputs + case.expected_outputs)
    assert repr(bp) == f"BundledProgram({str(GOOD)!r}, test_cases={{'encode': 3, 'forward': 3}})"


def test_every_case_verifies():
    bp = Runtime.get().load_bundled_program(GOOD)
    for method in sorted(bp.method_names):
        for i in range(len(bp.test_cases(method))):
            result = bp.verify(method, i)
            assert result.passed and all(c.passed for c in result.checks)
            outs = bp.verify_result_with_bundled_expected_output(method, i)
            assert isinstance(outs[0], np.ndarray)


def test_a_wrong_expected_output_fails_exactly_that_case():
    bp = Runtime.get().load_bundled_program(BAD)
    results = {(r.method, r.case): r.passed for r in bp.check_all()}
    assert [k for k, ok in results.items() if not ok] == [("encode", 1)]
    with pytest.raises(VerificationError, match=r"^method 'encode' test case 1: output\(s\) \[0\] differ from the "
                                                r"expected ones \(worst absolute error 0.5; rtol=1e-05, atol=1e-08\)$"):
        bp.verify("encode", 1)
    assert bp.verify("encode", 1, atol=0.6).passed  # within a loose enough tolerance it passes
    assert isinstance(VerificationError("x"), AssertionError)


def test_bad_method_and_case_index():
    bp = Runtime.get().load_bundled_program(GOOD)
    with pytest.raises(MethodNotFoundError, match="has no test cases for method 'decode'"):
        bp.verify("decode", 0)
    with pytest.raises(InvalidArgumentError, match="test case 3 is out of range: method 'forward' has 3 test case"):
        bp.verify("forward", 3)


def test_corrupted_and_wrong_files():
    data = GOOD.read_bytes()
    with pytest.raises(InvalidProgramError):
        Runtime.get().load_bundled_program(data[: len(data) // 3])
    with pytest.raises(InvalidProgramError, match=r"this is a plain \.pte program; use load_program"):
        Runtime.get().load_bundled_program(FIXTURES / "mlp.pte")
    with pytest.raises(FileNotFoundError, match="no such bundled program"):
        Runtime.get().load_bundled_program(FIXTURES / "nope.bpte")


def test_cli_verify(capsys):
    assert main(["verify", str(GOOD)]) == 0
    assert "6/6 test cases passed" in capsys.readouterr().out
    assert main(["verify", str(BAD)]) == 1
    out = capsys.readouterr().out
    assert "5/6 test cases passed" in out
    assert any(line.split()[:3] == ["encode", "1", "FAIL"] for line in out.splitlines())


def test_inspect_bundled(capsys):
    assert main(["inspect", str(GOOD)]) == 0
    assert "bundled test cases: encode x3, forward x3" in capsys.readouterr().out
