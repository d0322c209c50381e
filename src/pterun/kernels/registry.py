"""The kernel registry: one table keyed by the exact operator name a program uses.

A kernel is a plain function whose docstring's first line is its ATen schema. The schema tells the
interpreter how to convert each argument (``Tensor`` -> ``np.ndarray``, ``int[]`` -> tuple of ints,
``ScalarType?`` -> ``np.dtype`` or None, ...) and which arguments the kernel writes (those marked ``!``).
A kernel returns the new contents of what it writes — one array, or a tuple/list in schema order — and
the interpreter copies them into the planned output tensors (resizing dynamic ones). A kernel with no
written arguments returns a scalar, which the interpreter stores in the instruction's return slot.

The table fills as kernel families are imported: :func:`load` imports those of the operators a method calls,
:func:`load_all` every one (:mod:`pterun.kernels.families` says which family registers which operator).

Example::

    >>> import numpy as np
    >>> from pterun.kernels.registry import register, KERNELS
    >>> @register("demo::twice.out")
    ... def twice(self, out):
    ...     '''twice.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)'''
    ...     return self * 2
    >>> KERNELS["demo::twice.out"].schema.mutable
    (1,)
    >>> del KERNELS["demo::twice.out"]
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Callable

from pterun._record import Record  # immutable slotted records (dataclasses cost ~5 ms to import)
from pterun.kernels.families import FAMILIES, FAMILY_OF

__all__ = ["Arg", "Schema", "Kernel", "KERNELS", "load", "load_all", "register", "parse_schema"]


class Arg(Record):
    """One schema argument. ``base`` is Tensor, int, float, bool, Scalar, ScalarType, str, MemoryFormat, Layout,
    Device (or a Sym type); ``optional``: the argument may be None; ``elem_optional``: list items may be None
    (``Tensor?[]``); ``kwarg_only``: after the schema's ``*``, where out arguments live."""

    __slots__ = ("name", "base", "is_list", "optional", "elem_optional", "mutable", "kwarg_only")
    _defaults = (False, False, False, False, False)

    @property
    def kind(self) -> str:
        """A compact key for converters: e.g. 'Tensor', 'Tensor?', 'int[]', 'Tensor?[]'."""
        base = {"SymInt": "int", "SymFloat": "float", "SymBool": "bool"}.get(self.base, self.base)
        k = base + ("?" if self.elem_optional else "") + ("[]" if self.is_list else "")
        return k + ("?" if self.optional else "")


class Schema(Record):
    """A parsed schema; ``mutable`` holds the indices of the written arguments."""

    __slots__ = ("name", "args", "returns", "mutable")

    def __str__(self) -> str:
        return f"{self.name}({', '.join(a.name for a in self.args)}) -> {self.returns}"


_FROM_DOC = object()  # a registered kernel's schema, parsed from its docstring when first asked for


class Kernel:
    """A registered kernel: the operator's name, its function and everything the interpreter needs to know
    about it, all declared in the one ``register(...)`` call next to the function.

    ``schema`` is None for raw kernels. ``volatile_args``: for a raw kernel, the argument positions whose
    tensors it retargets or resizes (None: all of them). ``foldable``: whether an instance with constant
    inputs may be computed once at load (False for random draws and uninitialised buffers).
    ``returns_view``: whether the result is normally a view of an input, so folding it costs no memory.
    ``not_supported``: why pterun refuses the operator (loading a program that uses it fails with this
    reason), or None. ``unwritten``: positions of schema-mutable arguments the kernel never writes (ExecuTorch's
    ``update_cache`` writes its cache and leaves its ``out`` placeholder alone), so moving the instruction past
    another that uses that memory is safe (pterun.interp.merge). ``random``: the kernel draws random numbers
    from the ``rng=`` keyword argument, which the interpreter binds to the method's
    :class:`numpy.random.Generator` (never foldable). ``shape_only``: positions of tensor arguments whose
    contents the kernel never reads, only their shape and dtype (``full_like``'s ``self``): with a static
    shape they count as constant for folding. :meth:`specialize` asks for a load-time fast path.
    """

    __slots__ = ("name", "fn", "_schema", "raw", "_specializer", "volatile_args", "foldable", "returns_view",
                 "not_supported", "random", "unwritten", "shape_only")

    def __init__(self, name: str, fn: Callable, schema: Schema | None, raw: bool = False, *,
                 specialize: Callable | None = None, volatile_args: tuple[int, ...] | None = None,
                 foldable: bool = True, returns_view: bool = False, not_supported: str | None = None,
                 random: bool = False, unwritten: tuple[int, ...] = (), shape_only: tuple[int, ...] = ()):
        self.name, self.fn, self._schema, self.raw = name, fn, schema, raw
        self.unwritten = tuple(unwritten)
        self.shape_only = frozenset(shape_only)
        self.random = random
        self._specializer = specialize
        self.volatile_args = volatile_args
        self.foldable = foldable and not random
        self.returns_view = returns_view
        self.not_supported = not_supported

    @property
    def schema(self) -> Schema | None:
        # parsed on first use: parsing all ~270 schemas would add ~6 ms to the first load of every program
        if self._schema is _FROM_DOC:
            self._schema = parse_schema(self.fn.__doc__.strip().splitlines()[0])
        return self._schema

    @property
    def has_fast_path(self) -> bool:
        return self._specializer is not None

    def specialize(self, *args) -> Callable[[], object] | None:
        """A zero-argument step computing this operator straight into its ``out`` array(s) for these load-time
        arguments (every one fixed: static shapes, constant scalars), or None where only the general kernel
        applies. The step gives the same bits as the general kernel followed by the interpreter's write.
        """
        if self._specializer is None:
            return None
        return self._specializer(self.fn, *args)

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, {self.fn.__module__}.{self.fn.__name__})"


