"""``pterun generate`` and ``pterun transcribe``: stream text to stdout, statistics to stderr.

Example::

    $ pterun generate llama.pte --tokenizer tokenizer.json --prompt "Once upon a time" --max-new-tokens 64
    $ pterun generate llama.pte --tokenizer tokenizer.model --prompt "Hi" --temperature 0.7 --top-p 0.9 --seed 1
    $ pterun generate llava.pte --tokenizer tokenizer.json --image cat.npy --prompt "USER: {image} What is it?"
    $ pterun transcribe speech.wav --model whisper.pte --tokenizer tokenizer.json --preprocessor preprocessor.pte

Ctrl-C stops generation cleanly; the statistics are printed all the same. ``--image`` takes a ``.npy`` array of
raw pixels (HWC or CHW, uint8 or float) or a binary PPM/PGM file, and any image file Pillow reads when Pillow is
installed (pterun never needs it). ``--audio`` takes a WAV file or a ``.npy`` array of features.
"""

from __future__ import annotations

import argparse
import sys
import time

from pterun.cli import ctrlc
from pterun.cli.options import number, whole

__all__ = ["add_generate_parser", "cmd_generate", "add_transcribe_parser", "cmd_transcribe", "read_image"]


def add_generate_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``generate`` command to a ``pterun`` subparsers object."""
    g = subparsers.add_parser("generate", help="generate text with an LLM .pte (needs pterun[llm])",
                              description="Stream text from an ExecuTorch-exported LLM; statistics go to stderr.")
    g.add_argument("model", help="the .pte program (exported with ExecuTorch's LLM exporter)")
    g.add_argument("--tokenizer", required=True, metavar="FILE",
                   help="tokenizer.json (HuggingFace), a tiktoken file or a SentencePiece .model")
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--max-new-tokens", type=whole(1, also=(-1,), note=" for the rest of the context"), default=256,
                   metavar="N", help="at most N new tokens (default 256; -1: the rest of the context)")
    g.add_argument("--temperature", type=number(0.0), default=0.8, metavar="T", help="0 is greedy (default 0.8)")
    g.add_argument("--top-p", type=number(0.0, 1.0, above=True, note=" (1 = off)"), default=0.9, metavar="P",
                   help="nucleus sampling mass (default 0.9; 1 = off)")
    g.add_argument("--top-k", type=whole(0), default=0, metavar="K",
                   help="sample among the K likeliest (default 0 = off)")
    g.add_argument("--seed", type=whole(0), default=None, metavar="S", help="seed for sampling (default: random)")
    g.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s) holding the weights")
    g.add_argument("--num-bos", type=whole(0), default=None, metavar="N",
                   help="BOS tokens before the prompt (default: 1 when the model has a BOS id)")
    g.add_argument("--echo", action="store_true", help="print the prompt before the generated text")
    g.add_argument("--image", action="append", default=[], metavar="FILE",
                   help="an image for a multimodal model (.npy raw pixels, PPM/PGM, or what Pillow reads when it is "
                        "installed); repeatable. Each goes where the prompt says {image}, else before the prompt")
    g.add_argument("--audio", action="append", default=[], metavar="FILE",
                   help="audio for a multimodal model (a WAV file, or .npy features); repeatable; placed like "
                        "--image, at {audio}")
    g.add_argument("--preprocessor", metavar="FILE.pte",
                   help="the model's audio preprocessor program (waveform -> features) for --audio WAV files")
    g.set_defaults(fn=cmd_generate)
    return g


def add_transcribe_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``transcribe`` command (speech to text with a Whisper-style .pte) to a subparsers object."""
    t = subparsers.add_parser("transcribe", help="speech to text with a Whisper-style .pte (needs pterun[llm])",
                              description="Transcribe a WAV file with an ExecuTorch-exported encoder-decoder "
                                          "(encoder + text_decoder methods); text to stdout, statistics to stderr.")
    t.add_argument("audio", help="the WAV file (PCM or float; mono or averaged to mono; resampled to 16 kHz)")
    t.add_argument("--model", required=True, metavar="FILE.pte", help="the speech-to-text program")
    t.add_argument("--tokenizer", required=True, metavar="FILE", help="its tokenizer (tokenizer.json for Whisper)")
    t.add_argument("--preprocessor", metavar="FILE.pte",
                   help="the mel preprocessor program; without it pterun computes Whisper's log-mel in NumPy")
    t.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd", help="external weights")
    t.add_argument("--max-new-tokens", type=whole(1), default=128, metavar="N", help="at most N tokens per 30 s "
                   "window (default 128)")
    t.add_argument("--temperature", type=number(0.0), default=0.0, metavar="T", help="0 is greedy (default)")
    t.add_argument("--seed", type=whole(0), default=None, metavar="S", help="seed for sampling")
    t.add_argument("--decoder-start-token-id", type=whole(0), default=None, metavar="ID",
                   help="the first decoder token (default: the program's, else <|startoftranscript|>)")
    t.add_argument("--prompt-tokens", default="", metavar="T1,T2",
                   help="tokens forced after the start token, by name or id (e.g. '<|en|>,<|transcribe|>')")
    t.set_defaults(fn=cmd_transcribe)
    return t


