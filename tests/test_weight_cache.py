"""The packed-weight cache (litert_engine.cache, .compiled): keys, the files' life, the settings that turn it on, and
what a program loaded through it gives (the differential guard runs every committed program through it too).
"""

from __future__ import annotations

import importlib.util
import os
import time

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls_from, run_python
from pterun import Runtime, config
from pterun.delegates.xnnpack.litert_engine import cache as K

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert not installed")


# -- keys ----------------------------------------------------------------------------------------------------------
def test_the_key_covers_every_byte_the_versions_and_the_cpu(monkeypatch):
    model = np.random.default_rng(0).integers(0, 255, 3 << 20, dtype=np.uint8).tobytes()
    k = K.key(model, "2.3.0")
    assert len(k) == 64 and int(k, 16) >= 0
    assert K.key(bytes(model), "2.3.0") == k  # the same bytes, another object
    for at in (0, 1 << 20, len(model) - 1):  # in the flatbuffer's head, and among the weights after it
        changed = bytearray(model)
        changed[at] ^= 1
        assert K.key(bytes(changed), "2.3.0") != k, at
    assert K.key(model[:-1], "2.3.0") != k
    assert K.key(model, "2.4.0") != k
    monkeypatch.setattr(K, "_cpu", "another CPU")
    assert K.key(model, "2.3.0") != k


def test_the_cpu_identity_names_the_processor():
    ident = K.cpu_identity()
    assert isinstance(ident, str) and ident
    if os.path.exists("/proc/cpuinfo"):
        assert "flags" in ident or "Features" in ident


# -- the files -----------------------------------------------------------------------------------------------------
def _write(path: str, n: int) -> None:
    with open(path, "wb") as f:
        f.write(b"x" * n)


def test_a_model_is_noted_on_its_first_load_written_on_the_next_and_read_after(tmp_path):
    c = K.Cache(str(tmp_path), 1 << 30)
    assert c.lookup("k1") == ("first", None)
    state, scratch = c.lookup("k1")
    assert state == "miss" and scratch.endswith(".partial") and os.path.dirname(scratch) == c.root
    assert c.lookup("k1")[0] == "miss"  # nothing committed yet: still a miss
    _write(scratch, 100)
    final = c.commit(scratch, "k1")
    assert final == os.path.join(c.root, "k1.weights") and not os.path.exists(scratch)
    assert not os.path.exists(os.path.join(c.root, "k1.seen"))
    assert c.lookup("k1") == ("hit", final)
    assert c.lookup("k2") == ("first", None)  # another key is another model


def test_an_empty_file_is_not_kept_and_a_refused_model_goes_to_the_interpreter(tmp_path):
    c = K.Cache(str(tmp_path), 1 << 30)
    c.lookup("k")
    _, scratch = c.lookup("k")
    _write(scratch, 0)  # LiteRT could not write it
    assert c.commit(scratch, "k") is None and not os.path.exists(scratch)
    _, scratch = c.lookup("k")
    _write(scratch, 10)
    c.refuse("k", scratch)
    assert not os.path.exists(scratch)
    assert c.lookup("k") == ("refused", None)


