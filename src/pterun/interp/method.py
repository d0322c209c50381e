"""Method load and the execution loop.

:class:`MethodRunner` does all the work once, in ``__init__``: it lays tensors over arenas and constants,
resolves every operator and delegate, and turns each instruction into a small closure (``step``). Running
is then setting inputs, calling the steps in order (following JumpFalse when the program has control
flow), and copying the outputs out.

Instructions whose inputs are all constants (a weight's ``permute_copy``, a dequantized weight) are computed
once, at load, and leave no step behind: their outputs become read-only constants of their own, or, when the
kernel returns a view of a constant, that view itself. ``PTERUN_NO_FOLD=1`` turns this off.

Example::

    >>> from pterun import Runtime                                         # doctest: +SKIP
    >>> m = Runtime.get().load_program("model.pte").load_method("forward")  # doctest: +SKIP
"""

from __future__ import annotations

import bisect
import os
import threading
from functools import partial

import numpy as np

from pterun._fpstate import quiet, restore
from pterun._log import logger
from pterun.delegates import BACKENDS, DelegateContext
from pterun.errors import (DelegateError, InvalidProgramError, KernelError,
                           MethodNotFoundError, NotSupportedError, OperatorMissingError, PterunError)
from pterun.format import dtypes
from pterun.format.program import (BOOL, DELEGATE_CALL, DOUBLE, DYNAMIC_UNBOUND, EXTERNAL, FREE_CALL, INT,
                                   INT_LIST, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL, NULL, OPT_TENSOR_LIST, STATIC,
                                   TAG_NAMES, TENSOR, TENSOR_LIST, Plan, ProgramFile, TensorDesc)
from pterun.interp.binding import Binder
from pterun.interp.checks import CHECKS as GEOMETRY_CHECKS
from pterun.interp.checks import check as check_geometry
from pterun.interp.tensor import Tensor

#: Executed-instruction ceiling for programs with jumps (ExecuTorch's ET_MAX_INSTRUCTIONS).
MAX_INSTRUCTIONS = 10_000_000

#: A method with jumps may execute at most ``LOOP_BUDGET_FACTOR x its instructions x its largest tensor dim``
#: instructions (a loop the exporter writes, such as ``map``, runs its body once per row of a tensor), and never
#: fewer than ``MIN_LOOP_BUDGET`` (a fraction of a second here) nor more than ``MAX_INSTRUCTIONS``: a corrupt
#: jump that loops forever fails in about a second instead of running for minutes.
LOOP_BUDGET_FACTOR = 4
MIN_LOOP_BUDGET = 100_000

#: New memory (bytes) that folded results may take per method. A folded result no longer shares the memory
#: plan's arena, so a large one (every dequantized weight of a quantized model) would cost its full size; views
#: of constants take none and are always folded.
FOLD_BUDGET = 16 << 20


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


_EMPTY = np.zeros(0, np.uint8)


