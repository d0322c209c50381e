"""The multimodal runner: greedy generations against ExecuTorch's ``MultimodalRunner`` on a LLaVA program made by
ExecuTorch's own exporter, the input types, interleaving, conversations, the HF-processor path, audio and raw
audio on a fake program, ``pterun generate --image/--audio``, and no torch anywhere.

The fixtures in ``tests/fixtures/multimodal/`` come from ``tools/export_multimodal_fixtures.py llava``: a tiny
random ``LlavaForConditionalGeneration`` through ``examples/models/llava/export_llava.export_all`` (vision encoder
PT2E int8 and text decoder 8da4w on XNNPACK, 8-bit token embeddings), with ExecuTorch's Python
``MultimodalRunner`` recording greedy generations on raw-pixel images.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pterun import Runtime
from pterun.errors import InvalidArgumentError, InvalidProgramError, NotSupportedError
from pterun.llm import (GenerationConfig, Image, MultimodalInput, MultimodalRunner, make_audio_input,
                        make_image_input, make_raw_audio_input, make_text_input, make_token_input)
from pterun.llm.cli import cmd_generate
from pterun.llm.tokenizer import Tokenizer
from fixtures_util import needs
from llm_util import generate_args, greedy_config

MM = Path(__file__).parent / "fixtures" / "multimodal"
MANIFEST = json.loads((MM / "manifest.json").read_text(encoding="utf-8"))["llava"]
CASES = MANIFEST["cases"]
PTE, TOK = MM / "llava.pte", MM / "llava_tokenizer" / "tokenizer.json"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def rec():
    return np.load(MM / "llava.npz")


@pytest.fixture(scope="module")
def runner():
    needs("tokenizers")
    return MultimodalRunner(PTE, TOK)


def greedy(**kw) -> GenerationConfig:
    return greedy_config(MANIFEST["max_new_tokens"], **kw)


def inputs_of(case, rec, layout: str = "HWC") -> list[MultimodalInput]:
    out = []
    for kind, value in case["inputs"]:
        if kind == "text":
            out.append(make_text_input(value))
        else:
            px = rec[value]
            out.append(make_image_input(px if layout == "HWC" else np.ascontiguousarray(px.transpose(2, 0, 1))))
    return out


# ==============================================================================================================
# Against ExecuTorch
# ==============================================================================================================
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_greedy_tokens_match_executorch(runner, rec, case):
    n = CASES.index(case)
    runner.reset()
    got = list(runner.stream_ids(inputs_of(case, rec), greedy()))
    assert got == rec[f"c{n}_generated"].tolist()
    assert runner.stats.num_prompt_tokens == case["prompt_positions"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_text_and_stats_match_executorchs_runner(runner, rec, case):
    runner.reset()
    pieces, stats = [], []
    runner.generate(inputs_of(case, rec), greedy(), pieces.append, stats.append)
    assert "".join(pieces) == "".join(case["runner_pieces"])  # no EOS in these runs, so no special-token text
    assert len(pieces) == len(case["runner_pieces"])  # one callback per token, as in ExecuTorch
    st = stats[0]
    want = case["runner_stats"]
    assert st.num_prompt_tokens == want["prompt_tokens"] and st.num_generated_tokens == want["generated_tokens"]
    assert [k for k in json.loads(st.to_json_string()) if not k.endswith("_per_sec")] == \
        [k for k in want if not k.endswith("_per_sec")]


def test_generate_without_a_token_callback_decodes_no_text_and_counts_the_same(runner, rec, monkeypatch):
    case = CASES[0]
    runner.reset()
    runner.generate(inputs_of(case, rec), greedy(), lambda piece: None)
    with_text = (runner.stats.num_prompt_tokens, runner.stats.num_generated_tokens, runner.pos)

    def no_decoding(ids):
        raise AssertionError("decoded text nobody reads")
    monkeypatch.setattr(runner.tokenizer, "decode", no_decoding)
    runner.reset()
    runner.generate(inputs_of(case, rec), greedy())
    assert (runner.stats.num_prompt_tokens, runner.stats.num_generated_tokens, runner.pos) == with_text
    assert with_text[1] == case["runner_stats"]["generated_tokens"]


def test_first_logits_match_executorch(rec):
    """The prefill's logits of the first case, by hand through the methods (8da4w: int8 activations per token)."""
    got, want = _first_logits(Runtime.get().load_program(PTE), rec)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-3


