"""``pterun.Module``: the shape of ExecuTorch's pybindings (``executorch.extension.pybindings.portable_lib``).

Most tutorials and existing scripts use ExecuTorch's older module API. The same calls work here, after changing
the import::

    # from executorch.extension.pybindings.portable_lib import _load_for_executorch
    from pterun import _load_for_executorch

    module = _load_for_executorch("model.pte")                 # or pterun.Module("model.pte")
    outputs = module.forward([x])                              # NumPy arrays, or torch tensors via DLPack
    outputs = module.run_method("encode", [x])
    module.method_names()                                      # ['encode', 'forward']
    module.method_meta("forward").input_tensor_meta(0).sizes()

pterun adds onnxruntime-style one-liners: ``module.get_inputs()`` and ``module.get_outputs()``.

Differences, all deliberate: outputs are NumPy arrays unless ``tensor_output="torch"`` (or
``$EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=torch``); errors come from pterun's tree (a missing method is a
:class:`~pterun.MethodNotFoundError`, a ``KeyError``, where ExecuTorch raises ``RuntimeError``); ETDump and the
debug buffer are not available (:mod:`pterun.profile` times each operator instead).

Example::

    >>> import numpy as np, pterun
    >>> module = pterun.Module("model.pte")                                    # doctest: +SKIP
    >>> module.get_inputs()                                                    # doctest: +SKIP
    [IOInfo(name='input_0', kind='Tensor', dtype='float32', shape=(1, 3, 224, 224), dynamic=False)]
    >>> module.forward([np.zeros((1, 3, 224, 224), np.float32)])              # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence, Union

from pterun._record import Fields
from pterun.errors import NotSupportedError, PterunError
from pterun.format.program import EXTERNAL, TENSOR
from pterun.runtime import MethodMeta, Program, Runtime, Verification

if TYPE_CHECKING:
    from pterun.bundled import BundledProgram

__all__ = ["Module", "IOInfo", "_load_for_executorch", "_load_for_executorch_from_buffer",
           "_load_for_executorch_from_bundled_program", "_load_bundled_program_from_buffer", "_get_operator_names",
           "_get_registered_backend_names", "_is_available"]

PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class IOInfo(Fields):
    """One input or output of a method, onnxruntime-style (``NodeArg``): ``name`` is ``input_N``/``output_N``
    (programs carry no names), ``dtype`` the NumPy dtype name (None for non-tensors), ``shape`` the sizes (upper
    bounds when ``dynamic``; None for non-tensors)."""

    name: str
    kind: str
    dtype: str | None
    shape: tuple[int, ...] | None
    dynamic: bool


def _io_infos(meta: MethodMeta, which: str) -> list[IOInfo]:
    count = meta.num_inputs() if which == "input" else meta.num_outputs()
    tag_of = meta.input_tag if which == "input" else meta.output_tag
    info_of = meta.input_tensor_meta if which == "input" else meta.output_tensor_meta
    out = []
    for i in range(count):
        kind = tag_of(i)
        if kind == "Tensor":
            t = info_of(i)
            out.append(IOInfo(f"{which}_{i}", kind, t.numpy_dtype().name, t.sizes(), t.is_dynamic()))
        else:
            out.append(IOInfo(f"{which}_{i}", kind, None, None, False))
    return out


def _load_methods_reading_external_data(program: Program) -> None:
    """Load now every method that reads tensors from a ``.ptd``, so that a Module built without its data file
    (or with the wrong one) fails at construction, naming the tensor, rather than at the first ``forward``."""
    pf = program.file
    for header in pf.plan_headers:
        try:
            values = pf.plan(header.index).values
        except PterunError:
            continue  # a method that cannot be read fails on its own, when it is used
        if any(tag == TENSOR and v.location == EXTERNAL and v.fqn for tag, v in values):
            program.load_method(header.name)


def _no_debugging(enable_etdump: bool, debug_buffer_size: int) -> None:
    if enable_etdump or debug_buffer_size:
        raise NotSupportedError("ETDump and the debug buffer are not available in pterun (enable_etdump / "
                                "debug_buffer_size); pterun.profile.profile(method, inputs) times each operator")


class Module:
    """A loaded program with ExecuTorch's pybindings API: :meth:`forward`, :meth:`run_method`,
    :meth:`method_names`, :meth:`method_meta`, plus :meth:`get_inputs` / :meth:`get_outputs`.

    Args:
        program: a path (memory-mapped), bytes, bytearray or memoryview of a ``.pte`` (or a loaded
            :class:`~pterun.Program`).
        data_path: ``.ptd`` external-data file(s) for programs whose weights live outside the ``.pte``.
        program_verification: as ExecuTorch's ``program_verification``.
        tensor_output: ``"numpy"`` (the default) or ``"torch"``; see :meth:`pterun.Runtime.load_program`.

    A method that reads tensors from external data is loaded at construction, so a missing or mismatched
    ``.ptd`` fails here; other methods load on their first call.

    Raises:
        InvalidProgramError: not a valid program, or a ``.ptd`` tensor whose layout differs from the program's.
        NamedDataNotFoundError: a tensor the program keeps in external data is in no ``data_path`` file given.
        FileNotFoundError: no such file.
    """

    def __init__(self, program: PathOrBytes | Program, data_path: Any = None, *,
                 program_verification: Verification = Verification.InternalConsistency,
                 tensor_output: str | None = None):
        if isinstance(program, Program):
            self.program = program
        else:
            self.program = Runtime.get().load_program(program, data_path=data_path, verification=program_verification,
                                                      tensor_output=tensor_output)
            _load_methods_reading_external_data(self.program)
        self._planned: dict[str, list] = {}

    def method_names(self) -> list[str]:
        """The program's method names, sorted (ExecuTorch's list comes in no particular order)."""
        return sorted(self.program.method_names)

    def method_meta(self, method_name: str) -> MethodMeta:
        """Inputs and outputs of a method, without running it.

        Raises:
            MethodNotFoundError: no such method.
        """
        return self.program.metadata(method_name)

    def run_method(self, method_name: str, inputs: Sequence[Any] = (), clone_outputs: bool = True) -> list[Any]:
        """Run ``method_name`` on ``inputs`` and return its outputs as a list.

        The method is loaded on its first call and cached. ``clone_outputs`` is accepted for compatibility:
        pterun's outputs always belong to the caller, so ``False`` changes nothing.

        Raises:
            MethodNotFoundError: no such method.
            InvalidArgumentError: wrong number, dtype or shape of inputs.
        """
        return self.program.load_method(method_name).execute(inputs)

    def forward(self, inputs: Sequence[Any] = (), clone_outputs: bool = True) -> list[Any]:
        """``run_method("forward", inputs)``."""
        return self.run_method("forward", inputs, clone_outputs)

    def __call__(self, inputs: Any = (), clone_outputs: bool = True) -> list[Any]:
        """``forward``; one tensor (an array or a DLPack object) is taken as the only input."""
        if hasattr(inputs, "__dlpack__") or hasattr(inputs, "__array_interface__"):
            inputs = [inputs]
        return self.forward(inputs, clone_outputs)

    # -- onnxruntime-style introspection ---------------------------------------------------------------------
    def get_inputs(self, method_name: str = "forward") -> list[IOInfo]:
        """The method's inputs in one line each: ``[IOInfo(name='input_0', kind='Tensor', dtype='float32',
        shape=(1, 3, 224, 224), dynamic=False)]``."""
        return _io_infos(self.method_meta(method_name), "input")

    def get_outputs(self, method_name: str = "forward") -> list[IOInfo]:
        """The method's outputs, as :meth:`get_inputs`."""
        return _io_infos(self.method_meta(method_name), "output")

    # -- bundled programs ------------------------------------------------------------------------------------
    def load_bundled_input(self, bundle: BundledProgram, method_name: str, testset_idx: int) -> None:
        """Set the inputs of ``method_name`` to a bundled test case's, for :meth:`plan_execute`."""
        self._planned[method_name] = bundle.load_bundled_input(method_name, testset_idx)

    def plan_execute(self, method_name: str = "forward", clone_outputs: bool = True) -> list[Any]:
        """Run ``method_name`` on the inputs :meth:`load_bundled_input` set.

        Raises:
            InvalidArgumentError: no inputs were loaded for this method.
        """
        if method_name not in self._planned:
            from pterun.errors import InvalidArgumentError
            raise InvalidArgumentError(f"no inputs loaded for method {method_name!r}: call "
                                       "load_bundled_input(bundle, method_name, testset_idx) first")
        return self.run_method(method_name, self._planned[method_name], clone_outputs)

    def verify_result_with_bundled_expected_output(self, bundle: BundledProgram, method_name: str, testset_idx: int,
                                                   rtol: float = 1e-5, atol: float = 1e-8) -> list[Any]:
        """Run test case ``testset_idx`` and compare its outputs with the bundle's expected ones.

        Returns the outputs; raises :class:`~pterun.VerificationError` when one differs (ExecuTorch's rule:
        ``|expected - actual| <= atol + |rtol * actual|``)."""
        return bundle.verify(method_name, testset_idx, rtol, atol).outputs

    def has_etdump(self) -> bool:
        """Always False: pterun records no ETDump."""
        return False

    def __repr__(self) -> str:
        return f"Module({self.program!r})"


