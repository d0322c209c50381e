"""Bundled programs (``.bpte``): run a program's own test cases and check its outputs, as ExecuTorch's
``BundledModule`` does.

Example::

    >>> from pterun import Runtime
    >>> bp = Runtime.get().load_bundled_program("model.bpte")     # doctest: +SKIP
    >>> bp.verify("forward", 0)                                    # doctest: +SKIP
    VerificationResult(method='forward', case=0, passed=True, ...)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pterun.errors import InvalidArgumentError, MethodNotFoundError, NotSupportedError, VerificationError
from pterun.format.bundled import BundledCase, BundledFile

__all__ = ["BundledProgram", "VerificationResult", "OutputCheck"]

_FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))


@dataclass(frozen=True)
class OutputCheck:
    """How one output compares with its expected value."""

    index: int
    passed: bool
    max_abs_error: float
    max_rel_error: float
    detail: str = ""


@dataclass(frozen=True)
class VerificationResult:
    method: str
    case: int
    passed: bool
    checks: tuple[OutputCheck, ...]
    outputs: list = field(repr=False, compare=False)

    @property
    def worst(self) -> OutputCheck | None:
        return max(self.checks, key=lambda c: (not c.passed, c.max_abs_error), default=None)


def _compare(index: int, expected, actual, rtol: float, atol: float) -> OutputCheck:
    if not isinstance(expected, np.ndarray):
        raise NotSupportedError(f"expected output {index} is a {type(expected).__name__}; only tensor expected "
                                "outputs are supported (as in ExecuTorch)")
    if not isinstance(actual, np.ndarray):
        return OutputCheck(index, False, np.inf, np.inf, f"output is {type(actual).__name__}, expected a tensor")
    if actual.dtype != expected.dtype:
        return OutputCheck(index, False, np.inf, np.inf, f"dtype {actual.dtype} != expected {expected.dtype}")
    if actual.shape != expected.shape:
        return OutputCheck(index, False, np.inf, np.inf,
                           f"shape {list(actual.shape)} != expected {list(expected.shape)}")
    if expected.size == 0:
        return OutputCheck(index, True, 0.0, 0.0)
    if expected.dtype in _FLOAT_KINDS:
        a = expected.astype(np.float64)
        b = actual.astype(np.float64)
        same_special = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
        with np.errstate(invalid="ignore"):
            diff = np.where(same_special, 0.0, np.abs(a - b))
        ok = same_special | (diff <= atol + np.abs(rtol * b))
        rel = diff / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-8)
        return OutputCheck(index, bool(ok.all()), float(np.nanmax(diff)), float(np.nanmax(rel)))
    equal = expected.tobytes() == np.ascontiguousarray(actual).tobytes()
    diff = 0.0 if equal else float(np.max(np.abs(expected.astype(np.float64) - actual.astype(np.float64))))
    return OutputCheck(index, equal, diff, diff)


class BundledProgram:
    """A loaded ``.bpte``: the embedded :attr:`program` (a :class:`pterun.runtime.Program`, which
    :meth:`pterun.Runtime.load_bundled_program` loads) plus its test cases per method."""

    def __init__(self, bf: BundledFile, program: Any):
        self._bf = bf
        self.program = program
        self._suites = {s.method: s for s in bf.suites}

    @property
    def method_names(self) -> set[str]:
        """Methods that carry test cases."""
        return set(self._suites)

    def test_cases(self, method: str) -> tuple[BundledCase, ...]:
        suite = self._suites.get(method)
        if suite is None:
            raise MethodNotFoundError(f"{self._bf.name} has no test cases for method {method!r}; it has "
                                      f"{sorted(self._suites)}")
        return suite.cases

    def _case(self, method: str, testset_idx: int) -> BundledCase:
        cases = self.test_cases(method)
        if not 0 <= testset_idx < len(cases):
            raise InvalidArgumentError(f"test case {testset_idx} is out of range: method {method!r} has "
                                       f"{len(cases)} test case(s)")
        return cases[testset_idx]

    def load_bundled_input(self, method: str, testset_idx: int) -> list:
        """The inputs of one test case."""
        return list(self._case(method, testset_idx).inputs)

    def run(self, method: str, testset_idx: int) -> list:
        """Run one test case and return its outputs (without checking them)."""
        return self.program.load_method(method).execute(self.load_bundled_input(method, testset_idx))

    def check(self, method: str, testset_idx: int, rtol: float = 1e-5, atol: float = 1e-8) -> VerificationResult:
        """Run one test case and compare its outputs with the expected ones; never raises on a mismatch.

        Floating outputs (float32/float64/float16) pass when ``|expected - actual| <= atol + |rtol * actual|``
        elementwise (NaN equals NaN, same-sign infinities are equal); other dtypes must match byte for byte.
        """
        case = self._case(method, testset_idx)
        if not case.expected_outputs:
            raise NotSupportedError(f"test case {testset_idx} of method {method!r} has no expected outputs")
        outputs = self.program.load_method(method).execute(list(case.inputs))
        if len(outputs) != len(case.expected_outputs):
            checks = (OutputCheck(0, False, np.inf, np.inf, f"{len(outputs)} outputs, expected "
                                                            f"{len(case.expected_outputs)}"),)
        else:
            checks = tuple(_compare(i, e, a, rtol, atol)
                           for i, (e, a) in enumerate(zip(case.expected_outputs, outputs)))
        return VerificationResult(method, testset_idx, all(c.passed for c in checks), checks, outputs)

    def verify(self, method: str, testset_idx: int, rtol: float = 1e-5, atol: float = 1e-8) -> VerificationResult:
        """Like :meth:`check`, but raise :class:`VerificationError` when any output differs."""
        result = self.check(method, testset_idx, rtol, atol)
        if not result.passed:
            bad = [c for c in result.checks if not c.passed]
            raise VerificationError(
                f"method {method!r} test case {testset_idx}: output(s) {[c.index for c in bad]} differ from the "
                f"expected ones (worst absolute error {max(c.max_abs_error for c in bad):.3g}; rtol={rtol}, "
                f"atol={atol}){': ' + bad[0].detail if bad[0].detail else ''}")
        return result

    def verify_result_with_bundled_expected_output(self, method_name: str, testset_idx: int, rtol: float = 1e-5,
                                                   atol: float = 1e-8) -> list:
        """ExecuTorch's name for :meth:`verify`: returns the outputs, raises on a mismatch."""
        return self.verify(method_name, testset_idx, rtol, atol).outputs

    def check_all(self, rtol: float = 1e-5, atol: float = 1e-8) -> list[VerificationResult]:
        """Every test case of every method."""
        return [self.check(m, i, rtol, atol) for m in sorted(self._suites) for i in range(len(self._suites[m].cases))]

    def __repr__(self) -> str:
        cases = {m: len(s.cases) for m, s in sorted(self._suites.items())}
        return f"BundledProgram({self._bf.name!r}, test_cases={cases})"
