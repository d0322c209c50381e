"""A method's inputs on the command line: loaded from ``.npy``/``.npz`` files, a bundled program's test case, or
made at random to fit the method's metadata (tokens and positions that fit the context, for an exported LLM).

Example::

    >>> from pterun.cli.inputs import random_inputs
    >>> inputs, how = random_inputs(program, program.metadata("forward"), seed=0)   # doctest: +SKIP
    >>> how                                                                         # doctest: +SKIP
    'random values (seed 0)'
"""

from __future__ import annotations

import time

import numpy as np

from pterun._record import Fields
from pterun.cli.files import InputError, default_method, load
from pterun.errors import PterunError

__all__ = ["load_inputs", "random_inputs", "inputs_for", "check_count", "Prepared", "prepare"]

_LLM_METADATA = ("get_max_seq_len", "get_max_context_len", "get_vocab_size")


def load_inputs(paths: list[str]) -> tuple[list, list[str]]:
    """(the arrays of ``paths`` in order, where each came from): a ``.npy`` is one input, a ``.npz`` its arrays
    in file order. The parser has checked the names end in ``.npy`` or ``.npz``."""
    arrays: list = []
    names: list[str] = []
    for p in paths:
        try:
            if p.endswith(".npz"):
                with np.load(p) as z:
                    for k in z.files:
                        arrays.append(z[k])
                        names.append(f"{p}[{k}]")
            else:
                arrays.append(np.load(p))
                names.append(p)
        except FileNotFoundError:
            raise InputError(f"--input {p}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"--input {p}: a directory, not a file") from None
        except (ValueError, OSError, EOFError) as e:  # np.load's ways of saying it is no .npy / .npz
            raise InputError(f"--input {p}: not a readable {p[-4:]} file ({e})") from None
    return arrays, names


def _expected(meta) -> str:
    parts = []
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag == "Tensor":
            t = meta.input_tensor_meta(i)
            parts.append(f"{t.numpy_dtype().name}{list(t.sizes())}")
        else:
            parts.append(tag)
    return ", ".join(parts) if parts else "nothing"


def check_count(meta, arrays: list, names: list[str]) -> None:
    """An :class:`InputError` naming the arrays found and the inputs expected, unless there is one array per
    input of the method (``meta``, a MethodMeta); dtypes and shapes are for the method to check."""
    if len(arrays) == meta.num_inputs():
        return
    found = ", ".join(f"{n} {a.dtype.name}{list(a.shape)}" for n, a in zip(names, arrays, strict=True))
    raise InputError(f"method {meta.name!r} takes {meta.num_inputs()} input(s) ({_expected(meta)}); --input gave "
                     f"{len(arrays)}: {found}")


def _llm_inputs(program, meta, rng: np.random.Generator) -> tuple[list, str] | None:
    """Inputs an exported LLM's ``forward`` accepts: tokens below the vocabulary size, positions from 0 (so the
    tokens fit the context), or None when the program does not look like an LLM."""
    if meta.name != "forward" or not any(n in program.method_names for n in _LLM_METADATA):
        return None
    from pterun.llm.runner import read_model_info
    try:
        info = read_model_info(program)
    except PterunError:
        return None
    n = min(info.tokens_bound, info.max_context_len - 1) if info.use_kv_cache else info.tokens_bound
    vocab = info.vocab_size if info.vocab_size > 0 else 2
    inputs: list = [rng.integers(0, vocab, size=(1, n), dtype=np.int64)]
    note = f"{n} random tokens below the vocabulary size {vocab}"
    if info.use_kv_cache:
        pos_meta = meta.input_tensor_meta(1)
        if info.cache_positions:
            inputs.append(np.arange(n, dtype=pos_meta.numpy_dtype()).reshape(pos_meta.sizes()[:-1] + (n,)))
            note += f", cache positions 0..{n - 1}"
        else:
            inputs.append(np.zeros(pos_meta.sizes(), pos_meta.numpy_dtype()))
            note += ", start position 0"
    return inputs, note


def random_inputs(program, meta, seed: int) -> tuple[list, str]:
    """Inputs that fit ``meta`` (a MethodMeta), and how they were made."""
    if meta.num_inputs() == 0:
        return [], "none (the method takes no inputs)"
    rng = np.random.default_rng(seed)
    llm = _llm_inputs(program, meta, rng)
    if llm is not None:
        return llm[0], f"an LLM: {llm[1]} (seed {seed})"
    inputs = []
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag != "Tensor":
            raise InputError(f"input {i} of method {meta.name!r} is {tag}; pass the inputs with --input (random "
                             "inputs are only made for tensors)")
        info = meta.input_tensor_meta(i)
        dt, shape = info.numpy_dtype(), info.sizes()
        if dt == np.bool_:
            inputs.append(rng.random(shape) > 0.5)
        elif dt.kind in "iu":
            inputs.append(rng.integers(0, 10, size=shape).astype(dt))
        else:
            inputs.append(rng.standard_normal(shape).astype(dt))
    return inputs, f"random values (seed {seed})"


def inputs_for(args, program, bundle, method) -> tuple[list, str]:
    """The inputs a command runs ``method`` on: ``--input`` files, else the bundle's test case 0, else random."""
    if args.input:
        arrays, names = load_inputs(args.input)
        check_count(method.metadata, arrays, names)
        return arrays, "from " + ", ".join(args.input)
    if bundle is not None and bundle.test_cases(method.name):
        return bundle.load_bundled_input(method.name, 0), "the bundled program's test case 0"
    return random_inputs(program, method.metadata, args.seed)


class Prepared(Fields):
    """A command's method, ready to run: its name, how long ``load_method`` took, its inputs and where they came
    from."""
    method: object
    name: str
    load_s: float
    inputs: list
    source: str


def prepare(args) -> Prepared:
    """Load ``args.file`` (and its ``--data``), its ``--method`` (else the default one), timed, and its inputs."""
    program, bundle = load(args.runtime, args.file, args.data_path)
    name = default_method(program, bundle, args.method)
    t0 = time.perf_counter()
    method = program.load_method(name)
    load_s = time.perf_counter() - t0
    inputs, source = inputs_for(args, program, bundle, method)
    return Prepared(method, name, load_s, inputs, source)
