"""Engine selection and what the user sees of it: the engine setting's sources and when it is decided, which
imports a program brings (LiteRT only for XNNPACK programs), LiteRT's stderr line turned into a log record, and
the command line's --engine, inspect and bench."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading

import pytest

from fixtures_util import FIXTURES, run_python
from pterun import Runtime

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")


@pytest.fixture(autouse=True)
def default_engine(monkeypatch):
    """These tests are about the engine choice itself: start from the default, whatever the environment says."""
    monkeypatch.delenv("PTERUN_ENGINE", raising=False)


# ==============================================================================================================
# Engine selection
# ==============================================================================================================
@needs_litert
def test_auto_runs_xnnpack_delegates_on_litert_and_reports_it():
    program = Runtime().load_program(FIXTURES / "xnn_mobilenet_v2.pte")
    assert program.engine == "auto"
    method = program.load_method("forward")
    (d,) = method.delegates
    assert (d.index, d.backend, d.engine, d.reason) == (0, "XnnpackBackend", "litert", None)


def test_numpy_engine_is_chosen_with_no_reason():
    method = Runtime(engine="numpy").load_program(FIXTURES / "xnn_mobilenet_v2.pte").load_method("forward")
    assert [(d.engine, d.reason) for d in method.delegates] == [("numpy", None)]


def test_programs_without_delegates_report_none():
    method = Runtime().load_program(FIXTURES / "mlp.pte").load_method("forward")
    assert method.delegates == []


def test_engine_argument_beats_runtime_setting_beats_environment(monkeypatch):
    monkeypatch.setenv("PTERUN_ENGINE", "numpy")
    assert Runtime().load_program(FIXTURES / "xnn_mlp.pte").engine == "numpy"
    monkeypatch.setenv("PTERUN_ENGINE", "auto")
    assert Runtime(engine="numpy").load_program(FIXTURES / "xnn_mlp.pte").engine == "numpy"
    assert Runtime(engine="numpy").load_program(FIXTURES / "xnn_mlp.pte", engine="auto").engine == "auto"
    monkeypatch.setenv("PTERUN_ENGINE", " NumPy ")
    assert Runtime().load_program(FIXTURES / "xnn_mlp.pte").engine == "numpy"


@needs_litert
def test_the_engine_is_decided_at_load_program(monkeypatch):
    program = Runtime().load_program(FIXTURES / "xnn_mlp.pte")
    monkeypatch.setenv("PTERUN_ENGINE", "numpy")  # too late for this program
    assert program.engine == "auto" and program.load_method("forward").delegates[0].engine == "litert"
    assert Runtime().load_program(FIXTURES / "xnn_mlp.pte").load_method("forward").delegates[0].engine == "numpy"


def test_bad_engine_values_are_value_errors(monkeypatch):
    with pytest.raises(ValueError, match=r"engine must be one of 'auto', 'numpy', 'litert', got 'tflite'"):
        Runtime(engine="tflite")
    with pytest.raises(ValueError, match=r"engine must be one of .* got 'gpu'"):
        Runtime().load_program(FIXTURES / "xnn_mlp.pte", engine="gpu")
    monkeypatch.setenv("PTERUN_ENGINE", "fast")
    with pytest.raises(ValueError, match=r"PTERUN_ENGINE must be one of .* got 'fast'"):
        Runtime().load_program(FIXTURES / "xnn_mlp.pte")


# ==============================================================================================================
# Imports and LiteRT's stderr line
# ==============================================================================================================
def test_import_pterun_does_not_import_litert_nor_do_programs_with_nothing_for_it():
    # a portable program of a few cheap operators is not worth a LiteRT call; nothing is on the NumPy engine
    r = run_python(f"""
        import pterun
        assert "ai_edge_litert" not in sys.modules
        m = pterun.Runtime().load_program({str(FIXTURES / "unplanned_io.pte")!r}).load_method("forward")
        assert "ai_edge_litert" not in sys.modules and not m._runner.merged
        pterun.Runtime().load_program({str(FIXTURES / "mlp.pte")!r}, engine="numpy").load_method("forward")
        pterun.Runtime().load_program({str(FIXTURES / "xnn_mlp.pte")!r}, engine="numpy").load_method("forward")
        assert "ai_edge_litert" not in sys.modules
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


