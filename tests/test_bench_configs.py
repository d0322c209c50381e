"""bench/: the configurations the drivers run side by side (the peer runtime, executorch-numpy-runtime, included:
its configuration, pairing and report, from synthetic results: neither torch nor the peer's venv is needed), and
run_one.py's delegate-boundary report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

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


def test_byte_compile_writes_the_pyc_a_process_with_pythondontwritebytecode_would_not(tmp_path):
    # what bench.py and llm_bench.py do before their pterun processes start, as pip does at install
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    assert bench.byte_compile(sys.executable, tmp_path / "pkg") is None
    assert [p.name.split(".")[0] for p in (tmp_path / "pkg" / "__pycache__").iterdir()] == ["mod"]
    (tmp_path / "pkg" / "bad.py").write_text("def (:\n")
    why = bench.byte_compile(sys.executable, tmp_path / "pkg")
    assert why is not None and "bad.py" in why


@pytest.mark.parametrize("name, message", [
    ("numpy", "expected 'defaults', 'cached', 'peer', 'ref', 'ref-<N>t' or '<engine>-<N>t'"),
    ("peer-1t", "executorch-numpy-runtime has no thread setting"),
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


# --- the peer runtime: executorch-numpy-runtime (bench.py --peer PY) ------------------------------------------


def test_the_peer_configuration_is_the_peer_as_it_comes():
    p = bench.parse_config("peer")
    assert (p.runtime, p.env, p.threads, p.engine) == ("peer", (), None, None)
    assert p.is_peer and not p.is_ref and not p.is_pterun
    caller = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "PTERUN_NUM_THREADS": "1", "BENCH_REF_THREADS": "1"}
    assert bench.config_env(caller, p) == {"PATH": "/bin"}


def test_the_peer_pairs_with_executorch_on_all_cores_and_pterun_on_all_cores_with_it(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    names = ("defaults", "cached", "numpy-2t", "litert-1t", "litert-2t", "ref-1t", "ref-2t", "peer")
    configs = [bench.parse_config(n) for n in names]
    by = {c.name: c for c in configs}
    assert bench.pair_of(by["peer"], configs).name == "ref-2t"
    assert bench.pair_of(by["peer"], configs + [bench.parse_config("ref")]).name == "ref"
    peers = {c.name: getattr(bench.peer_pair_of(c, configs), "name", None) for c in configs}
    assert peers == {"defaults": "peer", "cached": "peer", "numpy-2t": "peer", "litert-1t": None, "litert-2t": "peer",
                     "ref-1t": None, "ref-2t": None, "peer": None}
    assert bench.peer_pair_of(by["defaults"], [c for c in configs if not c.is_peer]) is None


def test_peer_runs_only_with_an_interpreter():
    logged = []
    args = SimpleNamespace(configs=None, ref="/ref/python", peer=None)
    assert [c.name for c in bench.chosen_configs(args, logged.append)] == bench.DEFAULT_CONFIGS
    args.peer = "/peer/python"
    assert [c.name for c in bench.chosen_configs(args, logged.append)] == bench.DEFAULT_CONFIGS + ["peer"]
    assert logged == []
    args = SimpleNamespace(configs=["defaults", "ref-2t", "peer"], ref=None, peer=None)
    assert [c.name for c in bench.chosen_configs(args, logged.append)] == ["defaults"]
    assert logged == ["(no --peer interpreter: configuration 'peer' skipped; --peer PY runs it, see bench/README.md)"]


def test_the_peer_interpreter_is_looked_for_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "REPO", tmp_path)
    assert bench.resolve_ref(None, "--peer", ".peer") is None
    assert bench.resolve_ref("auto", "--peer", ".peer") is None
    assert bench.resolve_ref("none", "--peer", ".peer") is None
    py = tmp_path / ".peer" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("")
    assert bench.resolve_ref(None, "--peer", ".peer") is None  # never without --peer
    assert bench.resolve_ref("auto", "--peer", ".peer") == str(py)
    with pytest.raises(SystemExit, match="--peer /no/such/python: no such interpreter"):
        bench.resolve_ref("/no/such/python", "--peer", ".peer")


def test_what_the_peer_cannot_run_is_reported_with_its_reason_never_as_numbers():
    log = ("I 00:00:00.001 executorch:cpuinfo_utils.cpp:71] Reading file /sys/devices/soc0/image_version\n"
           "E 00:00:00.090 executorch:operator_registry.cpp:277] kernel 'llama::update_cache.out' not found.\n"
           "E 00:00:00.090 executorch:method.cpp:819] Missing operator: [8] llama::update_cache.out\n"
           "E 00:00:00.090 executorch:method.cpp:819] Missing operator: [10] llama::custom_sdpa.out\n"
           "E 00:00:00.090 executorch:method.cpp:819] Missing operator: [8] llama::update_cache.out\n")
    assert bench.peer_log_reason(log) == "missing operators: llama::update_cache.out, llama::custom_sdpa.out"
    other = "E 00:00:00.095 executorch:method.cpp:1203] Input 0 has unexpected scalar type: expected BFloat16\n"
    assert bench.peer_log_reason(other) == "Input 0 has unexpected scalar type: expected BFloat16"
    assert bench.peer_log_reason("I 00:00:00.1 x.cpp:1] fine\n") == ""
    failed = {"runtime": "peer", "error_type": "ExecutionError",
              "error": "load (in the first call): execute('forward') failed",
              "error_reason": "missing operators: llama::custom_sdpa.out"}
    assert bench.error_label([failed]) == "n/a (missing operators: llama::custom_sdpa.out)"
    plain = {"runtime": "peer", "error_type": "ProgramLoadError", "error": "load: bad | file"}
    assert bench.error_label([plain]) == "n/a (ProgramLoadError: load: bad / file)"
    assert bench.error_label([dict(plain, error="x" * 300)]) == "n/a (ProgramLoadError: " + "x" * 139 + "...)"


def _res(runtime, rnd, median, *, load, first, imp, rss, **extra):
    return {"runtime": runtime, "round": rnd, "median_s": median, "p90_s": median * 1.25, "min_s": median,
            "first_call_s": first, "load_s": load, "import_s": imp, "peak_rss_mb": rss, "calls": 10, **extra}


def _row(model, raw, peer_error=None):
    configs = list(raw)
    if peer_error:
        raw["peer"] = [{"runtime": "peer", "round": 0, "error_type": "ExecutionError", "error": "failed",
                        "error_reason": peer_error}]
        configs.append("peer")
    row = {"model": model, "pte": f"{model}.pte", "xnnpack": True, "configs": configs, "raw": raw,
           "agg": {c: bench.aggregate(rs) for c, rs in raw.items()},
           "errors": {c: bench.error_label(rs) for c, rs in raw.items()},
           "max_rel_err": {"defaults": 0.0, "litert-1t": 0.0, "peer": 0.0}, "max_rel_err_peer": {"defaults": 1e-7}}
    bench.finish_row(row)
    return row


def _synthetic_rows():
    pt = {"instructions": 3, "plan_instructions": 3, "engines": ["litert"], "delegate_calls": 1}
    raw = {"defaults": [_res("pterun", 0, 10e-6, load=0.0297, first=0.0003, imp=0.05, rss=20, threads=2, **pt)],
           "litert-1t": [_res("pterun", 0, 12e-6, load=0.03, first=0.001, imp=0.05, rss=20, threads=1, **pt)],
           "ref-1t": [_res("executorch", 0, 24e-6, load=0.05, first=0.01, imp=5.0, rss=400, threads=1)],
           "ref-2t": [_res("executorch", 0, 20e-6, load=0.05, first=0.01, imp=5.0, rss=400, threads=2)]}
    raw_m = dict(raw, peer=[_res("peer", 0, 16e-6, load=0.0001, first=0.0299, imp=0.1, rss=40, threads=2,
                                 load_lazy=True)])
    raw_llm = {k: [dict(r) for r in v] for k, v in raw.items()}
    return [_row("m", raw_m), _row("llm", raw_llm, peer_error="missing operators: llama::custom_sdpa.out")]


def test_the_report_shows_pterun_and_the_peer_against_executorch_and_pterun_against_the_peer(monkeypatch):
    import report
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    rows = _synthetic_rows()
    gt, extra = report.global_targets(rows)
    meta = {"date": "d", "machine": "x", "cpu": "c", "commit": "abc", "loadavg_start": "0", "loadavg_end": "0",
            "command": "bench.py", "configs": ["defaults", "litert-1t", "ref-1t", "ref-2t", "peer"]}
    lines = report.results_markdown(rows, gt, extra, meta).splitlines()
    # 1. the overview: pterun / ExecuTorch, peer / ExecuTorch, pterun / peer
    assert ("| model | instr | invokes | `defaults` | `litert-1t` | `ref-1t` | `ref-2t` | `peer` | `defaults` / `peer` "
            "|") in lines
    assert ("| `m` | 3 | 1 | 10.0 µs (**0.5×**) | 12.0 µs (**0.5×**) | 24.0 µs | 20.0 µs | 16.0 µs (**0.8×**) "
            "| **0.625×** |") in lines
    assert ("| `llm` | 3 | 1 | 10.0 µs (**0.5×**) | 12.0 µs (**0.5×**) | 24.0 µs | 20.0 µs "
            "| n/a (missing operators: llama::custom_sdpa.out) | n/a |") in lines
    # 2. the peer's line: its lazy load marked, its load ratio on load + first call
    assert ("| `m` | `peer` | executorch-numpy-runtime | 2 | 16.0 µs | 20.0 µs | **0.8×** | 29.90 ms† "
            "| 100.0 µs† | 0.5×† | 100.00 ms | 40 MB | 0.1× | 0.0e+00 | 1 |") in lines
    assert "| `llm` | `peer` | n/a (missing operators: llama::custom_sdpa.out) |" + " |" * 12 in lines
    assert report.LAZY_NOTE in lines
    # 3. pterun / peer
    assert "| model | config | median | p90 | load + first call | import | peak RSS | max rel err |" in lines
    assert "| `m` | `defaults` / `peer` | **0.625×** | 0.625× | 1× | 0.5× | 0.5× | 1.0e-07 |" in lines
    assert "| `llm` | `defaults` / `peer` | n/a (missing operators: llama::custom_sdpa.out) |" + " |" * 5 in lines
    # the targets are pterun's alone: no peer column, the peer's import not counted as pterun's
    assert "| target | `defaults` | `litert-1t` |" in lines
    assert "| `import pterun` ≤ 0.15 s | 50.00 ms (median of 4 processes) | ✅ met |" in lines


def test_a_run_without_the_peer_renders_as_before(monkeypatch):
    import report
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    rows = _synthetic_rows()
    for row in rows:
        row["configs"] = [c for c in row["configs"] if c != "peer"]
        bench.finish_row(row)
    meta = {"date": "d", "machine": "x", "cpu": "c", "commit": "abc", "loadavg_start": "0", "loadavg_end": "0",
            "command": "bench.py", "configs": ["defaults", "litert-1t", "ref-1t", "ref-2t"]}
    md = report.results_markdown(rows, [], {}, meta)
    assert "| model | instr | invokes | `defaults` | `litert-1t` | `ref-1t` | `ref-2t` |" in md.splitlines()
    assert "peer" not in md and "†" not in md


def _timed(model, median, ref_median, load=0.1, ref_load=0.05, cached_load=None, **pt):
    """A row of pterun at its defaults (and ``cached``) against ExecuTorch on two threads, one round."""
    raw = {"defaults": [_res("pterun", 0, median, load=load, first=0.01, imp=0.05, rss=20, threads=2, **pt)],
           "ref-2t": [_res("executorch", 0, ref_median, load=ref_load, first=0.01, imp=5.0, rss=400, threads=2)]}
    if cached_load is not None:
        raw["cached"] = [_res("pterun", 0, median, load=cached_load, first=0.01, imp=0.05, rss=20, threads=2, **pt)]
    return _row(model, raw)


def test_the_report_holds_a_run_to_issue_24s_done_when(monkeypatch):
    import report
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    rows = [_timed("bert_tiny_xnnpack", 1e-3, 2e-3), _timed("whisper_encoder_xnnpack", 0.6, 0.5),
            _timed("mlp_xnnpack", 11e-6, 10e-6), _timed("resnet18_portable", 0.03, 9.0),
            _timed("resnet18_xnnpack", 0.02, 0.02, load=0.1, ref_load=0.05, cached_load=0.02)]
    got = {t["target"]: (t["measured"], t["met"]) for t in report.issue24_targets(rows)}
    assert got == {
        "bert_tiny_xnnpack: per call ≤ 1.15× ExecuTorch (`defaults`)": ("0.5×", True),
        "whisper_encoder_xnnpack: per call ≤ 1.15× ExecuTorch (`defaults`)": ("1.2×", False),
        "geometric mean of those 2 ≤ 1×": ("0.775×", True),  # sqrt(0.5 x 1.2)
        "mlp_xnnpack: per call ≤ 1× ExecuTorch (`defaults`)": ("1.1×", False),
        # two programs, so their medians: the portable ResNet18 against ExecuTorch's XNNPACK one
        "resnet18_portable (`defaults`) ≤ 1.5× ExecuTorch's resnet18_xnnpack (`ref-2t`)":
            ("1.5× (30.00 ms vs 20.00 ms)", True),
        "resnet18_xnnpack: load ≤ 1.5× ExecuTorch's, the first time (`defaults`)": ("2× (100.00 ms)", False),
        "resnet18_xnnpack: load ≤ 0.5× ExecuTorch's, once cached (`cached`)": ("0.4× (20.00 ms)", True),
    }  # what the run did not measure (MobileNetV2, the transformer fixture) is left out, not failed
    meta = {"date": "d", "machine": "x", "cpu": "c", "commit": "abc", "loadavg_start": "0", "loadavg_end": "0",
            "command": "bench.py", "configs": ["defaults", "cached", "ref-2t"]}
    lines = report.results_markdown(rows, [], {}, meta).splitlines()
    assert "| mlp_xnnpack: per call ≤ 1× ExecuTorch (`defaults`) | 1.1× | ❌ missed |" in lines
    assert "| geometric mean of those 2 ≤ 1× | 0.775× | ✅ met |" in lines
    assert report.issue24_targets([_timed("other", 1.0, 1.0)]) == []


def test_the_invokes_column_names_engines_other_than_litert():
    import report
    assert report._invokes_cell({"delegate_calls": 1, "engines": ["litert"]}) == "1"
    assert report._invokes_cell({"delegate_calls": 3.0, "engines": ["numpy", "litert"]}) == "3 (litert, numpy)"
    assert report._invokes_cell({"delegate_calls": 0, "engines": []}) == "0"
    assert report._invokes_cell({"engines": ["litert"]}) == "—" and report._invokes_cell(None) == "—"


def test_llm_bench_holds_decode_to_issue_24s_floors_by_thread_count():
    import llm_bench
    assert [llm_bench.decode_floor_24(m, t) for m, t in [("llama130m_8da4w", 1), ("llama130m_fp32", 2),
                                                         ("llama500m_8da4w", 1), ("llama500m_fp32", 2),
                                                         ("llama130m_8da4w", 4), ("tiny_xnn", 1)]] \
        == [1.0, 0.9, 0.95, 0.95, None, None]

    def rnd(tps, rss, threads=None):
        return {"load_s": 1.0, "ttft_s": 0.1, "prefill_tps": 100.0, "decode_tps": tps, "peak_rss_mb": rss,
                "threads": threads, "engines": ["litert"]}
    configs = [bench.parse_config(n) for n in ("litert-1t", "litert-2t", "ref-1t", "ref-2t")]
    raw = {"llama130m_8da4w": {"litert-1t": [rnd(95.0, 250, 1)], "litert-2t": [rnd(180.0, 250, 2)],
                               "ref-1t": [rnd(100.0, 900, 1)], "ref-2t": [rnd(190.0, 900, 2)]}}
    results = {m: {c: llm_bench.median(rs) for c, rs in per.items()} for m, per in raw.items()}
    meta = {"date": "d", "machine": "x", "cpu": "c", "commit": "abc", "loadavg_start": "0", "loadavg_end": "0",
            "command": "llm_bench.py"}
    lines = llm_bench.render(results, configs, raw, meta).splitlines()
    assert "| llama130m_8da4w | `litert-1t` vs `ref-1t` | 1 | decode ≥ 1×: 0.95× ❌ | peak RSS ≤ 0.6×: 0.28× ✅ |" \
        in lines
    assert "| llama130m_8da4w | `litert-2t` vs `ref-2t` | 2 | decode ≥ 0.9×: 0.95× ✅ | peak RSS ≤ 0.6×: 0.28× ✅ |" \
        in lines


def test_llm_bench_refuses_the_peer(capsys):
    import llm_bench
    with pytest.raises(SystemExit):
        llm_bench.main(["--configs", "defaults", "peer"])
    assert ("configuration 'peer' (executorch-numpy-runtime) cannot run here: it has no LLM operators"
            in capsys.readouterr().err)


def test_llm_bench_gives_the_cached_configuration_its_cache_and_other_configurations_none(monkeypatch, tmp_path):
    import subprocess

    import llm_bench
    seen = []

    def fake_run(cmd, capture_output, text, timeout, env):
        seen.append((cmd, env))
        return subprocess.CompletedProcess(cmd, 1, "", "stopped here")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.delenv("PTERUN_CACHE_DIR", raising=False)
    spec = (tmp_path / "m.pte", tmp_path / "tok.json", 1, 64)
    for name in ("cached", "defaults"):
        r = llm_bench.run_one("python", bench.parse_config(name), "m", spec, False, str(tmp_path / "c"), max_new=2)
        assert r == {"runtime": name, "error": "stopped here"}
    (cmd_c, env_c), (cmd_d, env_d) = seen
    assert env_c["PTERUN_CACHE_DIR"] == str(tmp_path / "c") and "PTERUN_CACHE_DIR" not in env_d
    assert cmd_c[cmd_c.index("--max-new") + 1] == "2"


def test_the_peer_gets_the_same_seeded_inputs_from_its_metadata_dict():
    import run_one
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np = run_one.np
    meta = run_one.PeerMeta({"num_inputs": 3, "num_outputs": 2, "inputs": [
        {"scalar_type": 6, "shape": [2, 3], "is_memory_planned": True},
        {"scalar_type": 4, "shape": [1], "is_memory_planned": True},
        {"scalar_type": 15, "shape": [64], "is_memory_planned": True}],
        "outputs": [{"scalar_type": 15, "shape": [4]}, {"scalar_type": 6, "shape": [4]}]})

    class Other:  # the metadata interface of pterun and ExecuTorch
        def num_inputs(self):
            return 3

        def input_tensor_meta(self, i):
            return SimpleNamespace(sizes=lambda: [(2, 3), (1,), (64,)][i], dtype=lambda: (6, 4, 15)[i])

    raw, same = run_one.make_inputs(meta, 0), run_one.make_inputs(Other(), 0)
    assert [(st, a.shape, a.dtype) for st, a in raw] == [(6, (2, 3), np.float32), (4, (1,), np.int64),
                                                         (15, (64,), np.float32)]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(raw, same))
    fed = run_one.convert_inputs(raw, "peer", meta)
    assert fed[0] is raw[0][1] and fed[2].dtype == np.uint16  # bfloat16 as its bits, rounded as torch rounds
    assert np.array_equal(fed[2], raw[2][1].astype(ml_dtypes.bfloat16).view(np.uint16))
    assert meta.bf16_outputs() == {0}
    outs = run_one.to_numpy_outputs([fed[2], np.ones(4, np.float32)], meta.bf16_outputs())
    assert outs["out0"].dtype == np.float32 and np.array_equal(outs["out0"], raw[2][1].astype(ml_dtypes.bfloat16))


def test_the_decode_attention_probe_agrees_with_the_numpy_kernels(capsys):
    # bench/probe_decode_attention.py: both in-LiteRT ways give pterun's custom_sdpa results and caches
    pytest.importorskip("ai_edge_litert")
    import probe_decode_attention as probe

    probe.main(["--layers", "2", "--max-seq", "32", "--bucket", "16", "--grow", "8", "--positions", "9", "20"])
    lines = capsys.readouterr().out.splitlines()
    ways = {line.split(":")[0]: line for line in lines if "max difference" in line}
    assert sorted(ways) == ["bound", "prefix", "variable"]
    for line in ways.values():
        assert "caches equal NumPy's: True" in line
        assert float(line.split("max difference ")[1].split()[0]) < 1e-5
    # the prefix grew through positions 0..20 in steps of 8, resized each time, and XNNPACK kept the graph
    grew = next(line for line in lines if line.startswith("prefix resizes: "))
    assert [p.split()[0] for p in grew[len("prefix resizes: "):].split(";")[0].split(", ")] == ["8", "16", "24"]
    assert grew.endswith("XNNPACK partitions at 24 positions: 2")
    assert lines[-2].startswith("pos 9: numpy ") and all(w in lines[-2] for w in ("variable", "bound", "prefix"))
    assert lines[-1].startswith("pos 20: numpy ") and "prefix" in lines[-1] and "bound" not in lines[-1]


def test_decode_steps_times_pterun_from_each_position(capsys):
    # bench/decode_steps.py: ms a decode step from given positions, each in a fresh worker process
    pytest.importorskip("ai_edge_litert")
    import decode_steps

    from fixtures_util import FIXTURES
    assert decode_steps.main([str(FIXTURES / "llm" / "kv_xnn.pte"), "--pos", "5", "40", "--steps", "4",
                              "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("kv_xnn.pte: ms a decode step, mean of 4 steps, 1 thread(s)")
    assert [line.split(":")[0] for line in lines[1:]] == ["positions 5-8", "positions 40-43"]
    assert all(float(line.split("pterun ")[1]) > 0 for line in lines[1:])
    with pytest.raises(SystemExit, match="pterun worker failed"):  # past the 128-position cache
        decode_steps.main([str(FIXTURES / "llm" / "kv_xnn.pte"), "--pos", "126", "--steps", "4", "--rounds", "1"])


def test_load_pairs_times_both_trees_in_alternating_processes():
    # the same tree twice: two lines of medians and one ratio over the pairs, from processes that really loaded
    src = str(ROOT / "src")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "load_pairs.py"), str(FIXTURES / "mlp.pte"),
                           "--trees", src, src + os.sep, "--pairs", "2"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:2]] == [src, src + os.sep]
    assert all("(medians of 2)" in ln for ln in lines[:2])
    assert lines[2].startswith("load, second / first: median of pair ratios ") and "of 2 pairs faster" in lines[2]


def test_token_overhead_parts_a_decode_token_and_times_each_step():
    # bench/token_overhead.py, in a process of its own (it wraps the KV plan's methods for the rest of the process)
    pytest.importorskip("ai_edge_litert")
    llm = FIXTURES / "llm"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "token_overhead.py"), str(llm / "kv_8da4w.pte"),
                           "--tokenizer", str(llm / "tokenizer.json"), "--threads", "1", "--max-new", "8",
                           "--repeat", "1", "--rounds", "2"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["kv_8da4w.pte: 1 thread(s)",
                         "per decode token, median of 2 generations (7 decode steps each), ms:"]
    parts = {line[:24].strip(): float(line[24:].split()[0]) for line in lines[2:8]}
    assert list(parts) == ["LiteRT invoke", "KV plan besides it", "prepares (growths)", "interpreter",
                           "runner between calls", "pterun's own, all"]
    assert parts["LiteRT invoke"] > 0 and parts["interpreter"] > 0 and parts["runner between calls"] > 0
    own = sum(parts[k] for k in ("KV plan besides it", "prepares (growths)", "interpreter", "runner between calls"))
    assert abs(parts["pterun's own, all"] - own) < 0.005  # the parts add up (each printed to 1 us)
    assert lines[8] == "the interpreter's steps, us a call:"
    steps = [line.split()[1] for line in lines[9:]]
    assert "aten::embedding.out" in steps and not any(s.startswith("delegate") for s in steps)


def test_load_perf_groups_samples_by_what_they_are():
    import load_perf  # bench/load_perf.py: reads perf's text report, runs nothing here

    report = "\n".join([
        "# Samples: 9  of event 'cpu-clock:ppp'",
        "           499  libpywrap_litert_common.so  [.] xnn_pack_f32_conv_goki_w",
        "           100  libc.so.6                   [.] __memmove_avx_unaligned_erms",
        "            30  libpywrap_litert_common.so  [.] xnn_x32_packw_gemm_goi_ukernel_x16__avx_u4",
        "            50  libpywrap_litert_common.so  [.] tflite::Subgraph::Invoke()",
        "           200  libexecutorch_backend_xnnpack.so  [.] 0x000000000006e384",
        "            40  [kernel.kallsyms]           [k] clear_page_erms",
        "            10  libpython3.11.so.1.0        [.] _PyEval_EvalFrameDefault",
        "             5  libc.so.6                   [.] malloc",
        "",
    ])
    ms = 1e3 / load_perf.HZ
    got = load_perf.groups(report)
    assert got.keys() == {"packing", "litert, other", "xnnpack (ExecuTorch)", "kernel", "python", "other"}
    assert got["packing"] == pytest.approx(629 * ms) and got["litert, other"] == pytest.approx(50 * ms)
    assert got["xnnpack (ExecuTorch)"] == pytest.approx(200 * ms) and got["other"] == pytest.approx(5 * ms)