def test_a_merged_graph_prepared_too_small_is_prepared_again_rather_than_moved_to_numpy(monkeypatch, rec, caplog):
    """The text decoder's input is 128 tokens of 128 features. Prepared with both dims at 1 (as every dim the
    size of a dynamic bound once was), its first merged graph cannot take a call's shapes: it is prepared again at
    the declared dims and stays on XNNPACK, whose numbers are ExecuTorch's (the NumPy engine's rsqrt is not)."""
    import logging

    import pterun.delegates.xnnpack as X

    def every_dim(sizes, dynamic):
        sizes = frozenset(sizes)
        return lambda ext, declared: tuple(1 if d in sizes else d for d in declared) if dynamic(ext) else None
    monkeypatch.setattr(X, "load_dims", every_dim)
    program = Runtime(num_threads=1).load_program(PTE)
    with caplog.at_level(logging.DEBUG, logger="pterun"):
        got, want = _first_logits(program, rec)
    assert "prepared again at the declared dims" in caplog.text
    assert "moves to the NumPy engine" not in caplog.text
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-3


def _first_logits(program, rec) -> tuple:
    """(pterun's, ExecuTorch's) last logits of the first case's prefill, by hand through ``program``'s methods."""
    case = CASES[0]
    emb, dec, vis = (program.load_method(m).execute for m in ("token_embedding", "text_decoder", "vision_encoder"))
    tok = MultimodalRunner(PTE, TOK).tokenizer
    pos, logits = 0, None
    for i, (kind, value) in enumerate(case["inputs"]):
        if kind == "text":
            e = emb([np.array([([MANIFEST["bos_id"]] if i == 0 else []) + tok.encode(value)])])[0]
        else:
            e = vis([np.ascontiguousarray(rec[value].transpose(2, 0, 1))])[0]
        logits = dec([e, np.array([pos])])[0]
        pos += e.shape[1]
    return logits.reshape(-1, logits.shape[-1])[-1], rec["c0_logits"][0]


def test_model_info(runner):
    info = runner.info
    assert info.max_seq_len == info.max_context_len == MANIFEST["max_seq_len"]
    assert info.modalities == ("vision",) and not info.cache_positions
    assert info.bos_id == MANIFEST["bos_id"] and info.eos_ids == {MANIFEST["eos_id"]}  # from the tokenizer
    assert info.tokens_bound == 48  # the exporter plans token_embedding for its example prompt's length


# ==============================================================================================================
# Inputs: images in every layout, interleaving, the HF processor's output
# ==============================================================================================================
def test_every_image_layout_gives_the_same_tokens(runner, rec):
    want = rec["c0_generated"].tolist()
    case = CASES[0]
    px = rec[case["inputs"][1][1]]
    chw = np.ascontiguousarray(px.transpose(2, 0, 1))
    forms = [px, px[None], chw, chw[None], Image(chw.reshape(-1).tolist(), px.shape[1], px.shape[0], 3),
             Image.from_array(chw, layout="CHW")]
    for form in forms:
        runner.reset()
        inputs = [make_text_input(case["inputs"][0][1]), make_image_input(form), make_text_input(case["inputs"][2][1])]
        assert list(runner.stream_ids(inputs, greedy())) == want


