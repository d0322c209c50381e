"""Text generation: the runner against ExecuTorch's recorded greedy runs, the tokenizers
and the streaming UTF-8 decoder, seeded sampling through the runner, the KV cache staying in place, and ``pterun
generate``. The llama:: kernels themselves are in ``test_llm_kernels.py``; the generation config, stats and the
sampler's rules in ``test_llm_sampling.py``.

The fixtures in ``tests/fixtures/llm/`` come from ``tools/export_llm_fixtures.py`` (reference venv): a tiny
Llama trained to recite sentences, exported four ways, with greedy ids and logits recorded by ExecuTorch.
Runner logic that the exported models cannot reach (cache-position inputs, static token inputs, chunked
prefill) runs against a fake program that spells a fixed UTF-8 string one byte-token at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path


import numpy as np
import pytest

from pterun import Runtime
from pterun.errors import InvalidArgumentError
from pterun.kernels import KERNELS
from pterun.kernels.registry import Kernel
from pterun.llm import GenerationConfig, TextLLMRunner, load_tokenizer
from pterun.llm.cli import cmd_generate
from pterun.llm.tokenizer import Tokenizer
from fixtures_util import needs
from llm_util import generate_args, greedy_config

LLM = Path(__file__).parent / "fixtures" / "llm"
MANIFEST = json.loads((LLM / "manifest.json").read_text(encoding="utf-8"))
VARIANTS = sorted(MANIFEST["variants"])
PROMPTS = MANIFEST["prompts"]
TOKENIZER = LLM / "tokenizer.json"
#: max |pterun - ExecuTorch| / max |ExecuTorch| for the logits; 8da4w rounds activations to int8 per token,
#: and a value that lands on a rounding boundary may go the other way in a different summation order
LOGIT_TOL = {"kv_8da4w": 1e-3}  # measured: 4e-7 for every variant


def greedy(**kw) -> GenerationConfig:
    return greedy_config(MANIFEST["max_new"], **kw)


@pytest.fixture(scope="module", params=VARIANTS)
def variant(request):
    needs("tokenizers")  # the fixtures' tokenizer.json
    name = request.param
    return name, TextLLMRunner(LLM / f"{name}.pte", TOKENIZER), np.load(LLM / f"{name}.npz")


# ==============================================================================================================
# The runner against ExecuTorch's recorded greedy decoding
# ==============================================================================================================
def test_greedy_tokens_match_executorch(variant):
    name, runner, rec = variant
    for i, prompt in enumerate(PROMPTS):
        runner.reset()
        got = list(runner.stream_ids(prompt, greedy()))
        assert runner.tokenizer.encode(prompt, 1) == rec[f"p{i}_prompt"].tolist()
        assert got == rec[f"p{i}_generated"].tolist(), f"{name} prompt {i}"
        assert got[-1] == MANIFEST["eos"]  # the recorded runs all end in EOS, before max_new
        assert len(got) < MANIFEST["max_new"]


def test_logits_match_executorch(variant):
    name, runner, rec = variant
    tol = LOGIT_TOL.get(name, 1e-4)
    for i in range(len(PROMPTS)):
        program = Runtime.get().load_program(LLM / f"{name}.pte")  # fresh planned memory: an empty cache
        forward = program.load_method("forward").execute
        seq = rec[f"p{i}_prompt"].tolist()
        kv = runner.info.use_kv_cache
        out = forward([np.array([seq]), np.array([0])] if kv else [np.array([seq])])[0]
        for step, want in enumerate(rec[f"p{i}_logits"]):
            got = out.reshape(-1, out.shape[-1])[-1]
            err = np.abs(got - want).max() / np.abs(want).max()
            assert err <= tol, f"{name} prompt {i} step {step}: relative error {err:.2e} > {tol:.0e}"
            seq.append(int(rec[f"p{i}_generated"][step]))
            out = forward([np.array([seq[-1:]]), np.array([len(seq) - 1])] if kv else [np.array([seq])])[0]


def test_callbacks_get_every_piece_and_one_stats(variant):
    name, runner, rec = variant
    runner.reset()
    pieces, stats = [], []
    runner.generate(PROMPTS[1], greedy(echo=True), pieces.append, stats.append)
    assert pieces[0] == PROMPTS[1]  # echo comes first, as in ExecuTorch
    generated = rec["p1_generated"].tolist()
    assert "".join(pieces[1:]) == runner.tokenizer.decode(generated)
    assert len(pieces) == 1 + len(generated)  # one call per token (EOS's piece is "")
    assert len(stats) == 1 and stats[0] is runner.stats
    st = stats[0]
    assert st.num_prompt_tokens == len(rec["p1_prompt"])
    assert st.num_generated_tokens == len(generated) - 1  # ExecuTorch counts decode steps only
    assert st.inference_start_ms <= st.first_token_ms <= st.inference_end_ms
    keys = list(json.loads(st.to_json_string()))
    want = [k for k in MANIFEST["variants"][name]["runner_stats"]]
    assert [k for k in keys if not k.endswith("_per_sec")] == [k for k in want if not k.endswith("_per_sec")]


def test_generate_without_a_token_callback_decodes_no_text_and_counts_the_same(variant, monkeypatch):
    name, runner, rec = variant
    runner.reset()
    runner.generate(PROMPTS[1], greedy(), lambda piece: None)
    with_text = (runner.stats.num_prompt_tokens, runner.stats.num_generated_tokens)

    def no_decoding(ids):
        raise AssertionError("decoded text nobody reads")
    monkeypatch.setattr(runner.tokenizer, "decode", no_decoding)
    runner.reset()
    stats = []
    runner.generate(PROMPTS[1], greedy(), None, stats.append)
    assert stats == [runner.stats]
    assert (runner.stats.num_prompt_tokens, runner.stats.num_generated_tokens) == with_text
    assert with_text[1] == len(rec["p1_generated"]) - 1
    assert runner.pos == len(rec["p1_prompt"]) + with_text[1]  # the same positions in the cache


def test_executorch_runner_text_matches(variant):
    """ExecuTorch's own TextLLMRunner produced the same text (it also prints the EOS token's text)."""
    name, runner, _ = variant
    runner.reset()
    text = "".join(runner.stream(PROMPTS[0], greedy()))
    assert "".join(MANIFEST["variants"][name]["runner_pieces"]) == text + "<|end_of_text|>"


def test_eos_and_max_new_tokens_stop_generation(variant):
    name, runner, rec = variant
    generated = rec["p0_generated"].tolist()
    runner.reset()
    assert list(runner.stream_ids(PROMPTS[0], greedy(max_new_tokens=5))) == generated[:5]
    runner.reset()
    assert list(runner.stream_ids(PROMPTS[0], greedy(max_new_tokens=100))) == generated  # EOS, well before 100
    n = len(rec["p0_prompt"])
    runner.reset()
    cfg = GenerationConfig(echo=False, temperature=0, num_bos=1, seq_len=n + 3)
    assert list(runner.stream_ids(PROMPTS[0], cfg)) == generated[:3]


def test_conversation_continues_and_reset_rewinds(variant):
    name, runner, rec = variant
    runner.reset()
    list(runner.stream_ids(PROMPTS[0], greedy(max_new_tokens=3)))
    # ExecuTorch's accounting: the last sampled token is not run through the model
    assert runner.pos == len(rec["p0_prompt"]) + 2
    list(runner.stream_ids(PROMPTS[1], greedy(max_new_tokens=3)))
    assert runner.pos == len(rec["p0_prompt"]) + len(rec["p1_prompt"]) + 4
    runner.reset()
    assert runner.pos == 0 and list(runner.stream_ids(PROMPTS[1], greedy())) == rec["p1_generated"].tolist()


def test_model_info_reads_the_metadata_methods(variant):
    name, runner, _ = variant
    info = runner.info
    assert info.max_seq_len == info.max_context_len == MANIFEST["max_seq_len"] or not info.use_kv_cache
    assert info.bos_id == MANIFEST["bos"] and info.eos_ids == {MANIFEST["eos"]}
    assert info.use_kv_cache == (name != "nokv") and info.enable_dynamic_shape and not info.cache_positions
    assert runner.get_vocab_size() == MANIFEST["params"]["vocab_size"]


# ==============================================================================================================
# The KV cache stays in planned memory
# ==============================================================================================================
def test_kv_cache_is_updated_in_place_in_planned_memory(monkeypatch):
    needs("tokenizers")
    seen = []
    real = KERNELS["llama::update_cache.out"]

    def spy(value, cache, start_pos, out):
        """update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, Tensor(b!) out) -> Tensor(b!)"""
        seen.append((cache.__array_interface__["data"][0], cache.base is not None, start_pos))
        return real.fn(value, cache, start_pos, out)

    monkeypatch.setitem(KERNELS, "llama::update_cache.out", Kernel(real.name, spy, real.schema))
    runner = TextLLMRunner(LLM / "kv_sdpa.pte", TOKENIZER)
    arena = runner.program.load_method("forward")._runner.arenas[1]
    lo, hi = arena.__array_interface__["data"][0], arena.__array_interface__["data"][0] + arena.nbytes
    generated = list(runner.stream_ids(PROMPTS[0], greedy()))
    calls = len(generated)  # one prefill call, then one call per decode step
    assert len(seen) == 4 * calls  # 2 layers x (k, v) per call
    per_call = [[p for p, _, _ in seen[i:i + 4]] for i in range(0, len(seen), 4)]
    assert all(c == per_call[0] for c in per_call)  # the same four arrays every call: nothing is copied
    assert all(lo <= p < hi for p in per_call[0])  # ... and they are views of the method's arena
    assert all(is_view for _, is_view, _ in seen)
    n = runner.stats.num_prompt_tokens
    assert [s for _, _, s in seen[::4]] == [0] + list(range(n, n + calls - 1))


def test_decode_step_allocates_far_less_than_the_cache():
    needs("tokenizers")
    runner = TextLLMRunner(LLM / "kv_sdpa.pte", TOKENIZER)
    p = MANIFEST["params"]
    one_cache = MANIFEST["max_seq_len"] * p["n_kv_heads"] * (p["dim"] // p["n_heads"]) * 4  # one layer's K (or V)
    runner.prefill(PROMPTS[0], GenerationConfig(num_bos=1))
    runner._step(5)  # warm up caches of the first call
    tracemalloc.start()
    runner._step(6)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # a kernel that copied even one layer's cache per step would allocate (about) one_cache more
    assert peak < one_cache, f"a decode step allocated {peak} bytes; one layer's K cache is {one_cache}"


def test_a_decode_step_hands_the_sampler_the_method_s_own_logits_and_checks_its_inputs_once(monkeypatch):
    """The runner reads each step's logits where the method left them (no caller copy a token) and passes the
    same input arrays every step, checked once; other arrays are checked as ``execute`` checks them."""
    needs("tokenizers")
    runner = TextLLMRunner(LLM / "kv_sdpa.pte", TOKENIZER)
    method = runner.program.load_method("forward")
    checks = []
    check = method._check_inputs
    monkeypatch.setattr(method, "_check_inputs", lambda inputs: checks.append(len(inputs)) or check(inputs))
    runner.prefill(PROMPTS[0], GenerationConfig(num_bos=1))
    assert len(checks) == 1
    held = runner._step(5)
    (slot,) = method._runner.outputs
    own = method._runner.values[slot].array
    assert np.shares_memory(held, own) and held.shape == (own.shape[-1],)
    got = held.copy()
    for tok in (6, 7):
        runner._step(tok)
    assert len(checks) == 2  # the decode's two arrays: checked at its first step only
    fresh = TextLLMRunner(LLM / "kv_sdpa.pte", TOKENIZER)
    fresh.prefill(PROMPTS[0], GenerationConfig(num_bos=1))
    want = fresh.program.load_method("forward").execute([np.array([[5]], np.int64), np.array([fresh.pos], np.int64)])
    np.testing.assert_array_equal(got, want[0].reshape(-1))  # what execute gives a caller, at the same step
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected dtype int64, got int32"):
        method._held([np.array([[5]], np.int32), runner._pos1])  # other arrays: checked again
    assert len(checks) == 3


# ==============================================================================================================
# Config, stats, sampling
# ==============================================================================================================
def test_seeded_sampling_is_reproducible():
    needs("tokenizers")
    runner = TextLLMRunner(LLM / "kv_sdpa.pte", TOKENIZER)

    def run(**kw):
        runner.reset()
        return list(runner.stream_ids(PROMPTS[0], max_new_tokens=20, temperature=3.0, top_p=1.0, **kw))

    assert run(seed=123) == run(seed=123)
    assert run(rng=np.random.default_rng(5)) == run(rng=np.random.default_rng(5))
    assert len({tuple(run(seed=s)) for s in range(4)}) > 1


def test_generated_multibyte_characters_come_out_whole():
    needs("tokenizers")
    runner = TextLLMRunner(LLM / "kv_xnn.pte", TOKENIZER)
    pieces = list(runner.stream(PROMPTS[1], max_new_tokens=40, temperature=0))
    assert "東" in pieces and "🙂" in pieces and all("\ufffd" not in p for p in pieces)


# ==============================================================================================================
# Runner conventions, on a fake program that spells TARGET one byte-token at a time
# ==============================================================================================================
TARGET = "hé東🙂!".encode()  # no byte repeats, so "the next token" is a function of the last one
V, BOS, EOS, OFFSET = 300, 1, 2, 3


class ByteTokenizer(Tokenizer):
    vocab_size, bos_id, eos_id, special_ids = V, BOS, EOS, frozenset({0, BOS, EOS})

    def _encode(self, text):
        return [b + OFFSET for b in text.encode()]

    def decode(self, ids):
        return bytes(i - OFFSET for i in ids if i >= OFFSET).decode("utf-8", errors="replace")


class _Info:
    def __init__(self, sizes, dynamic):
        self._s, self._d = tuple(sizes), dynamic

    def sizes(self):
        return self._s

    def numpy_dtype(self):
        return np.dtype(np.int64)

    def is_dynamic(self):
        return self._d


class FakeLM:
    """forward(tokens[, positions]) -> logits[1, V] that pick the successor of the last token in TARGET."""

    def __init__(self, kv=True, cache_positions=False, dynamic=True, bound=8, ctx=64, full_logits=False):
        self.kv, self.cache_positions, self.dynamic, self.bound, self.full = kv, cache_positions, dynamic, bound, \
            full_logits
        self.constants = {"get_max_seq_len": ctx, "get_max_context_len": ctx, "get_bos_id": BOS, "get_eos_ids": EOS,
                          "use_kv_cache": kv, "enable_dynamic_shape": dynamic}
        self.calls = []
        chain = [b + OFFSET for b in TARGET] + [EOS]
        self.next = {a: b for a, b in zip(chain, chain[1:])}
        self.method_names = set(self.constants) | {"forward"}

    def metadata(self, name):
        fake = self
        n_tok = self.bound if self.dynamic else 1
        infos = [_Info((1, n_tok), self.dynamic)]
        if self.kv:
            infos.append(_Info((n_tok,) if self.cache_positions else (1,), self.dynamic and self.cache_positions))

        class Meta:
            def num_inputs(self):
                return len(infos)

            def num_outputs(self):
                return 1

            def input_tensor_meta(self, i):
                return infos[i]
        del fake
        return Meta()

    def load_method(self, name):
        fake = self

        class M:
            def execute(self, inputs):
                return [fake.constants[name]] if name != "forward" else fake.forward(inputs)
        return M()

    def forward(self, inputs):
        tokens = inputs[0]
        assert tokens.dtype == np.int64 and tokens.shape[0] == 1 and 1 <= tokens.shape[1] <= self.bound
        if self.kv:
            pos = inputs[1]
            n = tokens.shape[1]
            if self.cache_positions:
                assert pos.tolist() == list(range(int(pos[0]), int(pos[0]) + n))
            else:
                assert pos.shape == (1,)
            self.calls.append((tokens[0].tolist(), int(pos[0])))
        else:
            self.calls.append((tokens[0].tolist(), 0))
        rows = np.zeros((tokens.shape[1], V), np.float32)
        rows[np.arange(tokens.shape[1]), [self.next.get(int(t), OFFSET + TARGET[0]) for t in tokens[0]]] = 10.0
        return [rows[None] if self.full else rows[-1:]]


@pytest.mark.parametrize("kw", [dict(), dict(cache_positions=True), dict(dynamic=False), dict(kv=False, bound=16),
                                dict(full_logits=True), dict(bound=2, cache_positions=True)],
                         ids=["start_pos", "cache_positions", "static_tokens", "no_kv_cache", "full_logits",
                              "chunked_prefill"])
def test_runner_conventions_on_a_fake_program(kw):
    fake = FakeLM(**kw)
    runner = TextLLMRunner.from_program(fake, ByteTokenizer())
    pieces = list(runner.stream("Say:", max_new_tokens=30))  # the fake's successor of ":" starts TARGET
    assert "".join(pieces) == TARGET.decode() and all("\ufffd" not in p for p in pieces)
    assert "東" in pieces and "🙂" in pieces  # 3- and 4-byte characters, each spread over that many tokens
    prompt = [BOS] + [b + OFFSET for b in b"Say:"]
    fed = [t for toks, _ in fake.calls for t in toks]
    if fake.kv:  # every token goes in once, at consecutive positions
        assert fed == prompt + [b + OFFSET for b in TARGET]
        starts = [p for _, p in fake.calls]
        sizes = [len(t) for t, _ in fake.calls]
        assert starts == list(np.cumsum([0] + sizes[:-1]))
        chunk = 1 if not fake.dynamic else min(fake.bound, fake.constants["get_max_seq_len"])
        assert max(sizes) <= chunk and len(fake.calls) == -(-len(prompt) // chunk) + len(TARGET)
    else:  # the whole sequence every call
        assert fake.calls[-1][0] == prompt + [b + OFFSET for b in TARGET]


def test_stop_from_a_callback_and_context_limits():
    runner = TextLLMRunner.from_program(FakeLM(bound=16, ctx=16), ByteTokenizer())
    pieces = []

    def cb(piece):
        pieces.append(piece)
        if len(pieces) == 3:
            runner.stop()
    runner.generate("Say:", GenerationConfig(echo=False, temperature=0, num_bos=1), cb)
    assert len(pieces) == 3 and runner.stats.num_generated_tokens == 2
    runner.reset()
    with pytest.raises(InvalidArgumentError, match="positions"):
        runner.generate("x" * 16, GenerationConfig(num_bos=0))
    with pytest.raises(InvalidArgumentError, match="empty"):
        runner.generate("", GenerationConfig())
    with pytest.raises(TypeError, match="unexpected"):
        list(runner.stream("Say:", colour="red"))
    assert list(runner.stream_ids("Say:", max_new_tokens=2)) == [OFFSET + TARGET[0], OFFSET + TARGET[1]]
    assert list(runner.stream_ids("Say:", max_new_tokens=1)) == [OFFSET + TARGET[0]]


# ==============================================================================================================
# The CLI, and no torch anywhere
# ==============================================================================================================
def test_cli_streams_text_and_reports_stats(capsys):
    needs("tokenizers")
    args = generate_args(["generate", str(LLM / "kv_xnn.pte"), "--tokenizer", str(TOKENIZER), "--prompt", PROMPTS[2],
                 "--temperature", "0"])
    assert cmd_generate(args) == 0
    out, err = capsys.readouterr()
    want = load_tokenizer(TOKENIZER).decode(np.load(LLM / "kv_xnn.npz")["p2_generated"].tolist())
    assert out == want + "\n"
    for needle in ("prompt tokens: 6", "time to first token", "prefill:", "decode:", "tokens/s", "peak memory"):
        assert needle in err


def test_cli_ctrl_c_stops_cleanly_and_still_reports(capsys, monkeypatch):
    needs("tokenizers")
    args = generate_args(["generate", str(LLM / "kv_sdpa.pte"), "--tokenizer", str(TOKENIZER), "--prompt", PROMPTS[0],
                 "--seed", "1", "--top-k", "5", "--top-p", "0.8"])
    written = []

    def write(s):
        written.append(s)
        if len(written) == 4:
            raise KeyboardInterrupt
    monkeypatch.setattr(sys.stdout, "write", write)
    assert cmd_generate(args) == 130
    err = capsys.readouterr().err
    assert "(interrupted)" in err and "peak memory" in err and "time to first token" in err


def test_generation_never_imports_torch():
    needs("tokenizers")
    code = ("import sys; from pterun.llm import TextLLMRunner; "
            f"r = TextLLMRunner({str(LLM / 'kv_8da4w.pte')!r}, {str(TOKENIZER)!r}); "
            f"print(''.join(r.stream({PROMPTS[3]!r}, temperature=0))); "
            "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules), 'torch imported'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(" cost 3 €")
