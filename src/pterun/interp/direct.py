"""A method that is one delegate call, called directly: the caller's arrays go straight into the executor's memory
and its outputs straight into the caller's own arrays.

A method compiled whole into one LiteRT program (an MLP, a CNN in one XNNPACK delegate) otherwise pays for the
interpreter around that one invoke: the inputs copied into the method's memory and from there into LiteRT's, the
step loop, and the outputs copied into the method's memory and from there into the caller's arrays (6.6 µs a call
of a three-layer MLP whose invoke takes 1.2). The direct call copies each input once and each output once.

It applies when the method's only step is a DelegateCall (or merged call) whose executor offers
``call_direct(arrays)`` (:class:`pterun.delegates.xnnpack.litert_engine.plan.LiteRTPlan`), every argument the
executor reads is one of the method's inputs or a constant of the program, every output of the method is a
tensor the executor writes and no input, and no memory is shared with the program's other methods (memory ids
past 1: state another method would read there). ``call_direct`` returns None whenever the executor is not in the
state it made the shortcut for (another input shape, its first call, a forked child, the NumPy fallback): the
method then runs its step as usual, which writes the method's memory as every call did before. Hooks
(``Method.trace``) take the usual path.
"""

from __future__ import annotations

from collections.abc import Callable

from pterun.format.schema import TENSOR

__all__ = ["bind_direct"]


def bind_direct(only_call: tuple | None, inputs: tuple, outputs: tuple, tags: tuple, constant) -> Callable | None:
    """``direct(arrays)`` -> the method's outputs (caller-owned arrays), or None when this call must take the usual
    path; None (no shortcut at all) where the method is not one direct call (module docstring). ``constant(slot)``
    is the array of a read-only constant of the program at ``slot``, else None."""
    if only_call is None:
        return None
    executor, args = only_call
    call = getattr(executor, "call_direct", None)
    ins, outs = getattr(executor, "inputs", None), getattr(executor, "outputs", None)
    if call is None or ins is None or outs is None:
        return None
    try:
        read = [args[ext] for ext, *_ in ins]
        written = [args[ext] for ext, *_ in outs]
    except (IndexError, TypeError):  # the step reports a malformed call
        return None
    position = {slot: k for k, slot in enumerate(inputs)}
    fixed = {slot: constant(slot) for slot in read if slot not in position}
    if any(a is None or not a.flags.c_contiguous for a in fixed.values()) or len(set(written)) != len(written) or \
            set(written) & set(inputs) or sorted(outputs) != sorted(set(outputs)) or \
            set(outputs) != set(written) or any(tags[slot] != TENSOR for slot in outputs):
        return None
    take = [position.get(slot, -1) for slot in read]
    order = [written.index(slot) for slot in outputs]
    if take == list(range(len(inputs))) and order == list(range(len(outputs))):
        return call  # the method's inputs and outputs are the executor's, in its order
    consts = [fixed.get(slot) for slot in read]

    def direct(arrays: list) -> list | None:
        got = call([arrays[k] if k >= 0 else c for k, c in zip(take, consts)])
        return None if got is None else [got[j] for j in order]
    return direct