def test_hf_processor_output_gives_the_same_tokens(runner, rec):
    case = CASES[0]
    tok = runner.tokenizer
    image_id = MANIFEST["image_token_id"]
    ids = [MANIFEST["bos_id"]] + tok.encode(case["inputs"][0][1]) + [image_id] * 16 + tok.encode(case["inputs"][2][1])
    pixels = rec[case["inputs"][1][1]].transpose(2, 0, 1)[None]  # [1, C, H, W], as a processor returns it
    runner.reset()
    text = runner.generate_text_hf({"input_ids": np.array([ids]), "pixel_values": pixels}, greedy(),
                                   image_token_id=image_id)
    assert text == "".join(case["runner_pieces"])
    with pytest.raises(InvalidArgumentError, match="no image_token_id"):
        runner.generate_hf({"input_ids": np.array([ids]), "pixel_values": pixels}, greedy())
    with pytest.raises(InvalidArgumentError, match="one contiguous run"):
        runner.generate_hf({"input_ids": np.array([[image_id, 5, image_id]]), "pixel_values": pixels}, greedy(),
                           image_token_id=image_id)
    with pytest.raises(InvalidArgumentError, match="no 'pixel_values'"):
        runner.generate_hf({"input_ids": np.array([[image_id]])}, greedy(), image_token_id=image_id)


def test_input_types():
    img = make_image_input(np.zeros((4, 6, 3), np.uint8))
    assert img.is_image() and img.kind == "image" and img.get_text() is None and img.get_audio() is None
    im = img.get_image()
    assert (im.width, im.height, im.channels, im.is_uint8(), im.is_float()) == (6, 4, 3, True, False)
    assert im.data.shape == (3, 4, 6) and not im.data.flags.writeable and im.uint8_data.size == 72
    assert repr(im) == "<Image height=4 width=6 channels=3 dtype=uint8>"
    f = Image([0.5] * 12, 2, 2, 3)
    assert f.is_float() and f.float_data.dtype == np.float32
    with pytest.raises(InvalidArgumentError, match="holds float data"):
        _ = f.uint8_data
    assert make_token_input(np.array([[1, 2, 3]])).get_tokens() == [1, 2, 3]
    a = make_audio_input(np.zeros((1, 8, 10), np.float32)).get_audio()
    assert (a.batch_size, a.n_bins, a.n_frames) == (1, 8, 10) and repr(a).startswith("<Audio batch_size=1")
    r = make_raw_audio_input(np.zeros(160, np.float32)).get_raw_audio()
    assert (r.batch_size, r.n_channels, r.n_samples) == (1, 1, 160)
    assert MultimodalInput("hi").is_text() and MultimodalInput([4, 5]).is_tokens()
    with pytest.raises(InvalidArgumentError, match="3 .RGB. or 4 .RGBA. channels"):
        make_image_input(np.zeros((5, 6, 7), np.uint8))
    with pytest.raises(InvalidArgumentError, match="batch size 1"):
        make_image_input(np.zeros((2, 4, 4, 3), np.uint8))
    with pytest.raises(InvalidArgumentError, match="uint8 or float"):
        make_image_input(np.zeros((4, 4, 3), np.int16))
    with pytest.raises(InvalidArgumentError, match="0..255"):
        Image([300] * 12, 2, 2, 3)
    with pytest.raises(InvalidArgumentError, match="needs 12"):
        Image([1] * 11, 2, 2, 3)
    with pytest.raises(InvalidArgumentError, match="3-D"):
        make_audio_input(np.zeros((8, 10), np.float32))
    with pytest.raises(InvalidArgumentError, match="holds text, token ids"):
        MultimodalInput(3.5)


def test_wrong_inputs_raise_pterun_errors(runner, rec):
    runner.reset()
    with pytest.raises(InvalidArgumentError, match="takes uint8 pixels, but this image holds float data"):
        runner.generate([make_image_input(np.zeros((32, 32, 3), np.float32))], greedy())
    with pytest.raises(InvalidArgumentError, match="no 'audio_encoder' method"):
        runner.generate([make_audio_input(np.zeros((1, 80, 100), np.float32))], greedy())
    with pytest.raises(InvalidArgumentError, match="empty"):
        runner.generate([], greedy())
    runner.reset()
    big = make_image_input(rec[CASES[0]["inputs"][1][1]])
    with pytest.raises(InvalidArgumentError, match=r"fills 16 positions but only \d+ of the 128-position context"):
        runner.prefill([big] * 9)  # 16 positions each
    with pytest.raises(InvalidProgramError, match="needs 'token_embedding' and 'text_decoder'"):
        MultimodalRunner(MM / "whisper.pte", TOK)


