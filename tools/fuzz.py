#!/usr/bin/env python3
"""Structure-aware fuzzer: hostile programs and data files must end in pterun's documented errors.

For every fixture (``.pte``, ``.ptd``, ``.bpte``) it first runs load -> load_method -> execute once with the
flatbuffer reader instrumented, recording every field the reader touches: scalars, offsets, vector lengths and
elements, union tags, vtable entries, in the program and in the delegate payloads and data files inside it. Each
case then applies one mutation class to one fixture and runs load -> load_method -> execute on the result:

* ``field``: a recorded field set to a boundary value (0, 1, -1, the type's min/max, 2^31, the old value +- 1,
  doubled, a bit flipped), or an offset moved, a vector length grown, a union tag changed;
* ``value``: a mutation that usually keeps the file loadable, so the kernels and the delegate see hostile
  programs too: a tensor's sizes, a scalar argument (Int/Double), a value's dtype, an XNNPACK value's dims or
  datatype, a node's numeric fields;
* ``flip``: 1-4 random bytes; ``truncate``: the file cut short; ``chunk``: a chunk duplicated or deleted.

Cases run in forked worker processes (``--workers``) with an address-space cap (``RLIMIT_AS``): a worker that dies
is a crash, a case that takes more than ``--hang-s`` seconds is a hang (the worker is killed), a case that leaves
the worker above 1 GiB of RSS is a memory blow-up, and any exception that is not a ``pterun.errors.PterunError``
is undocumented. Case ``i`` of seed ``s`` is the same mutation whatever the worker count, so any finding is
reproduced with ``--case i``. One line per class, then the documented errors by class, the Python warnings that
escaped (reported, not failures), the slowest case and the largest worker RSS, then exactly ``fuzz: N cases, C
crashes, H hangs, U undocumented``; the exit status is 1 when any of those three (or a memory blow-up) is not zero.

Usage::

    python tools/fuzz.py --cases 200000 --workers 1            # every fixture, long campaign
    python tools/fuzz.py --cases 2000 --fixtures cond,xnn_mlp   # a quick slice
    python tools/fuzz.py --case 1234 --seed 1                  # replay one case here, with its traceback

Needs only NumPy and pterun (no torch). Linux/macOS (fork).
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one thread everywhere: workers are forked, the machine shared (before NumPy loads)
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PTERUN_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the fuzz_* modules beside this one, however it is loaded

from fuzz_cases import (  # noqa: E402,F401  (re-exported: the tests and a replay use them as fuzz.<name>)
    CLASSES, MAX_INPUT_BYTES, ROOT, STAGE, Target, case_plan, discover, mutate, run_case, run_file,
    selftest_targets,
)
from fuzz_record import record, record_isolated  # noqa: E402,F401

from pterun.errors import PterunError  # noqa: E402

GIB = 1 << 30


# -- workers ------------------------------------------------------------------------------------------------------
def _vm_size() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _worker(fd: int, seed: int, cases: list[int], targets, classes, as_cap: int, rss_limit: int) -> None:
    """Child: run ``cases`` in order, reporting 'S i' before and 'D i class outcome rss detail' after each."""
    import faulthandler

    faulthandler.disable()  # a crash is counted by the parent, not dumped by the child
    from pterun._fpstate import warning_rules
    from pterun.threads import set_num_threads

    set_num_threads(1)  # one thread per worker, BLAS included, whatever the forking process had set
    if as_cap:
        resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + as_cap, resource.RLIM_INFINITY))
    out = os.fdopen(fd, "w", buffering=1)
    for i in cases:
        out.write(f"S {i}\n")
        with warnings.catch_warnings(record=True) as caught:  # a library should not warn: counted, not shown
            warnings.simplefilter("always")
            warning_rules()  # pterun's own filter, as a user's process has it (simplefilter pushed it aside)
            t0 = time.perf_counter()
            cls, outcome, detail = run_case(seed, i, targets, classes)
            took = time.perf_counter() - t0
        warned = ",".join(sorted({w.category.__name__ for w in caught})) or "-"
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out.write(f"D {i} {cls} {outcome} {rss} {STAGE[0]} {warned}/{took:.4f} {json.dumps(detail)}\n")
        if rss > rss_limit:
            break  # the parent counts it and starts a fresh worker
    out.close()
    os._exit(0)


class Campaign:
    def __init__(self, targets, seed, n_cases, workers=1, hang_s=5.0, as_cap=2 * GIB, classes=CLASSES,
                 first=0, rss_limit=GIB, progress=0):
        self.targets, self.seed, self.workers, self.hang_s, self.as_cap = targets, seed, workers, hang_s, as_cap
        self.rss_limit = rss_limit
        self.progress = progress  # print a line to stderr every this many cases (0: never)
        self.done = 0
        self.classes = classes
        self.todo = list(range(first, first + n_cases))
        self.stats = {c: Counter() for c in classes}
        self.details: Counter = Counter()
        self.findings: list[str] = []
        self.max_rss = 0
        self.slowest = (0.0, -1)  # (seconds, case) of the slowest case that finished
        self.warnings: Counter = Counter()  # Python warnings that escaped pterun, by category

    def _spawn(self, cases):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                _worker(w, self.seed, cases, self.targets, self.classes, self.as_cap, self.rss_limit)
            finally:
                os._exit(70)
        os.close(w)
        return {"pid": pid, "fd": r, "buf": b"", "cases": cases, "pos": 0, "current": None, "since": time.monotonic()}

    def _finish(self, i: int, cls: str, outcome: str, detail: str = "") -> None:
        self.stats[cls][outcome] += 1
        self.stats[cls]["cases"] += 1
        if outcome != "ok":
            self.details[(cls, outcome, detail.split(":")[0])] += 1
        if outcome in ("crash", "hang", "undocumented", "memory"):
            target, _, _ = case_plan(self.seed, i, self.targets, self.classes)
            self.findings.append(f"case {i} ({cls}, {target.name}): {outcome} {detail}")
            if self.progress:
                print(f"FINDING  {self.findings[-1]}", file=sys.stderr, flush=True)
        self.done += 1
        if self.progress and self.done % self.progress == 0:
            t = self.totals()
            print(f"progress {self.done} cases, {t['crash']} crashes, {t['hang']} hangs, {t['undocumented']} "
                  f"undocumented, {t['memory']} memory, max RSS {self.max_rss >> 20} MiB, slowest "
                  f"{self.slowest[0]:.2f} s", file=sys.stderr, flush=True)

    def run(self) -> "Campaign":
        queues = [self.todo[w :: self.workers] for w in range(self.workers)]
        live = [self._spawn(q) for q in queues if q]
        while live:
            fds = [wk["fd"] for wk in live]
            ready, _, _ = select.select(fds, [], [], 0.25)
            now = time.monotonic()
            for wk in list(live):
                if wk["fd"] in ready:
                    chunk = os.read(wk["fd"], 65536)
                    if chunk:
                        wk["buf"] += chunk
                        self._lines(wk)
                        continue
                    self._ended(wk, live)
                elif wk["current"] is not None and now - wk["since"] > self.hang_s:
                    if select.select([wk["fd"]], [], [], 0)[0]:
                        continue  # it answered while this (starved) parent was not looking: read it first
                    os.kill(wk["pid"], signal.SIGKILL)
                    os.waitpid(wk["pid"], 0)
                    os.close(wk["fd"])
                    i = wk["current"]
                    self._finish(i, case_plan(self.seed, i, self.targets, self.classes)[1], "hang",
                                 f"over {self.hang_s:g} s")
                    self._restart(wk, live, wk["cases"].index(i) + 1)
        return self

    def _lines(self, wk) -> None:
        *lines, wk["buf"] = wk["buf"].split(b"\n")
        for line in lines:
            parts = line.decode().split(" ", 7)
            if parts[0] == "S":
                wk["current"], wk["since"] = int(parts[1]), time.monotonic()
            else:
                i, cls, outcome, rss, detail = int(parts[1]), parts[2], parts[3], int(parts[4]), json.loads(parts[7])
                if parts[5] == "execute":
                    self.stats[cls]["executed"] += 1
                warned = parts[6].split("/")[0]
                if warned != "-":
                    self.stats[cls]["warned"] += 1
                    self.warnings.update(warned.split(","))
                self.max_rss = max(self.max_rss, rss)
                if rss > self.rss_limit:
                    outcome, detail = "memory", f"worker RSS {rss >> 20} MiB after the case"
                self._finish(i, cls, outcome, detail)
                took = float(parts[6].split("/")[1])
                if took > self.slowest[0]:
                    self.slowest = (took, i)
                wk["current"] = None
                wk["pos"] = wk["cases"].index(i) + 1

    def _ended(self, wk, live) -> None:
        _, status = os.waitpid(wk["pid"], 0)
        os.close(wk["fd"])
        i = wk["current"]
        if i is not None:  # died inside a case
            why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            self._finish(i, case_plan(self.seed, i, self.targets, self.classes)[1], "crash", why)
            self._restart(wk, live, wk["cases"].index(i) + 1)
        elif wk["pos"] < len(wk["cases"]):  # stopped between cases (RSS over the limit): carry on
            self._restart(wk, live, wk["pos"])
        else:
            live.remove(wk)

    def _restart(self, wk, live, start: int) -> None:
        live.remove(wk)
        rest = wk["cases"][start:]
        if rest:
            live.append(self._spawn(rest))

    def totals(self) -> Counter:
        t = Counter()
        for c in self.stats.values():
            t.update(c)
        return t

    def report(self, out=sys.stdout, wall: float | None = None) -> None:
        for cls in self.classes:
            s = self.stats[cls]
            out.write(f"{cls:9s} {s['cases']:8d} cases: {s['ok']} ran, {s['executed']} reached execute, "
                      f"{s['error']} documented errors, "
                      f"{s['crash']} crashes, {s['hang']} hangs, {s['undocumented']} undocumented, "
                      f"{s['memory']} over {_size(self.rss_limit)}\n")
        t = self.totals()
        errors = Counter()
        for (_, outcome, name), v in self.details.items():
            if outcome == "error":
                errors[name] += v
        top = ", ".join(f"{name} {v}" for name, v in errors.most_common())
        out.write(f"errors   {top}\n")
        warned = sum(s["warned"] for s in self.stats.values())
        out.write(f"warnings {warned} cases let a Python warning escape"
                  + (f" ({', '.join(f'{k} {v}' for k, v in self.warnings.most_common())})\n" if warned else "\n"))
        for f in self.findings[:20]:
            out.write(f"FINDING  {f}\n")
        extra = f" in {wall:.0f} s" if wall is not None else ""
        took, which = self.slowest
        out.write(f"slowest  case {which}: {took:.2f} s (limit {self.hang_s:g} s)\n")
        out.write(f"rss      max {self.max_rss / (1 << 20):.0f} MiB in a worker{extra}; {t['memory']} cases over "
                  f"{_size(self.rss_limit)}\n")
        out.write(f"fuzz: {t['cases']} cases, {t['crash']} crashes, {t['hang']} hangs, {t['undocumented']} "
                  "undocumented\n")


def _size(n: int) -> str:
    return f"{n / GIB:g} GiB" if n % GIB == 0 else f"{n >> 20} MiB"


def prepare(names=None, max_bytes: int | None = None) -> list[Target]:
    targets = [t for t in discover(names) if max_bytes is None or len(t.data) <= max_bytes]
    for t in targets:
        record_isolated(t)
    return targets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="index of the first case (to resume a campaign)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--hang-s", type=float, default=5.0)
    ap.add_argument("--as-cap-gib", type=float, default=2.0, help="address space each worker may add")
    ap.add_argument("--fixtures", default="", help="comma-separated fixture names (default: all)")
    ap.add_argument("--max-bytes", type=int, default=None, help="only fixtures up to this size")
    ap.add_argument("--json", default="", help="also write the counts and findings to this file")
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--progress", type=int, default=10_000, help="a progress line on stderr every N cases (0: none)")
    ap.add_argument("--case", type=int, default=None, help="replay one case in this process, with its traceback")
    ap.add_argument("--save", default="", help="with --case: write the mutated file here")
    ap.add_argument("--trace-after", type=float, default=0, help="with --case: dump the stack and exit after this "
                    "many seconds (to see where a hang is)")
    args = ap.parse_args(argv)
    names = [n for n in args.fixtures.split(",") if n] or None
    classes = tuple(c for c in args.classes.split(",") if c)
    t0 = time.monotonic()
    targets = prepare(names, args.max_bytes)
    if not targets:
        print("fuzz: no fixtures found", file=sys.stderr)
        return 2
    if args.case is not None:
        target, cls, rng = case_plan(args.seed, args.case, targets, classes)
        data = mutate(target, cls, rng)
        print(f"case {args.case}: {cls} mutation of {target.name} ({len(data)} bytes)")
        if args.save:
            Path(args.save).write_bytes(data)
        if args.trace_after:
            import faulthandler

            faulthandler.dump_traceback_later(args.trace_after, exit=True)
        try:
            print(f"ran {run_file(target, data, rng)} method(s)")
        except PterunError as e:
            print(f"documented: {type(e).__name__}: {e}")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            return 1
        return 0
    fields = sum(len(t.fields) for t in targets)
    print(f"targets  {len(targets)} files, {fields} recorded fields, "
          f"{sum(len(t.semantic) for t in targets)} value fields", flush=True)
    c = Campaign(targets, args.seed, args.cases, args.workers, args.hang_s, int(args.as_cap_gib * GIB), classes,
                 args.first, progress=args.progress).run()
    c.report(wall=time.monotonic() - t0)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "targets": [{"name": t.name, "kind": t.kind, "fields": len(t.fields)} for t in targets],
            "stats": {cls: dict(s) for cls, s in c.stats.items()}, "totals": dict(c.totals()),
            "findings": c.findings, "max_rss": c.max_rss, "slowest": c.slowest}, indent=1))
    t = c.totals()
    return 1 if t["crash"] or t["hang"] or t["undocumented"] or t["memory"] else 0


if __name__ == "__main__":
    sys.exit(main())
