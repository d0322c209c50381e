"""What each instruction reads and overwrites, by value slot and by byte.

Two values may be one buffer. The memory plan lays values over the same arena bytes on purpose (ExecuTorch 0.6
and 1.0 leave a flatten between two delegates as nothing but two values at one offset) and to reuse the memory of
a value nobody reads any more. A pass that merges, skips, defers or caches what an instruction writes must know
whether those bytes are read later through *any* value: :class:`SharedBytes` says which tensor slots meet in
memory, and :class:`Accesses` which instructions read each slot and which overwrite it whole, so that
:meth:`Accesses.bytes_read` can follow the bytes one slot holds through the instructions that run next.

Example::

    >>> acc = Accesses(plan, values, tags)                        # doctest: +SKIP
    >>> acc.shared.overlapping(2)                                 # doctest: +SKIP
    (3,)
    >>> acc.bytes_read(2, 0, After(len(plan.chains[0]), resume=5))  # doctest: +SKIP
    True
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable

import numpy as np

from pterun.format.schema import (DELEGATE_CALL, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL, OPT_TENSOR_LIST, TENSOR,
                                  TENSOR_LIST)
from pterun.interp.tensor import Tensor

__all__ = ["Accesses", "After", "SharedBytes", "WrittenIn", "kernels_for", "storage_span", "view_roots",
           "written_slots"]

def kernels_for(plan, chain=None) -> dict:
    """The kernel registry with the families of ``plan``'s operators imported (:mod:`pterun.kernels.families`), or
    {} when ``chain`` (default: all of the plan's) calls no kernel: a program that is all delegate calls imports
    no kernel family, and one that calls a few operators imports only theirs."""
    chains = plan.chains if chain is None else (chain,)
    if not any(ins.kind == KERNEL_CALL for c in chains for ins in c):
        return {}
    from pterun.kernels.registry import load
    return load(plan.operators)


def written_slots(kernel, args: tuple) -> tuple:
    """The value slots a KernelCall writes: its out (``!``) arguments and return slot; a raw kernel's last one."""
    if kernel.raw:
        return args[-1:]
    n = len(kernel.schema.args)
    out = [args[m] for m in kernel.schema.mutable if m < len(args)]
    if len(args) == n + 1:
        out.append(args[-1])
    return tuple(dict.fromkeys(out))  # an out variant's return slot is usually its out argument


VIEW = "executorch_prim::et_view.default"


def view_roots(plan) -> dict:
    """slot -> the slot whose memory it aliases, through chains of ``et_view`` (the only aliasing operator)."""
    root = {}
    for chain in plan.chains:
        for ins in chain:
            if ins.kind == KERNEL_CALL and 0 <= ins.op_index < len(plan.operators) and \
                    plan.operators[ins.op_index] == VIEW and len(ins.args) >= 3:
                root[ins.args[2]] = root.get(ins.args[0], ins.args[0])
    return root


def storage_span(t) -> tuple[int, int] | None:
    """The [start, end) addresses of a tensor's storage (the bytes it may ever use), None when it has none."""
    st = getattr(t, "storage", None)
    if st is None or not st.size:
        return None
    lo = hi = st.__array_interface__["data"][0]
    for n, step in zip(st.shape, st.strides):
        if step < 0:
            lo += (n - 1) * step
        else:
            hi += (n - 1) * step
    return lo, hi + st.itemsize


class SharedBytes:
    """Which tensor slots of a loaded method lie over the same bytes (worked out from the live tensors' storage, so
    arenas, shared arenas, constants and external data are one address space). ``roots`` maps the result of a view
    (``et_view``, which points its result at its input's memory when it runs) to the slot whose memory it is."""

    def __init__(self, values: list, roots: dict | None = None):
        roots = roots or {}
        own = {i: storage_span(v) for i, v in enumerate(values) if isinstance(v, Tensor)}
        spans = [(i, own.get(roots.get(i, i))) for i in own]
        spans = [(i, s) for i, s in spans if s is not None]
        self._span = dict(spans)
        self._slots = np.array([i for i, _ in spans], np.int64)
        self._lo = np.array([s[0] for _, s in spans], np.int64)
        self._hi = np.array([s[1] for _, s in spans], np.int64)
        self._over: dict[int, tuple] = {}

    def span(self, slot: int) -> tuple[int, int] | None:
        """The [start, end) addresses of ``slot``'s storage, None for anything but a tensor with bytes."""
        return self._span.get(slot)

    def overlapping(self, slot: int) -> tuple[int, ...]:
        """The other tensor slots whose storage meets ``slot``'s (empty for anything but a tensor with bytes)."""
        got = self._over.get(slot)
        if got is None:
            s = self._span.get(slot)
            if s is None:
                got = ()
            else:
                hit = self._slots[(self._lo < s[1]) & (self._hi > s[0])]
                got = tuple(hit[hit != slot].tolist())
            self._over[slot] = got
        return got

    def same(self, a: int, b: int) -> bool:
        """Whether two slots' storage is exactly the same bytes."""
        s = self._span.get(a)
        return s is not None and s == self._span.get(b)


class Accesses:
    """Per instruction of each chain: the tensor slots it may read, those it certainly writes, and those it
    certainly overwrites whole.

    Reading is counted on the cautious side: every argument of a raw kernel, a move, an in-place update
    (``self!``) or a delegate call whose outputs its backend does not say (``delegate_outputs``). Writing only where
    it is certain: the out arguments of a kernel with a schema, and the outputs a backend names. A write covers the
    elements of the tensor's current shape (what its readers read); it overwrites the tensor's bytes whole only for
    a static tensor. List arguments count with their members.

    ``delegate_outputs(delegate_index)`` gives the positions of a DelegateCall's arguments that the delegate writes,
    or None where that is not known.
    """

    def __init__(self, plan, values: list, tags: list, shared: SharedBytes | None = None,
                 delegate_outputs: Callable[[int], frozenset | None] | None = None):
        self.plan, self.values, self.tags = plan, values, tags
        self.roots = view_roots(plan)
        self.shared = shared if shared is not None else SharedBytes(values, self.roots)
        self.outputs = frozenset(plan.outputs)
        self.inputs = frozenset(plan.inputs)
        self.delegate_outputs = delegate_outputs or (lambda i: None)
        # slot -> [(chain, pc)] reading it / certainly writing it, ascending
        self.read_at: dict[int, list] = {}
        self.write_at: dict[int, list] = {}
        self.writes_of: list[list[frozenset]] = []  # per chain, per pc: the slots it certainly writes
        # per chain, per pc: the slots it certainly writes by name, views among them (writes_of has their roots'
        # bytes as read instead)
        self.named_writes: list[list[frozenset]] = []
        self._groups: dict[int, tuple] = {}  # slot -> what bytes_read scans (_group_events)
        self._all: tuple | None = None  # every slot's reads and certain writes (_events)
        self._io: tuple | None = None  # the outputs and tensor inputs with bytes (_ends)
        self._escape: dict[tuple, bool] = {}  # (slot, chain, others only) -> _escapes
        self._foreign: dict[int, tuple] = {}  # chain -> the slots with bytes that escape its order (_escaping)
        # slots of state other methods share (memory ids >= 2), and, per slot, the chains that name it
        self._state = frozenset(k for k, (_, d) in enumerate(plan.values)
                                if getattr(d, "memory_id", None) is not None and d.memory_id >= 2)
        self._chains_of: dict[int, frozenset] | None = None
        kernels = kernels_for(plan)
        for ci, chain in enumerate(plan.chains):
            self.writes_of.append([])
            self.named_writes.append([])
            for pc, ins in enumerate(chain):
                reads, writes = self._of(ins, kernels)
                self.named_writes[ci].append(frozenset(writes))
                roots = self.roots
                if roots:
                    through = {k for k in writes if k in roots}
                    reads = {roots.get(k, k) for k in reads} | {roots[k] for k in through}
                    writes = writes - through
                for k in reads:
                    self.read_at.setdefault(k, []).append((ci, pc))
                for k in writes:
                    self.write_at.setdefault(k, []).append((ci, pc))
                self.writes_of[ci].append(frozenset(writes))

    def last_write(self, slot: int, ci: int, start: int, stop: int, skip=frozenset()) -> int | None:
        """The last pc in ``start..stop-1`` of chain ``ci`` (``skip`` left out) that certainly writes ``slot``."""
        got = [pc for c, pc in self.write_at.get(slot, ()) if c == ci and start <= pc < stop and pc not in skip]
        return max(got, default=None)

    def written_in(self, ci: int, start: int, stop: int, skip=frozenset()) -> WrittenIn:
        """The slots that instructions ``start..stop-1`` of chain ``ci`` (``skip`` left out) certainly write, as a
        container that answers ``slot in it`` from that slot's writes (merging asks once for each slot a run writes,
        each time from another start: a set of every slot written would be rebuilt for each)."""
        return WrittenIn(self.write_at, ci, start, stop, skip)

    def _whole(self, slot: int) -> bool:
        """Whether a write of ``slot`` overwrites all its bytes (a static tensor's writer writes every element)."""
        v = self.values[slot]
        return self.tags[slot] == TENSOR and isinstance(v, Tensor) and not v.dynamic

    def _members(self, slot: int) -> list:
        if not 0 <= slot < len(self.values):
            return []
        out = [slot]
        if self.tags[slot] in (TENSOR_LIST, OPT_TENSOR_LIST) and isinstance(self.values[slot], tuple):
            out.extend(j for j in self.values[slot] if isinstance(j, int) and 0 <= j < len(self.values))
        return out

    def _of(self, ins, kernels) -> tuple[set, set]:
        """(slots the instruction may read, tensor slots it certainly writes)."""
        kind = ins.kind
        if kind == MOVE_CALL:
            return set(self._members(ins.move_from)) | set(self._members(ins.move_to)), set()
        if kind == JUMP_FALSE_CALL:
            return set(self._members(ins.cond_value_index)), set()
        if kind == DELEGATE_CALL:
            outs = self.delegate_outputs(ins.delegate_index)
            args = tuple(ins.args)
            if outs is None:
                return {j for a in args for j in self._members(a)}, set()
            reads = {j for k, a in enumerate(args) if k not in outs for j in self._members(a)}
            return reads, {j for k, a in enumerate(args) if k in outs for j in self._members(a)
                           if self.tags[j] == TENSOR} - reads
        if kind != KERNEL_CALL:
            return set(), set()
        args = tuple(ins.args)
        name = self.plan.operators[ins.op_index] if 0 <= ins.op_index < len(self.plan.operators) else None
        if name == VIEW:
            return set(), set()  # a binding: the result is the input's memory (see ``roots``)
        kernel = kernels.get(name)
        if kernel is None or kernel.raw:
            return {j for a in args for j in self._members(a)}, set()
        left = set(kernel.unwritten)  # out placeholders the kernel never touches
        reads, writes = set(), set()
        for pos, (arg, vi) in enumerate(zip(kernel.schema.args, args)):
            if pos in left:
                continue
            members = self._members(vi)
            if arg.mutable and arg.kwarg_only:
                writes.update(j for j in members if self.tags[j] == TENSOR)
            else:
                reads.update(members)  # an input, or an in-place update (self!) that reads what it writes
        return reads, writes - reads

    def bytes_read(self, slot: int, ci: int, after: After, others_only: bool = False, written=frozenset()) -> bool:
        """Whether the bytes ``slot`` holds at some point of chain ``ci`` are read before they are all overwritten,
        when what runs next is ``after``. Reads through any slot over those bytes count (``others_only``: through
        other slots only), and so do the caller's reads of the method outputs, any other chain's use, and state
        that other methods share (memory ids >= 2); a read of a slot written since then (or in ``written``, slots
        already written again since that point) reads what that write left (its current shape's elements), not
        these bytes; a view's read, what its root's write left)."""
        shared = self.shared
        span = shared.span(slot)
        if span is None:
            return False
        if others_only and not shared.overlapping(slot):
            return False
        if self._escapes(slot, ci, others_only):
            return True
        live, since = [span], set()  # ``since``: slots written in the order ``after`` runs
        for _, what, k, lo, hi, whole, root in self._in_order(slot, after, others_only):
            if what == 0:
                # a view reads what its root holds: a write of the root since then is what it reads too
                if k not in since and root not in since and k not in written and root not in written:
                    for a, b in live:
                        if a < hi and lo < b:
                            return True
            else:
                since.add(k)
                if whole:
                    live = _subtract(live, (lo, hi))
                    if not live:
                        return False
        return False

    def _in_order(self, slot: int, after: After, others_only: bool):
        """The reads (0) and certain writes (1) of the slots over ``slot``'s bytes, as (pc, what, slot, start, end,
        whole, root) in the order ``after`` runs them (an instruction reads before it writes; pc None for the
        caller's reads of the outputs and the next call's writes of the inputs), lazily: the caller stops at the
        first that decides. ``others_only`` leaves out ``slot``'s own reads. ``start``/``end`` are the slot's
        storage addresses, ``whole`` whether its write overwrites them all, ``root`` its view root."""
        ev, pcs, outs, ins = self._group_events(slot)
        skip = after.skip
        for pc in after.first:
            for e in ev[bisect_left(pcs, pc):bisect_right(pcs, pc)]:
                if not (e[1] == 0 and others_only and e[2] == slot):
                    yield e
        segments = [(after.resume, after.n)]
        tail = [(0, min(after.until, after.resume))] if after.inputs_at is not None else []
        for segs, ends in ((segments, True), (tail, False)):
            for lo, hi in segs:
                for e in ev[bisect_left(pcs, lo):bisect_left(pcs, hi)]:
                    if e[0] not in skip and not (e[1] == 0 and others_only and e[2] == slot):
                        yield e
            if ends:  # the caller reads the outputs; the next call writes its inputs
                for e in outs:
                    if not (others_only and e[2] == slot):
                        yield e
                if after.inputs_at is not None:
                    yield from ins

    def _escapes(self, slot: int, ci: int, others_only: bool) -> bool:
        """Whether a slot over ``slot``'s bytes (other than ``slot`` with ``others_only``) is state other methods may
        read (memory ids >= 2), or is used by another chain than ``ci`` (no order between them is known here)."""
        key = (slot, ci, others_only)
        got = self._escape.get(key)
        if got is None:
            slots, lo, hi = self._escaping(ci)
            start, end = self.shared.span(slot)
            hit = slots[(lo < end) & (hi > start)]
            got = self._escape[key] = bool((hit != slot).any() if others_only else hit.size)
        return got

    def _escaping(self, ci: int) -> tuple:
        """(slots, their start addresses, their end addresses) of the slots with bytes that are state other methods
        share or that a chain other than ``ci`` uses, as arrays; worked out once per chain."""
        got = self._foreign.get(ci)
        if got is None:
            foreign, span = set(self._state), self.shared.span
            if len(self.plan.chains) != 1 or ci != 0:  # (a lone chain's slots are all its own)
                mine = frozenset((ci,))
                foreign.update(k for k, chains in self._chain_uses().items() if chains - mine)
            out = sorted(k for k in foreign if span(k) is not None)
            got = self._foreign[ci] = (np.array(out, np.int64), np.array([span(k)[0] for k in out], np.int64),
                                       np.array([span(k)[1] for k in out], np.int64))
        return got

    def _chain_uses(self) -> dict[int, frozenset]:
        """slot -> the chains that read or certainly write it."""
        if self._chains_of is None:
            chains: dict[int, set] = {}
            for at in (self.read_at, self.write_at):
                for k, where in at.items():
                    chains.setdefault(k, set()).update(c for c, _ in where)
            self._chains_of = {k: frozenset(c) for k, c in chains.items()}
        return self._chains_of

    def _events(self) -> tuple:
        """Every read (0) and certain write (1) of every slot with bytes, as (pc, what, slot, start, end, whole,
        root), sorted (the chains together: a slot whose bytes another chain uses never gets as far as reading
        them, :meth:`_escapes`), with their pcs, starts and ends as arrays; worked out once (a slot's group,
        :meth:`_group_events`, is the events whose bytes meet its own)."""
        if self._all is None:
            span, ev = self.shared.span, []
            for k in self.read_at.keys() | self.write_at.keys():
                if span(k) is not None:
                    g = self._member(k)
                    ev += [(pc, 0) + g for _, pc in self.read_at.get(k, ())]
                    ev += [(pc, 1) + g for _, pc in self.write_at.get(k, ())]
            ev.sort()
            every = np.empty(len(ev), object)
            every[:] = ev
            self._all = (every, np.array([e[0] for e in ev], np.int64), np.array([e[3] for e in ev], np.int64),
                         np.array([e[4] for e in ev], np.int64))
        return self._all

    def _ends(self) -> tuple:
        """(the method outputs, the tensor inputs) with bytes, as ascending (slot, start, end); worked out once."""
        if self._io is None:
            span = self.shared.span
            self._io = tuple([(k,) + span(k) for k in sorted(slots) if span(k) is not None]
                             for slots in (self.outputs, {k for k in self.inputs if self.tags[k] == TENSOR}))
        return self._io

    def _member(self, k: int) -> tuple:
        """(slot, start, end, whole, root) of a slot with bytes (see :meth:`_in_order`)."""
        lo, hi = self.shared.span(k)
        return k, lo, hi, self._whole(k), self.roots.get(k, k)

    def _group_events(self, slot: int) -> tuple:
        """(events, their pcs, the caller's reads of the outputs, the next call's writes of its inputs) of the slots
        over ``slot``'s bytes, ``slot`` first: every read (0) and certain write (1) of those slots, sorted
        (:meth:`_events`), and one read (0) of each that is a method output, one write (1) of each that is a
        tensor input, as (None, what, slot, start, end, whole, root) (see :meth:`_in_order`); worked out once per
        slot."""
        got = self._groups.get(slot)
        if got is None:
            every, pcs, lo, hi = self._events()
            start, end = self.shared.span(slot)
            at = np.flatnonzero((lo < end) & (hi > start))  # the events of the slots over these bytes, in order
            outs, ins = self._ends()
            outs = tuple((None, 0) + self._member(k) for k in _meeting(outs, slot, start, end))
            ins = tuple((None, 1) + self._member(k) for k in _meeting(ins, slot, start, end))
            got = self._groups[slot] = (every[at].tolist(), pcs[at].tolist(), outs, ins)
        return got


def _meeting(spans: list, slot: int, start: int, end: int) -> list:
    """The slots of ``spans`` ((slot, start, end), ascending) whose bytes meet [start, end), ``slot`` first."""
    got = [k for k, lo, hi in spans if lo < end and hi > start]
    return [slot] + [k for k in got if k != slot] if slot in got else got


class WrittenIn:
    """``slot in it``: whether instructions ``start..stop-1`` of chain ``ci`` (``skip`` left out) certainly write
    ``slot``, from ``write_at`` (:attr:`Accesses.write_at`)."""

    __slots__ = ("write_at", "ci", "start", "stop", "skip")

    def __init__(self, write_at: dict, ci: int, start: int, stop: int, skip=frozenset()):
        self.write_at, self.ci, self.start, self.stop, self.skip = write_at, ci, start, stop, skip

    def __contains__(self, slot) -> bool:
        ci, start, stop, skip = self.ci, self.start, self.stop, self.skip
        return any(c == ci and start <= pc < stop and pc not in skip for c, pc in self.write_at.get(slot, ()))


class After:
    """What runs after a point of a chain of ``n`` instructions, in order: the pcs ``first``, then ``resume`` up to
    the end of the chain, then the caller reads the outputs; with ``wrap``, the next call then writes its inputs
    and runs the chain from its start up to ``until``. ``skip``: pcs that do not run at all. ``position(pc)``
    gives an instruction's place in that order, None where it does not run."""

    __slots__ = ("first", "resume", "n", "until", "skip", "outputs_at", "inputs_at", "_first")

    def __init__(self, n: int, resume: int, first=(), wrap: bool = True, until: int | None = None, skip=()):
        self.n, self.resume, self.first = n, resume, tuple(first)
        self._first = {pc: k for k, pc in enumerate(self.first)}
        self.skip = frozenset(skip) | frozenset(self.first)
        self.until = (resume if until is None else until) if wrap else 0
        base = len(self.first) + max(n - resume, 0)
        self.outputs_at = base
        self.inputs_at = base + 1 if wrap else None

    def position(self, pc: int) -> int | None:
        k = self._first.get(pc)
        if k is not None:
            return k
        if pc in self.skip:
            return None
        if pc >= self.resume:
            return len(self.first) + pc - self.resume if pc < self.n else None
        if pc < self.until:
            return self.outputs_at + 2 + pc
        return None


def _subtract(ranges: list, cut: tuple) -> list:
    """``ranges`` (disjoint [start, end) pairs) less ``cut``."""
    out = []
    for lo, hi in ranges:
        if cut[1] <= lo or hi <= cut[0]:
            out.append((lo, hi))
            continue
        if lo < cut[0]:
            out.append((lo, cut[0]))
        if cut[1] < hi:
            out.append((cut[1], hi))
    return out