def test_an_unwritable_directory_turns_the_cache_off_for_the_load(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = K.Cache(str(blocker), 1 << 30)
    assert c.lookup("k") == ("off", None)


def test_trimming_removes_the_files_used_longest_ago_and_dead_scratch_files(tmp_path):
    c = K.Cache(str(tmp_path), 250)
    os.makedirs(c.root)
    now = time.time()
    for k, age in (("old", 300), ("mid", 200), ("new", 100)):
        p = os.path.join(c.root, f"{k}.weights")
        _write(p, 100)
        os.utime(p, (now - age, now - age))
    dead = os.path.join(c.root, "x.1.2.partial")
    live = os.path.join(c.root, "y.3.4.partial")
    _write(dead, 50)
    _write(live, 50)
    os.utime(dead, (now - 2 * K._STALE, now - 2 * K._STALE))
    assert c.trim() == 150  # "old" (300 bytes over 250) and the dead scratch file
    left = sorted(os.listdir(c.root))
    assert left == ["mid.weights", "new.weights", "y.3.4.partial"]
    c.max_bytes = 0
    c.trim(keep=os.path.join(c.root, "mid.weights"))
    assert sorted(os.listdir(c.root)) == ["mid.weights", "y.3.4.partial"]  # the file just written stays


def test_a_hit_refreshes_the_files_time(tmp_path):
    c = K.Cache(str(tmp_path), 1 << 30)
    os.makedirs(c.root)
    p = os.path.join(c.root, "k.weights")
    _write(p, 10)
    os.utime(p, (1, 1))
    assert c.lookup("k") == ("hit", p)
    assert os.path.getmtime(p) > time.time() - 60


# -- settings ------------------------------------------------------------------------------------------------------
def test_the_cache_is_off_unless_asked_for(monkeypatch, tmp_path):
    assert config.resolve({}).cache_dir == ""
    monkeypatch.setenv("PTERUN_CACHE_DIR", str(tmp_path))
    assert config.resolve({}).cache_dir == str(tmp_path)
    assert config.resolve({"cache": ""}).cache_dir == ""  # Runtime(cache=False) wins over the variable
    monkeypatch.setenv("PTERUN_NO_CACHE", "1")
    assert config.resolve({}).cache_dir == ""
    assert config.resolve({"cache": str(tmp_path / "mine")}).cache_dir == str(tmp_path / "mine")


def test_runtime_cache_takes_a_directory_true_or_false(tmp_path):
    assert Runtime(cache=tmp_path).cache == str(tmp_path)
    assert Runtime(cache=str(tmp_path)).cache == str(tmp_path)
    assert Runtime(cache=False).cache == ""
    assert Runtime(cache=True).cache == config.default_cache_dir()
    assert Runtime().cache is None
    for bad in (1, "", b"/tmp", 0.5):
        with pytest.raises(TypeError, match=r"cache must be a directory \(str or os.PathLike\), True or False"):
            Runtime(cache=bad)


def test_the_default_directory_follows_the_platform(monkeypatch):
    import sys

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert config.default_cache_dir() == os.path.join("/x/cache", "pterun")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert config.default_cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "pterun")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert config.default_cache_dir() == os.path.join(os.path.expanduser("~"), "Library", "Caches", "pterun")


def test_the_size_bound_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("PTERUN_CACHE_MAX_MB", raising=False)
    assert config.cache_max_bytes() == config.CACHE_MAX_MB << 20
    monkeypatch.setenv("PTERUN_CACHE_MAX_MB", "12")
    assert config.cache_max_bytes() == 12 << 20
    for bad in ("-1", "lots", "1.5"):
        monkeypatch.setenv("PTERUN_CACHE_MAX_MB", bad)
        with pytest.raises(ValueError, match=f"PTERUN_CACHE_MAX_MB must be a non-negative integer \\(megabytes\\), "
                                             f"got '{bad}'"):
            config.cache_max_bytes()


# -- programs through the cache ------------------------------------------------------------------------------------
def _engines(method) -> list[str]:
    r = method._runner
    return sorted(type(getattr(ex, "_interp", None)).__name__ for ex in list(r.executors) +
                  [v[1] for v in r.merged.values()] if getattr(ex, "engine", None) == "litert")


def _run(rel: str, rt: Runtime) -> tuple[list, list]:
    program = rt.load_program(FIXTURES / rel)
    call = load_calls_from((FIXTURES / rel).with_suffix(".npz"))[0]
    m = program.load_method(call["method"])
    return _engines(m), m.execute(call["inputs"])


