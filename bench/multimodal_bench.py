#!/usr/bin/env python
"""Multimodal and speech generation, pterun vs ExecuTorch, same ``.pte`` files, 1 and 2 threads, one run.

    .venv/bin/python bench/multimodal_bench.py --ref /path/to/mm-llava/bin/python
    .venv/bin/python bench/multimodal_bench.py --ref ... --models llava whisper --threads 1 --rounds 1

Models (``--models``):

* ``llava_bench``: a random LLaVA through ExecuTorch's own exporter (``examples/models/llava``): a CLIP-like
  vision tower (224x224 images, 14x14 patches, 256 image tokens, width 256, 4 layers; PT2E int8) and a 6-layer
  Llama (dim 256, 8da4w), XNNPACK; ``bench/models/mm/``, made by ``tools/export_multimodal_fixtures.py llava
  --bench bench/models/mm`` (git-ignored).
* ``whisper_bench``: a random Whisper of whisper-tiny's shape (d_model 384, 4 + 4 layers, 30 s windows) with a
  4k vocabulary, through optimum-executorch (XNNPACK), and ExecuTorch's mel preprocessor ``.pte``
  (``... whisper --bench bench/models/mm``).
* ``llava``, ``whisper``: the test fixtures in ``tests/fixtures/multimodal/`` (tiny: mostly per-call overhead).

What is timed, in a fresh process per (model, runtime, threads, round); the order is reversed every other round:
construct the runner (``load``), one short warm-up generation, ``reset()``, then one timed greedy generation of
``--new-tokens`` tokens:

* LLaVA: ``[text, image, text]`` with a random image of the vision tower's size; pterun's ``MultimodalRunner``
  vs ExecuTorch's Python ``MultimodalRunner``.
* Whisper: 10 s of synthetic speech (a 16 kHz waveform) through the preprocessor program, the encoder, then
  greedy decoding; pterun's ``Seq2SeqRunner`` vs ExecuTorch's ``Runtime`` driven by the C++ ``Seq2SeqRunner``'s
  loop (ExecuTorch has no Python ASR runner), the ``sampler`` method picking each token as in its runner.

Reported: ``ttft`` (from the call to the first token: preprocessing, encoders and prefill included), decode
tokens/s (tokens after the first / time after the first), ``cpu/wall`` during the timed call (how many cores
the runtime kept busy), and peak RSS (``ru_maxrss`` at the end: interpreter, imports, model, caches). Threads:
pterun ``PTERUN_NUM_THREADS=N``; ExecuTorch's threadpool resized to N right after import. Results go to
``bench/out/multimodal.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_MODELS = ROOT / "bench" / "models" / "mm"
FIXTURES = ROOT / "tests" / "fixtures" / "multimodal"
OUT = ROOT / "bench" / "out"
SR = 16000


def model_files(name: str) -> dict:
    if name == "llava_bench":
        return {"kind": "llava", "pte": BENCH_MODELS / "llava_bench.pte", "tok": BENCH_MODELS / "llava_bench_tokenizer"}
    if name == "llava":
        return {"kind": "llava", "pte": FIXTURES / "llava.pte", "tok": FIXTURES / "llava_tokenizer"}
    if name == "whisper_bench":
        return {"kind": "whisper", "pte": BENCH_MODELS / "whisper_bench.pte",
                "pre": BENCH_MODELS / "whisper_bench_preprocessor.pte",
                "tok": BENCH_MODELS / "whisper_bench_tokenizer.json"}
    if name == "whisper":
        return {"kind": "whisper", "pte": FIXTURES / "whisper.pte", "pre": FIXTURES / "whisper_preprocessor.pte",
                "tok": FIXTURES / "whisper_tokenizer.json"}
    raise SystemExit(f"unknown model {name!r}")


def speech(seconds: float):
    import numpy as np
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * SR)) / SR
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.5 * t)
    x = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / SR) / k for k in range(1, 12))
    x *= (np.sin(2 * np.pi * 3 * t) > 0) * 0.3
    return (x + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# One measurement, in its own process
# ----------------------------------------------------------------------------------------------------------------
class Clock:
    """Wall and CPU time from ``start()``; ``first()`` stamps the first token."""

    def start(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.t_first = None
        self.n = 0

    def token(self, *_):
        self.n += 1
        if self.t_first is None:
            self.t_first = time.perf_counter()

    def stop(self) -> dict:
        t1, c1 = time.perf_counter(), time.process_time()
        decode = t1 - self.t_first
        return {"ttft_ms": (self.t_first - self.t0) * 1000, "tokens": self.n,
                "decode_tok_s": (self.n - 1) / decode if decode > 0 and self.n > 1 else 0.0,
                "cpu_per_wall": (c1 - self.c0) / (t1 - self.t0)}


def child(args) -> dict:
    import numpy as np
    files = model_files(args.model)
    threads = args.threads
    is_ref = args.runtime == "executorch"
    t_import = time.perf_counter()
    if is_ref:
        import torch
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
        import executorch.kernels.quantized  # noqa: F401
        from executorch.extension.pybindings.portable_lib import (_threadpool_get_thread_count,
                                                                  _unsafe_reset_threadpool)
        _unsafe_reset_threadpool(threads)
        torch.set_num_threads(threads)
        got_threads = int(_threadpool_get_thread_count())
    else:
        os.environ["PTERUN_NUM_THREADS"] = str(threads)
        import pterun.llm  # noqa: F401
        from pterun import threads as pthreads
        got_threads = pthreads.num_threads()
    import_s = time.perf_counter() - t_import
    clock = Clock()
    n_new = args.new_tokens
    t_load = time.perf_counter()
    if files["kind"] == "llava":
        if is_ref:
            from executorch.extension.llm.runner import (GenerationConfig, MultimodalRunner, make_image_input,
                                                         make_text_input)
            runner = MultimodalRunner(str(files["pte"]), str(files["tok"]))
        else:
            from pterun.llm import GenerationConfig, MultimodalRunner, make_image_input, make_text_input
            runner = MultimodalRunner(files["pte"], files["tok"] / "tokenizer.json")
        load_s = time.perf_counter() - t_load
        if is_ref:  # the vision encoder's (largest) image size, from each runtime's own metadata
            from executorch.runtime import Runtime
            size = Runtime.get().load_program(str(files["pte"])).metadata("vision_encoder").input_tensor_meta(0)
            size = list(size.sizes())[-1]
        else:
            size = runner.program.metadata("vision_encoder").input_tensor_meta(0).sizes()[-1]
        px = np.random.default_rng(1).integers(0, 256, (3, size, size), dtype=np.uint8)
        image = make_image_input(torch.from_numpy(px) if is_ref else px)
        inputs = [make_text_input("USER: "), image, make_text_input(" What is in the picture? ASSISTANT:")]

        def run(n):
            cfg = GenerationConfig(echo=False, max_new_tokens=n, temperature=0.0, num_bos=1)
            runner.generate(inputs, cfg, clock.token)

        clock.start()
        run(2)
        runner.reset()
        clock.start()
        run(n_new)
        result = clock.stop()
    else:
        wav = speech(args.audio_seconds)
        if is_ref:
            from executorch.runtime import Runtime
            rt = Runtime.get()
            pre = rt.load_program(str(files["pre"])).load_method("forward")
            prog = rt.load_program(str(files["pte"]))
            enc, dec, smp = (prog.load_method(m) for m in ("encoder", "text_decoder", "sampler"))
            start = int(prog.load_method("decoder_start_token_id").execute([])[0])
            load_s = time.perf_counter() - t_load

            def run(n):  # the C++ Seq2SeqRunner's loop
                feats = pre.execute([torch.from_numpy(wav)])[0]
                e = enc.execute([feats])[0]
                tok = start
                for pos in range(n):
                    logits = dec.execute([torch.tensor([[tok]]), e, torch.tensor([pos])])[0]
                    tok = int(smp.execute([logits])[0].reshape(-1)[0])
                    clock.token()
        else:
            from pterun.llm import Seq2SeqRunner, Seq2SeqTranscribeConfig
            runner = Seq2SeqRunner(files["pte"], files["tok"], preprocessor_path=files["pre"])
            load_s = time.perf_counter() - t_load

            def run(n):  # eos_token_ids: an id no model produces, so both runtimes decode n tokens
                runner.transcribe(wav, Seq2SeqTranscribeConfig(max_new_tokens=n, eos_token_ids=[-1]), clock.token)

        clock.start()
        run(2)
        clock.start()
        run(n_new)
        result = clock.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result.update(load_s=load_s, import_s=import_s, threads=got_threads,
                  peak_rss_mb=peak / 1024 / (1024 if sys.platform == "darwin" else 1))
    return result


# ----------------------------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------------------------
def run_child(python: str, model: str, runtime: str, threads: int, args) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PTERUN_NUM_THREADS", "PTERUN_ENGINE",
                                                             "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT / "src")
    cmd = [python, __file__, "--child", "--model", model, "--runtime", runtime, "--threads-one", str(threads),
           "--new-tokens", str(args.new_tokens), "--audio-seconds", str(args.audio_seconds)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{model}/{runtime}/{threads}t failed:\n{r.stderr[-3000:]}")


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", help="python of an environment with torch + executorch (its MultimodalRunner)")
    ap.add_argument("--models", nargs="+", default=["llava_bench", "whisper_bench"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--audio-seconds", type=float, default=10.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--runtime", help=argparse.SUPPRESS)
    ap.add_argument("--threads-one", dest="threads_one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.threads = args.threads_one
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0
    runtimes = [("pterun", sys.executable)] + ([("executorch", args.ref)] if args.ref else [])
    results: dict = {}
    for rnd in range(args.rounds):
        order = [(m, rt, py, t) for m in args.models for t in args.threads for rt, py in runtimes]
        for m, rt, py, t in (order if rnd % 2 == 0 else order[::-1]):
            res = run_child(py, m, rt, t, args)
            results.setdefault((m, rt, t), []).append(res)
            print(f"round {rnd}: {m} {rt} {t}t: ttft {res['ttft_ms']:.1f} ms, decode {res['decode_tok_s']:.1f} "
                  f"tok/s, cpu/wall {res['cpu_per_wall']:.2f}, peak RSS {res['peak_rss_mb']:.0f} MB", flush=True)
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0] if isinstance(v[0][f], (int, float))}
           for k, v in results.items()}
    lines = [f"# Multimodal and speech, pterun vs ExecuTorch ({time.strftime('%Y-%m-%d')})", "",
             f"CPU: {cpu_model()} ({os.cpu_count()} cores); {args.rounds} rounds, medians; {args.new_tokens} new "
             f"tokens; Whisper on {args.audio_seconds:g} s of audio.", "",
             "| model | runtime | threads | load s | TTFT ms | decode tok/s | cpu/wall | peak RSS MB | TTFT ratio | "
             "decode ratio | RSS ratio |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (m, rt, t), r in sorted(med.items()):
        ref = med.get((m, "executorch", t))
        ratios = ("", "", "")
        if ref and rt == "pterun":
            ratios = (f"{r['ttft_ms'] / ref['ttft_ms']:.2f}x", f"{r['decode_tok_s'] / ref['decode_tok_s']:.2f}x",
                      f"{r['peak_rss_mb'] / ref['peak_rss_mb']:.2f}x")
        lines.append(f"| {m} | {rt} | {t} | {r['load_s']:.2f} | {r['ttft_ms']:.1f} | {r['decode_tok_s']:.1f} | "
                     f"{r['cpu_per_wall']:.2f} | {r['peak_rss_mb']:.0f} | " + " | ".join(ratios) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "multimodal.md").write_text(text)
    (OUT / "multimodal.json").write_text(json.dumps({f"{m}/{rt}/{t}": v for (m, rt, t), v in results.items()},
                                                    indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
