"""Audio + text generation on a Voxtral program (optimum-executorch's export) against ExecuTorch's
MultimodalRunner, through the preprocessor program and through the NumPy front end, from Python and from the
command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fixtures_util import needs
from llm_util import generate_args, greedy_config
from pterun.llm import MultimodalRunner, make_raw_audio_input, make_text_input
from pterun.llm.cli import cmd_generate

MM = Path(__file__).parent / "fixtures" / "multimodal"


VOX = json.loads((MM / "manifest.json").read_text(encoding="utf-8"))["voxtral"]


@pytest.fixture(scope="module", params=["preprocessor_pte", "numpy_front_end"])
def voxtral(request):
    needs("tiktoken")
    pre = MM / "voxtral_preprocessor.pte" if request.param == "preprocessor_pte" else None
    return MultimodalRunner(MM / "voxtral.pte", MM / "tekken.json", preprocessor_path=pre)


def _vox_inputs(case):
    from pterun.llm.audio import read_wav
    wav = np.tile(read_wav(MM / case["wav"])[0], case["repeat"])
    return [make_text_input(case["before"]), make_raw_audio_input(wav), make_text_input(case["after"])]


@pytest.mark.parametrize("case", VOX["cases"], ids=[c["name"] for c in VOX["cases"]])
def test_voxtral_greedy_tokens_match_executorch(voxtral, case):
    n = VOX["cases"].index(case)
    rec = np.load(MM / "voxtral.npz")
    voxtral.reset()
    cfg = greedy_config(VOX["max_new_tokens"], num_bos=0)  # the prompt spells <s> itself
    assert list(voxtral.stream_ids(_vox_inputs(case), cfg)) == rec[f"c{n}_generated"].tolist()
    assert voxtral.stats.num_prompt_tokens == case["prompt_positions"]  # 375 audio positions per 30 s chunk


def test_voxtral_text_matches_executorchs_runner(voxtral):
    case = VOX["cases"][0]
    voxtral.reset()
    text = voxtral.generate_text(_vox_inputs(case), greedy_config(VOX["max_new_tokens"], num_bos=0))
    special = set(_tekken_specials())
    assert text == "".join(p for p in case["runner_pieces"] if p not in special)
    info = voxtral.info
    assert info.modalities == ("audio",) and info.cache_positions and info.eos_ids == {2}


def _tekken_specials():
    data = json.loads((MM / "tekken.json").read_text(encoding="utf-8"))
    return [t["token_str"] for t in data["special_tokens"]]


def test_cli_generate_with_audio(capsys):
    needs("tiktoken")
    case = VOX["cases"][0]
    special = set(_tekken_specials())
    want = "".join(p for p in case["runner_pieces"] if p not in special)
    for pre in ([], ["--preprocessor", str(MM / "voxtral_preprocessor.pte")]):
        args = generate_args(["generate", str(MM / "voxtral.pte"), "--tokenizer", str(MM / "tekken.json"), "--prompt",
                     case["before"] + "{audio}" + case["after"], "--audio", str(MM / case["wav"]), "--num-bos", "0",
                     "--temperature", "0", "--max-new-tokens", str(VOX["max_new_tokens"])] + pre)
        assert cmd_generate(args) == 0
        out, err = capsys.readouterr()
        assert out == want + "\n" and f"prompt tokens: {case['prompt_positions']}" in err