class MethodRunner:
    """One loaded method: its values, memory and resolved steps."""

    def __init__(self, pf: ProgramFile, plan: Plan, *, shared_arenas: dict, external: tuple = (),
                 engine: str = "auto"):
        self.pf = pf
        self.engine = engine  # which engine delegates compile for (see pterun.delegates.DelegateContext)
        self.plan = plan
        self.name = plan.name
        self.where = f"{pf.name}: method {plan.name!r}"
        self._external = external  # PtdFile objects from data_path, searched before the program's named data
        self._check_supported()
        self.arenas = self._make_arenas(shared_arenas)
        self.tags = [tag for tag, _ in plan.values]
        self.values = [self._make_value(i, tag, p) for i, (tag, p) in enumerate(plan.values)]
        self.inputs = plan.inputs
        self.outputs = plan.outputs
        self.uses_shared_arenas = len(plan.buffer_sizes) > 2
        if plan.delegates and self._external:
            self._check_named_data_unique()
        self.executors = [self._init_delegate(i, d) for i, d in enumerate(plan.delegates)]
        self.volatile = self._find_volatile()
        self.binder = Binder(self.values, self.tags, self.volatile, self.where)
        self.folded: list[tuple[int, int, str]] = []  # (chain, instruction, operator) computed at load
        self._folding = self._fold_plan()  # None: nothing is folded
        self.chains = [self._build_chain(c, ci) for ci, c in enumerate(plan.chains)]
        del self._folding
        self.loop_budget = self._loop_budget()
        self.lock = threading.Lock()

    # -- load ----------------------------------------------------------------------------------------------
    def fail(self, what: str) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: {what}")

    def _check_supported(self) -> None:
        KERNELS = _kernels() if _uses_kernels(self.plan) else {}
        for i, (tag, p) in enumerate(self.plan.values):
            if tag == TENSOR:
                if p.dynamism == DYNAMIC_UNBOUND:
                    raise NotSupportedError(f"{self.where}: tensor value {i} has unbounded dynamic shape, which "
                                            "ExecuTorch's runtime does not support either")
                try:
                    p.dtype
                except NotSupportedError as e:
                    raise NotSupportedError(f"{self.where}: tensor value {i}: {e}") from None
        missing = [self.plan.operators[a] for c in self.plan.chains for (k, a, _) in c
                   if k == KERNEL_CALL and self.plan.operators[a] not in KERNELS]
        if missing:
            raise OperatorMissingError(self.name, missing)
        unsupported = sorted({self.plan.operators[a] for c in self.plan.chains for (k, a, _) in c
                              if k == KERNEL_CALL and KERNELS[self.plan.operators[a]].not_supported})
        if unsupported:
            reasons = "; ".join(f"{op}: {KERNELS[op].not_supported}" for op in unsupported)
            raise NotSupportedError(f"{self.where}: uses operator(s) pterun deliberately does not support: {reasons}")

    def _loop_budget(self) -> int:
        if not any(jumps for jumps, _, _ in self.chains):
            return 0
        steps = sum(len(s) for _, s, _ in self.chains)
        # only tensors backed by real bytes (planned or constant) count: their sizes were checked against memory
        dims = [max(d.sizes, default=1) for tag, d in self.plan.values
                if tag == TENSOR and (d.memory_id is not None or d.data_buffer_idx > 0)]
        return max(MIN_LOOP_BUDGET, LOOP_BUDGET_FACTOR * steps * max(dims, default=1))

    def _make_arenas(self, shared: dict) -> list:
        # an arena never needs more than the largest offset + size of the tensors placed in it: that is what is
        # allocated, whatever (larger) size the plan declares, so a corrupt size costs nothing
        sizes = self.plan.arena_extents
        total = sum(sizes[1:])
        limit = _physical_memory()
        if total > limit:
            raise self.fail(f"the memory plan needs {total} bytes, more than this machine's {limit} bytes of RAM "
                            "(corrupt file?)")
        arenas = [_EMPTY]
        for j in range(1, len(sizes)):
            if j == 1:
                arenas.append(self._allocate(sizes[j], f"memory arena {j}"))
            else:  # memory ids >= 2 hold state shared across a program's methods (share_mutable_buffers)
                a = shared.get(j)
                if a is None or len(a) < sizes[j]:
                    need = max(sizes[j], self.pf.shared_arena_size(j))
                    a = shared[j] = self._allocate(need, f"shared memory arena {j}")
                arenas.append(a)
        return arenas

    def _allocate(self, nbytes: int, what: str) -> np.ndarray:
        if not nbytes:
            return _EMPTY
        try:
            return np.zeros(nbytes, np.uint8)
        except MemoryError:  # ulimit -v, overcommit off, a small board: the file asks for more than there is
            raise InvalidProgramError(f"{self.where}: {what} needs {nbytes} bytes, more memory than is available "
                                      "(corrupt file?)") from None

    def _make_value(self, i: int, tag: int, p):
        if tag == TENSOR:
            return self._make_tensor(i, p)
        if tag == NULL:
            return None
        return p  # Int/Bool/Double/String scalars; lists keep their tuples (of indices, or raw values)

    def _make_tensor(self, i: int, d: TensorDesc) -> Tensor:
        dtype = d.dtype
        nbytes = d.nbytes
        if d.location == EXTERNAL and d.fqn is not None:
            data = self._external_tensor(i, d)
            if d.memory_id is None:
                storage = data
            else:  # external initial state of a planned (mutable) tensor: copied in once
                storage = self.arenas[d.memory_id][d.memory_offset : d.memory_offset + nbytes]
                storage[:] = data
        elif d.data_buffer_idx > 0 and d.memory_id is None:
            storage = self.pf.constant_data(d)
        elif d.memory_id is not None:
            off = d.memory_offset
            storage = self.arenas[d.memory_id][off : off + nbytes]
            if d.data_buffer_idx > 0:
                storage[:] = self.pf.mutable_initial_data(d)
        else:
            if nbytes > _physical_memory():
                raise self.fail(f"tensor value {i} needs {nbytes} bytes, more than this machine has (corrupt file?)")
            storage = self._allocate(nbytes, f"unplanned tensor value {i} ({list(d.sizes)})")
        return Tensor(dtype, d.sizes, d.dim_order, storage, dynamic=d.dynamism != STATIC)

    def _external_tensor(self, i: int, d: TensorDesc) -> np.ndarray:
        if not self._external:
            raise MethodNotFoundError(f"{self.where}: tensor {d.fqn!r} is stored in external data (.ptd), but no "
                                      "data_path was given to load_program")
        for ptd in self._external:
            if d.fqn in ptd:
                layout = ptd.layout(d.fqn)
                if layout is not None:
                    want = (d.scalar_type, tuple(d.sizes), tuple(d.dim_order))
                    got = (layout.scalar_type, layout.sizes, layout.dim_order or tuple(range(len(layout.sizes))))
                    if want != got:
                        raise InvalidProgramError(
                            f"{self.where}: external tensor {d.fqn!r} in {ptd.name} has dtype "
                            f"{dtypes.scalar_type_name(got[0])}, sizes {list(got[1])}, dim order {list(got[2])}; "
                            f"the program expects {dtypes.scalar_type_name(want[0])}, sizes {list(want[1])}, "
                            f"dim order {list(want[2])}")
                data = ptd.data(d.fqn)
                if len(data) < d.nbytes:
                    raise InvalidProgramError(f"{self.where}: external tensor {d.fqn!r} in {ptd.name} has "
                                              f"{len(data)} bytes, the program needs {d.nbytes}")
                return data[: d.nbytes]
        raise MethodNotFoundError(f"{self.where}: external tensor {d.fqn!r} is not in "
                                  f"{', '.join(p.name for p in self._external)}")

    def _init_delegate(self, i: int, d):
        backend = BACKENDS.get(d.backend_id)
        if backend is None or not backend.is_available():
            raise DelegateError(f"{self.where}: delegate {i} needs backend {d.backend_id!r}, which is not "
                                f"available (available: {sorted(BACKENDS) or 'none'})")
        blob = self.pf.delegate_blob(d)
        ctx = DelegateContext(self.pf.name, self.name, i, self._named_data, self.engine)
        try:
            return backend.init(blob, d.compile_specs, ctx)
        except PterunError:
            raise
        except Exception as e:  # a backend bug must still surface as a pterun error
            raise DelegateError(f"{self.where}: backend {d.backend_id!r} failed to initialise delegate {i}: "
                                f"{type(e).__name__}: {e}") from e

    def _check_named_data_unique(self) -> None:
        for ptd in self._external:
            dup = sorted(set(ptd.keys()) & set(self.pf.named_data))
            if dup:
                raise InvalidProgramError(f"{self.where}: named data key {dup[0]!r} is in both {ptd.name} and the "
                                          "program; ExecuTorch rejects duplicate keys")

    def _named_data(self, key: str) -> np.ndarray:
        for ptd in self._external:
            if key in ptd:
                return ptd.data(key)
        if key in self.pf.named_data:
            return self.pf.named(key)
        where = ", ".join([p.name for p in self._external] + [self.pf.name])
        hint = "" if self._external else " (if the weights were exported to a .ptd file, pass it as data_path=)"
        raise MethodNotFoundError(f"{self.where}: no named data with key {key!r} in {where}{hint}")

    def _find_volatile(self) -> set[int]:
        """Slots whose content or tensor view can change during a run."""
        KERNELS = _kernels() if _uses_kernels(self.plan) else {}
        vol = set()
        for i, (tag, p) in enumerate(self.plan.values):
            if tag == TENSOR and p.dynamism != STATIC:
                vol.add(i)
        for chain in self.plan.chains:
            for kind, a, b in chain:
                if kind == MOVE_CALL:
                    vol.add(b)
                elif kind == FREE_CALL:
                    vol.add(a)
                elif kind == KERNEL_CALL:
                    k = KERNELS[self.plan.operators[a]]
                    if k.raw:
                        positions = range(len(b)) if k.volatile_args is None else k.volatile_args
                        vol.update(b[p] for p in positions if p < len(b))
                    elif not k.schema.mutable and b and self.tags[b[-1]] in (INT, DOUBLE, BOOL):
                        vol.add(b[-1])
        return vol

    def _build_chain(self, chain, ci: int):
        # steps are built in program order, so an instruction computed at load (folded) is done before any
        # later step binds its output; ``info`` entries are (name, arguments, instruction index)
        KERNELS = _kernels() if any(k == KERNEL_CALL for k, _, _ in chain) else {}
        steps, info = [], []
        has_jumps = False
        for pc, (kind, a, b) in enumerate(chain):
            if kind == KERNEL_CALL:
                name = self.plan.operators[a]
                if name in GEOMETRY_CHECKS:
                    self._check_geometry(KERNELS[name], b, pc)
                if self._folding is not None and self._fold(KERNELS[name], b, ci, pc):
                    self.folded.append((ci, pc, name))
                    continue
                steps.append(self._kernel_step(KERNELS[name], b, pc))
                info.append((name, b, pc))
            elif kind == DELEGATE_CALL:
                steps.append(self._delegate_step(a, b))
                info.append((f"delegate {self.plan.delegates[a].backend_id}", b, pc))
            elif kind == MOVE_CALL:
                steps.append(self._move_step(a, b))
                info.append(("MoveCall", (a, b), pc))
            elif kind == JUMP_FALSE_CALL:
                if not 0 <= b <= len(chain):
                    raise self.fail(f"JumpFalseCall at instruction {pc} jumps to {b}, outside the chain "
                                    f"(0..{len(chain)})")
                steps.append(self._jump_step(a, b, pc))
                info.append(("JumpFalseCall", (a,), pc))
                has_jumps = True
            elif kind == FREE_CALL:
                if self.tags[a] != TENSOR:
                    raise self.fail(f"FreeCall at instruction {pc} frees value {a}, which is not a tensor")
                steps.append(None)  # memory is reused by the plan; nothing to release here
                info.append(("FreeCall", (a,), pc))
        if not has_jumps:
            keep = [(s, n) for s, n in zip(steps, info) if s is not None]
            return False, [s for s, _ in keep], [n for _, n in keep]
        # a fast-path step (a functools.partial) returns what its NumPy call returns, which this loop would take
        # for the next instruction
        return True, [_noop if s is None else _returning_none(s) if isinstance(s, partial) else s
                      for s in steps], info

    # -- constant folding ------------------------------------------------------------------------------------
    def _fold_plan(self) -> _FoldPlan | None:
        # programs with jumps are left alone: an instruction there may run any number of times, or never
        plan = self.plan
        if os.environ.get("PTERUN_NO_FOLD") or not _uses_kernels(plan) or \
                any(k == JUMP_FALSE_CALL for c in plan.chains for k, _, _ in c):
            return None
        return _FoldPlan({i for i, (tag, d) in enumerate(plan.values) if tag == TENSOR and _is_constant(d)})

    def _fold_candidates(self, fp: _FoldPlan) -> None:
        """Find the instructions whose outputs may be detached from the memory plan (once, when the first
        instruction with constant inputs turns up).

        The kernel must write only out arguments; it must be the only writer of its outputs, nothing may read
        them before it, and nothing may reach them but as a kernel's input (raw kernels, delegates and moves get
        the Tensor object, not its array). Records where each tensor is read and written, for
        :meth:`_arena_unshared`.
        """
        plan, tags, values = self.plan, self.tags, self.values
        KERNELS = _kernels()
        reads, writes = fp.reads, fp.writes
        exposed: set[int] = set()
        written_by = {}
        lists = (TENSOR_LIST, OPT_TENSOR_LIST)
        pos = 0
        for ci, chain in enumerate(plan.chains):
            for pc, (kind, a, b) in enumerate(chain):
                pos += 1
                fp.position[(ci, pc)] = pos
                kernel = KERNELS[plan.operators[a]] if kind == KERNEL_CALL else None
                if kind in (DELEGATE_CALL, MOVE_CALL) or (kernel is not None and kernel.raw):
                    slots = set(b if kind != MOVE_CALL else (a, b))
                    slots.update(j for i in tuple(slots) if tags[i] in lists for j in values[i] if j >= 0)
                    exposed.update(slots)
                    for j in slots:  # these may write too; counting only reads is the cautious side
                        reads.setdefault(j, []).append(pos)
                if kernel is None or kernel.raw:
                    continue
                written, outs_only = [], True
                for arg, vi in zip(kernel.schema.args, b):
                    tag = tags[vi]
                    if tag == TENSOR:
                        slots = (vi,)
                    elif tag in lists:
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
                if outs_only and written:
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

    def _fold(self, kernel, args: tuple, ci: int, pc: int) -> bool:
        """Compute instruction ``pc`` now if its inputs are constants; False leaves it to run as a step.

        The kernel writes into fresh memory, never into the arena other tensors share. A result that is a view
        of a constant (a transposed weight) is kept as that view, zero-copy; anything else is copied into the
        tensor's own memory, within the method's budget. Any failure here is silent: the step then raises the
        same error when it runs, with the usual context.
        """
        if kernel.raw or not kernel.foldable or not kernel.schema.mutable:
            return False
        values, tags, fp = self.values, self.tags, self._folding
        schema = kernel.schema
        for arg, vi in zip(schema.args, args):
            if arg.mutable:
                continue
            items = values[vi] if tags[vi] in (TENSOR_LIST, OPT_TENSOR_LIST) else (vi,)
            if any(j >= 0 and tags[j] == TENSOR and j not in fp.constants for j in items):
                return False
        if fp.candidates is None:
            fp.candidates = {}  # stays empty if the analysis fails: folding is an optimization, never a load error
            try:
                self._fold_candidates(fp)
            except Exception as e:  # noqa: BLE001
                logger().debug("%s: not folding: %s: %s", self.where, type(e).__name__, e)
        written = fp.candidates.get((ci, pc))
        if written is None:
            return False
        nbytes = sum(values[j].array.nbytes for j in written)
        if nbytes > fp.budget and not kernel.returns_view:  # a view costs nothing: worth trying whatever the budget
            return False
        if not self._arena_unshared(written, fp.position[(ci, pc)]):
            return False
        fresh = {j: values[j].detached() for j in written}
        self.binder.where = f"{self.where}: instruction {pc} ({kernel.name})"
        try:
            call, sources = [], []
            for arg, vi in zip(schema.args, args):
                if arg.mutable:
                    call.append(fresh[vi].array if tags[vi] == TENSOR else [fresh[j].array for j in values[vi]])
                    continue
                is_dyn, v = self.binder.bind(arg, vi)
                if is_dyn:
                    return False
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
        except Exception as e:  # noqa: BLE001  (the step reports it at run time, with the usual context)
            logger().debug("%s: not folding instruction %d (%s): %s: %s", self.where, pc, kernel.name, type(e).__name__, e)
            return False
        if copied > fp.budget:
            return False
        fp.budget -= copied
        for j, array in final.items():
            values[j].freeze(array)
            fp.constants.add(j)
        return True

    def _arena_unshared(self, written: list[int], at: int) -> bool:
        """Whether no other tensor expects the outputs of the instruction at position ``at`` in the arena.

        The memory plan may lay a second tensor over an output's bytes on purpose (a view the exporter turned
        into an alias) or for reuse after it is dead. Reuse is safe to detach from: the other tensor is written
        again before it is read. An alias is not: it would read arena bytes nobody writes any more.
        """
        fp, plan = self._folding, self.plan
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
            for k in slots[(starts < hi) & (ends > lo)].tolist():
                if k in written:
                    continue
                rd, wr = fp.reads.get(k, ()), fp.writes.get(k, ())
                r, w = bisect.bisect_right(rd, at), bisect.bisect_right(wr, at)
                if r < len(rd) and (w == len(wr) or wr[w] >= rd[r]):
                    return False  # read after the instruction without being written in between
        return True

    def _check_geometry(self, kernel, args: tuple, pc: int) -> None:
        """Arguments fixed at load that drive a kernel's work (padding, windows, sizes) must give exactly the
        shape of its static out tensors (interp/checks.py); otherwise the program is refused now."""
        schema = kernel.schema
        if kernel.raw or len(args) not in (len(schema.args), len(schema.args) + 1):
            return  # _kernel_step reports the arity
        self.binder.where = f"{self.where}: instruction {pc} ({kernel.name})"
        bound, outs = [], []
        for arg, vi in zip(schema.args, args):
            is_dyn, v = self.binder.bind(arg, vi)
            if is_dyn:
                return  # shapes known only at run time
            bound.append(v)
            if arg.mutable:
                t = self.values[vi]
                outs.append((t.shape, not t.dynamic) if isinstance(t, Tensor) else ((), False))
        problem = check_geometry(kernel.name, bound, outs)
        if problem is not None:
            raise self.fail(f"instruction {pc} ({kernel.name}): {problem}")

    def _kernel_step(self, kernel, args: tuple, pc: int):
        where = f"instruction {pc} ({kernel.name})"
        values = self.values
        if kernel.raw:
            fn = kernel.fn
            return lambda: fn(values, args)
        schema = kernel.schema
        n = len(schema.args)
        if len(args) not in (n, n + 1):
            raise self.fail(f"{where} has {len(args)} arguments; the schema {schema} takes {n} plus a return slot")
        binder = self.binder
        binder.where = f"{self.where}: {where}"
        consts, dyn = [], []
        for pos, (arg, vi) in enumerate(zip(schema.args, args)):
            is_dyn, v = binder.bind(arg, vi)
            consts.append(None if is_dyn else v)
            if is_dyn:
                dyn.append((pos, v))
        fn = kernel.fn
        if kernel.has_fast_path and not dyn:
            # every argument is fixed at load (static shapes, constant scalars): the kernel may hand back a
            # closure that computes straight into the output arrays, skipping promotion and the write-back
            fast = kernel.specialize(*consts)
            if fast is not None:
                return fast
        if schema.mutable:
            writers = [binder.writer(schema.args[m], args[m]) for m in schema.mutable]
            if len(writers) == 1:
                w0 = writers[0]

                def write(result):  # None: the kernel updated its argument in place
                    if result is not None:
                        w0(result)
            else:
                def write(results, writers=writers):
                    for w, r in zip(writers, results):
                        if r is not None:
                            w(r)
        elif len(args) == n + 1 and self.tags[args[-1]] == TENSOR:
            # a functional op returning a new tensor (allclose.Tensor): the result goes into the return slot
            write = binder.writer(None, args[-1])
        else:
            if len(args) != n + 1:
                raise self.fail(f"{where} returns a value but has no return slot")
            ret = args[-1]
            if self.tags[ret] not in (INT, DOUBLE, BOOL):
                raise self.fail(f"{where} returns a scalar into value {ret}, which is "
                                f"{TAG_NAMES.get(self.tags[ret])}")

            def write(r, ret=ret):
                values[ret] = r
        if not dyn:
            return lambda: write(fn(*consts))
        if len(dyn) == 1:
            (p0, g0), = dyn

            def step():
                a = consts.copy()
                a[p0] = g0()
                write(fn(*a))
            return step

        def step():
            a = consts.copy()
            for p, g in dyn:
                a[p] = g()
            write(fn(*a))
        return step

    def _delegate_step(self, index: int, args: tuple):
        ex = self.executors[index]
        values = self.values
        get = values.__getitem__
        return lambda: ex.execute(list(map(get, args)))

    def _move_step(self, src: int, dst: int):
        values = self.values

        def move():
            values[dst] = values[src]
        return move

    def _jump_step(self, cond: int, dest: int, pc: int):
        values = self.values
        tag = self.tags[cond]
        if tag == BOOL:
            if cond in self.volatile:
                return lambda: None if values[cond] else dest
            return (lambda: dest) if not values[cond] else (lambda: None)
        if tag == TENSOR:
            if values[cond].dtype != np.bool_:
                raise self.fail(f"JumpFalseCall at instruction {pc} tests a {values[cond].dtype} tensor; "
                                "it must be bool")
            return lambda: None if values[cond].array.all() else dest
        raise self.fail(f"JumpFalseCall at instruction {pc} tests a {TAG_NAMES.get(tag)} value; it must be Bool")

    # -- run -----------------------------------------------------------------------------------------------
    def set_inputs(self, inputs: list) -> None:
        values = self.values
        for i, (vi, x) in enumerate(zip(self.inputs, inputs)):
            if self.tags[vi] == TENSOR:
                t = values[vi]
                if x.shape != t.shape:
                    t.resize(x.shape)
                t.array[...] = x  # Method.execute checked the dtype: a plain copy (half of copyto's cost)

    def run(self) -> None:
        # NumPy's floating-point warnings (overflow to inf, 0/0) are part of the numbers, not errors;
        # the library never writes to stderr on its own
        token = quiet()
        try:
            self._run()
        finally:
            restore(token)

    def _run(self) -> None:
        for jumps, steps, info in self.chains:
            pc = 0
            try:
                if not jumps:
                    for pc, step in enumerate(steps):
                        step()
                else:
                    n = len(steps)
                    count = 0
                    limit = min(MAX_INSTRUCTIONS, self.loop_budget)
                    while pc < n:
                        nxt = steps[pc]()
                        pc = pc + 1 if nxt is None else nxt
                        count += 1
                        if count > limit:
                            raise InvalidProgramError(
                                f"{self.where}: executed more than {limit} instructions, the budget of a method "
                                f"with {n} instructions (infinite loop in the program?)")
            except PterunError as e:
                if isinstance(e, (InvalidProgramError, KernelError)):
                    raise
                raise self._kernel_error(info, pc, e) from e
            except Exception as e:
                raise self._kernel_error(info, pc, e) from e

    def _kernel_error(self, info, pc: int, cause: Exception) -> KernelError:
        # ``pc`` counts steps; the message names the program's own instruction index
        name, args, pc = info[pc] if pc < len(info) else ("?", (), pc)
        shapes = []
        inputs = {vi: k for k, vi in enumerate(self.inputs)}  # a bad value the caller gave is named as theirs
        for a in args:
            v = self.values[a] if 0 <= a < len(self.values) else None
            if isinstance(v, Tensor):
                shapes.append(f"{v.dtype.name}{list(v.shape)}" + (f" = input {inputs[a]}" if a in inputs else ""))
            elif self.tags[a] not in (TENSOR,) and not isinstance(v, tuple):
                shapes.append(repr(v))
        return KernelError(f"{self.where}: {name} failed at instruction {pc} with inputs ({', '.join(shapes)}): "
                           f"{type(cause).__name__}: {cause}", operator=name, instruction=pc)

    def collect_outputs(self) -> list:
        out = []
        values = self.values
        for o in self.outputs:
            v = values[o]
            if isinstance(v, Tensor):
                out.append(v.array.copy(order="K"))  # the caller's own array, in the tensor's memory order
            elif isinstance(v, tuple):
                out.append([values[j] for j in v] if self.tags[o] == INT_LIST else list(v))
            else:
                out.append(v)
        return out


