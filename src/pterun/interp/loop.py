"""The execution loop: call a loaded method's steps in order, following JumpFalse where a chain has jumps.

A step (pterun.interp.steps) is a zero-argument function called for its effect; its return value is ignored. A
chain (:class:`pterun.interp.steps.Chain`) with control flow also holds :class:`JumpFalse` records, which say
where to go next; the chain's ``jumps`` lists, per position, None or the JumpFalse's ``target``. Errors are
reported with the failing instruction's operator and index. :func:`pterun.interp.observe.run_observed` is the same
loop with a hook around each step.
"""

from __future__ import annotations

from pterun.errors import InvalidProgramError, KernelError


class JumpFalse:
    """A JumpFalseCall: ``target()`` is None to fall through, else the instruction to jump to."""

    __slots__ = ("target",)

    def __init__(self, target):
        self.target = target

    def __call__(self):  # run as a plain step (by an observer), it only evaluates its condition
        return self.target()


def run_chains(runner) -> None:
    for jumps, steps, info, _, _ in runner.chains:
        pc = 0
        try:
            if not jumps:
                for pc, step in enumerate(steps):
                    step()
            else:  # ``jumps``: per position, None for a step, else the JumpFalse's target function
                n, count, limit = len(steps), 0, runner.instruction_limit
                while pc < n:
                    target = jumps[pc]
                    if target is None:
                        steps[pc]()
                        pc += 1
                    else:
                        nxt = target()
                        pc = pc + 1 if nxt is None else nxt
                    count += 1
                    if count > limit:
                        raise runner.loop_error(limit, n)
        except Exception as e:
            if isinstance(e, (InvalidProgramError, KernelError)):  # already names the method and instruction
                raise
            raise runner.kernel_error(info, pc, e) from e
