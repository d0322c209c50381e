"""``pterun trace``: record every instruction's outputs, or find where two recorded traces first diverge.

Example::

    $ pterun trace model.pte --input x.npy --out a.npz
    $ pterun trace --compare a.npz b.npz --rtol 1e-4
"""

from __future__ import annotations

from pterun.cli.inputs import prepare

__all__ = ["cmd_trace"]


def cmd_trace(args) -> int:
    """Record every instruction's outputs (--out), or compare two recorded traces (--compare A B); the parser
    has checked that exactly one of them was asked for, with the options it takes."""
    from pterun.trace import first_divergence, load as load_trace, save
    if args.compare:
        a, b = (load_trace(p) for p in args.compare)
        d = first_divergence(a, b, rtol=args.rtol, atol=args.atol)
        if d is None:
            print(f"no divergence: {len(a)} and {len(b)} entries agree where both have them "
                  f"(rtol={args.rtol}, atol={args.atol})")
            return 0
        print(d)
        return 1
    method, _, _, inputs, how = prepare(args)
    if not args.input:
        print(f"no --input given: using {how}")
    entries = method.trace(inputs)
    written = save(args.out, entries)
    print(f"wrote {len(entries)} traced instructions ({sum(len(e.outputs) for e in entries)} outputs) to {written}")
    return 0