def _load_for_executorch(program_path: str | os.PathLike[str], data_path: Any = None, enable_etdump: bool = False,
                         debug_buffer_size: int = 0,
                         program_verification: Verification = Verification.InternalConsistency) -> Module:
    """ExecuTorch's ``_load_for_executorch``: a :class:`Module` for the ``.pte`` at ``program_path``."""
    _no_debugging(enable_etdump, debug_buffer_size)
    return Module(program_path, data_path, program_verification=program_verification)


def _load_for_executorch_from_buffer(buffer: bytes | bytearray | memoryview, data_map_buffer: Any = None,
                                     enable_etdump: bool = False, debug_buffer_size: int = 0,
                                     program_verification: Verification = Verification.InternalConsistency) -> Module:
    """ExecuTorch's ``_load_for_executorch_from_buffer``: a :class:`Module` for a ``.pte`` in memory
    (``data_map_buffer``: the bytes of its ``.ptd``)."""
    _no_debugging(enable_etdump, debug_buffer_size)
    return Module(buffer, data_map_buffer, program_verification=program_verification)


def _load_bundled_program_from_buffer(buffer: bytes | bytearray | memoryview,
                                      non_const_pool_size: int = 0) -> BundledProgram:
    """ExecuTorch's ``_load_bundled_program_from_buffer``: a bundled program (``.bpte``) from bytes.
    ``non_const_pool_size`` is accepted and ignored (pterun sizes its memory from the program)."""
    return Runtime.get().load_bundled_program(buffer)


def _load_for_executorch_from_bundled_program(module: BundledProgram, enable_etdump: bool = False,
                                              debug_buffer_size: int = 0) -> Module:
    """ExecuTorch's ``_load_for_executorch_from_bundled_program``: a :class:`Module` for the embedded program."""
    _no_debugging(enable_etdump, debug_buffer_size)
    return Module(module.program)


def _get_operator_names() -> list[str]:
    """Every operator pterun has a kernel for, sorted."""
    return sorted(Runtime.get().operator_registry.operator_names)


def _get_registered_backend_names() -> list[str]:
    """The delegate backends pterun can run."""
    return Runtime.get().backend_registry.registered_backend_names


def _is_available(backend_name: str) -> bool:
    """Whether the delegate backend ``backend_name`` can run here."""
    return Runtime.get().backend_registry.is_available(backend_name)
