"""The release matrix: programs exported by every ExecuTorch release run in pterun and match that release's own
runtime, on both engines, with delegate merging and constant folding each on and off.

Example: ``.venv/bin/python -m pytest -q tests/test_releases.py -k "1.0.1 and xnnpack_cnn"``.

The files are ``tests/fixtures/releases/<release>/`` (``tools/release_matrix.py`` writes them, see the README
there); each release's ``manifest.json`` names its programs and says why a program is missing where the release
could not export it. Every (release, program, engine, merge, fold) is its own test, so a failure names the file and
the load option that changes the numbers.
"""

from __future__ import annotations

import json

import pytest
from fixtures_util import FIXTURES, check_bound, load_calls, needs, output_bounds

from pterun import Runtime

RELEASES = FIXTURES / "releases"
# the releases the matrix must hold (issue 22): a release dropped from the folder fails, it does not vanish
EXPECTED_RELEASES = ["0.4.0", "0.5.0", "0.6.0", "0.7.0", "1.0.1", "1.1.0", "1.2.0", "1.3.1", "1.4.1", "1.5.1"]
# the bounds are the accuracy policy's (fixtures_util.output_bounds): 1e-4 of the output's scale for float
# programs, 1e-3 for those with dynamically quantized activations, one quantization step for outputs an XNNPACK
# delegate dequantizes from static int8


def _manifest(release: str) -> dict:
    return json.loads((RELEASES / release / "manifest.json").read_text())


def _present_releases() -> list[str]:
    return sorted((p.parent.name for p in RELEASES.glob("*/manifest.json")),
                  key=lambda r: tuple(int(x) for x in r.split(".")))


def _cases() -> list[tuple[str, str]]:
    return [(r, name) for r in _present_releases() for name, e in _manifest(r)["programs"].items() if e["exported"]]


def _open(release: str, name: str, entry: dict, runtime: Runtime):
    folder = RELEASES / release
    if f"{name}.bpte" in entry["files"]:
        bundled = runtime.load_bundled_program(folder / f"{name}.bpte")
        return bundled.program, bundled
    ptd = folder / f"{name}.ptd"
    return runtime.load_program(folder / f"{name}.pte", data_path=ptd if ptd.exists() else None), None


@pytest.mark.parametrize("fold", [True, False], ids=["fold", "nofold"])
@pytest.mark.parametrize("merge", [True, False], ids=["merge", "nomerge"])
@pytest.mark.parametrize("engine", ["numpy", "auto"])
@pytest.mark.parametrize("release,name", _cases(), ids=[f"{r}-{n}" for r, n in _cases()])
def test_release_program_matches_its_runtime(release, name, engine, merge, fold):
    entry = _manifest(release)["programs"][name]
    if engine == "auto" and entry["xnnpack_delegates"]:
        needs("ai_edge_litert")  # without LiteRT "auto" is the NumPy engine: nothing new to test
    program, bundled = _open(release, name, entry, Runtime(engine=engine, merge_delegates=merge, fold=fold))
    where = f"ExecuTorch {release} {name} (engine={engine}, merge_delegates={merge}, fold={fold})"
    calls = load_calls(f"releases/{release}/{name}")  # a name relative to tests/fixtures
    assert len(calls) == entry["calls"]
    methods, bounds = {}, {}
    for k, call in enumerate(calls):
        name_ = call["method"]
        if name_ not in methods:
            methods[name_] = program.load_method(name_)
            bounds[name_] = output_bounds(program, name_)
            if entry["kind"] == "qint8":
                assert any(kind == "abs" for kind, _ in bounds[name_]), f"{where}: no output dequantized from int8"
        outputs = methods[name_].execute(call["inputs"])
        assert len(outputs) == len(call["outputs"]), f"{where} call {k}: output count"
        for j, (got, want) in enumerate(zip(outputs, call["outputs"])):
            check_bound(got, want, bounds[name_][j], f"{where} call {k} ({name_}) output {j}")
    if bundled is not None:  # the bundled test cases hold eager PyTorch's outputs: close, not bit for bit
        failed = [(r.method, r.case) for r in bundled.check_all(rtol=1e-4, atol=1e-5) if not r.passed]
        assert not failed, f"{where}: bundled test cases {failed} fail"


def test_every_release_is_in_the_matrix():
    assert _present_releases() == EXPECTED_RELEASES


@pytest.mark.parametrize("release", _present_releases())
def test_manifest_is_complete(release):
    """Every program the exporter knows is either committed with its files or has the reason it is missing."""
    m = _manifest(release)
    assert m["executorch"] == release and m["torch"] and m["python"]
    expected = {"portable_mlp", "portable_cnn", "portable_multi_method", "xnnpack_cnn", "xnnpack_mlp_dynamic",
                "xnnpack_transformer", "xnnpack_qint8_cnn", "xnnpack_8da4w", "ptd_mlp", "bundled_mlp", "llama"}
    assert set(m["programs"]) == expected
    for name, e in m["programs"].items():
        if e["exported"]:
            for f in e["files"]:
                assert (RELEASES / release / f).is_file(), f"{release}: {f} is missing"
        else:
            assert e["reason"], f"{release} {name}: not exported and no reason given"
    # only the manifest's files are in the folder: nothing stale from an older export
    listed = {f for e in m["programs"].values() if e["exported"] for f in e["files"]} | {"manifest.json"}
    assert {p.name for p in (RELEASES / release).iterdir()} == listed


@pytest.mark.parametrize("release", _present_releases())
def test_each_release_is_small(release):
    """A few hundred KB per release (the tiny Llama is most of it): the repository's fixtures stay under ~20 MB."""
    total = sum(p.stat().st_size for p in (RELEASES / release).iterdir() if p.is_file())
    assert total < 700 * 1024, f"{release}'s programs take {total} bytes"
