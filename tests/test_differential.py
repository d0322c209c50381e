"""The differential guard: every committed program gives the reference runtime's numbers under every engine and
every load option that changes the plan (delegate merging, constant folding), within the accuracy policy.

Two values may be one buffer, and a load pass that gets that wrong gives wrong numbers without an error; so do
other pass bugs. Each (program, engine, merge, fold) is its own test, so a failure names the program and the
option that changes the numbers, whichever fixture shows it. The bounds are the README's "Accuracy" policy:
``1e-4`` of the output's scale for float outputs, ``1e-3`` where a method has dynamically quantized activations
or fp16 values, one quantization step for an output an XNNPACK delegate dequantizes from static int8; an LLM's
logits as ``test_llm.py`` bounds them. The release matrix (``test_releases.py``) runs every release's files the
same way.

Example: ``.venv/bin/python -m pytest -q tests/test_differential.py -k "xnn_transformer and merge"``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES, check_bound, load_calls_from, needs, output_bounds
from pterun import Runtime

#: committed programs that are not a reference to match, and why
NOT_REFERENCES = {
    "bundled_bad.bpte": "its expected outputs are wrong on purpose (test_bundled.py checks that they fail)",
}
#: an LLM's logits against ExecuTorch's (test_llm.py's bounds)
LLM_LOGIT_TOL = {"kv_8da4w": 1e-3}
MM = FIXTURES / "multimodal"


def _llava(rt: Runtime, where: str) -> None:
    import test_multimodal as T
    from pterun.llm import MultimodalRunner
    needs("tokenizers")
    rec = np.load(MM / "llava.npz")
    runner = MultimodalRunner(MM / "llava.pte", MM / "llava_tokenizer" / "tokenizer.json", runtime=rt)
    got = list(runner.stream_ids(T.inputs_of(T.CASES[0], rec), T.greedy()))
    assert got == rec["c0_generated"].tolist(), f"{where}: greedy tokens differ from ExecuTorch's"


def _voxtral(rt: Runtime, where: str, preprocessor: bool = False) -> None:
    import test_voxtral as T
    from llm_util import greedy_config
    from pterun.llm import MultimodalRunner
    needs("tiktoken")
    pre = MM / "voxtral_preprocessor.pte" if preprocessor else None
    runner = MultimodalRunner(MM / "voxtral.pte", MM / "tekken.json", preprocessor_path=pre, runtime=rt)
    cfg = greedy_config(T.VOX["max_new_tokens"], num_bos=0)
    got = list(runner.stream_ids(T._vox_inputs(T.VOX["cases"][0]), cfg))
    assert got == np.load(MM / "voxtral.npz")["c0_generated"].tolist(), f"{where}: greedy tokens differ"


def _whisper(rt: Runtime, where: str, preprocessor: bool = False) -> None:
    import test_asr as T
    from pterun.llm import Seq2SeqRunner
    needs("tokenizers")
    pre = MM / "whisper_preprocessor.pte" if preprocessor else None
    runner = Seq2SeqRunner(MM / "whisper.pte", MM / "whisper_tokenizer.json", preprocessor_path=pre, runtime=rt)
    got = runner.transcribe(MM / "speech.wav", T.greedy())
    assert got == np.load(MM / "whisper.npz")["tokens"].tolist(), f"{where}: greedy tokens differ"


#: programs a runner drives, checked through that runner's first recorded greedy case (a preprocessor through
#: the model it feeds)
RUNNER_CASES = {
    "multimodal/llava.pte": _llava,
    "multimodal/voxtral.pte": _voxtral,
    "multimodal/voxtral_preprocessor.pte": lambda rt, where: _voxtral(rt, where, preprocessor=True),
    "multimodal/whisper.pte": _whisper,
    "multimodal/whisper_preprocessor.pte": lambda rt, where: _whisper(rt, where, preprocessor=True),
}


def _programs() -> list[str]:
    """Every committed program with recorded outputs, as a path relative to the fixtures folder."""
    found = []
    for p in sorted(FIXTURES.rglob("*")):
        rel = p.relative_to(FIXTURES).as_posix()
        if rel.startswith("releases/") or p.name in NOT_REFERENCES:
            continue  # the release matrix runs its own files through every configuration (test_releases.py)
        if rel in RUNNER_CASES or p.suffix == ".bpte" or (p.suffix == ".pte" and p.with_suffix(".npz").exists()):
            found.append(rel)
    return found


def _configs() -> list:
    """(program, engine, merge, fold) for every program: a portable one's operators compile into LiteRT programs
    under "auto" with merging on, as delegate calls merge."""
    out = []
    for rel in _programs():
        for engine in ("numpy", "auto"):
            for merge in (True, False):
                for fold in (True, False):
                    out.append(pytest.param(rel, engine, merge, fold, id=f"{rel}-{engine}-"
                                            f"{'merge' if merge else 'nomerge'}-{'fold' if fold else 'nofold'}"))
    return out


def _runtime(engine: str, merge: bool, fold: bool) -> Runtime:
    if engine == "auto":
        needs("ai_edge_litert")  # without LiteRT "auto" is the NumPy engine: nothing new to test
    return Runtime(engine=engine, merge_delegates=merge, fold=fold)


@pytest.mark.parametrize("rel, engine, merge, fold", _configs())
def test_every_program_gives_the_reference_numbers_under_every_load_option(rel, engine, merge, fold):
    _check_program(rel, _runtime(engine, merge, fold), f"{rel} (engine={engine}, merge_delegates={merge}, fold={fold})")


@pytest.mark.parametrize("rel", _programs())
def test_every_program_gives_the_reference_numbers_from_cached_packed_weights(rel, tmp_path, monkeypatch):
    """The packed-weight cache is a load option too: with every model taken into it (no size floor, written on
    its first load), the load that writes the weights and the one that reads them back give the reference
    numbers; models XNNPACK does not take whole are left to the interpreter, as without a cache."""
    from pterun.delegates.xnnpack.litert_engine import cache, compiled

    needs("ai_edge_litert")
    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(cache, "NOTE_LOADS", 0)
    for load in ("writes", "reads"):
        rt = Runtime(engine="auto", cache=tmp_path)
        _check_program(rel, rt, f"{rel} (cached packed weights, the load that {load} them)")


@pytest.mark.parametrize("rel", _programs())
def test_every_program_gives_the_reference_numbers_reading_its_constants_in_place(rel, monkeypatch):
    """Reading constants from the program file in place is a load option too: with every model whose constants
    are runs of the file taken (no size floor), on LiteRT's CompiledModel, whose first call prepares each graph."""
    from pterun.delegates.xnnpack.litert_engine import compiled

    needs("ai_edge_litert")
    monkeypatch.setattr(compiled, "EXTERNAL_MIN_BYTES", 0)
    _check_program(rel, Runtime(engine="auto"), f"{rel} (constants read from the program file in place)")


