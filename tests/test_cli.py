"""The pterun command: run, inspect, demo, ops; errors are one line with a non-zero exit code."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls
from pterun.cli import main


def test_demo(capsys):
    assert main(["demo", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "matches ExecuTorch's recorded output: yes" in out
    assert "predicted class:" in out


def test_run_with_inputs_and_outputs(tmp_path, capsys):
    call = load_calls("mlp")[0]
    np.save(tmp_path / "x.npy", call["inputs"][0])
    out = tmp_path / "out.npz"
    assert main(["run", str(FIXTURES / "mlp.pte"), "--input", str(tmp_path / "x.npy"), "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "output 0: float32[4, 10]" in text
    with np.load(out) as z:
        np.testing.assert_allclose(z["out0"], call["outputs"][0], rtol=1e-5, atol=1e-6)


def test_run_with_random_inputs_and_method(capsys):
    assert main(["run", str(FIXTURES / "multi_method.pte"), "--method", "encode"]) == 0
    text = capsys.readouterr().out
    assert "no --input given: using random inputs (seed 0)" in text
    assert "output 0: float32[5, 4]" in text


def test_inspect_text_and_json(capsys):
    assert main(["inspect", str(FIXTURES / "multi_method.pte")]) == 0
    text = capsys.readouterr().out
    assert "method 'forward'" in text and "constant values: [128]" in text and "aten::addmm.out" in text
    assert main(["inspect", "--json", str(FIXTURES / "dynamic.pte")]) == 0
    info = json.loads(capsys.readouterr().out)
    (m,) = info["methods"]
    assert m["inputs"][0]["dynamic"] is True and m["inputs"][0]["shape"] == [8, 6]
    assert m["outputs"][-1] == {"kind": "Int"}
    assert m["operators"]["aten::sym_size.int"] >= 1


def test_ops_for_a_file(capsys):
    assert main(["ops", str(FIXTURES / "mlp.pte")]) == 0
    assert "operators supported" in capsys.readouterr().out


def test_errors_are_one_line_with_nonzero_exit(tmp_path, capsys):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program at all, just text" * 4)
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("pterun: error: InvalidProgramError: ")
    assert main(["run", str(FIXTURES / "mlp.pte"), "--method", "nope"]) == 1
    assert "MethodNotFoundError: no method named 'nope'" in capsys.readouterr().err


def test_debug_shows_the_traceback(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"x" * 100)
    with pytest.raises(Exception):
        main(["--debug", "run", str(bad)])


def test_console_script_entry_point_runs_as_module():
    r = subprocess.run([sys.executable, "-m", "pterun.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("pterun ")


def test_threads_option_sets_pterun_threads_process_wide(capsys):
    from pterun import threads

    before, blas = threads.num_threads(), threads.blas_threads()
    try:
        assert main(["--threads", "2", "bench", str(FIXTURES / "cnn.pte"), "--repeat", "2"]) == 0
        assert threads.num_threads() == 2
        if blas is not None:
            assert threads.blas_threads() == 1
        capsys.readouterr()
        assert main(["--threads", "0", "bench", str(FIXTURES / "cnn.pte")]) == 1
        assert capsys.readouterr().err == "pterun: error: ValueError: num_threads must be at least 1, got 0\n"
    finally:
        threads.set_num_threads(before)
        if blas:
            threads.set_blas_threads(blas)
