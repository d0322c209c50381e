"""``pterun bench``: time load, the first call and repeated calls; ``--profile`` adds the time per operator.

Example::

    $ pterun bench model.pte --repeat 100 --warmup 5
    $ pterun bench model.pte --json
"""

from __future__ import annotations

import time

from pterun.cli import ctrlc, output
from pterun.cli.inputs import prepare
from pterun.cli.output import dump, ranges, stats

__all__ = ["cmd_bench"]


def _timed_calls(method, inputs, args) -> tuple[list[float], bool]:
    """(call times, interrupted): ``args.warmup`` untimed calls, then ``args.repeat`` timed ones; Ctrl-C ends
    them early and keeps what was timed."""
    times: list[float] = []
    interrupted = False
    progress = output.Progress(args.warmup, args.repeat)
    try:
        for i in range(args.warmup):
            ctrlc.check()
            method.execute(inputs)
            progress.warming(i + 1)
        for _ in range(args.repeat):
            ctrlc.check()
            t0 = time.perf_counter()
            method.execute(inputs)
            times.append(time.perf_counter() - t0)
            progress.timed(times)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    return times, interrupted


def _print_delegates(method) -> None:
    groups: dict = {}  # one line per (backend, engine, reason): an exported LLM has a hundred delegates
    for d in method.delegates:
        groups.setdefault((d.backend, d.engine, d.reason), []).append(d.index)
    for (backend, engine, reason), indices in groups.items():
        which = f"delegate {indices[0]}" if len(indices) == 1 else f"delegates {ranges(indices)}"
        print(f"{which} ({backend}): engine {engine or 'its own'}" + (f" ({reason})" if reason else ""))
    merged = [e for e in method.steps if e.kind == "DelegateCall" and e.detail]
    if merged:
        calls = sum(1 for e in method.steps if e.kind == "DelegateCall")
        print(f"{calls} delegate call(s) per run; {len(merged)} of them each run several neighbouring instructions "
              "(delegate calls, portable operators) compiled into one LiteRT program (PTERUN_NO_MERGE=1 keeps "
              "them apart)")


def cmd_bench(args) -> int:
    method, method_name, load_s, inputs, source = prepare(args)
    t0 = time.perf_counter()
    method.execute(inputs)
    first_s = time.perf_counter() - t0
    times, interrupted = _timed_calls(method, inputs, args)
    from pterun import threads
    st = stats(times)
    if args.json:
        print(dump({"file": args.file, "method": method_name, "inputs_from": source, "load_ms": load_s * 1e3,
                    "first_call_ms": first_s * 1e3, "warmup": args.warmup, "repeat": args.repeat,
                    "calls": len(times), **{k + "_ms": v * 1e3 for k, v in st.items()},
                    "threads": args.runtime.num_threads, "blas_threads": threads.blas_threads(),
                    "interrupted": interrupted}))
        return 130 if interrupted else 0
    head = f"{args.file} method {method_name!r}: load {load_s * 1e3:.1f} ms, first call {first_s * 1e3:.2f} ms"
    if times:
        print(f"{head}, median {st['median'] * 1e3:.3f} ms, p90 {st['p90'] * 1e3:.3f} ms over {len(times)} "
              f"calls ({args.warmup} warm-up) on {args.runtime.num_threads} thread(s)"
              + (f"  (interrupted after {len(times)} of {args.repeat} calls)" if interrupted else ""))
    else:
        print(f"{head}; interrupted before any timed call")
    _print_delegates(method)
    if args.profile and not interrupted:
        from pterun.profile import format_profile, profile
        shown = output.Progress(0, 0)  # a long profile phase says how far it is, as the timed calls do
        try:
            rows = profile(method, inputs, repeat=max(1, min(args.repeat, 20)), progress=shown.profiled)
        finally:
            shown.close()
        print()
        print(format_profile(rows, total_s=st["median"]))
    return 130 if interrupted else 0
