"""Speech to text: the Whisper-style runner against ExecuTorch's recorded run, the mel front end against
ExecuTorch's preprocessor program, WAV reading, resampling, ``pterun transcribe``, and no torch anywhere.

The fixtures in ``tests/fixtures/multimodal/`` come from ``tools/export_multimodal_fixtures.py whisper``: a tiny
random Whisper exported by optimum-executorch (XNNPACK), ExecuTorch's own mel preprocessor ``.pte``, and the
greedy tokens ExecuTorch's Runtime produced through the C++ ``Seq2SeqRunner``'s algorithm on ``speech.wav``.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import textwrap
import wave
from pathlib import Path

import numpy as np
import pytest

from pterun import Runtime
from pterun.errors import InvalidArgumentError, InvalidProgramError
from pterun.llm import Seq2SeqRunner, Seq2SeqTranscribeConfig
from pterun.llm.audio import WhisperFrontEnd, load_audio, mel_filters, read_wav, resample
from fixtures_util import needs

MM = Path(__file__).parent / "fixtures" / "multimodal"
MANIFEST = json.loads((MM / "manifest.json").read_text(encoding="utf-8"))["whisper"]
PTE, PRE, TOK, WAV = MM / "whisper.pte", MM / "whisper_preprocessor.pte", MM / "whisper_tokenizer.json", \
    MM / "speech.wav"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def rec():
    return np.load(MM / "whisper.npz")


@pytest.fixture(scope="module", params=["preprocessor_pte", "numpy_front_end"])
def runner(request):
    needs("tokenizers")
    return Seq2SeqRunner(PTE, TOK, preprocessor_path=PRE if request.param == "preprocessor_pte" else None)


def greedy(**kw) -> Seq2SeqTranscribeConfig:
    return Seq2SeqTranscribeConfig(**{"max_new_tokens": MANIFEST["max_new_tokens"], **kw})


def rel_err(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


# ==============================================================================================================
# Against ExecuTorch
# ==============================================================================================================
def test_greedy_tokens_match_executorch(runner, rec):
    ids = runner.transcribe(WAV, greedy())
    assert ids == rec["tokens"].tolist()
    assert ids[0] == MANIFEST["decoder_start_token_id"] and len(ids) == MANIFEST["max_new_tokens"] + 1


def test_features_match_executorchs_preprocessor(runner, rec):
    feats = runner.features(WAV)
    assert feats.shape == rec["features"].shape == (1, 80, 1000) and feats.dtype == np.float32
    assert rel_err(feats, rec["features"]) < 1e-5  # measured: 4e-6 (program), 8e-6 (NumPy)


def test_encoder_and_decoder_logits_match_executorch(rec):
    program = Runtime.get().load_program(PTE)
    enc = program.load_method("encoder").execute([rec["features"]])[0]
    assert enc.shape == rec["encoder_out"].shape and rel_err(enc, rec["encoder_out"]) < 1e-5
    dec = program.load_method("text_decoder")
    for pos, want in enumerate(rec["logits"]):
        got = dec.execute([np.array([[rec["tokens"][pos]]]), rec["encoder_out"], np.array([pos])])[0]
        assert got.shape == (1, 1, want.size) and rel_err(got.reshape(-1), want) < 1e-5


def test_metadata_the_runner_reads(runner):
    info = runner.info
    assert info["feature_shape"] == [1, 80, 1000] and info["max_seq_len"] == 64
    assert info["eos_ids"] == [MANIFEST["eos_id"]]  # the program's get_eos_id (optimum's singular name)
    assert info["decoder_start_token_id"] == MANIFEST["decoder_start_token_id"]


# ==============================================================================================================
# The runner's behaviour
# ==============================================================================================================
def test_streamed_text_is_the_decoded_tokens_and_callbacks_get_it_too(runner, rec):
    tok = runner.tokenizer
    want = tok.decode(rec["tokens"][1:].tolist()).rstrip("\ufffd")  # a cut-off last character is not shown
    pieces = list(runner.stream(WAV, greedy()))
    assert "".join(pieces) == want and len(pieces) > 5
    got = []
    runner.transcribe(WAV, greedy(), got.append)
    assert "".join(got) == want
    assert runner.transcribe_text(WAV, max_new_tokens=MANIFEST["max_new_tokens"]) == want


def test_waveform_and_features_inputs_give_the_same_tokens(runner, rec):
    wav, _ = read_wav(WAV)
    assert runner.transcribe(wav, greedy()) == rec["tokens"].tolist()
    assert runner.transcribe(rec["features"], greedy()) == rec["tokens"].tolist()


def test_max_new_tokens_eos_and_stop(runner, rec):
    assert runner.transcribe(WAV, greedy(max_new_tokens=5)) == rec["tokens"][:6].tolist()
    tokens = rec["tokens"].tolist()
    eos = tokens[4]  # pretend the 4th generated token is EOS
    assert runner.transcribe(WAV, greedy(eos_token_ids=[eos])) == tokens[:5]
    seen = []

    def cb(piece):
        seen.append(piece)
        if len(seen) == 2:
            runner.stop()
    ids = runner.transcribe(WAV, greedy(), cb)
    assert len(seen) == 2 and len(ids) < len(tokens)


def test_forced_prompt_tokens_are_fed_not_predicted(runner, rec):
    tok = runner.tokenizer
    forced = [tok.token_to_id("<|en|>"), tok.token_to_id("<|transcribe|>")]
    ids = runner.transcribe(WAV, greedy(prompt_ids=forced, max_new_tokens=3))
    assert ids[:3] == [MANIFEST["decoder_start_token_id"]] + forced and len(ids) == 6
    # greedy decoding after the forced tokens, worked out by hand from the decoder
    program = Runtime.get().load_program(PTE)
    dec = program.load_method("text_decoder")
    seq = ids[:3]
    for pos in range(len(seq) - 1, 5):
        logits = dec.execute([np.array([[seq[pos]]]), rec["encoder_out"], np.array([pos])])[0]
        if pos >= 2:
            seq.append(int(logits.reshape(-1).argmax()))
    assert ids == seq


def test_long_audio_is_transcribed_window_by_window(runner, rec):
    two = np.concatenate([rec["features"], rec["features"]], axis=2)  # 20 s: two encoder windows
    ids = runner.transcribe(two, greedy())
    one = rec["tokens"].tolist()
    assert ids == one + one  # each window starts again from the start token
    assert runner.stats.num_prompt_tokens == 1000  # 500 encoder positions per window
    wav = np.concatenate([read_wav(WAV)[0], np.zeros(16000 * 10, np.float32)])  # 12.5 s of samples
    assert runner.features(wav).shape == (1, 80, 2000)


def test_stats_count_like_executorchs_runner(runner):
    runner.transcribe(WAV, greedy(max_new_tokens=6))
    st = runner.stats
    assert st.num_prompt_tokens == 500 and st.num_generated_tokens == 6  # every token, the first included
    assert st.inference_start_ms <= st.prompt_eval_end_ms <= st.first_token_ms <= st.inference_end_ms
    assert st.seconds["ttft"] > 0 and st.seconds["prefill"] > 0
    assert json.loads(st.to_json_string())["generated_tokens"] == 6


def test_sampling_is_seeded(runner):
    def run(seed):
        return runner.transcribe(WAV, greedy(temperature=1.0, seed=seed, max_new_tokens=12))
    assert run(3) == run(3)
    assert len({tuple(run(s)) for s in range(4)}) > 1


def test_bad_programs_and_inputs_raise_pterun_errors(runner):
    with pytest.raises(InvalidProgramError, match="needs 'encoder' and 'text_decoder'"):
        Seq2SeqRunner.from_program(Runtime.get().load_program(MM / "whisper_preprocessor.pte"), runner.tokenizer)
    with pytest.raises(InvalidArgumentError, match=r"do not fit the encoder's input \[1, 80, 1000\]"):
        runner.transcribe(np.zeros((1, 80, 999), np.float32))
    with pytest.raises(InvalidArgumentError, match="1-D float waveform"):
        runner.transcribe(np.zeros((2, 16000), np.float32))
    with pytest.raises(InvalidArgumentError, match="max_new_tokens must be positive"):
        runner.transcribe(WAV, greedy(max_new_tokens=0))
    with pytest.raises(TypeError, match="unexpected transcription option"):
        runner.transcribe_text(WAV, colour="red")


# ==============================================================================================================
# Audio: WAV files, resampling, the mel front end
# ==============================================================================================================
def _wav(path, frames: bytes, width: int, channels: int = 1, rate: int = 16000):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(frames)
    return path


def test_read_wav_scales_pcm_as_executorch_does(rec, tmp_path):
    samples, rate = read_wav(WAV)
    with wave.open(str(WAV)) as w:
        raw = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    assert rate == 16000 and samples.dtype == np.float32 and samples.shape == raw.shape
    # ExecuTorch's load_wav_audio_data: static_cast<float>(double(sample) * (1 / float(INT16_MAX)))
    np.testing.assert_array_equal(samples, (raw.astype(np.float64) * np.float32(1 / 32767)).astype(np.float32))
    ints = np.array([-32768, -1, 0, 1, 32767], "<i2")
    assert read_wav(_wav(tmp_path / "a.wav", ints.tobytes(), 2))[0].tolist() == pytest.approx(
        [-32768 / 32767, -1 / 32767, 0, 1 / 32767, 1], rel=1e-6)
    i32 = np.array([2 ** 31 - 1, -2 ** 30], "<i4")
    assert read_wav(_wav(tmp_path / "b.wav", i32.tobytes(), 4))[0].tolist() == pytest.approx([1.0, -0.5], rel=1e-6)
    u8 = np.array([0, 128, 255], np.uint8)
    assert read_wav(_wav(tmp_path / "c.wav", u8.tobytes(), 1))[0].tolist() == pytest.approx([-128 / 127, 0, 1])
    s24 = b"".join(int(v).to_bytes(3, "little", signed=True) for v in (2 ** 23 - 1, -2 ** 22, 0))
    assert read_wav(_wav(tmp_path / "d.wav", s24, 3))[0].tolist() == pytest.approx([1.0, -0.5, 0.0], rel=1e-6)


def test_read_wav_stereo_float_and_errors(tmp_path):
    stereo = np.array([[1000, -1000], [300, 500]], "<i2")
    both, _ = read_wav(_wav(tmp_path / "s.wav", stereo.tobytes(), 2, channels=2), mono=False)
    assert both.shape == (2, 2)
    mono, _ = read_wav(tmp_path / "s.wav")
    np.testing.assert_allclose(mono, [0.0, 400 / 32767], atol=1e-7)
    floats = np.array([0.25, -0.5, 1.5], "<f4")  # IEEE float WAV (format 3): the stdlib cannot read it
    fmt = struct.pack("<HHIIHH", 3, 1, 22050, 22050 * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", 12) + floats.tobytes()
    (tmp_path / "f.wav").write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    x, rate = read_wav(tmp_path / "f.wav")
    assert rate == 22050 and x.tolist() == [0.25, -0.5, 1.5]
    (tmp_path / "junk.wav").write_bytes(b"not a wav file at all")
    with pytest.raises(InvalidArgumentError, match="not a WAV file"):
        read_wav(tmp_path / "junk.wav")
    _wav(tmp_path / "empty.wav", b"", 2)
    with pytest.raises(InvalidArgumentError, match="no samples"):
        read_wav(tmp_path / "empty.wav")
    (tmp_path / "adpcm.wav").write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body.replace(
        struct.pack("<HH", 3, 1), struct.pack("<HH", 2, 1), 1))
    with pytest.raises(InvalidArgumentError, match="format 0x0002"):
        read_wav(tmp_path / "adpcm.wav")


def test_resample_keeps_the_frequency_and_load_audio_uses_it(tmp_path):
    t = np.arange(8000) / 8000
    x = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    y = resample(x, 8000, 16000)
    assert y.shape == (16000,) and y.dtype == np.float32
    spectrum = np.abs(np.fft.rfft(y))
    assert np.argmax(spectrum) == 440  # 1 s of signal: bin k is k Hz
    np.testing.assert_allclose(y[::2], x, atol=1e-4)
    _wav(tmp_path / "8k.wav", (x * 32767).astype("<i2").tobytes(), 2, rate=8000)
    assert load_audio(tmp_path / "8k.wav", 16000).shape == (16000,)


def test_front_end_matches_the_preprocessor_program_on_other_audio():
    rng = np.random.default_rng(1)
    program = Runtime.get().load_program(PRE).load_method("forward")
    for n in (400, 16000 * 3 + 7, 16000 * 10, 16000 * 10 + 1):  # shorter than a frame .. just over one window
        x = (0.1 * rng.standard_normal(n)).astype(np.float32)
        want = program.execute([x])[0]
        got = WhisperFrontEnd(80, chunk_length=10)(x)
        assert got.shape == want.shape and rel_err(got, want) < 1e-5
    w = mel_filters(16000, 400, 80)
    assert w.shape == (80, 201) and not w.flags.writeable and (w >= 0).all()
    stacked = WhisperFrontEnd(80, chunk_length=10, stack_output=True)(np.zeros(16000 * 15, np.float32))
    assert stacked.shape == (2, 80, 1000)
    with pytest.raises(InvalidArgumentError, match="whole seconds"):
        WhisperFrontEnd.for_encoder((1, 80, 1001))


# ==============================================================================================================
# The command line, and no torch
# ==============================================================================================================
def test_cli_transcribe(capsys, rec):
    needs("tokenizers")
    from pterun.llm.cli import add_transcribe_parser, cmd_transcribe
    parser = argparse.ArgumentParser()
    add_transcribe_parser(parser.add_subparsers())
    args = parser.parse_args(["transcribe", str(WAV), "--model", str(PTE), "--tokenizer", str(TOK),
                              "--preprocessor", str(PRE), "--max-new-tokens", str(MANIFEST["max_new_tokens"])])
    assert cmd_transcribe(args) == 0
    out, err = capsys.readouterr()
    tok = Seq2SeqRunner(PTE, TOK).tokenizer
    assert out == tok.decode(rec["tokens"][1:].tolist()).rstrip("\ufffd") + "\n"
    for needle in ("encoder positions: 500", f"generated tokens: {MANIFEST['max_new_tokens']}",
                   "time to first token", "decode:", "peak memory"):
        assert needle in err
    args = parser.parse_args(["transcribe", str(WAV), "--model", str(PTE), "--tokenizer", str(TOK),
                              "--max-new-tokens", "2", "--prompt-tokens", "<|en|>,<|nope|>"])
    with pytest.raises(ValueError, match="no token '<|nope|>'"):
        cmd_transcribe(args)


def test_transcription_never_imports_torch(tmp_path):
    needs("tokenizers")
    poison = tmp_path / "torch"
    poison.mkdir()
    (poison / "__init__.py").write_text("raise RuntimeError('pterun must never import torch')\n")
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(SRC)!r}]
        from pterun.llm import Seq2SeqRunner
        for pre in ({str(PRE)!r}, None):
            r = Seq2SeqRunner({str(PTE)!r}, {str(TOK)!r}, preprocessor_path=pre)
            print(r.transcribe({str(WAV)!r})[:4])
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("OK")
