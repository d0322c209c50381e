"""The packed-weight cache (litert_engine.cache, .compiled): keys, the files' life, the settings that turn it on, and
what a program loaded through it gives (the differential guard runs every committed program through it too).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import numpy as np
import pytest

from fixtures_util import FIXTURES, litert_plans, load_calls_from, run_python
from pterun import Runtime, config
from pterun.delegates.xnnpack.litert_engine import cache as K

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert not installed")


# -- keys ----------------------------------------------------------------------------------------------------------
def test_a_digest_covers_every_byte_and_the_length():
    data = np.random.default_rng(0).integers(0, 255, 3 << 20, dtype=np.uint8).tobytes()
    d = K.digest(data)
    assert len(d) == 64 and int(d, 16) >= 0
    assert K.digest(bytearray(data)) == d  # the same bytes, another object
    for at in (0, 1 << 20, len(data) - 1):  # in the head, and past it
        changed = bytearray(data)
        changed[at] ^= 1
        assert K.digest(bytes(changed)) != d, at
    assert K.digest(data[:-1]) != d


def _laid(blobs, fb=b"flatbuffer", at=64):
    from pterun.delegates.xnnpack.litert_engine.writer import Unwritten

    placed, pos = [], at
    for b in blobs:
        placed.append((pos, b, 0))
        pos += -(-b.size // 64) * 64
    return Unwritten(fb, at, tuple(placed), pos, ())


def test_the_model_key_covers_the_flatbuffer_every_constant_the_versions_and_the_cpu(monkeypatch):
    rng = np.random.default_rng(1)
    blobs = [rng.integers(0, 255, n, dtype=np.uint8) for n in (100, 3000)]
    k = K.model_key(_laid(blobs), "2.3.0")
    assert len(k) == 64
    assert K.model_key(_laid([b.copy() for b in blobs]), "2.3.0") == k  # the same bytes in other arrays
    assert K.model_key(_laid(blobs, fb=b"flatbuffeR"), "2.3.0") != k
    assert K.model_key(_laid(blobs, at=128), "2.3.0") != k  # constants placed elsewhere
    for j in range(2):
        changed = [b.copy() for b in blobs]
        changed[j][-1] ^= 1
        assert K.model_key(_laid(changed), "2.3.0") != k, j
    assert K.model_key(_laid(blobs), "2.4.0") != k
    monkeypatch.setattr(K, "_cpu", "another CPU")
    assert K.model_key(_laid(blobs), "2.3.0") != k


def _mapped(path):
    from pterun.sources import open_source

    mm, _, _ = open_source(str(path))
    return mm, np.frombuffer(mm, np.uint8)


def test_constants_of_a_mapped_file_are_named_by_its_digest_noted_once_per_version(tmp_path, monkeypatch):
    f = tmp_path / "prog.pte"
    f.write_bytes(np.arange(4096, dtype=np.uint8).tobytes())
    monkeypatch.setattr(K, "RACY_S", -1.0)  # the file was written just now: trust a note made after it anyway
    c = K.Cache(str(tmp_path / "cache"), 1 << 30)
    computed = []
    monkeypatch.setattr(K, "digest", lambda data: computed.append(1) or "d" * 64)
    mm, whole = _mapped(f)
    k = K.model_key(_laid([whole[1000:2000]]), "2.3.0", c)
    assert len(computed) == 1
    assert K.model_key(_laid([whole[1000:2000]]), "2.3.0", c) == k and len(computed) == 1  # the note served
    assert K.model_key(_laid([whole[1001:2001]]), "2.3.0", c) != k  # another offset of the file
    assert K.model_key(_laid([whole[1000:2000].copy()]), "2.3.0", c) != k  # not from the file: its CRC
    notes = [n for n in os.listdir(c.root) if n.endswith(".file")]
    assert len(notes) == 1
    mm2, whole2 = _mapped(f)  # the same version mapped again, in a later load
    assert K.model_key(_laid([whole2[1000:2000]]), "2.3.0", c) == k and len(computed) == 1


def test_a_changed_file_is_digested_again_and_a_note_made_just_after_a_change_is_not_trusted(tmp_path):
    f = tmp_path / "prog.pte"
    data = bytearray(np.arange(4096, dtype=np.uint8).tobytes())
    f.write_bytes(bytes(data))
    c = K.Cache(str(tmp_path / "cache"), 1 << 30)
    k1 = K.model_key(_laid([_mapped(f)[1][100:200]]), "2.3.0", c)
    data[150] ^= 1  # a weight changes in place: same size; the file was written within RACY_S of the note
    with open(f, "r+b") as fh:
        fh.write(bytes(data))
    k2 = K.model_key(_laid([_mapped(f)[1][100:200]]), "2.3.0", c)
    assert k2 != k1
    # a note whose file changed within RACY_S before it was written is computed again, not read: every note now
    # names another digest, and the key stays the content's
    notes = [os.path.join(c.root, n) for n in os.listdir(c.root) if n.endswith(".file")]
    assert notes
    for note in notes:
        with open(note, "w") as fh:
            fh.write("e" * 64 + f" {time.time():.3f}\n")
    assert K.model_key(_laid([_mapped(f)[1][100:200]]), "2.3.0", c) == k2


def test_the_cpu_identity_names_the_processor():
    ident = K.cpu_identity()
    assert isinstance(ident, str) and ident
    if os.path.exists("/proc/cpuinfo"):
        assert "flags" in ident or "Features" in ident


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/cpuinfo names the CPU on Linux only")
def test_on_linux_the_cpu_is_named_without_starting_a_process(monkeypatch):
    import platform

    def refuse(*a, **k):
        raise AssertionError("platform.processor() runs `uname -p` in a new process")

    monkeypatch.setattr(platform, "processor", refuse)
    monkeypatch.setattr(K, "_cpu", None)
    ident = K.cpu_identity()
    assert ident.splitlines()[0] == platform.machine() and ("flags" in ident or "Features" in ident)


def test_the_keys_digest_is_sha256():
    import hashlib

    for data in (b"", b"abc", bytes(range(256)) * 4099):
        assert K.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    h = K.sha256(b"ab")
    h.update(b"c")
    assert h.hexdigest() == hashlib.sha256(b"abc").hexdigest()


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
    assert {f[:-len(".weights")] for f in files if f.endswith(".weights")} == \
        {f[:-len(".tflite")] for f in files if f.endswith(".tflite")}  # each model kept beside its weights
    # the third load read the model from its file: nothing of it was written in memory
    m = Runtime(engine="litert", cache=tmp_path).load_program(FIXTURES / rel).load_method("forward")
    models = [ex._interp for ex in litert_plans(m)]
    assert models and all(type(c).__name__ == "Compiled" and c.model is None for c in models)


@needs_litert
def test_a_damaged_model_file_is_written_again_and_a_changed_program_never_reads_another_version(tmp_path,
                                                                                                 monkeypatch):
    import shutil

    from pterun.delegates.xnnpack.litert_engine import compiled

    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(K, "NOTE_LOADS", 0)
    prog = tmp_path / "prog.pte"
    shutil.copy(FIXTURES / "xnn_mobilenet_v2.pte", prog)
    call = load_calls_from(FIXTURES / "xnn_mobilenet_v2.npz")[0]

    def run(cache):
        m = Runtime(engine="litert", cache=cache).load_program(prog).load_method(call["method"])
        return m.execute(call["inputs"])[0]

    ref = run(False)
    np.testing.assert_array_equal(run(tmp_path / "c"), ref)  # written
    root = tmp_path / "c" / "xnnpack"
    model, = [root / f for f in os.listdir(root) if f.endswith(".tflite")]
    whole = model.read_bytes()
    for damaged in (whole[:len(whole) // 2], b"x" * len(whole)):  # cut short; not a model at all
        model.write_bytes(damaged)
        np.testing.assert_array_equal(run(tmp_path / "c"), ref)  # not read: written again
        assert model.read_bytes() == whole
    data = bytearray(prog.read_bytes())
    for at in range(len(data) // 2, len(data) // 2 + 4):  # a weight changes, in place: same file, same size
        data[at] ^= 0x40
    prog.write_bytes(bytes(data))
    changed = run(False)
    assert not np.array_equal(changed, ref)
    for _ in range(2):  # noted as another model, then written: never the old version's files
        np.testing.assert_array_equal(run(tmp_path / "c"), changed)


@needs_litert
def test_a_program_given_as_bytes_names_its_constants_by_their_bytes_and_reads_its_files(tmp_path, monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import compiled

    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)
    data = (FIXTURES / "xnn_mobilenet_v2.pte").read_bytes()
    call = load_calls_from(FIXTURES / "xnn_mobilenet_v2.npz")[0]
    ref = Runtime(engine="litert").load_program(data).load_method(call["method"]).execute(call["inputs"])
    for _ in range(3):  # noted, written, read
        m = Runtime(engine="litert", cache=tmp_path).load_program(data).load_method(call["method"])
        for g, r in zip(m.execute(call["inputs"]), ref):
            np.testing.assert_array_equal(g, r)
    files = os.listdir(tmp_path / "xnnpack")
    assert not any(f.endswith(".file") for f in files)  # no file behind the bytes: no digest noted
    assert sum(f.endswith(".tflite") for f in files) == 1 and sum(f.endswith(".weights") for f in files) == 1
    assert all(type(ex._interp).__name__ == "Compiled" and ex._interp.model is None for ex in litert_plans(m))


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
    files = [f for f in os.listdir(tmp_path / "xnnpack") if not f.endswith(".file")]  # (the program's digest)
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
def test_a_cached_program_prints_nothing_and_imports_none_of_litert_s_python_layer_nor_what_costs_a_load(tmp_path):
    code = f"""
