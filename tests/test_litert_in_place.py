"""Constants read from the program file in place: a model whose weights are runs of the ``.pte`` LiteRT's
CompiledModel maps them there (``ExternalBuffer``) instead of a copy in the model's bytes
(:func:`.litert_engine.compiled.open_external`)."""

from __future__ import annotations

import importlib.util
import mmap
import os
import shutil

import numpy as np
import pytest
from fixtures_util import FIXTURES, litert_plans, load_calls_from, run_python

from pterun import Runtime

HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
pytestmark = pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")


def _run(source, rel: str, **kw):
    m = Runtime(engine="litert", **kw).load_program(source).load_method("forward")
    call = load_calls_from((FIXTURES / rel).with_suffix(".npz"))[0]
    return m, m.execute(call["inputs"])


@pytest.fixture()
def in_place(monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import compiled

    monkeypatch.setattr(compiled, "EXTERNAL_MIN_BYTES", 0)  # the fixtures are small
    return compiled


@pytest.mark.parametrize("rel", ["xnn_mlp.pte", "xnn_qint8_cnn.pte", "xnn_mobilenet_v2.pte", "xnn_8da4w.pte"])
def test_constants_read_in_place_give_the_interpreters_numbers_bit_for_bit(rel, in_place, monkeypatch):
    m, got = _run(FIXTURES / rel, rel)
    plans = [ex._interp for ex in litert_plans(m)]
    monkeypatch.setattr(in_place, "EXTERNAL_MIN_BYTES", 1 << 62)
    ref_m, ref = _run(FIXTURES / rel, rel)
    assert {type(p).__name__ for p in litert_plans(ref_m) for p in [p._interp]} == {"Interpreter"}
    assert plans and {type(p).__name__ for p in plans} == {"Compiled"}
    path = os.path.abspath(FIXTURES / rel)
    for p in plans:
        assert p.files and {f[0] for f in p.files} == {path}
        assert all(offset % 64 == 0 for _, _, offset, _, _ in p.files)
        if rel == "xnn_mobilenet_v2.pte":  # the model's bytes hold a fifth of what is read from the file
            assert 5 * len(p.model) < sum(size for _, _, _, size, _ in p.files)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert type(g) is type(r) and g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("rel", ["xnn_mobilenet_v2.pte", "xnn_mlp.pte"])
def test_a_model_read_in_place_packs_only_the_flatbuffer_litert_reads(rel, in_place, monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import writer

    packed, pack = [], writer.ModelWriter._pack
    monkeypatch.setattr(writer.ModelWriter, "_pack", lambda w, m: packed.append(bool(m.externalBuffers)) or pack(w, m))
    m, _ = _run(FIXTURES / rel, rel)
    plans = [ex._interp for ex in litert_plans(m)]
    assert plans and all(type(p).__name__ == "Compiled" and p.files for p in plans)
    assert packed == [True] * len(plans)  # the plain layout (constants copied) is never made
    packed.clear()
    monkeypatch.setattr(in_place, "EXTERNAL_MIN_BYTES", 1 << 62)  # too small to read in place: the plain one only
    m, _ = _run(FIXTURES / rel, rel)
    assert packed == [False] * len(litert_plans(m))


@pytest.mark.parametrize("external", [True, False], ids=["in-place", "copied"])
def test_a_model_that_cannot_be_laid_out_runs_on_numpy_and_says_why(external, in_place, monkeypatch):
    import struct

    from pterun.delegates.xnnpack.litert_engine import writer

    def refuse(w, m):
        raise struct.error("argument out of range")

    if not external:
        monkeypatch.setattr(in_place, "EXTERNAL_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(writer.ModelWriter, "_pack", refuse)  # as a field TFLite's format cannot hold does
    rel = "xnn_mobilenet_v2.pte"
    m, got = _run(FIXTURES / rel, rel)
    (d,) = m.delegates
    assert d.engine == "numpy" and "translation failed (error: argument out of range)" in d.reason, d.reason
    want = load_calls_from((FIXTURES / rel).with_suffix(".npz"))[0]["outputs"]
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-4 * float(np.abs(want[0]).max()))


def test_a_program_given_as_bytes_or_replaced_at_its_path_is_copied_as_before(in_place, tmp_path):
    rel = "xnn_mobilenet_v2.pte"
    data = (FIXTURES / rel).read_bytes()
    m, want = _run(data, rel)
    assert {type(p._interp).__name__ for p in litert_plans(m)} == {"Interpreter"}  # no file to read from
    path = tmp_path / "model.pte"
    shutil.copyfile(FIXTURES / rel, path)
    program = Runtime(engine="litert").load_program(path)
    os.replace(shutil.copyfile(FIXTURES / rel, tmp_path / "other.pte"), path)  # another file at the path now
    m = program.load_method("forward")
    assert {type(p._interp).__name__ for p in litert_plans(m)} == {"Interpreter"}
    got = m.execute(load_calls_from((FIXTURES / rel).with_suffix(".npz"))[0]["inputs"])
    for g, r in zip(got, want):
        np.testing.assert_array_equal(g, r)


def test_a_model_reading_its_constants_in_place_prints_nothing_and_loses_nothing_at_exit(tmp_path):
    # LiteRT's own environment logs its teardown after Python has finished; pterun closes stderr just before that,
    # so what Python writes at exit (an atexit handler registered before pterun's) still comes out
    code = f"""
import atexit, sys
atexit.register(lambda: sys.stderr.write("bye\\n"))
from pterun import Runtime
from pterun.delegates.xnnpack.litert_engine import compiled
compiled.EXTERNAL_MIN_BYTES = 0
m = Runtime().load_program({str(FIXTURES / 'xnn_mobilenet_v2.pte')!r}).load_method("forward")
print(sorted({{type(ex._interp).__name__ for ex in m._runner.executors}}))
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == ("['Compiled']\n", "bye\n")


def _rss_kb(path: str) -> int:
    """Resident kB of this process's private mappings of ``path``."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:
                fields = line.split()
                inside = len(fields) >= 6 and fields[5] == path and fields[1].endswith("p")
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's memory map")
def test_the_packed_ranges_of_private_mappings_are_dropped_and_nothing_else(tmp_path):
    from pterun.delegates.xnnpack.litert_engine.memory import release_mapped

    path = str(tmp_path / "weights.bin")
    size = 64 * mmap.PAGESIZE
    with open(path, "wb") as f:
        f.write(np.arange(size, dtype=np.uint8).tobytes())
    st = os.stat(path)
    with open(path, "rb") as f:
        private = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # MAP_PRIVATE, as LiteRT maps
    view = np.frombuffer(private, np.uint8)
    assert int(view.sum(dtype=np.int64)) > 0  # every page touched
    before = _rss_kb(path)
    assert before >= size // 1024
    half = size // 2
    assert release_mapped([(path, st, 0, half, False)]) == 0  # not packed: kept
    assert release_mapped([(path, st, 0, half, True)]) == half
    assert _rss_kb(path) <= before - half // 1024
    np.testing.assert_array_equal(view, np.arange(size, dtype=np.uint8))  # read back from the file, unchanged
    del view
    private.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's memory map")
def test_each_mapping_drops_exactly_the_whole_pages_of_the_packed_runs_it_holds(tmp_path):
    # as LiteRT maps a program read in place: one private mapping per constant, the file's other mappings beside
    from pterun.delegates.xnnpack.litert_engine.memory import release_mapped

    page = mmap.PAGESIZE
    path = str(tmp_path / "weights.bin")
    with open(path, "wb") as f:
        f.write(np.arange(24 * page, dtype=np.uint32).astype(np.uint8).tobytes())
    st = os.stat(path)
    with open(path, "rb") as f:  # pages [2, 6), [6, 10), [12, 20) of the file, mapped on their own
        maps = [mmap.mmap(f.fileno(), n * page, access=mmap.ACCESS_COPY, offset=at * page)
                for at, n in ((2, 4), (6, 4), (12, 8))]
    views = [np.frombuffer(m, np.uint8) for m in maps]
    assert all(int(v.sum(dtype=np.int64)) > 0 for v in views)  # every page touched
    # runs given out of order: one across the first two mappings (pages 3-8, its ends partial pages), one
    # inside the third (pages 14-15 whole), one in no mapping (page 21), one in a run that is not packed, and
    # one too small to hold a whole page; a last run reaching far past an earlier, shorter one's start
    runs = [(14 * page, 2 * page, True), (3 * page + 1, 5 * page, True), (21 * page, page, True),
            (16 * page, 3 * page, False), (17 * page + 5, page // 2, True), (0, 7 * page, True)]
    before = _rss_kb(path)
    got = release_mapped([(path, st, offset, size, packed) for offset, size, packed in runs])
    # the whole pages of each run inside each mapping, counted per run: (0, 7p) pages 2-5 in the first mapping
    # and 6 in the second, (3p+1, 5p) pages 4-5 and 6-7, (14p, 2p) pages 14-15; pages 2-7 and 14-15 dropped
    assert got == (4 + 1 + 2 + 2 + 2) * page
    assert _rss_kb(path) <= before - 8 * page // 1024
    for (at, n), v in zip(((2, 4), (6, 4), (12, 8)), views):  # the bytes read back from the file, unchanged
        np.testing.assert_array_equal(v, np.arange(at * page, (at + n) * page, dtype=np.uint32).astype(np.uint8))
    del views, v
    for m in maps:
        m.close()


def test_only_aligned_unchanged_runs_of_a_mapped_file_with_a_utf8_name_are_read_in_place(tmp_path):
    from pterun.delegates.xnnpack.litert_engine.writer import _in_files
    from pterun.format.mapped import remember
    from pterun.sources import open_source

    path = tmp_path / "p.pte"
    path.write_bytes(bytes(range(256)) * 4)
    mm, _, _ = open_source(str(path))
    whole = np.frombuffer(mm, np.uint8)
    blobs = [(1, whole[64:128], 0), (2, whole[96:160], 0), (3, whole[128:192], 0x88), (4, whole[256:512:2], 0),
             (5, np.arange(64, dtype=np.uint8), 0), (6, whole[512:1024], 0)]
    found = _in_files(blobs)
    assert sorted(found) == [1, 6]
    for k, offset in ((0, 64), (5, 512)):
        b, source, _ = blobs[k]
        where, st, (at, data) = found[b]
        assert (where, at, st.st_ino) == (os.path.abspath(path), offset, os.stat(path).st_ino)
        assert data is source
    with open(path, "rb") as f:
        other = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    remember(other, str(tmp_path / "caf\udce9.pte"), os.stat(path))  # a name not valid UTF-8
    assert _in_files([(1, np.frombuffer(other, np.uint8)[64:128], 0)]) == {}
    del whole


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's memory map")
def test_the_program_pages_litert_mapped_are_given_back_by_the_first_call_or_the_next_model_made():
    # LiteRT maps each constant it reads in place privately; XNNPACK packs them all when the model is made, and
    # the pages of the packed ones are given back once the model's signature is prepared, in its first call
    # (Compiled.release_when_prepared), so the load does not wait for it; or before the engine makes another
    # model, so that loads hold one model's pages at most
    rel = "xnn_mobilenet_v2.pte"
    code = f"""
from fixtures_util import load_calls_from
from pterun import Runtime
from pterun.delegates.xnnpack.litert_engine import compiled
compiled.EXTERNAL_MIN_BYTES = 0
path = {str(FIXTURES / rel)!r}
inputs = load_calls_from({str((FIXTURES / rel).with_suffix('.npz'))!r})[0]["inputs"]

from test_litert_in_place import _rss_kb

first = Runtime(engine="litert").load_program(path).load_method("forward")
loaded = _rss_kb(path)
second = Runtime(engine="litert").load_program(path).load_method("forward")
both = _rss_kb(path)
second.execute(inputs)
called = _rss_kb(path)
first.execute(inputs)
kinds = {{type(ex._interp).__name__ for m in (first, second) for ex in m._runner.executors}}
print(sorted(kinds), loaded, both, called, _rss_kb(path))
"""
    r = run_python(f"import sys; sys.path.insert(0, {str(FIXTURES.parent)!r})\n" + code)
    assert r.returncode == 0, r.stderr
    kinds, loaded, both, called, end = r.stdout.rsplit(" ", 4)
    loaded, both, called, end = int(loaded), int(both), int(called), int(end)
    assert kinds == "['Compiled']"
    assert loaded > 1024
    assert both < loaded * 3 // 2  # the first model's pages went before the second was made (else twice as many)
    # both models' pages given back but for the ones their 106 constants (a few KB at the smallest) share at the
    # ends; the first model's first call had nothing left to give
    assert called < loaded and end == called
