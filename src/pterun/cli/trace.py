"""``pterun trace``: record every instruction's outputs, or find where two recorded traces first diverge.

Example::

    $ pterun trace model.pte --input x.npy --out a.npz
    $ pterun trace --compare a.npz b.npz --rtol 1e-4
"""

from __future__ import annotations

from pterun.cli.inputs import load_inputs, random_inputs
from pterun.errors import PterunError

__all__ = ["cmd_trace"]


def cmd_trace(args) -> int:
    """Record every instruction's outputs (--out), or compare two recorded traces (--compare A B)."""
    from pterun.trace import first_divergence, load, save
    if args.compare:
        a, b = (load(p) for p in args.compare)
        d = first_divergence(a, b, rtol=args.rtol, atol=args.atol)
        if d is None:
            print(f"no divergence: {len(a)} and {len(b)} entries agree where both have them "
                  f"(rtol={args.rtol}, atol={args.atol})")
            return 0
        print(d)
        return 1
    if args.file is None or args.out is None:
        raise PterunError("trace needs MODEL.pte and --out TRACE.npz, or --compare A.npz B.npz")
    program = args.runtime.load_program(args.file, data_path=args.data_path or None)
    names = sorted(program.method_names)
    method = program.load_method(args.method or ("forward" if "forward" in names else names[0]))
    if args.input:
        inputs = load_inputs(args.input)
    else:
        inputs, how = random_inputs(program, method.metadata, args.seed)
        print(f"no --input given: using {how}")
    entries = method.trace(inputs)
    written = save(args.out, entries)
    print(f"wrote {len(entries)} traced instructions ({sum(len(e.outputs) for e in entries)} outputs) to {written}")
    return 0
