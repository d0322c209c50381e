"""A loaded method: the load passes, then running.

:class:`MethodRunner` does all the work once, in ``__init__``, as passes over the program's plan:

1. memory layout (pterun.interp.memory): arenas, and a value slot per EValue over arenas and constants;
2. analysis: which slots can change while running (steps.find_volatile), bound once by pterun.interp.binding;
3. delegates: runs of neighbouring DelegateCalls that their backend can compile as one (pterun.interp.merge),
   then each remaining DelegateCall's backend compiles its payload;
4. constant folding (pterun.interp.fold), one read of a repeatedly read input element (pterun.interp.repeats)
   and step building (pterun.interp.steps), instruction by instruction;

and :meth:`MethodRunner.run` is the loop (pterun.interp.loop), or its observed twin (pterun.interp.observe)
when a hook is given. The Runtime decides the configuration (``fold``, ``seed``, ``num_threads``, ``merge``) and
passes it in; the thread count is this thread's own (:func:`pterun.threads.use_threads`) while the method runs.

Example::

    >>> from pterun import Runtime                                         # doctest: +SKIP
    >>> m = Runtime.get().load_program("model.pte").load_method("forward")  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from functools import partial

from pterun import threads
from pterun._fpstate import quiet, restore
from pterun._log import logger
from pterun.delegates import BACKENDS, DelegateContext
from pterun.errors import DelegateError, InvalidProgramError, KernelError, NotSupportedError, OperatorMissingError, \
    PterunError
from pterun.format.program import (DELEGATE_CALL, DYNAMIC_UNBOUND, INT_LIST, KERNEL_CALL, TENSOR, ExecutionPlan,
                                   ProgramFile)
from pterun.interp.access import Accesses, kernels_for, written_slots
from pterun.interp.binding import Binder
from pterun.interp.fold import Folder
from pterun.interp.loop import run_chains
from pterun.interp.memory import Memory
from pterun.interp.merge import DelegatePart, find_runs, slots_read_outside
from pterun.interp.observe import Event, run_observed
from pterun.interp.steps import StepBuilder, find_volatile
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


class MethodRunner:
    """One loaded method: its values, memory and resolved steps."""

    def __init__(self, pf: ProgramFile, plan: ExecutionPlan, *, shared_arenas: dict, external: tuple = (),
                 engine: str = "auto", fold: bool = True, seed: int | None = None, num_threads: int | None = None,
                 merge: bool = True):
        self.pf = pf
        self.num_threads = num_threads  # the Runtime's thread count (None: the process default when it runs)
        self.engine = engine  # which engine delegates compile for (see pterun.delegates.DelegateContext)
        self.plan = plan
        self.name = plan.name
        self.where = f"{pf.name}: method {plan.name!r}"
        self._check_supported()
        memory = Memory(pf, plan, self.where, shared_arenas, external)
        self.arenas, self.values, self.named_data = memory.arenas, memory.values, memory.named_data
        self.tags = [tag for tag, _ in plan.values]
        self.inputs = plan.inputs
        self.outputs = plan.outputs
        self.uses_shared_arenas = len(plan.buffer_sizes) > 2
        self.volatile = find_volatile(plan, self.tags)
        self.dynamic_sizes = self._dynamic_sizes()  # what LiteRT prepares dynamic inputs at (DelegateContext)
        self.executors: list = [None] * len(plan.delegates)
        self.merged: dict = {}  # (chain, first instruction) -> (Run, executor, argument slots)
        self.absorbed: set = set()  # (chain, instruction) of every instruction a merged call runs
        self._finish: list = []  # what backends finish once every delegate is known (DelegateContext.finish)
        self._calls: dict[int, list] = {}  # delegate index -> the argument slots of each of its DelegateCalls
        self._accesses = None  # made on first use (self.accesses)
        for c in plan.chains:
            for ins in c:
                if ins.kind == DELEGATE_CALL:
                    self._calls.setdefault(ins.delegate_index, []).append(ins.args)
        if merge:
            self._merge_delegates()
        called = {ins.delegate_index for ci, c in enumerate(plan.chains) for pc, ins in enumerate(c)
                  if ins.kind == DELEGATE_CALL and (ci, pc) not in self.absorbed}
        for i, d in enumerate(plan.delegates):
            if self.executors[i] is None or i in called:
                self.executors[i] = self._init_delegate(i, d)
        for pending in self._finish:
            try:
                pending.finish()
            except PterunError:
                raise
            except Exception as e:  # a backend bug must still surface as a pterun error
                raise DelegateError(f"{self.where}: finishing the delegates' load failed: {type(e).__name__}: "
                                    f"{e}") from e
        self._finish = []
        self.binder = Binder(self.values, self.tags, self.volatile, self.where)
        self.folded: list[tuple[int, int, str]] = []  # (chain, instruction, operator) computed at load
        self.folded_events: list[Event] = []  # the same, as Method.trace reports them
        self.events: list[list[Event]] = []  # per chain, per step: what an execute hook is shown
        self.delegate_steps: list[dict] = []  # per chain: step -> (executor, args getter) reporting its nodes
        self.seed = seed  # of the generator random kernels draw from (None: OS entropy)
        self.rng = None  # that generator, made by the first random kernel's step (numpy.random is not free)
        folder = None
        if fold and Folder.applies(plan):
            folder = Folder(plan, self.values, self.tags, self.volatile, self.binder, self.where, FOLD_BUDGET)
        builder = StepBuilder(self, folder)
        self.chains = [builder.build_chain(c, ci) for ci, c in enumerate(plan.chains)]
        self.loop_budget = self._loop_budget()
        self.instruction_limit = min(MAX_INSTRUCTIONS, self.loop_budget)  # per chain with jumps, per call
        self.lock = threading.Lock()

    # -- load ----------------------------------------------------------------------------------------------
    def fail(self, what: str) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: {what}")

    def _check_supported(self) -> None:
        KERNELS = kernels_for(ins for c in self.plan.chains for ins in c)
        for i, (tag, p) in enumerate(self.plan.values):
            if tag == TENSOR:
                if p.dynamism == DYNAMIC_UNBOUND:
                    raise NotSupportedError(f"{self.where}: tensor value {i} has unbounded dynamic shape, which "
                                            "ExecuTorch's runtime does not support either")
                try:
                    p.dtype
                except NotSupportedError as e:
                    raise NotSupportedError(f"{self.where}: tensor value {i}: {e}") from None
        called = [self.plan.operators[ins.op_index] for c in self.plan.chains for ins in c if ins.kind == KERNEL_CALL]
        missing = [op for op in called if op not in KERNELS]
        if missing:
            raise OperatorMissingError(self.name, missing)
        unsupported = sorted({op for op in called if KERNELS[op].not_supported})
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

    def _init_delegate(self, i: int, d):
        backend = BACKENDS.get(d.backend_id)
        if backend is None or not backend.is_available():
            raise DelegateError(f"{self.where}: delegate {i} needs backend {d.backend_id!r}, which is not "
                                f"available (available: {sorted(BACKENDS) or 'none'})")
        blob = self.pf.delegate_blob(d)
        n = self.num_threads if self.num_threads is not None else threads.process_num_threads()
        first = self._calls.get(i, [()])[0]
        ctx = DelegateContext(self.pf.name, self.name, i, self.named_data, self.engine, self._call_args(i), n,
                              self.dynamic_sizes, tuple(self._is_dynamic(a) for a in first), self._finish)
        try:
            return backend.init(blob, d.compile_specs, ctx)
        except PterunError:
            raise
        except Exception as e:  # a backend bug must still surface as a pterun error
            raise DelegateError(f"{self.where}: backend {d.backend_id!r} failed to initialise delegate {i}: "
                                f"{type(e).__name__}: {e}") from e

    def _merge_delegates(self) -> None:
        """Runs of neighbouring delegate calls that their backend compiles into one (pterun.interp.merge)."""
        plan = self.plan

        def merger(i: int) -> str | None:
            if not 0 <= i < len(plan.delegates):
                return None
            name = plan.delegates[i].backend_id
            backend = BACKENDS.get(name) if name in BACKENDS else None
            return name if backend is not None and hasattr(backend, "merge") and backend.is_available() else None

        KERNELS = kernels_for(ins for c in plan.chains for ins in c)

        def later(ins):  # (read, written) slots of a KernelCall that may run after a merged call, or None
            kernel = KERNELS.get(plan.operators[ins.op_index]) if ins.kind == KERNEL_CALL else None
            if kernel is None or kernel.raw or kernel.random or kernel.not_supported:
                return None
            args = tuple(ins.args)
            left = {args[m] for m in kernel.unwritten if m < len(args)}  # out placeholders it never touches
            return set(args) - left, set(written_slots(kernel, args)) - left

        acc = self.accesses()
        runs = find_runs(plan, self.values, self.tags, self.volatile, merger, lambda b, op: BACKENDS[b].absorbs(op),
                         later, acc)
        if not runs:
            return
        outside = slots_read_outside(plan, self.tags, self.values, acc)
        for run in runs:
            indices = sorted({p.delegate_index for p in run.parts if isinstance(p, DelegatePart)})
            n = self.num_threads if self.num_threads is not None else threads.process_num_threads()
            ctx = DelegateContext(self.pf.name, self.name, indices[0], self.named_data, self.engine, (), n,
                                  self.dynamic_sizes, finish=self._finish)
            try:
                blobs = {i: self.pf.delegate_blob(plan.delegates[i]) for i in indices}
                got = BACKENDS[run.backend].merge(run.parts, blobs, ctx, partial(outside, run), self.values,
                                                  acc.shared)
            except Exception as e:  # the delegates then load one by one, and report their own errors
                logger().debug("%s: delegates %s not merged: %s: %s", self.where, indices, type(e).__name__, e)
                continue
            if got is None:
                continue
            ex, args = got
            self.merged[run.chain, run.start] = (run, ex, args)
            self.absorbed.update((run.chain, pc) for pc in range(run.start, run.stop))  # deferred ones included
            for i in indices:
                self.executors[i] = ex

    def accesses(self) -> Accesses:
        """What each instruction reads and writes, by slot and by byte (pterun.interp.access), made once, before
        anything is folded: two values may be one buffer, so the passes that skip or move what an instruction
        writes follow its bytes, through what each delegate writes (its backend says, where it can)."""
        if self._accesses is None:
            self._accesses = Accesses(self.plan, self.values, self.tags, delegate_outputs=self._delegate_outputs)
        return self._accesses

    def _delegate_outputs(self, i: int) -> frozenset | None:
        """The DelegateCall arguments delegate ``i`` writes, from its backend; None where that is not known."""
        if not 0 <= i < len(self.plan.delegates):
            return None
        name = self.plan.delegates[i].backend_id
        backend = BACKENDS.get(name) if name in BACKENDS else None
        if backend is None or not hasattr(backend, "outputs"):
            return None
        try:
            return backend.outputs(self.pf.delegate_blob(self.plan.delegates[i]))
        except Exception:  # noqa: BLE001  (unknown: every argument counts as read; the backend's init reports)
            return None

    def _dynamic_sizes(self) -> frozenset:
        """The upper bounds of the dims the method's dynamic tensor inputs may vary in: each dynamic input's largest
        dim (a token count's 511; the file does not say which dim varies, and a small one such as 3 channels is
        rarely the one)."""
        return frozenset(max(self.values[vi].shape) for vi in self.inputs
                         if self._is_dynamic(vi) and max(self.values[vi].shape, default=1) > 1)

    def _is_dynamic(self, vi: int) -> bool:
        v = self.values[vi] if 0 <= vi < len(self.values) else None
        return isinstance(v, Tensor) and v.dynamic

    def _call_args(self, i: int) -> tuple:
        """Per DelegateCall of delegate ``i``: each argument's largest element count (None: not a tensor)."""
        values = self.plan.values
        return tuple(tuple(values[a][1].numel if 0 <= a < len(values) and values[a][0] == TENSOR else None
                           for a in args)
                     for args in self._calls.get(i, ()))

    # -- run -----------------------------------------------------------------------------------------------
    def set_inputs(self, inputs: list) -> None:
        values = self.values
        for i, (vi, x) in enumerate(zip(self.inputs, inputs)):
            if self.tags[vi] == TENSOR:
                t = values[vi]
                if x.shape != t.shape:
                    t.resize(x.shape)
                t.array[...] = x  # Method.execute checked the dtype: a plain copy (half of copyto's cost)

    def run(self, hook=None) -> None:
        # NumPy's floating-point warnings (overflow to inf, 0/0) are part of the numbers, not errors;
        # the library never writes to stderr on its own
        token = quiet()
        current = threads.current  # this thread's count is the method's while it runs (threads.use_threads)
        prev, current.n = current.n, self.num_threads
        try:
            if hook is None:
                run_chains(self)
            else:
                run_observed(self, hook)
        finally:
            current.n = prev
            restore(token)

    def loop_error(self, limit: int, n: int) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: executed more than {limit} instructions, the budget of a method "
                                   f"with {n} instructions (infinite loop in the program?)")

    def kernel_error(self, info, pc: int, cause: Exception) -> KernelError:
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
