"""Pass 2, constant folding: instructions whose inputs are all constants run once, at load.

A weight's ``permute_copy`` or a dequantized weight leaves no step behind: its outputs become read-only constants
of their own, or, when the kernel returns a view of a constant, that view itself (zero-copy). A delegate call whose
inputs are all constants runs once too, on its own executor (:meth:`Folder.fold_delegate`), where its backend says
which arguments it writes: a T5 encoder's relative-position bias, computed from ``arange`` through an XNNPACK
delegate's ``log``, was 37 steps of every call. Folding is an
optimization, never a load error: anything unexpected leaves the instruction to run as a step. Programs with
jumps are not folded (an instruction there may run any number of times, or never).
"""

from __future__ import annotations

import bisect

import numpy as np

from pterun._log import logger
from pterun.format.schema import (DELEGATE_CALL, EXTERNAL, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL, OPT_TENSOR_LIST,
                                  STATIC, TENSOR, TENSOR_LIST, ExecutionPlan, TensorDesc)
from pterun.interp.access import kernels_for


class Folder:
    """Folds one method's instructions while its steps are built (pterun.interp.steps); dropped afterwards."""

    def __init__(self, plan: ExecutionPlan, values: list, tags: list, volatile: set[int], binder, where: str,
                 budget: int, delegate_outputs=lambda i: None):
        self.plan, self.values, self.tags, self.volatile, self.binder, self.where = \
            plan, values, tags, volatile, binder, where
        # delegate index -> the positions of the DelegateCall arguments it writes (None: not known)
        self.delegate_outputs = delegate_outputs
        # tensor slots known at load: the program's constants, then folded outputs
        self.constants = {i for i, (tag, d) in enumerate(plan.values) if tag == TENSOR and is_constant(d)}
        self.budget = budget  # bytes folded results may still take
        # (chain, instruction) -> the tensor slots it writes; None until an instruction's inputs are constant
        self.candidates: dict[tuple[int, int], list[int]] | None = None
        self.position: dict[tuple[int, int], int] = {}  # (chain, instruction) -> position in program order
        self.reads: dict[int, list[int]] = {}  # slot -> positions reading it, ascending
        self.writes: dict[int, list[int]] = {}  # slot -> positions writing it, ascending
        self.spans = None  # (slot, start, end) of every tensor in arena 1, built at the first fold attempt
        self.done: set[tuple[int, int]] = set()  # (chain, instruction) folded so far
        # slot -> (chain, instruction) of the KernelCall on the program's own constants alone that writes it, as
        # :meth:`foreseen` found them
        self._made_by: dict[int, tuple[int, int]] = {}

    @staticmethod
    def applies(plan: ExecutionPlan) -> bool:
        """Whether folding may apply: the method calls kernels and has no jumps."""
        kinds = {ins.kind for c in plan.chains for ins in c}
        return KERNEL_CALL in kinds and JUMP_FALSE_CALL not in kinds

    def _find_candidates(self) -> None:
        """Find the instructions whose outputs may be detached from the memory plan (once, when the first
        instruction with constant inputs turns up).

        The kernel must write only out arguments; it must be the only writer of its outputs, nothing may read
        them before it, and nothing may reach them but as a kernel's input (raw kernels, delegates and moves get
        the Tensor object, not its array). Records where each tensor is read and written, for
        :meth:`_arena_unshared`.
        """
        plan, fp = self.plan, self
        KERNELS = kernels_for(plan)
        reads, writes = fp.reads, fp.writes
        exposed: set[int] = set()
        written_by = {}
        pos = 0
        for ci, chain in enumerate(plan.chains):
            for pc, ins in enumerate(chain):
                pos += 1
                fp.position[(ci, pc)] = pos
                kind = ins.kind
                kernel = KERNELS[plan.operators[ins.op_index]] if kind == KERNEL_CALL else None
                outs = self.delegate_outputs(ins.delegate_index) if kind == DELEGATE_CALL else None
                if outs is not None:  # reads its inputs and writes its outputs, nothing else
                    written = self._note_delegate(ins.args, outs, pos)
                    if written:
                        written_by[(ci, pc)] = written
                elif kind in (DELEGATE_CALL, MOVE_CALL) or (kernel is not None and kernel.raw):
                    slots = self._members(ins.args if kind != MOVE_CALL else (ins.move_from, ins.move_to))
                    exposed.update(slots)
                    for j in slots:  # these may write too; counting only reads is the cautious side
                        reads.setdefault(j, []).append(pos)
                elif kernel is not None:
                    written = self._note_kernel(kernel, ins.args, pos)
                    if written:
                        written_by[(ci, pc)] = written
        # what a call leaves behind is read after its last instruction: outputs, and state kept across calls
        for j in plan.outputs:
            reads.setdefault(j, []).append(pos + 1)
        for j, (tag, d) in enumerate(plan.values):
            if tag == TENSOR and d.memory_id is not None and (d.data_buffer_idx > 0 or d.location == EXTERNAL):
                reads.setdefault(j, []).append(pos + 1)
        io = set(plan.inputs) | set(plan.outputs)

        def detachable(j: int, at: int) -> bool:
            d = plan.values[j][1]
            return (writes[j] == [at] and reads.get(j, (at + 1,))[0] > at and j not in exposed and j not in io
                    and j not in self.volatile and j not in fp.constants and d.dynamism == STATIC
                    and d.memory_id in (None, 1))  # ids >= 2 hold state other methods share
        fp.candidates = {at: w for at, w in written_by.items() if all(detachable(j, fp.position[at]) for j in w)}

    def _members(self, slots) -> set:
        """``slots`` with the members of the tensor lists among them."""
        tags, values = self.tags, self.values
        out = set(slots)
        out.update(j for i in tuple(out) if tags[i] in (TENSOR_LIST, OPT_TENSOR_LIST) for j in values[i] if j >= 0)
        return out

    def _note_delegate(self, args: tuple, outs: frozenset, pos: int) -> list:
        """Note where a DelegateCall that writes the arguments at positions ``outs`` reads and writes; the tensors
        it writes."""
        written = []
        for k, vi in enumerate(args):
            for j in self._members((vi,)):
                if k in outs and self.tags[j] == TENSOR:
                    written.append(j)
                    self.writes.setdefault(j, []).append(pos)
                else:
                    self.reads.setdefault(j, []).append(pos)
        return written

    def _note_kernel(self, kernel, b: tuple, pos: int) -> list | None:
        """Note where a kernel with a schema at position ``pos`` reads and writes; the tensors it writes when it
        writes only out arguments (a candidate to fold), else None."""
        tags, values, reads, writes = self.tags, self.values, self.reads, self.writes
        written, outs_only = [], True
        for arg, vi in zip(kernel.schema.args, b):
            tag = tags[vi]
            if tag == TENSOR:
                slots = (vi,)
            elif tag in (TENSOR_LIST, OPT_TENSOR_LIST):
                slots = [j for j in values[vi] if j >= 0 and tags[j] == TENSOR]
            elif arg.mutable:
                outs_only = False
                continue
            else:
                continue
            if arg.mutable:
                written.extend(slots)
                for j in slots:
                    writes.setdefault(j, []).append(pos)
                if arg.kwarg_only:
                    continue
                outs_only = False  # an in-place update (self!) reads what it writes
            for j in slots:
                reads.setdefault(j, []).append(pos)
        if len(b) == len(kernel.schema.args) + 1 and not kernel.schema.mutable and tags[b[-1]] == TENSOR:
            writes.setdefault(b[-1], []).append(pos)  # a functional op's return slot (allclose.Tensor)
        return written if outs_only and written else None

    def fold(self, kernel, args: tuple, ci: int, pc: int) -> bool:
        """Compute instruction ``pc`` now if its inputs are constants; False leaves it to run as a step.

        The kernel writes into fresh memory, never into the arena other tensors share. A result that is a view
        of a constant (a transposed weight) is kept as that view, zero-copy; anything else is copied into the
        tensor's own memory, within the method's budget. Any failure here is silent: the step then raises the
        same error when it runs, with the usual context.
        """
        if (ci, pc) in self.done:  # folded ahead of the merge (:meth:`ahead`)
            return True
        if kernel.raw or not kernel.foldable or not kernel.schema.mutable or not self._inputs_constant(kernel, args):
            return False
        fp, values = self, self.values
        written = self._ready(ci, pc)
        if written is None:
            return False
        nbytes = sum(values[j].array.nbytes for j in written)
        if nbytes > fp.budget and not kernel.returns_view:  # a view costs nothing: worth trying whatever the budget
            return False
        if not self._arena_unshared(written, fp.position[(ci, pc)]):
            return False
        self.binder.where = f"{self.where}: instruction {pc} ({kernel.name})"
        try:
            got = self._compute(kernel, args, {j: values[j].detached() for j in written})
        except Exception as e:  # noqa: BLE001  (the step reports it at run time, with the usual context)
            logger().debug("%s: not folding instruction %d (%s): %s: %s", self.where, pc, kernel.name,
                           type(e).__name__, e)
            return False
        if got is None or got[1] > fp.budget:
            return False
        final, copied = got
        fp.budget -= copied
        for j, array in final.items():
            values[j].freeze(array)
            fp.constants.add(j)
        self.done.add((ci, pc))
        return True

    def ahead(self, kernels: dict) -> tuple[frozenset, frozenset]:
        """Fold, before the merge, what a merged call would otherwise compute on every call: (the work folding
        does at load that no run should hold, :meth:`foreseen`; the KernelCalls among it folded now, in program
        order). Their outputs are then constants of the program that merged graphs take as their own, and the
        instructions leave no step, inside a merged run or not."""
        plan, fixed = self.plan, self.foreseen()
        for ci, pc in sorted(fixed):
            self._fold_ahead(kernels, ci, pc)
        return fixed, frozenset(self.done)

    def _fold_ahead(self, kernels: dict, ci: int, pc: int) -> None:
        """Fold KernelCall ``pc`` of chain ``ci``, after the instructions on the program's own constants alone that
        make what it reads (:meth:`foreseen` leaves those to merged graphs, but work folding does reads them: a
        BERT's token-type ids sliced from a constant; left unfolded, the work after them stays unfolded until the
        merge is done, and no run may lead in past it)."""
        ins = self.plan.chains[ci][pc]
        kernel = kernels.get(self.plan.operators[ins.op_index]) if ins.kind == KERNEL_CALL else None
        if kernel is None or (ci, pc) in self.done:
            return
        for j in self._members(tuple(ins.args)):
            made = self._made_by.get(j)
            if made is not None and made[0] == ci and made[1] < pc:
                self._fold_ahead(kernels, *made)
        self.fold(kernel, ins.args, ci, pc)

    def foreseen(self) -> frozenset:
        """(chain, instruction) of the work folding will do at load that the merge should leave to it:
        DelegateCalls whose every input is a constant (:meth:`fold_delegate`), and KernelCalls computing from
        constants that folding makes (what such calls write, an ``arange``'s output, ...) or from no tensor at all.
        Kernels on the program's own constants alone (a weight's transpose) are not named: merged graphs compute
        those once, as they are built. A prediction: constants flow forward through the instructions whose outputs
        may be detached; what it names but folding then leaves (its budget spent) runs as a step."""
        plan, volatile = self.plan, self.volatile
        KERNELS = kernels_for(plan)
        program = set(self.constants)
        constants, fixed = set(program), set()
        for ci, chain in enumerate(plan.chains):
            for pc, ins in enumerate(chain):
                got = _reads_writes(ins, plan, self.tags, self.values, KERNELS, self.delegate_outputs)
                if got is None:
                    continue
                reads, writes = got
                if not writes or not reads <= constants or (reads | writes) & volatile or \
                        any(a in volatile for a in ins.args):  # a size or an index known only when running
                    continue
                written = self._ready(ci, pc)
                if written is None or not self._arena_unshared(written, self.position[(ci, pc)]):
                    continue  # folding leaves it to run: what it writes stays unknown at load
                constants |= writes
                if ins.kind == DELEGATE_CALL or not reads or not reads <= program:
                    fixed.add((ci, pc))
                elif ins.kind == KERNEL_CALL:
                    self._made_by.update(dict.fromkeys(writes, (ci, pc)))
        return frozenset(fixed)

    def fold_delegate(self, executor, delegate_index: int, args: tuple, ci: int, pc: int) -> bool:
        """Run DelegateCall ``pc`` now, on ``executor``, if every argument it reads is a constant (tensors) or fixed
        at load (anything else); its outputs become constants. False leaves it to run as a step."""
        outs = self.delegate_outputs(delegate_index)
        if not outs or max(outs) >= len(args):  # an output past the call's arguments: the step reports it
            return False
        values, tags = self.values, self.tags
        for k, vi in enumerate(args):
            if k in outs:
                continue
            if vi in self.volatile or any(tags[j] == TENSOR and j not in self.constants for j in self._members((vi,))):
                return False
        written = self._ready(ci, pc)
        if written is None or any(args[k] not in written for k in outs if tags[args[k]] == TENSOR):
            return False
        nbytes = sum(values[j].array.nbytes for j in written)
        if nbytes > self.budget or not self._arena_unshared(written, self.position[(ci, pc)]):
            return False
        fresh = {j: values[j].detached() for j in written}
        try:
            with np.errstate(all="ignore"):
                executor.execute([fresh.get(vi, values[vi]) for vi in args])
        except Exception as e:  # noqa: BLE001  (the step reports it at run time, with the usual context)
            logger().debug("%s: not folding delegate call %d: %s: %s", self.where, pc, type(e).__name__, e)
            return False
        self.budget -= nbytes
        for j, t in fresh.items():
            values[j].freeze(t.array)
            self.constants.add(j)
        return True

    def _ready(self, ci: int, pc: int) -> list | None:
        """The tensors instruction ``pc`` writes when it may be folded (the analysis made on first use), else None."""
        if self.candidates is None:
            self.candidates = {}  # stays empty if the analysis fails: folding is an optimization, never a load error
            try:
                self._find_candidates()
            except Exception as e:  # noqa: BLE001
                logger().debug("%s: not folding: %s: %s", self.where, type(e).__name__, e)
        return self.candidates.get((ci, pc))

    def _inputs_constant(self, kernel, args: tuple) -> bool:
        values, tags = self.values, self.tags
        for k, (arg, vi) in enumerate(zip(kernel.schema.args, args)):
            if arg.mutable:
                continue
            if k in kernel.shape_only and tags[vi] == TENSOR and vi not in self.volatile and \
                    self.plan.values[vi][1].dynamism == STATIC:
                continue  # only its (fixed) shape is read
            items = values[vi] if tags[vi] in (TENSOR_LIST, OPT_TENSOR_LIST) else (vi,)
            if any(j >= 0 and tags[j] == TENSOR and j not in self.constants for j in items):
                return False
        return True

    def _compute(self, kernel, args: tuple, fresh: dict) -> tuple[dict, int] | None:
        """Run the kernel into ``fresh`` tensors: ({slot: the array it holds from now on}, bytes copied), or None
        where an argument is known only at run time. A result that is a view of a constant stays that view."""
        values, tags, schema = self.values, self.tags, kernel.schema
        call, sources = [], []
        for arg, vi in zip(schema.args, args):
            if arg.mutable:
                call.append(fresh[vi].array if tags[vi] == TENSOR else [fresh[j].array for j in values[vi]])
                continue
            is_dyn, v = self.binder.bind(arg, vi)
            if is_dyn:
                return None
            call.append(v)
            sources.extend(x for x in (v if isinstance(v, list) else (v,)) if isinstance(x, np.ndarray))
        with np.errstate(all="ignore"):
            results = kernel.fn(*call)
        if len(schema.mutable) == 1:
            results = (results,)
        contents = {}
        for m, r in zip(schema.mutable, results, strict=True):
            vi = args[m]
            if tags[vi] == TENSOR:
                contents[vi] = r
            else:
                contents.update(zip(values[vi], [None] * len(values[vi]) if r is None else r, strict=True))
        final, copied = {}, 0
        for j, r in contents.items():
            own = fresh[j].array
            if isinstance(r, np.ndarray) and r.dtype == own.dtype and r.shape == own.shape and \
                    any(np.may_share_memory(r, src) for src in sources):
                final[j] = r  # a view of a constant: no copy, no new memory
                continue
            if r is not None and r is not own:
                fresh[j].write(r)  # as the interpreter would store the result: cast, shape checked
            final[j] = own
            copied += own.nbytes
        return final, copied

    def _arena_unshared(self, written: list[int], at: int) -> bool:
        """Whether no other tensor expects the outputs of the instruction at position ``at`` in the arena.

        The memory plan may lay a second tensor over an output's bytes on purpose (a view the exporter turned
        into an alias) or for reuse after it is dead. Reuse is safe to detach from: the other tensor is written
        again before it is read. An alias is not: it would read arena bytes nobody writes any more.
        """
        fp, plan = self, self.plan
        if fp.spans is None:
            planned = [(j, d.memory_offset, d.memory_offset + d.nbytes) for j, (tag, d) in enumerate(plan.values)
                       if tag == TENSOR and d.memory_id == 1]
            fp.spans = np.array(planned, np.int64).reshape(-1, 3).T
        slots, starts, ends = fp.spans
        for j in written:
            d = plan.values[j][1]
            if d.memory_id is None:
                continue
            lo, hi = d.memory_offset, d.memory_offset + d.nbytes
            mine = fp.reads.get(j, ())
            for k in slots[(starts < hi) & (ends > lo)].tolist():
                if k in written:
                    continue
                rd, wr = fp.reads.get(k, ()), fp.writes.get(k, ())
                r, w = bisect.bisect_right(rd, at), bisect.bisect_right(wr, at)
                if r < len(rd) and (w == len(wr) or wr[w] >= rd[r]):
                    return False  # read after the instruction without being written in between
                if w < len(wr) and mine and mine[-1] > wr[w]:
                    return False  # written through another value while the output is still read: it would
                    # read what that write left, which the folded constant no longer shows
        return True