KERNELS: dict[str, Kernel] = {}

_TYPE_RE = re.compile(r"^(\w+)(?:\(\w+(!?)\))?(!?)(\?)?(\[\d*\])?(\?)?$")


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def parse_schema(text: str) -> Schema:
    """Parse ``name(Type arg, ..., *, Type(a!) out) -> Ret`` into a :class:`Schema`."""
    text = text.strip()
    open_ = text.index("(")
    close = text.rindex(")", 0, text.index("->") if "->" in text else len(text))
    name = text[:open_].strip()
    returns = text[text.index("->") + 2 :].strip() if "->" in text else "()"
    args = []
    kwarg_only = False
    for part in _split_top(text[open_ + 1 : close]):
        if part == "*":
            kwarg_only = True
            continue
        decl = part.split("=", 1)[0].strip()
        typ, _, arg_name = decl.rpartition(" ")
        m = _TYPE_RE.match(typ.strip())
        if not m:
            raise ValueError(f"cannot parse argument type {typ!r} in schema {text!r}")
        base, ann_mut, bang, q1, lst, q2 = m.groups()
        is_list = lst is not None
        args.append(Arg(
            name=arg_name,
            base=base,
            is_list=is_list,
            optional=bool(q2) or (bool(q1) and not is_list),
            elem_optional=bool(q1) and is_list,
            mutable=bool(ann_mut) or bool(bang),
            kwarg_only=kwarg_only,
        ))
    mutable = tuple(i for i, a in enumerate(args) if a.mutable)
    return Schema(name, tuple(args), returns, mutable)


def register(name: str, *, raw: bool = False, specialize: Callable | None = None,
             volatile_args: tuple[int, ...] | None = None, foldable: bool = True, returns_view: bool = False,
             not_supported: str | None = None, random: bool = False,
             unwritten: tuple[int, ...] = (), shape_only: tuple[int, ...] = ()) -> Callable[[Callable], Callable]:
    """Register ``fn`` as the kernel for operator ``name``, with its whole contract; registering a name twice
    is an error (one of pterun's own: its family is imported first, so the error comes here).

    ``raw=True`` kernels receive ``(values, arg_indices)`` — the method's live value slots — and do their own
    argument handling; only the few operators that alias or resize tensors (``et_view``) need that, and they
    name the arguments they retarget in ``volatile_args``. ``specialize(general, *args)`` builds a load-time
    fast path from the general kernel and the instruction's fixed arguments (see :mod:`pterun.kernels.fast`).
    ``foldable=False`` keeps an instruction from being computed at load however constant its inputs;
    ``returns_view=True`` says the result is normally a view of an input; ``not_supported`` registers an
    operator only to refuse it at load, with that reason; ``random=True`` marks a kernel that takes the method's
    random generator as ``rng=``; ``unwritten`` names out arguments the kernel leaves alone; ``shape_only``
    names tensor arguments it reads only the shape of. See :class:`Kernel`.
    """

    def deco(fn: Callable) -> Callable:
        if name in FAMILY_OF:
            _import(FAMILY_OF[name])  # its family first, so that registering one of its names twice fails here
        if name in KERNELS:
            raise RuntimeError(f"operator {name!r} is registered twice ({KERNELS[name].fn.__module__} and "
                               f"{fn.__module__})")
        if not raw and not (fn.__doc__ or "").strip():
            raise RuntimeError(f"kernel for {name!r} has no schema docstring")
        if volatile_args is not None and not raw:
            raise RuntimeError(f"kernel for {name!r}: volatile_args applies to raw kernels only")
        KERNELS[name] = Kernel(name, fn, None if raw else _FROM_DOC, raw, specialize=specialize,
                               volatile_args=volatile_args, foldable=foldable, returns_view=returns_view,
                               not_supported=not_supported, random=random, unwritten=unwritten,
                               shape_only=shape_only)
        return fn

    return deco


def load(names) -> dict:
    """:data:`KERNELS`, with the family of each of ``names`` imported (:mod:`pterun.kernels.families`; a name the
    table does not know is left as it is: the caller's own, or one without a kernel)."""
    for name in names:
        family = FAMILY_OF.get(name)
        if family is not None:
            _import(family)
    return KERNELS


def load_all() -> dict:
    """:data:`KERNELS` with every kernel family imported."""
    for family in FAMILIES:
        _import(family)
    return KERNELS


def _import(family: str) -> None:
    """Import a family module unless it is imported (or being imported: its own ``register`` calls come here)."""
    module = f"pterun.kernels.{family}"
    if module not in sys.modules:
        importlib.import_module(module)
