"""Measure pterun's out-of-the-box thread setting against the others, on a quiet and on a loaded machine.

Each setting runs ``pterun bench MODEL --json`` in fresh processes. A round runs every setting once (in an order
that rotates from round to round); "loaded" runs two copies of the same command at once, and ``--cpus`` pins
every process with ``taskset -c`` to emulate a smaller machine. Since a shared machine's speed drifts over
minutes, settings are compared within a round: each one's median call time over the best setting's in the same
round, and the table gives the median of those ratios over the rounds, next to the median time in ms (of
per-process medians; under load, of both copies). "default" is no flag and no variable.

Usage::

    .venv/bin/python tools/thread_defaults.py tests/fixtures/xnn_mobilenet_v2.pte --rounds 3
    .venv/bin/python tools/thread_defaults.py MODEL.pte --cpus 0          # one core
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

SETTINGS = {
    "default": ([], {}),
    "--threads 1": (["--threads", "1"], {}),
    "--threads 2": (["--threads", "2"], {}),
    "BLAS default (old)": (["--threads", "1"], {"OPENBLAS_NUM_THREADS": str(os.cpu_count() or 1)}),
}
THREAD_VARS = ("PTERUN_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def bench_cmd(model: str, flags: list[str], repeat: int, cpus: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "pterun", "bench", model, "--json", "--repeat", str(repeat), "--warmup", "5", *flags]
    return (["taskset", "-c", cpus] if cpus else []) + cmd


def run(model, flags, env_extra, repeat, cpus, copies) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env.update(env_extra)
    procs = [subprocess.Popen(bench_cmd(model, flags, repeat, cpus), stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(copies)]
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"bench failed ({p.returncode}): {' '.join(bench_cmd(model, flags, repeat, cpus))}")
        out.append(json.loads(text)["median_ms"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--cpus", help="taskset -c CPUS for every process (e.g. 0 for one core)")
    ap.add_argument("--engine", choices=("auto", "numpy", "litert"), help="pterun's --engine for every run")
    args = ap.parse_args()
    cols = {"quiet": 1, "loaded (2 copies)": 2}
    names = list(SETTINGS)
    times = {(s, c): [] for s in names for c in cols}
    ratios = {(s, c): [] for s in names for c in cols}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for col, copies in cols.items():
            engine = ["--engine", args.engine] if args.engine else []
            got = {name: run(args.model, SETTINGS[name][0] + engine, SETTINGS[name][1], args.repeat, args.cpus, copies)
                   for name in order}
            per_round = {name: statistics.median(v) for name, v in got.items()}
            best = min(per_round.values())
            for name in names:
                times[(name, col)] += got[name]
                ratios[(name, col)].append(per_round[name] / best)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
    print(f"{args.model}, {args.rounds} rounds x {args.repeat} calls, CPU {model_name}, "
          f"{len(os.sched_getaffinity(0))} cores" + (f", taskset -c {args.cpus}" if args.cpus else "")
          + (f", --engine {args.engine}" if args.engine else ""))
    print(f"| setting | " + " | ".join(f"{c}: median | vs best in round" for c in cols) + " |")
    print("|---|" + "---|---|" * len(cols))
    for s in names:
        cells = " | ".join(f"{statistics.median(times[(s, c)]):.2f} ms | {statistics.median(ratios[(s, c)]):.2f}x "
                           f"({min(ratios[(s, c)]):.2f}-{max(ratios[(s, c)]):.2f})" for c in cols)
        print(f"| {s} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
