"""Small immutable records for pterun's load-time descriptions, cheap to define: ``import pterun`` and a first
load define some sixty of them.

* :class:`Record`: a slotted class (``dataclasses`` costs ~5 ms to import).
* :class:`Fields`: a tuple with named fields, written as :class:`typing.NamedTuple` is, and behaving as it does
  (indexing, unpacking, ``_replace``, ``_fields``, ``_asdict``, pickling), without generating code for each
  class: ``collections.namedtuple`` compiles a ``__new__`` per class (~0.15 ms) and ``typing.NamedTuple``
  checks every annotation besides (~0.2 ms). Here a class costs ~0.03 ms; :func:`fields_type` makes one from
  field names.

Example::

    >>> class Point(Record):
    ...     __slots__ = ("x", "y")
    ...     _defaults = (0,)
    >>> Point(1)
    Point(x=1, y=0)
    >>> class Pair(Fields):
    ...     left: int
    ...     right: int = 0
    >>> Pair(1), Pair(1, right=2)._replace(left=3), tuple(Pair(4, 5))
    (Pair(left=1, right=0), Pair(left=3, right=2), (4, 5))
"""

from __future__ import annotations

try:  # CPython's field accessor, the one collections.namedtuple uses
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover  (another Python)
    from operator import itemgetter as _itemgetter

    def _tuplegetter(index: int, doc: str) -> property:
        return property(_itemgetter(index), doc=doc)

__all__ = ["Fields", "Record", "fields_type"]


class Record:
    """A small immutable record (plain classes keep ``dataclasses`` out of ``import pterun``)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        names = self.__slots__
        values = dict(zip(names, args), **kwargs)
        for name, default in zip(reversed(names), reversed(self._defaults)):
            values.setdefault(name, default)
        for name in names:
            object.__setattr__(self, name, values[name])

    _defaults: tuple = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other):
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self):
        return hash(tuple(getattr(self, n) for n in self.__slots__))

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


class _FieldsMeta(type):
    """Reads a :class:`Fields` subclass's annotated names, in order, as its fields (a class attribute of the same
    name is the field's default) and gives each an accessor; the class keeps no ``__dict__`` per instance, unless
    it sets ``_instance_dict = True`` (then its instances have one, which its ``__new__`` fills: ``_make`` and
    ``_replace`` go through it)."""

    def __new__(mcls, name, bases, ns):
        names = tuple(ns.get("__annotations__", ()))
        if names:
            if any(getattr(b, "_fields", ()) for b in bases):
                raise TypeError(f"{name}: a Fields class with fields cannot add fields")
            defaults = {}
            for k, field in enumerate(names):
                if field.startswith("_"):
                    raise TypeError(f"{name}: field names cannot start with an underscore: {field!r}")
                if field in ns:
                    defaults[field] = ns[field]
                elif defaults:
                    raise TypeError(f"{name}: field {field!r} without a default follows fields with defaults")
                ns[field] = _tuplegetter(k, f"Alias for field number {k}")
            ns["_fields"], ns["_field_defaults"], ns["__match_args__"] = names, defaults, names
            ns["_index"] = {field: k for k, field in enumerate(names)}
        if not ns.get("_instance_dict"):
            ns.setdefault("__slots__", ())
        return super().__new__(mcls, name, bases, ns)

    @property
    def __signature__(cls):
        """What :func:`inspect.signature` and ``help()`` show: the class's own ``__new__`` where it names its
        arguments, else ``(field, ..., field=default)`` over ``_new_fields`` (the fields a call gives; all of
        them unless the class says otherwise). Made when asked."""
        import inspect

        new = cls.__dict__.get("__new__")
        if new is not None:
            params = list(inspect.signature(new).parameters.values())[1:]
            if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
                return inspect.Signature(params)
        empty = inspect.Parameter.empty
        return inspect.Signature([inspect.Parameter(f, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                    default=cls._field_defaults.get(f, empty))
                                  for f in getattr(cls, "_new_fields", cls._fields)])


class Fields(tuple, metaclass=_FieldsMeta):
    """A tuple with named fields (see the module docstring)."""

    _fields = ()  # set by the metaclass (not annotated here: an annotation makes a field)
    _field_defaults = {}
    _index = {}  # field name -> position
    _instance_dict = False  # see _FieldsMeta

    def __new__(cls, *args, **kwargs):
        if kwargs or len(args) != len(cls._fields):
            args = cls._complete(args, kwargs)
        return tuple.__new__(cls, args)

    @classmethod
    def _complete(cls, args: tuple, kwargs: dict) -> tuple:
        names = cls._fields
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__} takes {len(names)} fields, got {len(args)}")
        values = list(args)
        for field in names[len(args):]:
            if field in kwargs:
                values.append(kwargs.pop(field))
            elif field in cls._field_defaults:
                values.append(cls._field_defaults[field])
            else:
                raise TypeError(f"{cls.__name__} missing field {field!r}")
        if kwargs:
            twice = [k for k in kwargs if k in names]
            raise TypeError(f"{cls.__name__} got field {(twice or list(kwargs))[0]!r} "
                            + ("twice" if twice else "it does not have"))
        return tuple(values)

    @classmethod
    def _make(cls, iterable) -> Fields:
        values = tuple(iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"{cls.__name__} takes {len(cls._fields)} fields, got {len(values)}")
        return cls(*values) if cls._instance_dict else tuple.__new__(cls, values)

    def _replace(self, **changes) -> Fields:
        values, index = list(self), self._index
        for field, value in changes.items():
            k = index.get(field)
            if k is None:
                raise TypeError(f"{type(self).__name__} has no field {field!r}")
            values[k] = value
        return type(self)(*values) if self._instance_dict else tuple.__new__(type(self), values)

    def _asdict(self) -> dict:
        return dict(zip(self._fields, self))

    def __getnewargs__(self) -> tuple:
        return tuple(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f}={v!r}' for f, v in zip(self._fields, self))})"


def fields_type(name: str, names: str, module: str, namespace: dict | None = None) -> type:
    """A :class:`Fields` class named ``name`` whose fields are the space-separated ``names`` (no defaults), in
    ``module`` (where pickle finds it), with ``namespace``'s attributes besides."""
    ns = {"__module__": module}
    ns.update(namespace or ())
    ns["__annotations__"] = dict.fromkeys(names.split(), "object")
    return _FieldsMeta(name, (Fields,), ns)