@needs_litert
@pytest.mark.parametrize("rel", ["xnn_mlp.pte", "xnn_8da4w.pte", "xnn_qint8_cnn.pte", "xnn_mobilenet_v2.pte"])
def test_loads_through_the_cache_give_the_interpreters_numbers_bit_for_bit(rel, tmp_path, monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import compiled

    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)
    engines, ref = _run(rel, Runtime(engine="litert"))
    assert engines and set(engines) == {"Interpreter"}
    seen = []
    for _ in range(3):  # noted, written, read
        engines, got = _run(rel, Runtime(engine="litert", cache=tmp_path))
        seen.append(set(engines))
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            assert type(g) is type(r) and g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_array_equal(g, r)
    assert seen == [{"Interpreter"}, {"Compiled"}, {"Compiled"}]
    files = os.listdir(tmp_path / "xnnpack")
    assert any(f.endswith(".weights") for f in files) and not any(f.endswith((".partial", ".seen")) for f in files)


@needs_litert
def test_small_models_and_a_cache_off_never_touch_the_directory(tmp_path):
    for _ in range(3):  # the MLP's weights are far under the size floor
        engines, _ = _run("xnn_mlp.pte", Runtime(engine="litert", cache=tmp_path))
        assert engines == ["Interpreter"]
    assert not (tmp_path / "xnnpack").exists() or not os.listdir(tmp_path / "xnnpack")


@needs_litert
def test_a_graph_xnnpack_does_not_take_whole_is_remembered_and_runs_as_before(tmp_path, monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import cache, compiled

    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(cache, "NOTE_LOADS", 0)
    rel = "xnn_transformer.pte"  # its merged graph leaves comparisons to LiteRT's builtin kernels
    engines, ref = _run(rel, Runtime(engine="litert"))
    for _ in range(2):
        got_engines, got = _run(rel, Runtime(engine="litert", cache=tmp_path))
        assert got_engines == engines
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
    files = os.listdir(tmp_path / "xnnpack")
    assert files and all(f.endswith(".refused") for f in files)


@needs_litert
def test_new_input_shapes_resize_a_cached_model(tmp_path, monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import cache, compiled

    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(cache, "NOTE_LOADS", 0)
    calls = load_calls_from(FIXTURES / "xnn_mlp_dynamic.npz")
    plain = Runtime(engine="litert").load_program(FIXTURES / "xnn_mlp_dynamic.pte").load_method("forward")
    for _ in range(2):
        m = Runtime(engine="litert", cache=tmp_path).load_program(FIXTURES / "xnn_mlp_dynamic.pte") \
            .load_method("forward")
        assert _engines(m) == ["Compiled"]
        for call in calls + calls[::-1]:  # growing and shrinking
            got, ref = m.execute(call["inputs"]), plain.execute(call["inputs"])
            for g, r in zip(got, ref):
                np.testing.assert_array_equal(g, r)
        x = call["inputs"][0]
        first = m.execute([x])[0].copy()
        assert not np.array_equal(m.execute([x + 1])[0], first)  # the steady path sees new values


@needs_litert
def test_a_cached_program_prints_nothing_while_it_loads_and_runs_but_litert_at_exit(tmp_path):
    code = f"""
import numpy as np
from pterun import Runtime
from pterun.delegates.xnnpack.litert_engine import cache, compiled
compiled.CACHE_MIN_BYTES = 0
cache.NOTE_LOADS = 0
for _ in range(2):
    m = Runtime(cache={str(tmp_path)!r}).load_program({str(FIXTURES / 'xnn_mlp.pte')!r}).load_method("forward")
    m.execute([np.ones((4, 16), np.float32)])
import sys; sys.stderr.write("END\\n"); sys.stderr.flush()
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    before_exit, at_exit = r.stderr.split("END\n")
    assert before_exit == "", before_exit
    # what LiteRT's own environment logs as the process ends is beyond reach (the module docstring of .compiled)
    assert all(line.startswith("INFO: [accelerator_registry.cc") for line in at_exit.splitlines()), at_exit
