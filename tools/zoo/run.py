#!/usr/bin/env python
"""Run pterun on the model zoo recorded by ``tools/zoo/export.py`` and check it against ExecuTorch's outputs.

Needs only pterun and NumPy (run it with pterun's interpreter); each case runs in a subprocess where a fake
``torch`` package comes first on ``sys.path`` and raises on import, and the case fails if torch got imported::

    python tools/zoo/run.py                        # every recorded case
    python tools/zoo/run.py resnet18 bert          # some models
    python tools/zoo/run.py --engine numpy         # PTERUN_ENGINE for the subprocesses
    python tools/zoo/run.py --markdown             # also the summary table for the README

One line per case (model/variant, family, tolerance kind, PASS / FAIL / REF-FAIL, the measurement, seconds)
and a summary line; the tolerance policy is ``tools/zoo/policy.py``. Cases the reference itself could not
export or run are listed as REF-FAIL with the stage and the reason, cases whose export ran past its time
limit as SKIPPED. Exit status 1 when any case fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"  # --src runs another pterun checkout, e.g. for before/after numbers
VARIANTS = ("portable", "xnn_fp32", "xnn_int8", "xnn_8da4w", "xnn_8da8w")

WORKER = r"""
import json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[3]]
import numpy as np
import policy
from pterun import Runtime
pte, npz, meta = sys.argv[4], sys.argv[5], json.loads(sys.argv[6])
with np.load(npz) as z:
    inputs = [z[k] for k in sorted((k for k in z.files if k.startswith("in")), key=lambda k: int(k[2:]))]
    expected = [z[k] for k in sorted((k for k in z.files if k.startswith("out")), key=lambda k: int(k[3:]))]
t0 = time.perf_counter()
method = Runtime.get().load_program(pte).load_method("forward")
t1 = time.perf_counter()
outs = method.execute(inputs)
t2 = time.perf_counter()
scales = meta.get("out_scales") or []
results = []
if len(outs) != len(expected):
    results.append((False, f"{len(outs)} outputs, expected {len(expected)}"))
for j, (a, e) in enumerate(zip(outs, expected)):
    floors = meta.get("float_floor") or []
    results.append(policy.check(meta["kind"], np.asarray(a), e, scales[j] if j < len(scales) else None,
                                floors[j] if j < len(floors) else None))
assert "torch" not in sys.modules, "pterun imported torch"
print(json.dumps({"ok": all(r[0] for r in results), "measure": "; ".join(r[1] for r in results),
                  "load_s": t1 - t0, "run_s": t2 - t1}))
