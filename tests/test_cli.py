"""The pterun command, through ``main(argv)``: every user mistake is one line and an exit status, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls
from pterun import cli, threads
from pterun.cli import output  # noqa: F401  (cli.output: bench's progress)
from pterun.cli import main
from pterun.runtime import Method

LLM = FIXTURES / "llm"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(autouse=True)
def keep_thread_setting():
    width, blas = threads._width, threads.blas_threads()
    yield
    threads._width = width
    if blas:
        threads.set_blas_threads(blas)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err


# -- demo and global options ------------------------------------------------------------------------------------
def test_demo(capsys):
    assert main(["demo", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "matches ExecuTorch's recorded output: yes" in out
    assert "predicted class:" in out


@pytest.mark.parametrize("argv", [["--threads", "1", "demo", "--repeat", "1"], ["demo", "--threads", "1", "--repeat", "1"],
                                  ["demo", "--repeat", "1", "--threads", "1"]])
def test_global_options_work_before_or_after_the_command(argv, capsys):
    threads.set_num_threads(2)
    assert main(argv) == 0
    assert threads.num_threads() == 2  # the flag configures the command's Runtime, not the process default
    assert "on 1 thread(s)" in capsys.readouterr().out


def test_an_option_before_the_command_is_kept_when_the_command_does_not_repeat_it():
    with pytest.raises(Exception):
        main(["--debug", "run", str(FIXTURES / "nope.pte")])
    with pytest.raises(Exception):
        main(["run", str(FIXTURES / "nope.pte"), "--debug"])


@pytest.mark.parametrize("argv,message", [
    (["demo", "--repeat", "0"], "argument --repeat: must be at least 1, got 0"),
    (["bench", "mlp.pte", "--repeat", "0"], "argument --repeat: must be at least 1, got 0"),
    (["bench", "mlp.pte", "--warmup", "-1"], "argument --warmup: must be 0 or more, got -1"),
    (["--threads", "0", "demo"], "argument --threads: must be at least 1, got 0"),
    (["demo", "--threads", "x"], "argument --threads: expected a positive integer, got 'x'"),
])
def test_bad_numbers_are_usage_errors(argv, message, capsys):
    argv = [str(FIXTURES / a) if a.endswith(".pte") else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert err.startswith("usage: pterun")  # argparse's usage line, then "pterun [COMMAND]: error: ..."
    assert err.endswith(f": error: {message}\n") and err.splitlines()[-1].startswith("pterun")


def test_help_and_version_return_zero(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("pterun ")
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--warmup" in out and "--threads" in out and "--json" in out


# -- errors -----------------------------------------------------------------------------------------------------
def test_errors_are_one_line_with_nonzero_exit(tmp_path, capsys):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program at all, just text" * 4)
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("pterun: error: InvalidProgramError: ")
    assert main(["run", str(FIXTURES / "mlp.pte"), "--method", "nope"]) == 1
    assert "MethodNotFoundError: no method named 'nope'" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.pte")]) == 1
    assert capsys.readouterr().err == f"pterun: error: FileNotFoundError: no such program file: " \
                                      f"'{tmp_path / 'missing.pte'}'\n"


def test_debug_shows_the_traceback(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"x" * 100)
    with pytest.raises(Exception):
        main(["--debug", "run", str(bad)])


def test_tensor_output_torch_in_the_environment_does_not_matter_to_the_cli(monkeypatch, capsys):
    # the command line prints and saves NumPy arrays; the variable is for Python code (and needs torch there)
    monkeypatch.setenv("PTERUN_TENSOR_OUTPUT", "torch")
    assert main(["run", str(FIXTURES / "mlp.pte")]) == 0
    assert "output 0: float32[4, 10]" in capsys.readouterr().out
    monkeypatch.setenv("PTERUN_TENSOR_OUTPUT", "nonsense")
    assert main(["bench", str(FIXTURES / "mlp.pte"), "--repeat", "1"]) == 0


def test_a_missing_library_is_one_line(monkeypatch, capsys):
    def no_torch(*args, **kwargs):
        raise ImportError("tensor_output='torch' needs PyTorch, which is not installed")
    monkeypatch.setattr(cli, "build_parser", _parser_with_demo(no_torch))
    assert main(["demo"]) == 1
    assert capsys.readouterr().err == "pterun: error: ImportError: tensor_output='torch' needs PyTorch, which is " \
                                      "not installed\n"


def _parser_with_demo(fn):
    build = cli.build_parser

    def parser():
        p = build()
        p._subparsers._group_actions[0].choices["demo"].set_defaults(fn=fn)
        return p
    return parser


@pytest.mark.parametrize("command", ["run", "bench", "ops", "trace"])
def test_a_ptd_where_a_program_is_expected_says_so(command, capsys, tmp_path):
    # a bad file, so status 1 (2 is for options that are wrong whatever the files hold)
    argv = [command, str(FIXTURES / "ext_mlp.ptd")] + (["--out", str(tmp_path / "t.npz")] if command == "trace" else [])
    assert main(argv) == 1
    err = capsys.readouterr().err
    _no_traceback(err)
    assert err.startswith(f"pterun: error: {FIXTURES / 'ext_mlp.ptd'} is an external data file (.ptd), not a "
                          "program")
    assert err.count("\n") == 1


def test_verify_of_a_plain_program_says_it_needs_a_bundle(capsys):
    assert main(["verify", str(FIXTURES / "mlp.pte")]) == 1
    assert capsys.readouterr().err == (f"pterun: error: {FIXTURES / 'mlp.pte'} is a program (.pte), not a bundled "
                                       "program (.bpte): verify needs one, since a .pte carries no expected outputs\n")
    assert main(["verify", str(FIXTURES / "ext_mlp.ptd")]) == 1  # speaks of what the file is: a .ptd
    assert capsys.readouterr().err == (f"pterun: error: {FIXTURES / 'ext_mlp.ptd'} is an external data file (.ptd), "
                                       "not a bundled program (.bpte): verify needs one, since a .ptd holds weights, "
                                       "not test cases\n")


def test_hints_name_command_line_flags_not_python_arguments(capsys):
    assert main(["run", str(FIXTURES / "ext_mlp.pte")]) == 1
    err = capsys.readouterr().err
    assert "no --data-path was given" in err and "data_path" not in err
    assert main(["run", str(FIXTURES / "ext_mlp.ptd").replace(".ptd", ".pte"), "--data-path",
                 str(FIXTURES / "ext_mlp.ptd")]) == 0


def test_a_closed_pipe_exits_quietly(monkeypatch, capsys):
    class ClosedPipe:
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            raise OSError("no file descriptor")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["inspect", str(FIXTURES / "xnn_mobilenet_v2.pte")]) == 141
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_in_a_real_pipeline_prints_nothing():
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_SETPIPE_SZ"):
        pytest.skip("needs Linux's F_SETPIPE_SZ to make the pipe smaller than the output")
    code = f"import sys; sys.path.insert(0, {str(SRC)!r}); from pterun.cli import main; sys.exit(main())"
    p = subprocess.Popen([sys.executable, "-c", code, "ops"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fcntl.fcntl(p.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)  # `pterun ops` writes ~10 kB: it must block
    p.stdout.read(10)
    p.stdout.close()  # what `| head -c 10` does
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert err == ""


# -- run --------------------------------------------------------------------------------------------------------
def test_run_with_inputs_and_outputs(tmp_path, capsys):
    call = load_calls("mlp")[0]
    np.save(tmp_path / "x.npy", call["inputs"][0])
    out = tmp_path / "out.npz"
    assert main(["run", str(FIXTURES / "mlp.pte"), "--input", str(tmp_path / "x.npy"), "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "output 0: float32[4, 10]" in text
    assert text.endswith(f"wrote 1 output to {out} (as out0)\n")
    with np.load(out) as z:
        np.testing.assert_allclose(z["out0"], call["outputs"][0], rtol=1e-5, atol=1e-6)


def test_run_says_which_names_it_saved_the_outputs_under(tmp_path, capsys):
    out = tmp_path / "many.npz"
    assert main(["run", str(FIXTURES / "xnn_gru.pte"), "--output", str(out)]) == 0
    assert capsys.readouterr().out.endswith(f"wrote 2 outputs to {out} (as out0, out1)\n")
    assert main(["run", str(FIXTURES / "ops_misc.pte"), "--output", str(out)]) == 0
    with np.load(out) as z:
        assert z.files == [f"out{i}" for i in range(19)]
    assert capsys.readouterr().out.endswith(f"wrote 19 outputs to {out} (as out0 ... out18)\n")


def test_run_of_a_method_without_inputs_says_so(capsys):
    assert main(["run", str(FIXTURES / "multi_method.pte"), "--method", "get_max_seq_len"]) == 0
    assert capsys.readouterr().out.startswith("inputs: none (the method takes no inputs)\noutput 0: int 128\n")


def test_output_without_extension_names_the_file_it_wrote(tmp_path, capsys):
    assert main(["run", str(FIXTURES / "mlp.pte"), "--output", str(tmp_path / "out")]) == 0
    assert f"to {tmp_path / 'out.npz'} " in capsys.readouterr().out
    assert (tmp_path / "out.npz").exists() and not (tmp_path / "out").exists()


def test_run_prints_small_outputs(tmp_path, capsys):
    call = load_calls("mlp")[0]
    np.save(tmp_path / "x.npy", call["inputs"][0])
    assert main(["run", str(FIXTURES / "mlp.pte"), "--input", str(tmp_path / "x.npy")]) == 0
    text = capsys.readouterr().out
    printed = text.split("output 0: ")[1].split("\n", 1)[1].split("method 'forward'")[0]
    values = np.array([float(v) for v in printed.replace("[", " ").replace("]", " ").split()], np.float32)
    np.testing.assert_allclose(values.reshape(4, 10), call["outputs"][0], rtol=1e-5, atol=2e-6)


def test_run_does_not_print_large_outputs(capsys):
    assert main(["run", str(LLM / "nokv.pte")]) == 0
    out = capsys.readouterr().out
    assert "output 0: float32[1, 512] min=" in out and "[[" not in out


def test_run_json_has_every_output_value(tmp_path, capsys):
    assert main(["run", str(FIXTURES / "mlp.pte"), "--json", "--seed", "3"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["method"] == "forward" and info["inputs_from"] == "random values (seed 3)"
    assert info["inputs"] == [{"kind": "Tensor", "dtype": "float32", "shape": [4, 16]}]
    (o,) = info["outputs"]
    assert o["kind"] == "Tensor" and o["dtype"] == "float32" and o["shape"] == [4, 10]
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    from pterun import Runtime
    want = Runtime.get().load_program(FIXTURES / "mlp.pte").load_method("forward").execute([x])[0]
    np.testing.assert_allclose(np.array(o["values"], np.float32), want, rtol=1e-6, atol=1e-7)
    assert set(info) == {"file", "method", "inputs_from", "inputs", "outputs", "load_ms", "run_ms", "saved_to"}
    assert main(["run", str(FIXTURES / "multi_method.pte"), "--method", "get_max_seq_len", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"] == [{"kind": "Int", "value": 128}]


def test_run_with_random_inputs_and_method(capsys):
    assert main(["run", str(FIXTURES / "multi_method.pte"), "--method", "encode"]) == 0
    text = capsys.readouterr().out
    assert "inputs: random values (seed 0)" in text
    assert "output 0: float32[5, 4]" in text


@pytest.mark.parametrize("variant", ["kv_sdpa", "kv_xnn", "kv_8da4w", "nokv"])
def test_run_random_inputs_of_an_llm_fit_its_context(variant, capsys):
    # a random start position plus a full-length token input would overflow the KV cache
    assert main(["run", str(LLM / f"{variant}.pte")]) == 0
    out = capsys.readouterr().out
    assert "inputs: an LLM: 127 random tokens below the vocabulary size 512" in out
    assert ("start position 0" in out) == variant.startswith("kv")
    assert "output 0: float32[1, 512]" in out


def test_run_and_bench_take_a_bundled_program(capsys):
    assert main(["run", str(FIXTURES / "bundled.bpte")]) == 0
    out = capsys.readouterr().out
    assert "inputs: the bundled program's test case 0" in out
    assert main(["bench", str(FIXTURES / "bundled.bpte"), "--repeat", "2"]) == 0


# -- bench ------------------------------------------------------------------------------------------------------
def test_bench_json_and_warmup(monkeypatch, capsys):
    calls = []
    real = Method.execute
    monkeypatch.setattr(Method, "execute", lambda self, inputs=(): calls.append(1) or real(self, inputs))
    assert main(["bench", str(FIXTURES / "mlp.pte"), "--repeat", "5", "--warmup", "3", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert len(calls) == 1 + 3 + 5
    assert info["calls"] == 5 and info["warmup"] == 3 and info["repeat"] == 5 and info["interrupted"] is False
    assert 0 < info["min_ms"] <= info["median_ms"] <= info["p90_ms"]
    assert info["threads"] == threads.num_threads()
    assert {"file", "method", "load_ms", "first_call_ms", "mean_ms", "blas_threads", "inputs_from"} <= set(info)


def test_bench_shows_progress_on_long_runs(monkeypatch, capsys):
    monkeypatch.setattr(cli.output, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(cli.output, "PROGRESS_EVERY_S", 0.0)  # a line after every call
    assert main(["bench", str(FIXTURES / "mlp.pte"), "--repeat", "3", "--warmup", "2"]) == 0
    out, err = capsys.readouterr()
    # timed calls are counted as the result line counts them, warm-up calls apart
    lines = err.splitlines()
    assert [ln.split(",")[0] for ln in lines] == ["bench: warm-up call 1 of 2", "bench: warm-up call 2 of 2",
                                                  "bench: 1 of 3 calls", "bench: 2 of 3 calls", "bench: 3 of 3 calls"]
    assert "median so far" in lines[2]
    assert "median" in out and "over 3 calls (2 warm-up)" in out


def test_bench_is_quiet_on_short_runs(capsys):
    assert main(["bench", str(FIXTURES / "mlp.pte"), "--repeat", "3"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("as_json", [False, True])
def test_bench_prints_what_it_has_on_ctrl_c(monkeypatch, capsys, as_json):
    calls = []
    real = Method.execute

    def execute(self, inputs=()):
        calls.append(1)
        if len(calls) == 1 + 2 + 4:  # first call, 2 warm-up, then the 5th timed call is interrupted
            raise KeyboardInterrupt
        return real(self, inputs)
    monkeypatch.setattr(Method, "execute", execute)
    argv = ["bench", str(FIXTURES / "mlp.pte"), "--repeat", "100"] + (["--json"] if as_json else [])
    assert main(argv) == 130
    out = capsys.readouterr().out
    if as_json:
        info = json.loads(out)
        assert info["interrupted"] is True and info["calls"] == 3 and info["median_ms"] > 0
    else:
        assert "over 3 calls (2 warm-up)" in out and "(interrupted after 3 of 100 calls)" in out


def test_bench_interrupted_before_any_timed_call(monkeypatch, capsys):
    calls = []
    real = Method.execute

    def execute(self, inputs=()):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, inputs)
    monkeypatch.setattr(Method, "execute", execute)
    assert main(["bench", str(FIXTURES / "mlp.pte"), "--json"]) == 130
    info = json.loads(capsys.readouterr().out)
    assert info["calls"] == 0 and info["median_ms"] is None and info["interrupted"] is True


def test_threads_option_sets_pterun_threads_process_wide(capsys):
    blas = threads.blas_threads()
    assert main(["--threads", "2", "bench", str(FIXTURES / "cnn.pte"), "--repeat", "2"]) == 0
    assert threads.num_threads() == 2
    if blas is not None and not any(os.environ.get(v) for v in threads.BLAS_ENV):
        assert threads.blas_threads() == 1
    assert "on 2 thread(s)" in capsys.readouterr().out


# -- inspect and ops --------------------------------------------------------------------------------------------
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


METHOD_KEYS = {"name", "inputs", "outputs", "num_values", "num_instructions", "operators", "delegates",
               "memory_planned_buffers", "external_tensors", "constant_values"}


@pytest.mark.parametrize("name", ["mlp.pte", "multi_method.pte", "ext_mlp.pte", "xnn_transformer.pte",
                                  "bundled.bpte", "llm/kv_sdpa.pte"])
def test_inspect_json_has_every_documented_key_on_every_method(name, capsys):
    args = ["inspect", "--json", str(FIXTURES / name)]
    if name == "ext_mlp.pte":
        args += ["--data-path", str(FIXTURES / "ext_mlp.ptd")]
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"file", "kind", "file_bytes", "methods", "segments", "named_data_keys", "supported"} <= set(info)
    for m in info["methods"]:
        assert set(m) == METHOD_KEYS, m["name"]
        assert isinstance(m["external_tensors"], list) and isinstance(m["constant_values"], list)
    by_name = {m["name"]: m for m in info["methods"]}
    if name == "ext_mlp.pte":
        assert by_name["forward"]["external_tensors"] == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    else:
        assert all(m["external_tensors"] == [] for m in info["methods"])
    if name == "multi_method.pte":
        assert by_name["get_max_seq_len"]["constant_values"] == [128] and by_name["forward"]["constant_values"] == []


def test_inspect_json_of_a_ptd_has_every_key(capsys):
    assert main(["inspect", "--json", str(FIXTURES / "ext_mlp.ptd")]) == 0
    info = json.loads(capsys.readouterr().out)
    for e in info["keys"]:
        assert set(e) == {"key", "dtype", "numpy_dtype", "shape", "dim_order", "bytes"}
    assert info["keys"][0] == {"key": "fc1.bias", "dtype": "Float", "numpy_dtype": "float32", "shape": [16],
                               "dim_order": [0], "bytes": 64}


def test_inspect_spells_dtypes_the_same_for_pte_and_ptd(capsys):
    assert main(["inspect", str(FIXTURES / "ext_mlp.ptd")]) == 0
    ptd = capsys.readouterr().out
    assert "fc1.bias    float32[16]  64 bytes" in ptd and "Float" not in ptd
    assert main(["inspect", str(FIXTURES / "ext_mlp.pte"), "--data-path", str(FIXTURES / "ext_mlp.ptd")]) == 0
    assert "input 0: float32[2, 8]" in capsys.readouterr().out


def test_inspect_groups_delegate_calls_by_backend(capsys):
    assert main(["inspect", str(FIXTURES / "xnn_transformer.pte")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "delegate " in ln]
    assert lines == ["  delegate XnnpackBackend: 7 call(s) of 7 payload(s), 7968 payload bytes"]
    assert main(["inspect", "--json", str(FIXTURES / "xnn_transformer.pte")]) == 0
    (m,) = json.loads(capsys.readouterr().out)["methods"]
    assert [d["calls"] for d in m["delegates"]] == [1] * 7  # each payload's own calls


def test_ops_for_a_file(capsys):
    assert main(["ops", str(FIXTURES / "mlp.pte")]) == 0
    assert "operators supported" in capsys.readouterr().out
    assert main(["ops", str(FIXTURES / "bundled.bpte")]) == 0


# -- entry points -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", ["pterun", "pterun.cli"])
def test_python_dash_m(module):
    r = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(SRC)})
    assert r.returncode == 0 and r.stdout.startswith("pterun ")
    r = subprocess.run([sys.executable, "-m", module, "demo", "--repeat", "0"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1] == "pterun demo: error: argument --repeat: must be at least 1, got 0"


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed")
def test_the_command_exits_without_litert_s_teardown_lines_and_keeps_its_status(tmp_path):
    """LiteRT's CompiledModel (here: an LLM's layers and caches joined into one call) leaves an environment that
    logs two INFO lines when the process tears its C++ objects down; the command exits without them, after
    Python's other exit handlers (the entry point and ``python -m pterun`` alike)."""
    llm = str(FIXTURES / "llm" / "kv_xnn.pte")
    flag = tmp_path / "exit-handlers-ran"
    # an exit handler registered while the command runs (as the logging module's is) still runs
    code = ("import atexit, pathlib, sys; import pterun.cli as cli; flag = pathlib.Path(sys.argv.pop(1)); "
            "main = cli.main; cli.main = lambda: (atexit.register(flag.touch), main())[1]; "
            "sys.argv[0] = 'pterun'; cli.command()")
    r = subprocess.run([sys.executable, "-c", code, str(flag), "--engine", "litert", "bench", llm, "--repeat", "1"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert r.returncode == 0 and "per run" in r.stdout and flag.exists()
    assert "DestroyAccelerator" not in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "pterun", "--engine", "litert", "run", llm], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert r.returncode == 0 and "output 0: float32[1, 512]" in r.stdout and "DestroyAccelerator" not in r.stderr


@pytest.mark.parametrize("before", [True, False])
def test_engine_is_a_global_option_too(before, monkeypatch, capsys):
    monkeypatch.setenv("PTERUN_ENGINE", "auto")  # the flag beats the variable (restored after the test)
    command = ["bench", str(FIXTURES / "xnn_mlp.pte"), "--repeat", "1"]
    assert main(["--engine", "numpy", *command] if before else [*command, "--engine", "numpy"]) == 0
    assert "delegate 0 (XnnpackBackend): engine numpy" in capsys.readouterr().out
    assert os.environ["PTERUN_ENGINE"] == "auto"  # passed to the command's Runtime, not written to the process


def test_bench_groups_delegates_that_run_alike(capsys):
    # xnn_transformer has 7 XNNPACK delegates: one line, not seven
    assert main(["--engine", "numpy", "bench", str(FIXTURES / "xnn_transformer.pte"), "--repeat", "1"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "XnnpackBackend" in ln]
    assert lines == ["delegates 0-6 (XnnpackBackend): engine numpy"]


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed")
def test_bench_says_how_many_delegate_calls_run_merged(capsys, monkeypatch):
    monkeypatch.delenv("PTERUN_NO_MERGE", raising=False)
    llm = str(FIXTURES / "llm" / "kv_xnn.pte")
    assert main(["--engine", "litert", "bench", llm, "--repeat", "1"]) == 0
    assert ("1 delegate call(s) per run; 1 of them each run several neighbouring instructions (delegate calls, "
            "portable operators) compiled into one LiteRT program (PTERUN_NO_MERGE=1 keeps them apart)") in \
        capsys.readouterr().out.splitlines()
    monkeypatch.setenv("PTERUN_NO_MERGE", "1")
    assert main(["--engine", "litert", "bench", llm, "--repeat", "1"]) == 0
    assert "merged" not in capsys.readouterr().out


def test_index_ranges_are_compressed():
    from pterun.cli.output import ranges as _ranges
    assert _ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert _ranges([3]) == "3"
