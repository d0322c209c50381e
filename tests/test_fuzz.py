"""Corrupt files: every truncation of a small fixture and 2,000 seeded random corruptions either load and
run or raise a PterunError — never IndexError, struct.error, MemoryError, a crash or a hang."""

from __future__ import annotations

import numpy as np
import pytest

import pterun.interp.method as method_module
from fixtures_util import FIXTURES, load_calls
from pterun import PterunError, Runtime

NAME = "cond"  # small, and has control flow (JumpFalse / Move), so corrupt jumps are exercised too
DATA = (FIXTURES / f"{NAME}.pte").read_bytes()
INPUTS = load_calls(NAME)[0]["inputs"]


@pytest.fixture(autouse=True)
def low_instruction_limit(monkeypatch):
    # a corrupt jump can loop forever; the limit turns that into an error quickly
    monkeypatch.setattr(method_module, "MAX_INSTRUCTIONS", 10_000)


def try_everything(data: bytes) -> str:
    try:
        program = Runtime.get().load_program(data)
        for name in sorted(program.method_names):
            m = program.load_method(name)
            meta = m.metadata
            m.execute(INPUTS if meta.num_inputs() == len(INPUTS) else [])
    except PterunError:
        return "error"
    return "ok"


def test_every_truncation_raises_a_pterun_error():
    outcomes = {try_everything(DATA[:n]) for n in range(len(DATA))}
    assert outcomes == {"error"}


def test_random_corruptions_never_escape_the_error_tree():
    rng = np.random.default_rng(20261130)
    counts = {"ok": 0, "error": 0}
    for _ in range(2000):
        data = bytearray(DATA)
        for _ in range(int(rng.integers(1, 5))):
            pos = int(rng.integers(0, len(data)))
            data[pos] = int(rng.integers(0, 256))
        counts[try_everything(bytes(data))] += 1
    # both outcomes must occur, or the corruption is not reaching the interesting paths
    assert counts["ok"] > 0 and counts["error"] > 0, counts