# ==============================================================================================================
# Conversations, prefill, stopping
# ==============================================================================================================
def test_prefill_then_generate_equals_one_generate(runner, rec):
    case = CASES[0]
    inputs = inputs_of(case, rec)
    runner.reset()
    runner.prefill(inputs[:2], GenerationConfig(num_bos=1))
    assert runner.pos == 1 + len(runner.tokenizer.encode(case["inputs"][0][1])) + 16
    got = list(runner.stream_ids(inputs[2:], greedy()))
    assert got == rec["c0_generated"].tolist()


def test_conversation_continues_and_reset_rewinds(runner, rec):
    runner.reset()
    first = list(runner.stream_ids(inputs_of(CASES[0], rec), greedy(max_new_tokens=4)))
    pos = runner.pos
    assert pos == CASES[0]["prompt_positions"] + 3  # the last sampled token is not run through the model yet
    more = list(runner.stream_ids([make_text_input(" and then?")], greedy(max_new_tokens=4)))
    assert runner.pos == pos + len(runner.tokenizer.encode(" and then?")) + 3 and len(more) == 4
    runner.reset()
    assert list(runner.stream_ids(inputs_of(CASES[0], rec), greedy(max_new_tokens=4))) == first


def test_stop_echo_and_max_new_tokens(runner, rec):
    runner.reset()
    pieces = []

    def cb(p):
        pieces.append(p)
        if len(pieces) == 4:
            runner.stop()
    runner.generate(inputs_of(CASES[0], rec), greedy(echo=True), cb)
    assert pieces[0] == CASES[0]["inputs"][-1][1]  # echo: the last text input, first
    assert len(pieces) == 4 and runner.stats.num_generated_tokens == 2
    runner.reset()
    assert runner.generate_text(inputs_of(CASES[1], rec), greedy(max_new_tokens=3)) == \
        runner.tokenizer.decode(rec["c1_generated"][:3].tolist())
    runner.reset()
    a = list(runner.stream_ids(inputs_of(CASES[1], rec), temperature=1.0, top_p=1.0, seed=5, max_new_tokens=8))
    runner.reset()
    b = list(runner.stream_ids(inputs_of(CASES[1], rec), temperature=1.0, top_p=1.0, seed=5, max_new_tokens=8))
    assert a == b


# ==============================================================================================================
# Conventions the LLaVA program does not have (cache positions, audio, raw audio, chunking), on a fake program
# ==============================================================================================================
DIM, V = 4, 50


class _Meta:
    def __init__(self, infos):
        self._infos = infos

    def num_inputs(self):
        return len(self._infos)

    def input_tensor_meta(self, i):
        return self._infos[i]


class _Info:
    def __init__(self, sizes, dtype, dynamic):
        self._s, self._t, self._d = tuple(sizes), np.dtype(dtype), dynamic

    def sizes(self):
        return self._s

    def numpy_dtype(self):
        return self._t

    def is_dynamic(self):
        return self._d


