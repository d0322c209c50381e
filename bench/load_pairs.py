#!/usr/bin/env python
"""A program's load with two pterun trees, in alternating fresh processes: what a change does to a load.

Each process imports pterun from one tree, times ``load_program`` + ``load_method`` in itself (the imports before
them not counted), then the first call on zeros; the trees alternate, the order reversed every other pair, and
the report is each tree's median and the median of the per-pair ratios (second tree / first). On a shared 2-core
host a load moves by 20-40 % from one minute to the next: only pairs taken side by side separate a few ms.

    git worktree add /tmp/before HEAD~1
    .venv/bin/python bench/load_pairs.py bench/models/mobilenet_v2_xnnpack.pte --trees /tmp/before/src src --pairs 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_CHILD = """
import sys, time
from pterun import Runtime
import numpy as np
t = time.perf_counter()
m = Runtime().load_program(sys.argv[1]).load_method(sys.argv[2])
t1 = time.perf_counter()
meta = m.metadata
m.execute([np.zeros(tuple(meta.input_tensor_meta(i).sizes()), meta.input_tensor_meta(i).numpy_dtype())
           for i in range(meta.num_inputs())])
print((t1 - t) * 1e3, (time.perf_counter() - t1) * 1e3)
"""


def one(src: str, model: str, method: str) -> tuple[float, float]:
    """(load ms, first call ms) of one fresh process importing pterun from ``src``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PTERUN_CACHE_DIR")}
    env["PYTHONPATH"] = os.path.abspath(src)
    out = subprocess.run([sys.executable, "-c", _CHILD, model, method], capture_output=True, text=True, env=env,
                         timeout=600)
    if out.returncode:
        raise SystemExit(f"{src}: {out.stderr.strip()[-500:]}")
    load, first = out.stdout.split()[-2:]
    return float(load), float(first)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--trees", nargs=2, required=True, metavar=("FIRST", "SECOND"),
                    help="the two trees' source folders (the one holding the pterun package)")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--method", default="forward")
    args = ap.parse_args(argv)
    got: list[list] = [[], []]  # per tree (the same folder twice measures the noise)
    for i in range(args.pairs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            got[k].append(one(args.trees[k], args.model, args.method))
    ratios = [y[0] / x[0] for x, y in zip(*got)]
    for t, runs in zip(args.trees, got):
        print(f"{t}: load {statistics.median(r[0] for r in runs):.1f} ms, first call "
              f"{statistics.median(r[1] for r in runs):.1f} ms (medians of {len(runs)})")
    print(f"load, second / first: median of pair ratios {statistics.median(ratios):.3f} "
          f"({sum(r < 1 for r in ratios)} of {len(ratios)} pairs faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
