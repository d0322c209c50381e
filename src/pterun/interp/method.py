"""A loaded method: the load passes, then running.

:class:`MethodRunner` runs the load passes once, in ``__init__``, each a function that takes what it needs and
returns a record, and keeps what they return:

1. memory layout (:class:`pterun.interp.memory.Memory`): arenas, and a value slot per EValue over arenas,
   constants and external data;
2. analysis (:func:`pterun.interp.analysis.analyse`): tags, which slots can change while running, the dims
   dynamic inputs vary in, each delegate's calls; what each instruction reads and writes by byte
   (:class:`pterun.interp.access.Accesses`), for the passes that merge, fold or skip;
3. delegates (:func:`pterun.interp.delegates.load_delegates`): runs of neighbouring DelegateCalls that their
   backend compiles as one (pterun.interp.merge), then every other delegate's executor;
4. steps (:func:`pterun.interp.steps.build_steps`), with constant folding (pterun.interp.fold) and one read of a
   repeatedly read input element (pterun.interp.repeats) on the way;

and :meth:`MethodRunner.run` is the loop (pterun.interp.loop), or its observed twin (pterun.interp.observe)
when a hook is given. The program's :class:`~pterun.config.Settings` decide the engine, folding, merging, the
random seed and the thread count, which is this thread's own (:func:`pterun.threads.use_threads`) while the
method runs.

Example::

    >>> from pterun import Runtime                                         # doctest: +SKIP
    >>> m = Runtime.get().load_program("model.pte").load_method("forward")  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from functools import cache

from pterun import threads
from pterun._fpstate import quiet, restore
from pterun.config import Settings
from pterun.errors import InvalidProgramError, KernelError
from pterun.format.program import ProgramFile
from pterun.format.schema import INT_LIST, TENSOR, ExecutionPlan
from pterun.interp.access import Accesses
from pterun.interp.analysis import analyse, check_supported
from pterun.interp.binding import Binder
from pterun.interp.delegates import Source, delegate_outputs, load_delegates
from pterun.interp.direct import bind_direct
from pterun.interp.fold import Folder, is_constant
from pterun.interp.loop import run_chains
from pterun.interp.memory import Memory
from pterun.interp.observe import run_observed
from pterun.interp.steps import build_steps
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
    """One loaded method: what its load passes returned, and how to run it."""

    def __init__(self, pf: ProgramFile, plan: ExecutionPlan, settings: Settings = Settings(), *, shared_arenas: dict,
                 external: tuple = ()):
        self.pf, self.plan, self.settings = pf, plan, settings
        self.name = plan.name
        self.where = f"{pf.name}: method {plan.name!r}"
        check_supported(plan, self.where)
        self.memory = Memory(pf, plan, self.where, shared_arenas, external)
        values = self.memory.values
        self.analysis = analyse(plan, values)
        tags, volatile = self.analysis.tags, self.analysis.volatile
        folding = settings.fold and Folder.applies(plan)
        # two values may be one buffer: the passes that merge, skip or move what an instruction writes follow its
        # bytes, through what each delegate writes (its backend says, where it can); made before anything folds
        # (each payload read once: the passes below ask for every delegate's outputs several times)
        outputs_of = cache(lambda i: delegate_outputs(pf, plan, i))
        acc = Accesses(plan, values, tags, delegate_outputs=outputs_of) if settings.merge or folding else None
        binder = Binder(values, tags, volatile, self.where)
        folder, repeats = None, (frozenset(), {})
        if folding:  # the merge folds what it would otherwise compute on every call first (Folder.ahead), and
            # merged calls read a repeated scalar from its first read (so the repeats are found before the merge)
            from pterun.interp.repeats import find_repeats

            folder = Folder(plan, values, tags, volatile, binder, self.where, FOLD_BUDGET, delegate_outputs=outputs_of)
            repeats = find_repeats(plan, values, tags, volatile, acc)
        self.delegates = load_delegates(Source(pf, plan, self.where), self.memory, self.analysis, settings, acc,
                                        folder, repeats[1])
        self.steps = build_steps(plan, values, self.analysis, self.delegates, binder, self.where, folder, repeats,
                                 settings.seed)
        known = folder.constants if folder is not None else \
            {i for i, (tag, d) in enumerate(plan.values) if tag == TENSOR and is_constant(d)}
        self.uses_shared_arenas = len(plan.buffer_sizes) > 2
        self.direct = None if self.uses_shared_arenas else \
            bind_direct(self.steps.only_call, tuple(plan.inputs), tuple(plan.outputs), tags,
                        lambda slot: values[slot].array if slot in known else None)
        self.loop_budget = self._loop_budget()
        self.instruction_limit = min(MAX_INSTRUCTIONS, self.loop_budget)  # per chain with jumps, per call
        self.lock = threading.Lock()

    # -- what the passes returned, by the names the loop, the observers and the facade read ------------------
    @property
    def values(self) -> list:
        return self.memory.values

    @property
    def arenas(self) -> list:
        return self.memory.arenas

    @property
    def named_data(self):
        return self.memory.named_data

    @property
    def tags(self) -> tuple:
        return self.analysis.tags

    @property
    def volatile(self) -> frozenset:
        return self.analysis.volatile

    @property
    def dynamic_sizes(self) -> frozenset:
        return self.analysis.dynamic_sizes

    @property
    def executors(self) -> tuple:
        return self.delegates.executors

    @property
    def merged(self) -> dict:
        return self.delegates.merged

    @property
    def chains(self) -> tuple:
        return self.steps.chains

    @property
    def folded(self) -> tuple:
        return self.steps.folded

    @property
    def folded_events(self) -> tuple:
        return self.steps.folded_events

    @property
    def events(self) -> list:
        return [c.events for c in self.steps.chains]

    @property
    def seed(self) -> int | None:
        return self.settings.seed

    @property
    def rng(self):
        return self.steps.random.rng

    @property
    def inputs(self) -> tuple:
        return self.plan.inputs

    @property
    def outputs(self) -> tuple:
        return self.plan.outputs

    def _loop_budget(self) -> int:
        chains = self.steps.chains
        if not any(c.jumps for c in chains):
            return 0
        steps = sum(len(c.steps) for c in chains)
        # only tensors backed by real bytes (planned or constant) count: their sizes were checked against memory
        dims = [max(d.sizes, default=1) for tag, d in self.plan.values
                if tag == TENSOR and (d.memory_id is not None or d.data_buffer_idx > 0)]
        return max(MIN_LOOP_BUDGET, LOOP_BUDGET_FACTOR * steps * max(dims, default=1))

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
        prev, current.n = current.n, self.settings.num_threads
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
        return KernelError(f"{self.where}: {name} failed at instruction {pc} with inputs ({_listed(shapes)}): "
                           f"{type(cause).__name__}: {cause}", operator=name, instruction=pc)

    def collect_outputs(self, own: bool = True) -> list:
        """The outputs: tensors as arrays the caller owns, or (``own=False``) the method's own arrays."""
        out = []
        values = self.values
        for o in self.outputs:
            v = values[o]
            if isinstance(v, Tensor):
                out.append(v.array.copy(order="K") if own else v.array)  # the caller's: in the tensor's memory order
            elif isinstance(v, tuple):
                out.append([values[j] for j in v] if self.tags[o] == INT_LIST else list(v))
            else:
                out.append(v)
        return out


#: the most argument descriptions an error message lists (a merged call can take a hundred caches)
LISTED_ARGS = 16


def _listed(items: list) -> str:
    """``items`` joined by commas; more than :data:`LISTED_ARGS` of them (a merged call's), a run of equal ones once
    with its count (``float32[1, 512, 4, 64] x24``), at most that many of those, then how many more there are."""
    if len(items) <= LISTED_ARGS:  # each argument in its place
        return ", ".join(items)
    runs: list[list] = []
    for it in items:
        if runs and runs[-1][0] == it:
            runs[-1][1] += 1
        else:
            runs.append([it, 1])
    shown = [it if n == 1 else f"{it} x{n}" for it, n in runs[:LISTED_ARGS]]
    left = sum(n for _, n in runs[LISTED_ARGS:])
    return ", ".join(shown + ([f"... {left} more"] if left else []))
