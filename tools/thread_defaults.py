"""Measure pterun's out-of-the-box thread setting against the others, on a quiet and on a loaded machine.

Each setting runs ``pterun bench MODEL --json`` in fresh processes, alternating over several rounds; "loaded"
runs two copies of the same command at once (each is timed; the row reports both), and ``--cpus`` pins every
process with ``taskset -c`` to emulate a smaller machine. The numbers are medians of per-process medians, in
ms, and the ratio of each setting to the best one in its column; "best run" is the least disturbed process of
each setting (the closest a shared machine gets to a quiet one). "default" is no flag and no variable.

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
    args = ap.parse_args()
    cols = {"quiet": 1, "loaded (2 copies)": 2}
    results = {(s, c): [] for s in SETTINGS for c in cols}
    for _ in range(args.rounds):
        for col, copies in cols.items():
            for name, (flags, env) in SETTINGS.items():
                results[(name, col)] += run(args.model, flags, env, args.repeat, args.cpus, copies)
    med = {k: statistics.median(v) for k, v in results.items()}
    low = {k: min(v) for k, v in results.items()}
    best = {c: min(med[(s, c)] for s in SETTINGS) for c in cols}
    best_low = {c: min(low[(s, c)] for s in SETTINGS) for c in cols}
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
    print(f"{args.model}, {args.rounds} rounds x {args.repeat} calls, CPU {model_name}, "
          f"{len(os.sched_getaffinity(0))} cores" + (f", taskset -c {args.cpus}" if args.cpus else ""))
    print(f"{'setting':<20}" + "".join(f"{c + ': median':>24}{'best run':>22}" for c in cols))
    for s in SETTINGS:
        cells = "".join(f"{med[(s, c)]:>9.3f} ms ({med[(s, c)] / best[c]:4.2f}x)"
                        f"{low[(s, c)]:>9.3f} ms ({low[(s, c)] / best_low[c]:4.2f}x)" for c in cols)
        print(f"{s:<20}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
