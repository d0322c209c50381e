"""The parts of text generation that need no program: :class:`GenerationConfig` against ExecuTorch's rules,
:class:`Stats` as JSON, and the :class:`Sampler` (greedy, top-k, top-p, temperature). Generation itself is in
``test_llm.py``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pterun.llm import GenerationConfig, Sampler, Stats


def test_generation_config_matches_executorch():
    cfg = GenerationConfig()
    assert repr(cfg) == "<GenerationConfig max_new_tokens=-1 seq_len=-1 temperature=0.800000 echo=True warming=False>"
    assert (cfg.echo, cfg.max_new_tokens, cfg.warming, cfg.seq_len, cfg.num_bos, cfg.num_eos) == (True, -1, False, -1,
                                                                                                   0, 0)
    assert cfg.temperature == 0.800000011920929  # a C float, as ExecuTorch stores it
    # ExecuTorch 1.5.1's resolve_max_new_tokens(128, occupied) for occupied in (0, 5, 100, 127, 128, 200)
    table = {(-1, -1): [128, 123, 28, 1, 0, 0], (10, -1): [10, 10, 10, 1, 0, 0], (-1, 50): [50, 45, 0, 0, 0, 0],
             (10, 50): [10, 10, 0, 0, 0, 0], (500, 20): [20, 15, 0, 0, 0, 0], (-1, 200): [128, 123, 28, 1, 0, 0],
             (5, 300): [5, 5, 5, 1, 0, 0]}
    for (mnt, seq), want in table.items():
        cfg = GenerationConfig(max_new_tokens=mnt, seq_len=seq)
        assert [cfg.resolve_max_new_tokens(128, o) for o in (0, 5, 100, 127, 128, 200)] == want


def test_stats_json_and_reset():
    st = Stats()
    st.model_load_start_ms, st.model_load_end_ms = 5, 9
    st.inference_start_ms, st.prompt_eval_end_ms, st.inference_end_ms = 1000, 1010, 1110
    st.num_prompt_tokens, st.num_generated_tokens = 13, 24
    d = json.loads(st.to_json_string())
    assert d["prefill_token_per_sec"] == 1300 and d["decode_token_per_sec"] == 240 and d["prompt_tokens"] == 13
    assert d["SCALING_FACTOR_UNITS_PER_SECOND"] == 1000
    st.reset()
    assert st.num_prompt_tokens == 0 and st.model_load_end_ms == 9
    st.reset(all_stats=True)
    assert st.model_load_end_ms == 0 and "decode_token_per_sec" not in json.loads(st.to_json_string())


def test_sampler_rules():
    logits = np.array([1.0, 4.0, 3.9, -2.0, 0.5], np.float32)
    assert Sampler(0.0).sample(logits) == 1
    assert Sampler(0.0).sample(np.array([2.0, 2.0])) == 0  # ties: the lowest id
    greedy_id = Sampler(0.0).sample([0.1, 3.0, 3.0, -1.0])  # a plain list too
    assert greedy_id == 1 and type(greedy_id) is int
    assert {Sampler(1.0, top_k=1, seed=s).sample(logits) for s in range(20)} == {1}
    assert {Sampler(1.0, top_p=0.01, seed=s).sample(logits) for s in range(20)} == {1}
    assert {Sampler(5.0, top_k=2, seed=s).sample(logits) for s in range(200)} == {1, 2}
    draws = [Sampler(1.0, top_p=1.0, rng=np.random.default_rng(0)).sample(logits)]
    s = Sampler(1.0, top_p=1.0, rng=np.random.default_rng(7))
    counts = np.bincount([s.sample(logits) for _ in range(4000)], minlength=5) / 4000
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(counts, p, atol=0.03)
    assert draws[0] in range(5)
    with pytest.raises(ValueError):
        Sampler(-1.0)


def test_top_p_keeps_the_likeliest_tokens_whose_mass_reaches_it_and_samples_them_by_probability():
    from pterun.llm.sampler import descending

    rng = np.random.default_rng(3)
    for trial in range(3):
        logits = (rng.normal(size=60) * 2).astype(np.float32)
        p = np.exp((logits.astype(np.float64) - logits.max()) / 0.7)
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        nucleus = order[: int(np.searchsorted(np.cumsum(p[order]), 0.6)) + 1]
        s = Sampler(0.7, top_p=0.6, rng=np.random.default_rng(trial))
        draws = np.array([s.sample(logits) for _ in range(6000)])
        assert set(draws.tolist()) == set(nucleus.tolist())
        want = np.zeros(60)
        want[nucleus] = p[nucleus] / p[nucleus].sum()
        np.testing.assert_allclose(np.bincount(draws, minlength=60) / draws.size, want, atol=0.03)
    # equal probabilities keep their id order, as a stable sort would
    assert descending(np.array([1.0, 3.0, 1.0, 3.0, 2.0], np.float32)).tolist() == [1, 3, 4, 0, 2]
    for high, n in ((9, 200), (800, 4000)):  # a few runs of equal values, and hundreds (sorted at once)
        for _ in range(50):
            v = rng.integers(0, high, rng.integers(1, n)).astype(np.float32)
            assert descending(v).tolist() == np.argsort(-v, kind="stable").tolist()
