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

import numpy as np
import pytest
from fixtures_util import FIXTURES, assert_matches, load_calls, needs

from pterun import Runtime
from pterun.delegates.xnnpack import payload as P
from pterun.format.program import DELEGATE_CALL, read_program

RELEASES = FIXTURES / "releases"
# the releases the matrix must hold (issue 22): a release dropped from the folder fails, it does not vanish
EXPECTED_RELEASES = ["0.4.0", "0.5.0", "0.6.0", "0.7.0", "1.0.1", "1.1.0", "1.2.0", "1.3.1", "1.4.1", "1.5.1"]
# the tolerances of test_xnnpack_fixtures.py: 1e-4 of the output's scale for float programs, 1e-3 for those with
# dynamically quantized activations, one quantization step for outputs dequantized from static int8
REL_TOL = {"float": 1e-4, "llm": 1e-4, "8da4w": 1e-3, "qint8": 1e-3}


def _manifest(release: str) -> dict:
    return json.loads((RELEASES / release / "manifest.json").read_text())


def _present_releases() -> list[str]:
    return sorted((p.parent.name for p in RELEASES.glob("*/manifest.json")),
                  key=lambda r: tuple(int(x) for x in r.split(".")))


def _cases() -> list[tuple[str, str]]:
    return [(r, name) for r in _present_releases() for name, e in _manifest(r)["programs"].items() if e["exported"]]


def _static_int8_steps(pte_bytes: bytes, where: str) -> dict[tuple[str, int], float]:
    """(method, output position) -> the quantization step of an output a delegate dequantizes from (q)int8."""
    pf = read_program(pte_bytes, where)
    steps = {}
    for header in pf.plan_headers:
        name, plan = header.name, pf.plan(header.index)
        for chain in plan.chains:
            for kind, d, args in chain:
                if kind != DELEGATE_CALL:
                    continue
                graph = P.read_graph(pf.delegate_blob(plan.delegates[d]), pf.named)
                for pos, out in enumerate(plan.outputs):
                    if out not in args:
                        continue
                    ext = list(args).index(out)
                    val = next((v for v in graph.values.values() if v.external_id == ext), None)
                    producer = val and next((n for n in graph.nodes if n.fields.get("output_id") == val.id), None)
                    if producer is not None and producer.name == "Convert":
                        src = graph.values[producer.input_id]
                        if src.datatype in (P.QINT8, P.QUINT8):
                            steps[(name, pos)] = src.quant.scale
    return steps


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
    steps = {}
    if entry["kind"] == "qint8":
        steps = _static_int8_steps((RELEASES / release / f"{name}.pte").read_bytes(), f"{release}/{name}.pte")
        assert steps, f"{where}: no output dequantized from int8 found"
    calls = load_calls(f"releases/{release}/{name}")  # a name relative to tests/fixtures
    assert len(calls) == entry["calls"]
    methods = {}
    for k, call in enumerate(calls):
        method = methods.setdefault(call["method"], program.load_method(call["method"]))
        outputs = method.execute(call["inputs"])
        assert len(outputs) == len(call["outputs"]), f"{where} call {k}: output count"
        for j, (got, want) in enumerate(zip(outputs, call["outputs"])):
            at = f"{where} call {k} ({call['method']}) output {j}"
            step = steps.get((call["method"], j))
            if step is not None:
                got = np.asarray(got)
                assert got.shape == want.shape and got.dtype == want.dtype, at
                err = float(np.abs(got.astype(np.float64) - want).max(initial=0))
                assert err <= step * 1.001, f"{at}: max error {err:.3g} = {err / step:.3g} quantization steps"
            else:
                assert_matches(got, want, at, rtol_scale=REL_TOL[entry["kind"]])
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
