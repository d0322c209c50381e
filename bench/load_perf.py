#!/usr/bin/env python
"""Where a load's CPU time goes, pterun against ExecuTorch: ``perf`` sampling of the load alone, fresh processes.

Each process imports its runtime (and, for pterun, the LiteRT engine's modules), then times ``load_program`` +
``load_method`` with ``perf record`` sampling only that span (perf starts disabled and the process switches it on
and off through perf's control FIFO). The runtimes alternate over ``--pairs``; the report gives each one's median
wall time and the milliseconds of samples in each group of symbols: packing (LiteRT's ``xnn_pack_*`` routines and
``*_packw_*`` microkernels, and libc's ``memmove``, which in these loads LiteRT's convolution packer calls for nearly all of it: check with
``perf report -g``), ExecuTorch's XNNPACK backend library (stripped: its packing cannot be told from the rest),
the kernel (page faults, zeroing), Python, and the rest. Needs Linux's
``perf`` with permission to sample user code (``perf_event_paranoid`` <= 2) and the reference venv::

    .venv/bin/python bench/load_perf.py bench/models/resnet18_xnnpack.pte --ref .ref/bin/python --pairs 6
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HZ = 4999

_CHILD = """
import os, sys, time
if sys.argv[1] == "pterun":
    from pterun import Runtime
    import pterun.delegates.xnnpack.graph, pterun.delegates.xnnpack.litert_engine.plan  # noqa: F401
    import ai_edge_litert.interpreter  # noqa: F401
    from ai_edge_litert import _pywrap_litert_compiled_model_wrapper  # noqa: F401
else:
    from executorch.runtime import Runtime
rt = Runtime.get()
ctl = os.environ["PERF_CTL"]

def command(c):
    with open(ctl, "w") as f:
        f.write(c + "\\n")
    with open(ctl + ".ack") as f:
        f.read(5)

time.sleep(0.2)  # past the imports' last page faults and NumPy's BLAS threads
command("enable")
t = time.perf_counter()
rt.load_program(sys.argv[2]).load_method("forward")
wall = time.perf_counter() - t
command("disable")
print(wall * 1e3)
"""

#: (group, where a sample falls in it): the first that matches a sample's (shared object, symbol) names it
GROUPS = (("packing", lambda dso, sym: "litert" in dso and (sym.startswith("xnn_pack") or "_packw_" in sym)),
          ("packing", lambda dso, sym: dso.startswith("libc") and "mem" in sym and "move" in sym),
          ("xnnpack (ExecuTorch)", lambda dso, sym: "executorch_backend_xnnpack" in dso),
          ("litert, other", lambda dso, sym: "litert" in dso),
          ("kernel", lambda dso, sym: "kernel" in dso),
          ("python", lambda dso, sym: "python" in dso),
          ("other", lambda dso, sym: True))


def groups(report: str) -> dict[str, float]:
    """ms of samples per group, from ``perf report --stdio --sort dso,sym -F sample,dso,sym``'s text."""
    got: dict[str, float] = {}
    for line in report.splitlines():
        parts = line.split()
        if line.startswith("#") or len(parts) < 4 or not parts[0].isdigit():
            continue
        n, dso, sym = int(parts[0]), parts[1], " ".join(parts[3:])
        group = next(g for g, match in GROUPS if match(dso, sym))
        got[group] = got.get(group, 0.0) + n * 1e3 / HZ
    return got


def _groups(data: str) -> dict[str, float]:
    """ms of samples per group in one ``perf.data``."""
    return groups(subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso,sym", "-F",
                                  "sample,dso,sym", "--percent-limit", "0"], capture_output=True, text=True,
                                 check=True).stdout)


def one(runtime: str, python: str, model: str, tmp: str) -> tuple[float, dict]:
    """(wall ms, ms per group) of one fresh process loading ``model``."""
    ctl, data = os.path.join(tmp, "ctl"), os.path.join(tmp, f"{runtime}.data")
    for fifo in (ctl, ctl + ".ack"):
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
    env = dict(os.environ, PERF_CTL=ctl)
    if runtime == "pterun":
        env["PYTHONPATH"] = str(ROOT / "src")
    env.pop("PTERUN_CACHE_DIR", None)  # a first load: XNNPACK packs
    done = subprocess.run(["perf", "record", "-q", "-D", "-1", f"--control=fifo:{ctl},{ctl}.ack", "-F", str(HZ),
                           "-o", data, "--", python, "-c", _CHILD, runtime, model], capture_output=True,
                          text=True, env=env, timeout=600)
    if done.returncode:
        raise SystemExit(f"{runtime}: {done.stderr.strip()[-600:]}")
    return float(done.stdout.split()[-1]), _groups(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--ref", required=True, help="the reference venv's python (ExecuTorch)")
    ap.add_argument("--pairs", type=int, default=6)
    args = ap.parse_args(argv)
    if shutil.which("perf") is None:
        raise SystemExit("needs Linux's perf (linux-tools) on the PATH")
    pythons = {"pterun": sys.executable, "executorch": args.ref}
    got: dict[str, list] = {"pterun": [], "executorch": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            for runtime in (("pterun", "executorch") if i % 2 == 0 else ("executorch", "pterun")):
                got[runtime].append(one(runtime, pythons[runtime], args.model, tmp))
    names = sorted({g for runs in got.values() for _, groups in runs for g in groups},
                   key=[g for g, _ in GROUPS].index)
    print(f"{Path(args.model).name}: load_program + load_method, medians (ranges) over {args.pairs} fresh "
          f"processes each, ms")
    for runtime, runs in got.items():
        walls = [w for w, _ in runs]
        cells = [f"wall {statistics.median(walls):.0f} ({min(walls):.0f}-{max(walls):.0f})"]
        for g in names:
            ms = [groups.get(g, 0.0) for _, groups in runs]
            if max(ms) > 0:
                cells.append(f"{g} {statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f})")
        print(f"  {runtime}: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
