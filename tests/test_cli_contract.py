"""The command line's one contract, over every command: a wrong option exits 2 with argparse's usage error naming
the option (found before any file is opened), a bad file or input exits 1 with one line naming it, Ctrl-C exits
130 at any moment; never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from fixtures_util import FIXTURES
from pterun import threads
from pterun.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"
MLP = str(FIXTURES / "mlp.pte")
BPTE = str(FIXTURES / "bundled.bpte")
PTD = str(FIXTURES / "ext_mlp.ptd")
LLM = str(FIXTURES / "llm" / "kv_sdpa.pte")
TOKENIZER = str(FIXTURES / "llm" / "tokenizer.json")
GEN = ["generate", LLM, "--tokenizer", TOKENIZER, "--prompt", "hi"]
MM = FIXTURES / "multimodal"
WAV, WHISPER, WTOK = str(MM / "speech.wav"), str(MM / "whisper.pte"), str(MM / "whisper_tokenizer.json")
ASR = ["transcribe", WAV, "--model", WHISPER, "--tokenizer", WTOK]

# (argv, the option or thing the message must name); "{tmp}" is a fresh directory, "{npz3}" a .npz of 3 arrays
WRONG_OPTIONS = [
    (["run", MLP, "--seed", "-1"], "argument --seed: must be 0 or more, got -1"),
    (["run", MLP, "--seed", "one"], "argument --seed: expected a whole number, got 'one'"),
    (["run", MLP, "--input", "x.txt"], "argument --input: expected a .npy or .npz file, got 'x.txt'"),
    (["run"], "the following arguments are required: file"),
    (["run", MLP, "--threads", "0"], "argument --threads: must be at least 1, got 0"),
    (["run", MLP, "--threads", "1000"], "argument --threads: must be at most"),
    (["--threads", "2.5", "run", MLP], "argument --threads: expected a positive integer, got '2.5'"),
    (["run", MLP, "--engine", "tpu"], "argument --engine: invalid choice: 'tpu'"),
    (["run", MLP, "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["inspect"], "the following arguments are required: file"),
    (["inspect", MLP, "--threads", "-3"], "argument --threads: must be at least 1, got -3"),
    (["demo", "--repeat", "0"], "argument --repeat: must be at least 1, got 0"),
    (["verify", BPTE, "--rtol", "-1"], "argument --rtol: must be 0 or more, got -1"),
    (["verify", BPTE, "--atol", "nan"], "argument --atol: must be a finite number, got 'nan'"),
    (["verify", BPTE, "--rtol", "tight"], "argument --rtol: expected a number, got 'tight'"),
    (["bench", MLP, "--repeat", "0"], "argument --repeat: must be at least 1, got 0"),
    (["bench", MLP, "--warmup", "-1"], "argument --warmup: must be 0 or more, got -1"),
    (["bench", MLP, "--seed", "-1"], "argument --seed: must be 0 or more, got -1"),
    (["ops", "--threads", "1000"], "argument --threads: must be at most"),
    (["trace", MLP], "one of the arguments --out --compare is required"),
    (["trace", "--out", "t.npz"], "--out needs the program to trace"),
    (["trace", MLP, "--out", "t.npz", "--compare", "a.npz", "b.npz"], "argument --compare: not allowed with "
                                                                        "argument --out"),
    (["trace", MLP, "--compare", "a.npz", "b.npz"], f"the program {MLP} is not used by --compare"),
    (["trace", "--compare", "a.npz", "b.npz", "--seed", "0"], "--seed is not used by --compare"),
    (["trace", "--compare", "a.npz", "b.npz", "--rtol", "-1"], "argument --rtol: must be 0 or more, got -1"),
    (["trace", MLP, "--out", "t.npz", "--atol", "1"], "--atol is for --compare only"),
    ([*GEN, "--temperature", "-1"], "argument --temperature: must be 0 or more, got -1"),
    ([*GEN, "--top-k", "-1"], "argument --top-k: must be 0 or more, got -1"),
    ([*GEN, "--top-p", "2"], "argument --top-p: must be above 0 and at most 1 (1 = off), got 2"),
    ([*GEN, "--top-p", "0"], "argument --top-p: must be above 0 and at most 1 (1 = off), got 0"),
    ([*GEN, "--num-bos", "-1"], "argument --num-bos: must be 0 or more, got -1"),
    ([*GEN, "--max-new-tokens", "0"], "argument --max-new-tokens: must be at least 1, or -1 for the rest of the "
                                      "context, got 0"),
    ([*GEN, "--seed", "-1"], "argument --seed: must be 0 or more, got -1"),
    (["generate", LLM, "--prompt", "hi"], "the following arguments are required: --tokenizer"),
    ([*ASR, "--max-new-tokens", "0"], "argument --max-new-tokens: must be at least 1, got 0"),
    ([*ASR, "--temperature", "-1"], "argument --temperature: must be 0 or more, got -1"),
    ([*ASR, "--seed", "-1"], "argument --seed: must be 0 or more, got -1"),
    (["transcribe", WAV, "--tokenizer", WTOK], "the following arguments are required: --model"),
    (["no-such-command"], "argument COMMAND: invalid choice: 'no-such-command'"),
]

BAD_FILES = [
    (["run", "{tmp}"], "{tmp} is a directory, not a file"),
    (["inspect", "{tmp}"], "{tmp} is a directory, not a file"),
    (["bench", "{tmp}"], "{tmp} is a directory, not a file"),
    (["verify", "{tmp}"], "{tmp} is a directory, not a file"),
    (["ops", "{tmp}"], "{tmp} is a directory, not a file"),
    (["trace", "{tmp}", "--out", "{tmp}/t.npz"], "{tmp} is a directory, not a file"),
    (["generate", "{tmp}", "--tokenizer", TOKENIZER, "--prompt", "hi"], "{tmp} is a directory, not a file"),
    (["transcribe", "{tmp}", "--model", WHISPER, "--tokenizer", WTOK], "{tmp} is a directory, not a file"),
    (["transcribe", WAV, "--model", "{tmp}", "--tokenizer", WTOK], "{tmp} is a directory, not a file"),
    (["transcribe", "{tmp}/missing.wav", "--model", WHISPER, "--tokenizer", WTOK],
     "no such audio file: '{tmp}/missing.wav'"),
    (["transcribe", WHISPER, "--model", WHISPER, "--tokenizer", WTOK], "not a WAV file pterun can read"),
    (["run", MLP, "--data-path", "{tmp}"], "{tmp} is a directory, not a file"),
    (["run", "{tmp}/missing.pte"], "no such program file: '{tmp}/missing.pte'"),
    (["inspect", "{tmp}/missing.pte"], "{tmp}/missing.pte"),
    (["run", MLP, "--input", "{tmp}/missing.npy"], "--input {tmp}/missing.npy: no such file"),
    (["run", MLP, "--input", "{npz3}"], "method 'forward' takes 1 input(s) (float32[4, 16]); --input gave 3: "
                                        "{npz3}[a] float32[4, 16], {npz3}[b] float32[2], {npz3}[c] int64[3]"),
    (["run", MLP, "--input", "{tmp}/text.npy"], "--input {tmp}/text.npy: not a readable .npy file"),
    (["run", MLP, "--method", "backward"], "MethodNotFoundError: no method named 'backward'"),
    (["run", PTD], f"{PTD} is an external data file (.ptd), not a program"),
    (["bench", PTD], f"{PTD} is an external data file (.ptd), not a program"),
    (["ops", PTD], f"{PTD} is an external data file (.ptd), not a program"),
    (["verify", MLP], f"{MLP} is a program (.pte), not a bundled program (.bpte)"),
    (["verify", PTD], f"{PTD} is an external data file (.ptd), not a bundled program (.bpte)"),
    (["run", "{tmp}/text.npy"], "InvalidProgramError"),
    (["trace", "--compare", "{tmp}/missing.npz", "{tmp}/missing.npz"], "{tmp}/missing.npz"),
]


@pytest.fixture(autouse=True)
def keep_thread_setting():
    width = threads._width
    yield
    threads._width = width


@pytest.fixture
def files(tmp_path):
    np.savez(tmp_path / "three.npz", a=np.zeros((4, 16), np.float32), b=np.ones(2, np.float32), c=np.arange(3))
    (tmp_path / "text.npy").write_text("not an array, just text\n" * 4)
    return {"tmp": str(tmp_path), "npz3": str(tmp_path / "three.npz")}


def _fill(items: list[str], files: dict) -> list[str]:
    return [s.format(**files) for s in items]


def _one_line_naming(err: str, named: str) -> None:
    assert "Traceback" not in err
    assert named in err, err
    assert err.endswith("\n") and named in err.splitlines()[-1] and err.splitlines()[-1].startswith("pterun")


@pytest.mark.parametrize("argv,named", WRONG_OPTIONS, ids=lambda v: " ".join(v[:4]) if isinstance(v, list) else None)
def test_a_wrong_option_exits_2_naming_it(argv, named, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: pterun")  # argparse's usage line, then "pterun COMMAND: error: ..."
    _one_line_naming(err, named)


@pytest.mark.parametrize("argv,named", BAD_FILES, ids=lambda v: " ".join(v[:3]) if isinstance(v, list) else None)
def test_a_bad_file_or_input_exits_1_in_one_line(argv, named, files, capsys):
    assert main(_fill(argv, files)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pterun: error: ")
    _one_line_naming(err, named.format(**files))


def test_every_command_is_in_the_tables():
    from pterun.cli import build_parser
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    assert commands == {"run", "inspect", "demo", "verify", "bench", "generate", "transcribe", "ops", "trace"}
    covered = {a[0] for a, _ in WRONG_OPTIONS} | {a[0] for a, _ in BAD_FILES}
    assert commands <= covered


def test_more_threads_than_cores_is_allowed_with_a_warning(monkeypatch, capsys):
    monkeypatch.setattr(threads, "default_num_threads", lambda: 2)
    assert main(["--threads", "3", "demo", "--repeat", "1"]) == 0
    out, err = capsys.readouterr()
    assert "on 3 thread(s)" in out
    assert err == ("pterun: warning: --threads 3 is more than the 2 core(s) this process may use; the threads beyond "
                   "them take turns\n")
    assert main(["--threads", "9", "demo"]) == 2  # over 4 per core: a mistake
    assert capsys.readouterr().err.endswith("argument --threads: must be at most 8 (4 per core; this process may use "
                                            "2), got 9\n")


def test_an_unexpected_error_is_one_line_too(monkeypatch, capsys):
    from pterun.cli import run

    def broken(args):
        raise RuntimeError("something pterun did not foresee")
    monkeypatch.setattr(run, "cmd_demo", broken)
    assert main(["demo"]) == 1
    assert capsys.readouterr().err == ("pterun: error: internal error: RuntimeError: something pterun did not foresee "
                                       "(run again with --debug for the traceback, and please report it)\n")
    with pytest.raises(RuntimeError):
        main(["demo", "--debug"])


# -- Ctrl-C ------------------------------------------------------------------------------------------------------
# A shell starts a job in the background (`pytest &`) with SIGINT ignored, and its children inherit that: Python
# then keeps it ignored, and a Ctrl-C test's signal would do nothing. Each child (and each test that delivers a
# SIGINT in this process) starts from Python's own handler, as a command typed at a terminal does.
_DEFAULT_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def _python(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _DEFAULT_SIGINT + code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}, **kw)


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler in this process for the test (see _DEFAULT_SIGINT)."""
    if not hasattr(signal, "SIGINT") or sys.platform == "win32":
        pytest.skip("needs POSIX signals")
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_the_entry_point_imports_nothing_slow_before_main_runs():
    # the console script runs `from pterun.cli import main` outside main(): that import must be all but instant,
    # so a Ctrl-C can only land there in the interpreter's own start-up; NumPy and the runtime load inside main()
    code = ("import sys; before = set(sys.modules); from pterun.cli import main; "
            "print(sorted(m for m in set(sys.modules) - before if not m.startswith('_')))")
    p = _python(code)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert eval(out) == ["pterun", "pterun.cli", "pterun.errors"]


