"""Costly optional imports wait until a program needs them: ``numpy.random`` for the random ops, ``ml_dtypes`` for
bfloat16 / float8, ``numpy.polynomial`` for erf; kernel schemas are parsed when first used."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fixtures_util import FIXTURES
from pterun.kernels import KERNELS
from pterun.kernels._common import F32, is_bfloat16, promote_types, widen_half

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent
# LiteRT: for XNNPACK delegates, and portable programs with work worth compiling into a LiteRT program
LAZY = ("numpy.random", "ml_dtypes", "numpy.polynomial", "ai_edge_litert")
HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
LITERT = {"ai_edge_litert"} if HAVE_LITERT else set()

# the steps run in order in one fresh interpreter (the first binds the names the others use); after each, the
# LAZY modules loaded so far
STEPS = {
    "import": "import pterun.kernels; from pterun import dtypes; from pterun.kernels import KERNELS; "
              "from pterun.kernels._common import F32, promote_types, widen_half",
    "cnn": "run('cnn')",
    "resnet_small": "run('resnet_small')",
    "mobilenet_v2": "run('mobilenet_v2')",
    "half promotion": "assert promote_types(F16, F32) == F32 and widen_half(F16) == F32",
    "erf kernel": "KERNELS['aten::erf.out'].fn(np.ones(2, np.float32), np.empty(2, np.float32))",
    "rand kernel": "KERNELS['aten::rand.out'].fn((2,), np.empty(2, np.float32))",
    "bfloat16 dtype": "assert dtypes.to_numpy(15).name == 'bfloat16'",
    "xnnpack program": "run('xnn_mlp')",
}
EXPECTED = {
    "import": set(), "cnn": LITERT, "resnet_small": LITERT, "mobilenet_v2": LITERT, "half promotion": LITERT,
    "erf kernel": {"numpy.polynomial"} | LITERT,
    "rand kernel": {"numpy.polynomial", "numpy.random"} | LITERT,
    "bfloat16 dtype": {"numpy.polynomial", "numpy.random", "ml_dtypes"} | LITERT,
    "xnnpack program": {"numpy.polynomial", "numpy.random", "ml_dtypes"} | LITERT,
}


@pytest.fixture(scope="module")
def loaded_after() -> dict[str, list[str]]:
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(SRC)!r}, {str(TESTS)!r}]
        import numpy as np
        from fixtures_util import load_calls
        loaded = {{}}

        def run(name):
            program = pterun.Runtime.get().load_program({str(FIXTURES)!r} + "/" + name + ".pte")
            for call in load_calls(name):
                program.load_method(call["method"]).execute(call["inputs"])
            assert "pterun.kernels.random" in sys.modules and "pterun.kernels.unary" in sys.modules

        F16 = np.dtype(np.float16)
        loaded["numpy itself"] = sorted(m for m in {LAZY!r} if m in sys.modules)  # NumPy 1.x loads some
        import pterun
        for step, code in {STEPS!r}.items():
            exec(code)
            loaded[step] = sorted(m for m in {LAZY!r} if m in sys.modules)
        print(json.dumps(loaded))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PTERUN_ENGINE"}  # the default engine: auto
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("step", list(STEPS))
def test_costly_modules_are_imported_only_when_needed(loaded_after, step):
    # what pterun adds: NumPy 1.x imports numpy.random and numpy.polynomial itself, NumPy 2 does not
    by_numpy = set(loaded_after["numpy itself"])
    assert set(loaded_after[step]) - by_numpy == EXPECTED[step] - by_numpy


def test_every_registered_schema_parses():
    # schemas are parsed on first use, so a malformed docstring would otherwise surface only in a program
    for name, kernel in KERNELS.items():
        assert (kernel.schema is None) == kernel.raw, name
        if not kernel.raw:
            assert kernel.schema.name == name.split("::", 1)[1], name


def test_bfloat16_promotes_as_executorch_without_the_eager_constant():
    bf16, f16, f64 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float64)
    assert is_bfloat16(bf16) and not is_bfloat16(f16) and not is_bfloat16(np.dtype([("a", "u1"), ("b", "u1")]))
    assert promote_types(bf16, f16) == F32 and promote_types(f16, bf16) == F32
    assert promote_types(bf16, np.dtype(ml_dtypes.float8_e4m3fn)) == bf16
    assert promote_types(bf16, f64) == f64 and promote_types(np.dtype(np.int32), bf16) == bf16
    assert widen_half(bf16) == F32 and widen_half(f16) == F32 and widen_half(f64) == f64


@pytest.mark.parametrize("engine, programs", [
    ("numpy", ["cnn"]),
    pytest.param("litert", ["xnn_mlp", "xnn_8da4w", "cnn"],
                 marks=pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")),
])
def test_import_and_run_need_neither_pathlib_nor_logging(engine, programs):
    # ~15 ms of import time a runtime that only loads and runs a program does not need; on LiteRT also the
    # packed-weight cache's modules (tempfile, hashlib: ~7 ms), which only a load with the cache on uses
    unwanted = ("pathlib", "logging", "tempfile", "hashlib", "shutil")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(SRC)!r})
        import numpy as np
        by_numpy = [m for m in {unwanted!r} if m in sys.modules]  # NumPy 1.x imports pathlib itself
        import pterun
        for name in {programs!r}:
            path = {str(FIXTURES)!r} + "/" + name + ".pte"
            method = pterun.Runtime(engine={engine!r}).load_program(path).load_method("forward")
            meta = method.metadata
            method.execute([np.zeros(meta.input_tensor_meta(i).sizes(), meta.input_tensor_meta(i).numpy_dtype())
                            for i in range(meta.num_inputs())])
            assert {engine!r} == "numpy" or not name.startswith("xnn") or \\
                any(d.engine == "litert" for d in method.delegates), name
        print(sorted(m for m in {unwanted!r} if m in sys.modules and m not in by_numpy))
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_logger_before_logging_is_imported_drops_only_what_no_handler_could_take():
    # no handler can exist before ``logging`` is imported: DEBUG and INFO records are dropped without importing
    # it; a WARNING still reaches logging's last-resort handler (stderr); once imported, the real logger
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(SRC)!r})
        from pterun._log import logger
        logger().debug("dropped %s", 1)
        logger().info("dropped too")
        print("logging" in sys.modules)
        logger().warning("shown: %s", "a warning")
        import logging
        print(logger() is logging.getLogger("pterun"))
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
    assert done.stderr.strip() == "shown: a warning"


# what a float program's user does, in order in one interpreter: ml_dtypes (0.7-0.8 s to import with ml_dtypes
# 0.7.0) must still be absent after each; the last step runs a bf16 program, which needs it, and shows the check
# sees an import when there is one
FLOAT_STEPS = {
    "import pterun": "import pterun",
    "import pterun.llm": "import pterun.llm",
    "portable float32 program": "run('mlp.pte')",
    "XNNPACK float32 program, NumPy engine": "run('xnn_mlp.pte', engine='numpy')",
    "XNNPACK float32 program, default engine": "run('xnn_mlp.pte')",
    "XNNPACK 8da4w program (bf16 scales), NumPy engine": "run('xnn_8da4w.pte', engine='numpy')",
    "XNNPACK 8da4w program (bf16 scales), default engine": "run('xnn_8da4w.pte')",
    "program with a .ptd": "run('ext_mlp.pte', data_path=FIX + '/ext_mlp.ptd')",
    "pterun inspect of a .pte": "inspect('mlp.pte'); inspect('xnn_8da4w.pte')",
    "pterun inspect of a .ptd": "inspect('ext_mlp.ptd')",
    "pterun inspect of a .bpte": "inspect('bundled.bpte')",
}


def test_float_programs_never_import_ml_dtypes():
    script = textwrap.dedent(f"""
        import contextlib, io, json, sys
        sys.path[:0] = [{str(SRC)!r}, {str(TESTS)!r}]
        FIX = {str(FIXTURES)!r}
        loaded = {{}}

        def run(name, **kwargs):
            import pterun
            from fixtures_util import load_calls
            engine = kwargs.pop("engine", None)
            program = pterun.Runtime.get().load_program(FIX + "/" + name, engine=engine, **kwargs)
            for call in load_calls(name[:-4]):
                program.load_method(call["method"]).execute(call["inputs"])

        def inspect(name):
            from pterun.cli import main
            with contextlib.redirect_stdout(io.StringIO()):
                assert main(["inspect", FIX + "/" + name]) == 0

        for step, code in {FLOAT_STEPS!r}.items():
            exec(code)
            loaded[step] = "ml_dtypes" in sys.modules
        run("bf16_mlp.pte")
        loaded["bf16 program"] = "ml_dtypes" in sys.modules
        print(json.dumps(loaded))
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == {**{step: False for step in FLOAT_STEPS}, "bf16 program": True}


def test_numpy_names_are_those_of_the_dtypes_without_importing_them():
    from pterun import dtypes

    for sid, (_, dt) in dtypes.SCALAR_TYPES.items():
        assert dtypes.numpy_name(sid) == (None if dt is None else dt.name), sid
    assert dtypes.numpy_name(99) is None


def test_importing_the_llm_runners_loads_no_kernel_family():
    """``import pterun.llm`` (the runners, their inputs, the tokenizer adapters) registers no kernel: the families,
    the llama:: custom operators among them, are imported with the first method that calls a kernel."""
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(SRC)!r}]
        import pterun.llm
        print(sorted(m for m in sys.modules if m.startswith("pterun.kernels")))
    """)
    done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]"
