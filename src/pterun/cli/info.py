"""``pterun inspect``, ``pterun ops`` and ``pterun verify``: what a file holds, which operators run, whether a
bundled program's test cases pass.

Example::

    $ pterun inspect model.pte --json
    $ pterun ops model.pte
    $ pterun verify model.bpte --rtol 1e-4
"""

from __future__ import annotations

import json

from pterun.cli.files import InputError, kind_of, kind_or_none
from pterun.format import kinds

__all__ = ["cmd_inspect", "cmd_ops", "cmd_verify"]


def cmd_inspect(args) -> int:
    from pterun.summary import describe, format_text
    kind_or_none(args.file)  # a directory is a bad file here as for every command
    info = describe(args.file, data_path=args.data_path or None, runtime=args.runtime)
    print(json.dumps(info, indent=2) if args.json else format_text(info))
    return 0


def cmd_ops(args) -> int:
    from pterun.kernels import KERNELS
    if args.file:
        from pterun.summary import describe
        if kind_or_none(args.file) == kinds.DATA:
            raise InputError(f"{args.file} is an external data file (.ptd), not a program: it holds weights, no "
                           "operators; pass the .pte (or .bpte)")
        info = describe(args.file, runtime=args.runtime)
        used = sorted({op for m in info["methods"] for op in m["operators"]})
        missing = [op for op in used if op not in KERNELS]
        for op in used:
            print(f"{'ok     ' if op in KERNELS else 'MISSING'}  {op}")
        print(f"{len(used) - len(missing)}/{len(used)} operators supported")
        return 1 if missing else 0
    for name in sorted(KERNELS):
        print(name)
    print(f"{len(KERNELS)} operators registered")
    return 0


def cmd_verify(args) -> int:
    kind = kind_of(args.file)
    why = {"a program (.pte)": "a .pte carries no expected outputs",
           "an external data file (.ptd)": "a .ptd holds weights, not test cases"}.get(kind)
    if why is not None:  # any other file: loading it as a bundle says what is wrong with it
        raise InputError(f"{args.file} is {kind}, not a bundled program (.bpte): verify needs one, since {why}")
    bp = args.runtime.load_bundled_program(args.file, data_path=args.data_path or None, tensor_output="numpy")
    results = bp.check_all(rtol=args.rtol, atol=args.atol)
    if not results:
        print(f"{args.file}: no test cases")
        return 1
    rows = [("method", "case", "result", "worst output", "max abs error", "max rel error")]
    for r in results:
        w = r.worst
        rows.append((r.method, str(r.case), "pass" if r.passed else "FAIL", str(w.index) if w else "-",
                     f"{w.max_abs_error:.3g}" if w else "-", f"{w.max_rel_error:.3g}" if w else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    failed = sum(not r.passed for r in results)
    print(f"{len(results) - failed}/{len(results)} test cases passed (rtol={args.rtol}, atol={args.atol})")
    for r in results:
        for c in r.checks:
            if c.detail:
                print(f"  {r.method} case {r.case} output {c.index}: {c.detail}")
    return 1 if failed else 0