@pytest.mark.parametrize("module", ["argparse", "numpy", "pterun.runtime", "pterun.cli.parser", "pterun.cli.run",
                                    "pterun.summary", "pterun.kernels"])
def test_ctrl_c_during_any_import_is_status_130_and_one_line(module):
    # a finder that raises KeyboardInterrupt when `module` is imported: Ctrl-C at that very moment
    code = textwrap.dedent(f"""
        import sys
        class CtrlC:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    raise KeyboardInterrupt
        sys.meta_path.insert(0, CtrlC())
        for m in [m for m in sys.modules if m == {module!r} or m.startswith({module!r} + ".")]:
            del sys.modules[m]
        from pterun.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    command = ["inspect", MLP] if module == "pterun.summary" else ["demo", "--repeat", "1"]
    p = _python(code, *command)
    out, err = p.communicate(timeout=120)
    assert (p.returncode, err) == (130, "pterun: interrupted\n")


@pytest.mark.parametrize("module", ["numpy", "pterun.runtime"])
def test_ctrl_c_that_an_import_turned_into_an_import_error_is_still_status_130(module):
    # NumPy's C import catches the KeyboardInterrupt of a Ctrl-C landing inside it and raises ImportError
    # ('PyCapsule_Import could not import module "datetime"'): seen as status 1 and NumPy's long message, both
    # where the parser is built (numpy) and inside a command (pterun.runtime)
    if not hasattr(signal, "SIGINT") or sys.platform == "win32":
        pytest.skip("needs POSIX signals")
    code = textwrap.dedent(f"""
        import os, signal, sys
        class CtrlCInside:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    try:
                        os.kill(os.getpid(), signal.SIGINT)
                        signal.raise_signal(signal.SIGINT)  # delivered here, whichever thread the kill reached
                    except KeyboardInterrupt:
                        raise ImportError('PyCapsule_Import could not import module "datetime"')
        sys.meta_path.insert(0, CtrlCInside())
        from pterun.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    p = _python(code, "demo", "--repeat", "1")
    out, err = p.communicate(timeout=120)
    assert (p.returncode, err, out) == (130, "pterun: interrupted\n", "")


@pytest.mark.parametrize("delay", [0.1, 0.25, 0.4, 0.8, 2.0])
def test_a_real_ctrl_c_at_any_moment_is_status_130_without_a_traceback(delay):
    # the signal lands wherever the command is after `delay` seconds: importing, loading, running, printing. The
    # clock starts once the entry point's import is done (a Ctrl-C before that is Python's own, and that import is
    # all but instant: test_the_entry_point_imports_nothing_slow_before_main_runs); on a loaded machine 0.1 s
    # from before it could land there
    if not hasattr(signal, "SIGINT") or sys.platform == "win32":
        pytest.skip("needs POSIX signals")
    p = _python("import sys; from pterun.cli import main; print('started', flush=True); sys.exit(main(sys.argv[1:]))",
                "demo", "--repeat", "100000000")
    assert p.stdout.readline() == "started\n"
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert "Traceback" not in err
    assert p.returncode == 130 and err.endswith("pterun: interrupted\n"), (p.returncode, err)


def test_ctrl_c_during_bench_prints_the_timings_so_far():
    if not hasattr(signal, "SIGINT") or sys.platform == "win32":
        pytest.skip("needs POSIX signals")
    p = _python("import sys; from pterun.cli import main; sys.exit(main(sys.argv[1:]))",
                "bench", MLP, "--repeat", "100000000", "--warmup", "0")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # progress shows after 2 s, when the timed calls run
        line = p.stderr.readline()
        if line.startswith("bench: ") or not line:
            break
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in err
    assert "calls (0 warm-up)" in out and "of 100000000 calls)" in out


def test_the_cli_package_keeps_its_modules_and_functions_short():
    # issue 23: no module over 500 lines, no function over 60, in the command line as elsewhere
    import ast
    for path in sorted((SRC / "pterun" / "cli").glob("*.py")):
        text = path.read_text()
        assert text.count("\n") <= 500, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 60, f"{path.name}: {node.name}"


def test_a_ctrl_c_that_a_weakref_callback_swallowed_still_stops_the_command(monkeypatch, python_sigint):
    # CPython ignores an exception raised inside a weakref callback: a SIGINT whose handler runs there was lost,
    # and `pterun demo --repeat N` went on (seen once in the real Ctrl-C test above, on a loaded machine)
    import os
    import weakref

    from pterun.cli import ctrlc

    if not hasattr(signal, "SIGINT") or sys.platform == "win32":
        pytest.skip("needs POSIX signals")

    class Dying:
        pass

    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    before = signal.getsignal(signal.SIGINT)
    with ctrlc.installed():
        ctrlc.check()  # nothing pressed yet
        obj = Dying()
        ref = weakref.ref(obj, lambda r: 1 / 0)
        del obj  # any other error a callback drops still reaches the hook
        assert ref() is None and dropped == [ZeroDivisionError]
        obj = Dying()
        ref = weakref.ref(obj, lambda r: os.kill(os.getpid(), signal.SIGINT))
        del obj  # the callback runs, the handler raises inside it, CPython drops the KeyboardInterrupt: not printed
        assert ref() is None and dropped == [ZeroDivisionError]
        with pytest.raises(KeyboardInterrupt):
            ctrlc.check()
    assert signal.getsignal(signal.SIGINT) is before
    assert sys.unraisablehook is not None and sys.unraisablehook.__name__ == "<lambda>"  # the hook comes back
    with ctrlc.installed():
        ctrlc.check()  # a new command starts with the flag down


def test_a_ctrl_c_inside_the_import_machinery_is_raised_once_out_of_it(monkeypatch, python_sigint):
    # raised between `_imp.acquire_lock()` and its `try` (importlib's callback that forgets a module lock), a
    # KeyboardInterrupt leaves the global import lock taken, and any other thread that imports hangs for ever
    # (a real Ctrl-C test above once ran into its 120 s timeout on a loaded machine)
    import types

    from pterun.cli import ctrlc

    if not hasattr(signal, "SIGINT") or sys.platform == "win32":
        pytest.skip("needs POSIX signals")
    inside = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename="<frozen importlib._bootstrap>"))
    asked = []
    monkeypatch.setattr(ctrlc._thread, "interrupt_main", lambda: asked.append(1))
    with ctrlc.installed():
        assert ctrlc._on_sigint(signal.SIGINT, inside) is None  # no raise there: the signal asked for again
        assert asked == [1]
        with pytest.raises(KeyboardInterrupt):
            ctrlc.check()  # the flag is up
        monkeypatch.undo()
        calls = []
        with pytest.raises(KeyboardInterrupt):
            ctrlc._on_sigint(signal.SIGINT, inside)  # returns; the handler runs again at the next check, here
            time.sleep(0)
            calls.append("went on")
        assert calls == []
        with pytest.raises(KeyboardInterrupt):
            ctrlc._on_sigint(signal.SIGINT, sys._getframe())
    with ctrlc.installed() as command:
        with pytest.raises(KeyboardInterrupt):
            ctrlc._on_sigint(signal.SIGINT, sys._getframe())
    assert command.pressed  # the command's, once it is over
    ctrlc.check()  # and nothing left for a command run outside one (a test calling cmd_generate)