"""


def cache_dir(arg: str | None) -> Path:
    return Path(arg or os.environ.get("PTERUN_ZOO_CACHE") or Path.home() / ".cache" / "pterun-zoo").expanduser()


def run_case(pte: Path, npz: Path, meta: dict, poison: Path, engine: str | None, timeout: int,
             src: Path = SRC) -> dict:
    env = dict(os.environ)
    if engine:
        env["PTERUN_ENGINE"] = engine
    cmd = [sys.executable, "-c", WORKER, str(poison), str(src), str(HERE), str(pte), str(npz), json.dumps(meta)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "measure": f"timed out after {timeout} s"}
    if r.returncode != 0:
        err = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        return {"ok": False, "measure": "error: " + (err[-1] if err else f"exit {r.returncode}")}
    return json.loads(r.stdout.strip().splitlines()[-1])


def reference_floor(model_dir: Path) -> list | None:
    """Per output: how far ExecuTorch's portable and XNNPACK fp32 programs of the same weights are apart,
    relative to scale (None when one of them is missing)."""
    import numpy as np

    try:
        with np.load(model_dir / "portable.npz") as a, np.load(model_dir / "xnn_fp32.npz") as b:
            outs = sorted((k for k in a.files if k.startswith("out")), key=lambda k: int(k[3:]))
            floors = []
            for k in outs:
                x, y = a[k].astype(np.float64), b[k].astype(np.float64)
                if x.shape != y.shape or x.dtype.kind != "f":
                    floors.append(None)
                    continue
                floors.append(float(np.abs(x - y).max(initial=0.0) / max(np.abs(x).max(initial=0.0), 1e-30)))
            return floors
    except (FileNotFoundError, KeyError):
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="models (default: every model in the cache)")
    ap.add_argument("--cache", help="cache directory (default $PTERUN_ZOO_CACHE or ~/.cache/pterun-zoo)")
    ap.add_argument("--engine", choices=("numpy", "litert", "auto"), help="sets PTERUN_ENGINE for the runs")
    ap.add_argument("--variants", nargs="*", default=[], help="only these variants")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per case (default 600)")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table too")
    ap.add_argument("--src", type=Path, default=SRC, help="the pterun sources to run (default: this checkout's)")
    args = ap.parse_args(argv)
    root = cache_dir(args.cache)
    if not root.is_dir():
        ap.error(f"no zoo cache at {root}: run tools/zoo/export.py with the reference toolchain first")
    names = args.names or sorted(p.name for p in root.iterdir() if p.is_dir())
    tally: dict = defaultdict(Counter)
    families: dict = defaultdict(set)
    failed = False
    failing: set = set()
    with tempfile.TemporaryDirectory() as tmp:
        poison = Path(tmp)
        (poison / "torch").mkdir()
        (poison / "torch" / "__init__.py").write_text("raise RuntimeError('pterun must never import torch')\n")
        for name in names:
            for variant in VARIANTS:
                if args.variants and variant not in args.variants:
                    continue
                mpath = root / name / f"{variant}.json"
                if not mpath.exists():
                    continue
                meta = json.loads(mpath.read_text())
                family = meta.get("family", "?")
                case = f"{name}/{variant}"
                if meta["status"] != "ok":
                    skipped = meta["status"] == "skipped"  # the export ran past its --timeout
                    tally[variant]["skipped" if skipped else "ref_failed"] += 1
                    print(f"{case:42s} {family:12s} {'-':8s} {'SKIPPED' if skipped else 'REF-FAIL':8s}  at "
                          f"{meta.get('stage')}: {meta.get('reason', '')[:150]}", flush=True)
                    continue
                if meta["kind"] == "float":
                    meta["float_floor"] = reference_floor(root / name)
                t0 = time.time()
                res = run_case(root / name / f"{variant}.pte", root / name / f"{variant}.npz", meta, poison,
                               args.engine, args.timeout, args.src)
                verdict = "PASS" if res["ok"] else "FAIL"
                failed |= not res["ok"]
                tally[variant]["pass" if res["ok"] else "fail"] += 1
                families[family].add(name)
                if not res["ok"]:
                    failing.add(name)
                print(f"{case:42s} {family:12s} {meta['kind']:8s} {verdict:8s}  {res['measure'][:110]}  "
                      f"({time.time() - t0:.1f} s)", flush=True)
    total = sum(tally.values(), Counter())
    ran = set().union(*families.values()) if families else set()
    clean = ran - failing
    print(f"SUMMARY engine={args.engine or os.environ.get('PTERUN_ENGINE', 'auto')}: {total['pass']} pass, "
          f"{total['fail']} fail, {total['ref_failed']} reference failures, {total['skipped']} skipped; "
          f"{len(ran)} architectures, "
          f"{len(clean)} with every case passing")
    if args.markdown:
        print("\n| variant | pass | fail | reference failed | skipped |\n|---|---|---|---|---|")
        for v in VARIANTS:
            if v in tally:
                t = tally[v]
                print(f"| {v} | {t['pass']} | {t['fail']} | {t['ref_failed']} | {t['skipped']} |")
        print(f"| **all** | **{total['pass']}** | **{total['fail']}** | **{total['ref_failed']}** | "
              f"**{total['skipped']}** |\n")
        for fam in sorted(families):
            print(f"- {fam} ({len(families[fam])}): {', '.join(sorted(families[fam]))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
