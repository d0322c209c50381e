"""A method's inputs on the command line: loaded from ``.npy``/``.npz`` files, a bundled program's test case, or
made at random to fit the method's metadata (tokens and positions that fit the context, for an exported LLM).

Example::

    >>> from pterun.cli.inputs import random_inputs
    >>> inputs, how = random_inputs(program, program.metadata("forward"), seed=0)   # doctest: +SKIP
    >>> how                                                                         # doctest: +SKIP
    'random values (seed 0)'
"""

from __future__ import annotations

import numpy as np

from pterun.cli.files import CliError
from pterun.errors import PterunError

__all__ = ["load_inputs", "random_inputs", "inputs_for"]

_LLM_METADATA = ("get_max_seq_len", "get_max_context_len", "get_vocab_size")


def load_inputs(paths: list[str]) -> list:
    """The arrays of ``paths`` in order: a ``.npy`` is one input, a ``.npz`` its arrays in file order."""
    out: list = []
    for p in paths:
        if p.endswith(".npz"):
            with np.load(p) as z:
                out.extend(z[k] for k in z.files)
        elif p.endswith(".npy"):
            out.append(np.load(p))
        else:
            raise CliError(f"--input {p!r}: expected a .npy or .npz file")
    return out


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
    rng = np.random.default_rng(seed)
    llm = _llm_inputs(program, meta, rng)
    if llm is not None:
        return llm[0], f"an LLM: {llm[1]} (seed {seed})"
    inputs = []
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag != "Tensor":
            raise CliError(f"input {i} of method {meta.name!r} is {tag}; pass the inputs with --input (random inputs "
                           "are only made for tensors)")
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
        return load_inputs(args.input), "from " + ", ".join(args.input)
    if bundle is not None and bundle.test_cases(method.name):
        return bundle.load_bundled_input(method.name, 0), "the bundled program's test case 0"
    return random_inputs(program, method.metadata, args.seed)
