"""bench/: the configurations the drivers run side by side, and run_one.py's delegate-boundary report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "bench"))

import bench  # noqa: E402  (bench/bench.py: NumPy only)


def test_configuration_names_set_exactly_their_variables():
    c = bench.parse_config("litert-2t")
    assert (c.runtime, c.engine, c.threads) == ("pterun", "litert", 2)
    assert dict(c.env) == {"PTERUN_ENGINE": "litert", "PTERUN_NUM_THREADS": "2"}
    r = bench.parse_config("ref-1t")
    assert r.is_ref and r.threads == 1 and dict(r.env) == {"BENCH_REF_THREADS": "1", "OMP_NUM_THREADS": "1"}
    d = bench.parse_config("defaults")
    assert (d.runtime, d.env, d.threads, d.engine) == ("pterun", (), None, None)
    caller = {"PATH": "/bin", "PTERUN_NUM_THREADS": "4", "PTERUN_ENGINE": "numpy", "OPENBLAS_NUM_THREADS": "8",
              "OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "2", "BENCH_REF_THREADS": "2"}
    assert bench.config_env(caller, d) == {"PATH": "/bin"}  # "defaults" really is nothing set
    assert bench.config_env(caller, c) == {"PATH": "/bin", "PTERUN_ENGINE": "litert", "PTERUN_NUM_THREADS": "2"}


@pytest.mark.parametrize("name, message", [
    ("numpy", "expected 'defaults', 'cached', 'ref', 'ref-<N>t' or '<engine>-<N>t'"),
    ("numpy-0t", "expected 'defaults'"),
    ("onnx-1t", "unknown engine 'onnx'"),
])
def test_bad_configuration_names_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        bench.parse_config(name)


def test_each_pterun_configuration_is_paired_with_the_reference_at_its_thread_count():
    configs = [bench.parse_config(n) for n in ("defaults", "numpy-1t", "litert-2t", "ref-1t", "ref-2t")]
    pairs = {c.name: (bench.pair_of(c, configs).name if bench.pair_of(c, configs) else None) for c in configs}
    assert pairs["numpy-1t"] == "ref-1t" and pairs["litert-2t"] == "ref-2t"
    assert pairs["ref-1t"] is None and pairs["ref-2t"] is None
    # defaults: ExecuTorch's own default, its threadpool on all the cores
    assert pairs["defaults"] == (f"ref-{os.cpu_count()}t" if os.cpu_count() in (1, 2) else None)
    assert bench.pair_of(configs[0], configs + [bench.parse_config("ref")]).name == "ref"


def test_an_engine_that_did_not_run_is_not_reported_under_its_name():
    lit, num = bench.parse_config("litert-1t"), bench.parse_config("numpy-1t")
    assert bench.engine_mismatch(lit, {"engines": ["numpy", "litert"]}) == "asked for litert, ran litert, numpy"
    assert bench.engine_mismatch(lit, {"engines": ["litert"]}) is None
    assert bench.engine_mismatch(lit, {"engines": []}) is None  # no delegate: the engine does not apply
    assert bench.engine_mismatch(lit, {"engines": None}) == "this pterun has no litert engine"
    assert bench.engine_mismatch(num, {"engines": None}) is None  # before engine selection NumPy was the engine


def test_ops_a_litert_graph_cannot_express_keep_delegates_apart():
    import run_one
    for op in ("aten::mean.out", "executorch_prim::et_view.default", "aten::native_layer_norm.out",
               "aten::squeeze_copy.dims_out", "aten::add.out", "MoveCall"):
        assert run_one.mergeable(op), op
    for op in ("llama::custom_sdpa.out", "llama::update_cache.out", "aten::embedding.out", "aten::index.Tensor_out",
               "delegate XnnpackBackend", "aten::addition_made_up.out"):
        assert not run_one.mergeable(op), op


def _run_one(*args, env=None):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "run_one.py"), "--runtime", "pterun", *args,
                           "--budget", "0.05", "--min-calls", "2", "--quiet", "--pterun-src", str(ROOT / "src")],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PTERUN_ENGINE": "numpy", **(env or {})})
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("@@BENCH@@"))
    result = json.loads(line.split(" ", 1)[1])
    assert "error_type" not in result, result.get("error")
    return result


def test_boundaries_of_the_xnnpack_transformer_fixture():
    res = _run_one(str(FIXTURES / "xnn_transformer.pte"), "--profile")
    assert res["delegate_calls"] == 7 and res["engines"] == ["numpy"] * 7
    b = res["profile"]["boundaries"]
    assert (b["delegate_calls"], b["gaps"], b["gaps_with_work"]) == (7, 6, 6)
    assert 0 <= b["gaps_mergeable"] <= b["gaps"]
    assert b["between_instructions"] == sum(c for _, c, _, _ in b["gap_ops"])
    assert {op for op, *_ in b["gap_ops"]} >= {"aten::native_layer_norm.out"}


def test_llm_decode_inputs_are_one_token_after_a_prefill():
    res = _run_one(str(FIXTURES / "llm" / "kv_8da4w.pte"), "--llm-decode", "10")
    assert res["inputs"] == ["int64[1, 1]", "int64[1]"]
    assert res["delegate_calls"] > 1 and set(res["engines"]) == {"numpy"}


def test_the_cached_configuration_turns_the_weight_cache_on_in_a_directory_of_the_run():
    cfg = bench.parse_config("cached")
    assert cfg.runtime == "pterun" and cfg.threads is None and cfg.engine is None
    env = bench.config_env({"PTERUN_NO_CACHE": "1", "PTERUN_CACHE_DIR": "/elsewhere", "HOME": "/h"}, cfg, "/run/cache")
    assert env == {"PTERUN_CACHE_DIR": "/run/cache", "HOME": "/h"}
    assert "PTERUN_CACHE_DIR" not in bench.config_env({"PTERUN_CACHE_DIR": "/x"}, bench.parse_config("defaults"))