import numpy as np
from pterun import Runtime
from pterun.delegates.xnnpack.litert_engine import cache, compiled
compiled.CACHE_MIN_BYTES = 0
cache.NOTE_LOADS = 0
import sys
before = set(sys.modules)  # NumPy 1.26 imports hashlib itself
for _ in range(2):
    m = Runtime(cache={str(tmp_path)!r}).load_program({str(FIXTURES / 'xnn_mlp.pte')!r}).load_method("forward")
    m.execute([np.ones((4, 16), np.float32)])
# LiteRT's CompiledModel ran through its bindings: none of the Python layer over them was imported
print(compiled.used(), sorted(n for n in sys.modules if n.split(".")[-1] in ("compiled_model", "tensor_buffer",
                                                                           "options", "environment")))
# naming the model once took OpenSSL's import (~4 ms: hashlib) and a `uname -p` process (~15 ms: subprocess)
print(sorted(n for n in ("hashlib", "subprocess") if n in sys.modules and n not in before))
sys.stderr.write("END\\n"); sys.stderr.flush()
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "True []\n[]\n"
    before_exit, at_exit = r.stderr.split("END\n")
    assert before_exit == "", before_exit
    # what LiteRT's own environment logs as the process ends is beyond reach (the module docstring of .compiled)
    assert all(line.startswith("INFO: [accelerator_registry.cc") for line in at_exit.splitlines()), at_exit