def _noop():
    return None


def _returning_none(step):
    def wrapped():
        step()
    return wrapped


class _FoldPlan:
    """What constant folding needs while a method's chains are built; dropped afterwards."""

    def __init__(self, constants: set[int]):
        self.constants = constants  # tensor slots known at load: the program's constants, then folded outputs
        self.budget = FOLD_BUDGET  # bytes folded results may still take
        # (chain, instruction) -> the tensor slots it writes; None until an instruction's inputs are constant
        self.candidates: dict[tuple[int, int], list[int]] | None = None
        self.position: dict[tuple[int, int], int] = {}  # (chain, instruction) -> position in program order
        self.reads: dict[int, list[int]] = {}  # slot -> positions reading it, ascending
        self.writes: dict[int, list[int]] = {}  # slot -> positions writing it, ascending
        self.spans = None  # (slot, start, end) of every tensor in arena 1, built at the first fold attempt


def _is_constant(d: TensorDesc) -> bool:
    """A read-only tensor of the program or its external data (not one copied into the memory plan)."""
    return d.memory_id is None and (d.data_buffer_idx > 0 or (d.location == EXTERNAL and d.fqn is not None))


def _kernels() -> dict:
    """The kernel registry; importing it loads every kernel family, so it happens at the first load of a
    method that calls a kernel (a program that is all delegate calls never needs it)."""
    from pterun.kernels import KERNELS
    return KERNELS


def _uses_kernels(plan: Plan) -> bool:
    return any(k == KERNEL_CALL for c in plan.chains for (k, _, _) in c)
