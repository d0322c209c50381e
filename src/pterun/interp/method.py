"""Method load and the execution loop.

:class:`MethodRunner` does all the work once, in ``__init__``: it lays tensors over arenas and constants,
resolves every operator and delegate, and turns each instruction into a small closure (``step``). Running
is then setting inputs, calling the steps in order (following JumpFalse when the program has control
flow), and copying the outputs out.

Example::

    >>> from pterun import Runtime                                         # doctest: +SKIP
    >>> m = Runtime.get().load_program("model.pte").load_method("forward")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from pterun.delegates import BACKENDS, DelegateContext
from pterun.errors import (DelegateError, InvalidProgramError, KernelError,
                           MethodNotFoundError, NotSupportedError, OperatorMissingError, PterunError)
from pterun.format import dtypes
from pterun.format.program import (BOOL, DELEGATE_CALL, DOUBLE, DYNAMIC_UNBOUND, EXTERNAL, FREE_CALL, INT,
                                   INT_LIST, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL, NULL, STATIC, TAG_NAMES, TENSOR, Plan, ProgramFile, TensorDesc)
from pterun.interp.binding import Binder
from pterun.interp.tensor import Tensor

log = logging.getLogger("pterun")

#: Executed-instruction limit for programs with jumps (ExecuTorch's ET_MAX_INSTRUCTIONS).
MAX_INSTRUCTIONS = 10_000_000


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


_EMPTY = np.zeros(0, np.uint8)


class MethodRunner:
    """One loaded method: its values, memory and resolved steps."""

    def __init__(self, pf: ProgramFile, plan: Plan, *, shared_arenas: dict, external: tuple = ()):
        self.pf = pf
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
        self.chains = [self._build_chain(c, ci) for ci, c in enumerate(plan.chains)]
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
                              if k == KERNEL_CALL and hasattr(KERNELS[self.plan.operators[a]].fn, "not_supported")})
        if unsupported:
            reasons = "; ".join(f"{op}: {KERNELS[op].fn.not_supported}" for op in unsupported)
            raise NotSupportedError(f"{self.where}: uses operator(s) pterun deliberately does not support: {reasons}")

    def _make_arenas(self, shared: dict) -> list:
        sizes = self.plan.buffer_sizes
        total = sum(sizes[1:])
        limit = _physical_memory()
        if total > limit:
            raise self.fail(f"the memory plan needs {total} bytes, more than this machine's {limit} bytes of RAM "
                            "(corrupt file?)")
        arenas = [_EMPTY]
        for j in range(1, len(sizes)):
            if j == 1:
                arenas.append(np.zeros(sizes[j], np.uint8))
            else:  # memory ids >= 2 hold state shared across a program's methods (share_mutable_buffers)
                a = shared.get(j)
                if a is None or len(a) < sizes[j]:
                    a = shared[j] = np.zeros(sizes[j], np.uint8)
                arenas.append(a)
        return arenas

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
            storage = np.zeros(nbytes, np.uint8) if nbytes else _EMPTY
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
        ctx = DelegateContext(self.pf.name, self.name, i, self._named_data)
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
                        positions = getattr(k.fn, "volatile_args", range(len(b)))
                        vol.update(b[p] for p in positions if p < len(b))
                    elif not k.schema.mutable and b and self.tags[b[-1]] in (INT, DOUBLE, BOOL):
                        vol.add(b[-1])
        return vol

    def _build_chain(self, chain, ci: int):
        KERNELS = _kernels() if any(k == KERNEL_CALL for k, _, _ in chain) else {}
        steps, info = [], []
        has_jumps = False
        for pc, (kind, a, b) in enumerate(chain):
            if kind == KERNEL_CALL:
                name = self.plan.operators[a]
                steps.append(self._kernel_step(KERNELS[name], b, pc))
                info.append((name, b))
            elif kind == DELEGATE_CALL:
                steps.append(self._delegate_step(a, b))
                info.append((f"delegate {self.plan.delegates[a].backend_id}", b))
            elif kind == MOVE_CALL:
                steps.append(self._move_step(a, b))
                info.append(("MoveCall", (a, b)))
            elif kind == JUMP_FALSE_CALL:
                if not 0 <= b <= len(chain):
                    raise self.fail(f"JumpFalseCall at instruction {pc} jumps to {b}, outside the chain "
                                    f"(0..{len(chain)})")
                steps.append(self._jump_step(a, b, pc))
                info.append(("JumpFalseCall", (a,)))
                has_jumps = True
            elif kind == FREE_CALL:
                if self.tags[a] != TENSOR:
                    raise self.fail(f"FreeCall at instruction {pc} frees value {a}, which is not a tensor")
                steps.append(None)  # memory is reused by the plan; nothing to release here
                info.append(("FreeCall", (a,)))
        if not has_jumps:
            keep = [(s, n) for s, n in zip(steps, info) if s is not None]
            return False, [s for s, _ in keep], [n for _, n in keep]
        return True, [s if s is not None else _noop for s in steps], info

    def _kernel_step(self, kernel, args: tuple, pc: int):
        where = f"instruction {pc} ({kernel.name})"
        values = self.values
        if kernel.raw:
            fn = kernel.fn
            if hasattr(fn, "check"):
                fn.check(self, args, where)
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
        specialize = getattr(fn, "specialize", None)
        if specialize is not None and not dyn:
            # every argument is fixed at load (static shapes, constant scalars): the kernel may hand back a
            # closure that computes straight into the output arrays, skipping promotion and the write-back
            fast = specialize(*consts)
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
                np.copyto(t.array, x, casting="no")

    def run(self) -> None:
        # NumPy's floating-point warnings (overflow to inf, 0/0) are part of the numbers, not errors;
        # the library never writes to stderr on its own
        with np.errstate(all="ignore"):
            self._run()

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
                    while pc < n:
                        nxt = steps[pc]()
                        pc = pc + 1 if nxt is None else nxt
                        count += 1
                        if count > MAX_INSTRUCTIONS:
                            raise InvalidProgramError(f"{self.where}: executed more than {MAX_INSTRUCTIONS} "
                                                      "instructions (infinite loop in the program?)")
            except PterunError as e:
                if isinstance(e, (InvalidProgramError, KernelError)):
                    raise
                raise self._kernel_error(info, pc, e) from e
            except Exception as e:
                raise self._kernel_error(info, pc, e) from e

    def _kernel_error(self, info, pc: int, cause: Exception) -> KernelError:
        name, args = info[pc] if pc < len(info) else ("?", ())
        shapes = []
        for a in args:
            v = self.values[a] if 0 <= a < len(self.values) else None
            if isinstance(v, Tensor):
                shapes.append(f"{v.dtype.name}{list(v.shape)}")
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
                out.append(np.array(v.array, copy=True, order="K"))
            elif isinstance(v, tuple):
                out.append([values[j] for j in v] if self.tags[o] == INT_LIST else list(v))
            else:
                out.append(v)
        return out


def _noop():
    return None


def _kernels() -> dict:
    """The kernel registry; importing it loads every kernel family, so it happens at the first load of a
    method that calls a kernel (a program that is all delegate calls never needs it)."""
    from pterun.kernels import KERNELS
    return KERNELS


def _uses_kernels(plan: Plan) -> bool:
    return any(k == KERNEL_CALL for c in plan.chains for (k, _, _) in c)