def _reads_writes(ins, plan, tags: list, values: list, kernels: dict, delegate_outputs) -> tuple | None:
    """(tensors whose contents the instruction reads, tensors it writes) of a DelegateCall whose backend names
    its outputs or of a kernel folding may compute, else None."""
    def tensors(slots) -> set:
        out = set()
        for vi in slots:
            out.update(j for j in (values[vi] if tags[vi] in (TENSOR_LIST, OPT_TENSOR_LIST) else (vi,))
                       if j >= 0 and tags[j] == TENSOR)
        return out

    if ins.kind == DELEGATE_CALL:
        outs = delegate_outputs(ins.delegate_index)
        if not outs or max(outs) >= len(ins.args):
            return None
        return (tensors(a for k, a in enumerate(ins.args) if k not in outs),
                tensors(a for k, a in enumerate(ins.args) if k in outs))
    if ins.kind != KERNEL_CALL:
        return None
    kernel = kernels.get(plan.operators[ins.op_index])
    if kernel is None or kernel.raw or kernel.random or not kernel.foldable or not kernel.schema.mutable:
        return None
    args = list(zip(kernel.schema.args, ins.args))
    return (tensors(a for k, (arg, a) in enumerate(args) if not arg.mutable and k not in kernel.shape_only),
            tensors(a for arg, a in args if arg.mutable))


def is_constant(d: TensorDesc) -> bool:
    """A read-only tensor of the program or its external data (not one copied into the memory plan)."""
    return d.memory_id is None and (d.data_buffer_idx > 0 or (d.location == EXTERNAL and d.fqn is not None))