class FakeMM:
    """token_embedding(ids) -> one-hot-ish embeddings; audio_encoder(features [1, bins, frames]) -> frames//2
    embeddings; text_decoder(embeds, cache_positions) -> logits that say "the next token is (sum of the last
    embedding's code + 1) % V". Every call is recorded."""

    def __init__(self, bound=4, cache_positions=True, audio_out_2d=False):
        self.calls = []
        self.bound, self.cp, self.audio_2d = bound, cache_positions, audio_out_2d
        self.method_names = {"token_embedding", "text_decoder", "audio_encoder", "get_max_seq_len", "get_eos_ids"}

    def metadata(self, name):
        b = self.bound
        return {"token_embedding": _Meta([_Info((1, b), np.int64, True)]),
                "text_decoder": _Meta([_Info((1, b, DIM), np.float32, True),
                                       _Info((b,) if self.cp else (1,), np.int64, self.cp)]),
                "audio_encoder": _Meta([_Info((1, 8, 6), np.float32, False)])}[name]

    def load_method(self, name):
        fake = self

        class M:
            def execute(self, inputs):
                fake.calls.append((name, [np.array(x) for x in inputs]))
                return getattr(fake, name)(*inputs)
        return M()

    def get_max_seq_len(self):
        return [64]

    def get_eos_ids(self):
        return [V - 1]

    def token_embedding(self, ids):
        e = np.zeros((1, ids.shape[1], DIM), np.float32)
        e[0, :, 0] = ids[0]
        return [e]

    def audio_encoder(self, feats):
        assert feats.shape == (1, 8, 6) and feats.dtype == np.float32
        out = np.full((3, DIM), 20.0, np.float32) + feats[0, 0, :3, None]
        return [out if self.audio_2d else out[None]]

    def text_decoder(self, embeds, pos):
        n = embeds.shape[1]
        assert n <= self.bound and embeds.dtype == np.float32
        if self.cp:
            assert pos.tolist() == list(range(int(pos[0]), int(pos[0]) + n)) or n == 1
        logits = np.zeros((1, n, V), np.float32)
        logits[0, np.arange(n), (embeds[0, :, 0].astype(int) + 1) % V] = 5.0
        return [logits]


class CountTokenizer(Tokenizer):
    vocab_size, bos_id, eos_id, special_ids = V, 1, V - 1, frozenset({1, V - 1})

    def _encode(self, text):
        return [10 + (ord(c) % 20) for c in text]

    def decode(self, ids):
        return "".join(chr(ord("a") + i % 26) for i in ids if i not in self.special_ids)


def test_fake_program_audio_text_interleaved_with_chunked_prefill():
    fake = FakeMM(bound=4, cache_positions=True)
    runner = MultimodalRunner.from_program(fake, CountTokenizer())
    feats = np.zeros((1, 8, 6), np.float32)
    feats[0, 0, :3] = [1, 2, 3]
    inputs = [make_text_input("abcdef"), make_audio_input(feats), make_token_input([7, 8])]
    ids = list(runner.stream_ids(inputs, greedy(max_new_tokens=5)))
    # the last prefill embedding is token 8: then 9, 10, 11 ... (each next = last + 1)
    assert ids == [9, 10, 11, 12, 13]
    dec = [(c[1][0].shape[1], c[1][1].tolist()) for c in fake.calls if c[0] == "text_decoder"]
    # BOS + 6 text ids = 7 embeddings in chunks of 4; 3 audio; 2 tokens; then one per decode step at its position
    assert dec[:4] == [(4, [0, 1, 2, 3]), (3, [4, 5, 6]), (3, [7, 8, 9]), (2, [10, 11])]
    assert [d[1] for d in dec[4:]] == [[12], [13], [14], [15]]
    assert runner.stats.num_prompt_tokens == 12 and runner.pos == 16


def test_fake_program_raw_audio_through_a_preprocessor_and_2d_encoder_output():
    class Pre:
        method_names = {"forward"}

        def metadata(self, name):
            return _Meta([_Info((48,), np.float32, True)])

        def load_method(self, name):
            class M:
                def execute(self, inputs):
                    wave = inputs[0]
                    assert wave.ndim == 1 and wave.size == 48
                    return [wave.reshape(8, 6)]  # features [bins, frames]
            return M()

    fake = FakeMM(bound=8, cache_positions=False, audio_out_2d=True)
    runner = MultimodalRunner.from_program(fake, CountTokenizer(), Pre())
    stereo = np.zeros((1, 2, 48), np.float32)
    stereo[0, :, :3] = [[2, 4, 6], [0, 0, 0]]  # averaged to mono: 1, 2, 3
    ids = list(runner.stream_ids([make_raw_audio_input(stereo), make_text_input("x")], greedy(max_new_tokens=2)))
    enc = [c for c in fake.calls if c[0] == "audio_encoder"][0][1][0]
    assert enc.shape == (1, 8, 6) and enc[0, 0, :3].tolist() == [1, 2, 3]
    assert runner.stats.num_prompt_tokens == 4 and len(ids) == 2  # no BOS: the first input is not text
    with pytest.raises(InvalidArgumentError, match="batch size 1"):
        list(runner.stream_ids([make_raw_audio_input(np.zeros((2, 1, 48), np.float32))], greedy()))