def _peak_rss_mib() -> float | None:
    """The process's peak resident memory in MiB; None where the platform has no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def _report(runner, interrupted: bool) -> None:
    st = runner.stats
    s = st.seconds
    # the LLM runners count decode steps (the first token comes from prefill); the speech runner every token
    every = getattr(runner, "counts_every_token", False)
    n_gen = st.num_generated_tokens + (0 if every or not st.first_token_ms else 1)
    steps = n_gen - 1 if every else st.num_generated_tokens
    lines = [f"{'encoder positions' if every else 'prompt tokens'}: {st.num_prompt_tokens}, generated tokens: "
             f"{n_gen}" + ("  (interrupted)" if interrupted else "")]
    if st.first_token_ms:
        lines.append(f"time to first token: {s['ttft'] * 1000:.1f} ms")
        lines.append(f"prefill: {st.num_prompt_tokens / s['prefill']:.1f} tokens/s" if s["prefill"] > 0 else
                     "prefill: -")
        if steps > 0 and s["decode"] > 0:
            lines.append(f"decode: {steps / s['decode']:.1f} tokens/s ({steps} tokens in {s['decode']:.2f} s)")
    peak = _peak_rss_mib()
    if peak is not None:
        lines.append(f"peak memory (RSS): {peak:.1f} MiB")
    print("\n".join(lines), file=sys.stderr, flush=True)


def read_image(path: str):
    """Raw pixels from ``path``: a ``.npy`` array, a binary PPM (P6) or PGM (P5) file, or (when Pillow is
    installed) any format Pillow reads. Returns a NumPy array, HWC or CHW as stored."""
    import numpy as np
    if path.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    with open(path, "rb") as f:
        head = f.read(2)
    if head in (b"P6", b"P5"):
        return _read_netpbm(path)
    try:
        from PIL import Image as PILImage
    except ImportError:
        raise ValueError(f"{path}: pterun reads .npy and PPM/PGM images; install Pillow to read other formats") \
            from None
    with PILImage.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _read_netpbm(path: str):
    import numpy as np
    data = open(path, "rb").read()
    fields, pos = [], 2
    while len(fields) < 3:  # width, height, maxval, separated by whitespace and # comments
        while pos < len(data) and data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos)
            continue
        start = pos
        while pos < len(data) and not data[pos:pos + 1].isspace():
            pos += 1
        fields.append(int(data[start:pos]))
    w, h, maxval = fields
    channels = 3 if data[:2] == b"P6" else 1
    dt = np.uint8 if maxval < 256 else np.dtype(">u2")
    px = np.frombuffer(data, dt, w * h * channels, pos + 1).reshape(h, w, channels)
    if channels == 1:
        px = np.repeat(px, 3, axis=2)
    return px.astype(np.uint8) if maxval == 255 else (px.astype(np.float32) / maxval * 255).round().astype(np.uint8)


def _media_inputs(args, runner):
    """The multimodal inputs in order: the prompt split at {image}/{audio}, media where they are named (else
    before the prompt)."""
    import re
    import numpy as np
    from pterun.llm import make_audio_input, make_image_input, make_raw_audio_input, make_text_input
    from pterun.llm.audio import load_audio

    images = [make_image_input(read_image(p)) for p in args.image]
    audios = []
    for p in args.audio:
        if p.endswith(".npy"):
            audios.append(make_audio_input(np.load(p, allow_pickle=False)))
        else:
            audios.append(make_raw_audio_input(load_audio(p, 16000)))
    parts = re.split(r"(\{image\}|\{audio\})", args.prompt)
    named = {"{image}": sum(1 for x in parts if x == "{image}"), "{audio}": sum(1 for x in parts if x == "{audio}")}
    inputs = []
    if not named["{image}"]:
        inputs += images
    if not named["{audio}"]:
        inputs += audios
    queues = {"{image}": list(images), "{audio}": list(audios)}
    for part in parts:
        if part in queues:
            if not queues[part]:
                raise ValueError(f"the prompt names {part} more often than files were given")
            inputs.append(queues[part].pop(0))
        elif part:
            inputs.append(make_text_input(part))
    for tag, rest in queues.items():
        if named[tag] and rest:
            raise ValueError(f"{len(rest)} more {tag[1:-1]} file(s) than {tag} in the prompt")
    return inputs


def cmd_generate(args) -> int:
    """Run ``pterun generate``; returns the exit status (130 after Ctrl-C, like the shell)."""
    multimodal = bool(getattr(args, "image", None) or getattr(args, "audio", None))
    try:
        from pterun import Runtime
        from pterun.llm import GenerationConfig, MultimodalRunner, TextLLMRunner
        from pterun.llm.tokenizer import load_tokenizer
        t0 = time.perf_counter()
        rt = getattr(args, "runtime", None) or Runtime.get()
        program = rt.load_program(args.model, data_path=args.data_path or None)
        multimodal = multimodal or "forward" not in program.method_names
        tokenizer = load_tokenizer(args.tokenizer)
        if multimodal:
            pre = rt.load_program(args.preprocessor) if getattr(args, "preprocessor", None) else None
            runner = MultimodalRunner.from_program(program, tokenizer, pre)
        else:
            runner = TextLLMRunner.from_program(program, tokenizer)
        load_s = time.perf_counter() - t0
    except ImportError as e:
        print(f"pterun: error: {e}", file=sys.stderr)
        return 1
    num_bos = args.num_bos if args.num_bos is not None else (1 if runner.info.bos_id is not None else 0)
    cfg = GenerationConfig(echo=args.echo, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                           num_bos=num_bos, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    prompt = _media_inputs(args, runner) if multimodal else args.prompt
    return _stream(runner.stream(prompt, cfg), runner, load_s)


def _stream(pieces, runner, load_s: float) -> int:
    interrupted = False
    try:
        for piece in pieces:
            ctrlc.check()
            sys.stdout.write(piece)
            sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
        pieces.close()  # finishes the stats of the partial generation
    sys.stdout.write("\n")
    sys.stdout.flush()
    print(f"model load: {load_s * 1000:.0f} ms", file=sys.stderr)
    _report(runner, interrupted)
    return 130 if interrupted else 0


def cmd_transcribe(args) -> int:
    """Run ``pterun transcribe``; returns the exit status (130 after Ctrl-C)."""
    try:
        from pterun.llm import Seq2SeqRunner, Seq2SeqTranscribeConfig
        t0 = time.perf_counter()
        runner = Seq2SeqRunner(args.model, args.tokenizer, data_path=args.data_path or None,
                               preprocessor_path=args.preprocessor, runtime=getattr(args, "runtime", None))
        load_s = time.perf_counter() - t0
    except ImportError as e:
        print(f"pterun: error: {e}", file=sys.stderr)
        return 1
    forced = []
    for name in filter(None, (t.strip() for t in args.prompt_tokens.split(","))):
        tid = int(name) if name.isdigit() else runner.tokenizer.token_to_id(name)
        if tid is None:
            raise ValueError(f"--prompt-tokens: the tokenizer has no token {name!r}")
        forced.append(tid)
    cfg = Seq2SeqTranscribeConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                  decoder_start_token_id=args.decoder_start_token_id, seed=args.seed,
                                  prompt_ids=forced)
    return _stream(runner.stream(args.audio, cfg), runner, load_s)
