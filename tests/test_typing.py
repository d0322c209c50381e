"""pterun ships py.typed: every public function and method carries type hints for its parameters and result."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import pterun

PUBLIC_MODULES = ["pterun", "pterun.llm", "pterun.threads", "pterun.summary", "pterun.config", "pterun.profile", "pterun.bundled",
                  "pterun.module", "pterun.runtime", "pterun.trace"]


def _public_functions():
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                if issubclass(obj, BaseException):
                    continue
                seen = set()  # what a user of the class sees: its own attributes and those pterun bases give it
                for attr, value in (kv for c in obj.__mro__ if c.__module__.startswith("pterun")
                                    for kv in vars(c).items()):
                    if attr in seen or (attr.startswith("_") and attr not in ("__init__", "__call__")):
                        continue
                    seen.add(attr)
                    if isinstance(value, property):
                        value = value.fget
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    value = getattr(value, "__wrapped__", value)
                    if inspect.isfunction(value):
                        yield f"{module_name}.{name}.{attr}", value
            elif inspect.isfunction(obj):
                yield f"{module_name}.{name}", obj


def test_py_typed_ships_with_the_package():
    assert (Path(pterun.__file__).parent / "py.typed").is_file()


def test_there_is_something_to_check():
    names = [n for n, _ in _public_functions()]
    assert "pterun.Runtime.load_program" in names and "pterun.Module.forward" in names
    assert len(names) > 80


@pytest.mark.parametrize("qualname,fn", list(_public_functions()), ids=lambda v: v if isinstance(v, str) else "")
def test_public_functions_are_fully_annotated(qualname, fn):
    sig = inspect.signature(fn)
    missing = [p for p, param in sig.parameters.items()
               if p not in ("self", "cls") and param.annotation is inspect.Parameter.empty]
    assert not missing, f"{qualname}: parameters without a type hint: {missing}"
    if fn.__name__ != "__init__":
        assert sig.return_annotation is not inspect.Signature.empty, f"{qualname}: no return type hint"