# ==============================================================================================================
# The command line, and no torch
# ==============================================================================================================
def test_cli_generate_with_images(tmp_path, capsys, rec):
    needs("tokenizers")
    case = CASES[0]
    px = rec[case["inputs"][1][1]]
    np.save(tmp_path / "img.npy", px)
    h, w, _ = px.shape
    (tmp_path / "img.ppm").write_bytes(b"P6\n# a comment\n%d %d\n255\n" % (w, h) + px.tobytes())
    want = "".join(case["runner_pieces"])
    for image in ("img.npy", "img.ppm"):
        prompt = case["inputs"][0][1] + "{image}" + case["inputs"][2][1]
        args = generate_args(["generate", str(PTE), "--tokenizer", str(TOK), "--prompt", prompt, "--image",
                     str(tmp_path / image), "--temperature", "0", "--max-new-tokens", str(MANIFEST["max_new_tokens"])])
        assert cmd_generate(args) == 0
        out, err = capsys.readouterr()
        assert out == want + "\n"
        assert f"prompt tokens: {case['prompt_positions']}" in err and "time to first token" in err
    args = generate_args(["generate", str(PTE), "--tokenizer", str(TOK), "--prompt", "{image}{image}", "--image",
                 str(tmp_path / "img.npy")])
    with pytest.raises(ValueError, match="names {image} more often"):
        cmd_generate(args)


def test_multimodal_generation_never_imports_torch(tmp_path, rec):
    needs("tokenizers")
    poison = tmp_path / "torch"
    poison.mkdir()
    (poison / "__init__.py").write_text("raise RuntimeError('pterun must never import torch')\n")
    np.save(tmp_path / "img.npy", rec[CASES[0]["inputs"][1][1]])
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(SRC)!r}]
        import numpy as np
        from pterun.llm import MultimodalRunner, make_image_input, make_text_input
        r = MultimodalRunner({str(PTE)!r}, {str(TOK)!r})
        img = make_image_input(np.load({str(tmp_path / 'img.npy')!r}))
        print(list(r.stream_ids([make_text_input("USER: "), img, make_text_input(" ASSISTANT:")],
                                temperature=0, max_new_tokens=4)))
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("OK")


def test_a_plain_string_is_a_text_input(runner, rec):
    case = next(c for c in CASES if c["name"] == "text_only")
    runner.reset()
    assert runner.generate_text(case["inputs"][0][1], greedy()) == "".join(case["runner_pieces"])


def test_float_features_go_to_a_bfloat16_audio_encoder_converted():
    import ml_dtypes

    class BF16(FakeMM):
        def metadata(self, name):
            if name == "audio_encoder":
                return _Meta([_Info((1, 8, 6), ml_dtypes.bfloat16, False)])
            return super().metadata(name)

        def audio_encoder(self, feats):
            assert feats.dtype == ml_dtypes.bfloat16
            return [np.full((1, 3, DIM), 20.0, np.float32)]

    fake = BF16()
    runner = MultimodalRunner.from_program(fake, CountTokenizer())
    feats = np.full((1, 8, 6), 1.00390625, np.float32)  # 1 + 2**-8: rounds to 1.0 in bfloat16
    list(runner.stream_ids([make_audio_input(feats)], greedy(max_new_tokens=1)))
    sent = [c for c in fake.calls if c[0] == "audio_encoder"][0][1][0]
    assert sent.dtype == ml_dtypes.bfloat16 and float(sent.astype(np.float32).max()) == 1.0
    with pytest.raises(NotSupportedError, match="takes bfloat16 input, but this audio holds uint8"):
        list(runner.stream_ids([make_audio_input(np.zeros((1, 8, 6), np.uint8))], greedy()))