def _check_program(rel: str, rt: Runtime, where: str) -> None:
    path = FIXTURES / rel
    if path.suffix == ".bpte":  # its test cases hold the expected outputs
        bundled = rt.load_bundled_program(path)
        results = bundled.check_all(rtol=1e-4, atol=1e-5)
        failed = [(r.method, r.case) for r in results if not r.passed]
        assert results and not failed, f"{where}: test cases {failed} fail"
        return
    if rel in RUNNER_CASES:
        RUNNER_CASES[rel](rt, where)
        return
    if rel.startswith("llm/"):
        _check_llm(path, rt, where)
        return
    ptd = path.with_suffix(".ptd")
    program = rt.load_program(path, data_path=ptd if ptd.exists() else None)
    methods, bounds = {}, {}
    calls = load_calls_from(path.with_suffix(".npz"))
    assert calls, f"{where}: no recorded calls"
    for k, call in enumerate(calls):
        name = call["method"]
        if name not in methods:
            methods[name] = program.load_method(name)
            bounds[name] = output_bounds(program, name)
        outputs = methods[name].execute(call["inputs"])
        assert len(outputs) == len(call["outputs"]), f"{where} call {k}: {len(outputs)} outputs"
        for j, (got, want) in enumerate(zip(outputs, call["outputs"])):
            check_bound(got, want, bounds[name][j], f"{where} call {k} ({name}) output {j}")


def _check_llm(path, rt: Runtime, where: str) -> None:
    """Prompt 0 and the recorded decode steps: the logits against ExecuTorch's, as test_llm.py bounds them."""
    with np.load(path.with_suffix(".npz")) as z:
        prompt, generated, logits = z["p0_prompt"].tolist(), z["p0_generated"], z["p0_logits"]
    program = rt.load_program(path)
    kv = bool(program.load_method("use_kv_cache").execute([])[0])
    forward = program.load_method("forward").execute
    tol = LLM_LOGIT_TOL.get(path.stem, 1e-4)
    seq = list(prompt)
    out = forward([np.array([seq]), np.array([0])] if kv else [np.array([seq])])[0]
    for step, want in enumerate(logits):
        got = out.reshape(-1, out.shape[-1])[-1]
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= tol, f"{where} step {step}: logits {err:.2e} of scale from ExecuTorch's, above {tol:.0e}"
        seq.append(int(generated[step]))
        out = forward([np.array([seq[-1:]]), np.array([len(seq) - 1])] if kv else [np.array([seq])])[0]


def test_the_guard_covers_every_committed_program():
    """A program added to the fixtures is guarded without a list to update, and each under all eight
    configurations."""
    programs = _programs()
    assert {"xnn_transformer.pte", "xnn_qint8_cnn.pte", "mlp.pte", "llm/kv_xnn.pte", "bundled.bpte",
            "zoo/litert_graphs.pte", "ext_mlp.pte"} <= set(programs)
    every = {p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.pte")
             if not p.relative_to(FIXTURES).as_posix().startswith("releases/")}
    assert every <= set(programs), f"programs without recorded outputs: {sorted(every - set(programs))}"
    configs = _configs()
    assert sum(1 for c in configs if c.values[0] == "xnn_transformer.pte") == 8
    assert sum(1 for c in configs if c.values[0] == "mlp.pte") == 8
