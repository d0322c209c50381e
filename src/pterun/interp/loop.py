"""The execution loop: call a loaded method's steps in order, following JumpFalse where a chain has jumps.

Every step is a zero-argument function built at load (pterun.interp.method); in a chain with jumps it returns
None (go on) or the instruction to jump to. Errors are reported with the failing instruction's operator and
index. :func:`pterun.interp.observe.run_observed` is the same loop with a hook around each step.
"""

from __future__ import annotations

from pterun.errors import InvalidProgramError, KernelError, PterunError


def run_chains(runner) -> None:
    for jumps, steps, info in runner.chains:
        pc = 0
        try:
            if not jumps:
                for pc, step in enumerate(steps):
                    step()
            else:
                n, count, limit = len(steps), 0, runner.instruction_limit()
                while pc < n:
                    nxt = steps[pc]()
                    pc = pc + 1 if nxt is None else nxt
                    count += 1
                    if count > limit:
                        raise runner.loop_error(limit, n)
        except PterunError as e:
            if isinstance(e, (InvalidProgramError, KernelError)):
                raise
            raise runner.kernel_error(info, pc, e) from e
        except Exception as e:
            raise runner.kernel_error(info, pc, e) from e