@needs_litert
def test_a_portable_program_with_matrix_products_compiles_into_one_litert_call():
    r = run_python(f"""
        import pterun
        m = pterun.Runtime().load_program({str(FIXTURES / "mlp.pte")!r}).load_method("forward")
        assert "ai_edge_litert" in sys.modules
        print([(ev.kind, ev.name) for ev in m.steps])
    """)
    assert r.returncode == 0 and r.stdout == "[('DelegateCall', 'delegate XnnpackBackend')]\n", r.stderr


@needs_litert
def test_loading_an_xnnpack_program_imports_litert_and_prints_nothing():
    r = run_python(f"""
        import logging
        import pterun
        records = []
        logging.getLogger("pterun").addHandler(type("H", (logging.Handler,), {{"emit": lambda s, r: records.append(
            r.getMessage())}})())
        logging.getLogger("pterun").setLevel(logging.INFO)
        m = pterun.Runtime().load_program({str(FIXTURES / "xnn_mobilenet_v2.pte")!r}).load_method("forward")
        assert "ai_edge_litert" in sys.modules and m.delegates[0].engine == "litert"
        print(records)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." did not get out
    assert "LiteRT: INFO: Created TensorFlow Lite XNNPACK delegate for CPU." in r.stdout


@needs_litert
def test_stderr_capture_passes_other_writers_through(capfd, caplog):
    from pterun.delegates.xnnpack.litert_engine.env import capture_native_stderr

    def other_thread():
        os.write(2, b"a line from another thread\n")

    with caplog.at_level(logging.INFO, logger="pterun"):
        with capture_native_stderr():
            os.write(2, b"INFO: native log line\n")
            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
            os.write(2, b"partial line without newline")
    err = capfd.readouterr().err
    assert err == "a line from another thread\npartial line without newline"
    assert [r.getMessage() for r in caplog.records] == ["LiteRT: INFO: native log line"]


# ==============================================================================================================
# The CLI: --engine, inspect, bench
# ==============================================================================================================
def test_cli_engine_flag_reaches_inspect_and_bench(monkeypatch, capsys):
    import json

    from pterun.cli import main

    monkeypatch.setenv("PTERUN_ENGINE", "auto")  # restored afterwards: --engine sets it for the process
    assert main(["--engine", "numpy", "inspect", str(FIXTURES / "xnn_mlp.pte")]) == 0
    assert "    engine: numpy\n" in capsys.readouterr().out
    assert main(["--engine", "numpy", "inspect", "--json", str(FIXTURES / "xnn_mlp.pte")]) == 0
    (d,) = json.loads(capsys.readouterr().out)["methods"][0]["delegates"]
    assert (d["engine"], d["engine_reason"]) == ("numpy", None)
    assert main(["--engine", "numpy", "bench", "--repeat", "2", str(FIXTURES / "xnn_mlp.pte")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "delegate 0 (XnnpackBackend): engine numpy"


@needs_litert
def test_cli_inspect_shows_why_a_delegate_is_not_on_litert(monkeypatch, capsys):
    from pterun.cli import main

    monkeypatch.setenv("PTERUN_ENGINE", "auto")
    assert main(["inspect", str(FIXTURES / "xnn_cnn.pte")]) == 0
    assert ("    engine: numpy (node 9 (XNNAvgPooling2d): pool padding [1, 1, 1, 1] is neither VALID nor SAME)\n"
            in capsys.readouterr().out)
    assert main(["--engine", "litert", "bench", "--repeat", "2", str(FIXTURES / "xnn_mobilenet_v2.pte")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "delegate 0 (XnnpackBackend): engine litert"
