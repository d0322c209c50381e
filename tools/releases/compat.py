"""Where ExecuTorch's export APIs differ between releases: one small function per difference.

Example (inside a release's virtual environment)::

    >>> from compat import ET, lower_xnnpack, pt2e_quantize  # doctest: +SKIP
    >>> ET >= (0, 7)                                          # doctest: +SKIP
    True

Every branch says which release changed what, so a reader can follow one release from top to bottom. The
functions raise ``Unsupported`` when the running release cannot do the thing at all; the caller records the
reason in the release's manifest instead of exporting something else under the same name.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from pathlib import Path

import torch

ET_VERSION = importlib.metadata.version("executorch")
TORCH_VERSION = torch.__version__.split("+")[0]


def _tuple(v: str) -> tuple[int, ...]:
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in v.split(".")[:3])


ET = _tuple(ET_VERSION)
TORCH = _tuple(TORCH_VERSION)


class Unsupported(Exception):
    """The running release cannot export this program; the message says why (it goes into the manifest)."""


def ensure_flatc() -> None:
    """Older releases (seen with 0.4.0 and 0.6.0) serialize programs by running ``flatc`` from PATH; their wheels
    ship one in ``executorch/data/bin`` that they do not put there themselves. Harmless for later releases."""
    if shutil.which("flatc"):
        return
    import executorch
    flatc = Path(next(iter(executorch.__path__))) / "data" / "bin" / "flatc"  # a namespace package: no __file__
    if flatc.exists():
        os.environ["PATH"] = f"{flatc.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        os.environ.setdefault("FLATC_EXECUTABLE", str(flatc))


def export(module: torch.nn.Module, args: tuple, dynamic_shapes=None) -> torch.export.ExportedProgram:
    """``torch.export.export`` (strict tracing was the default until torch 2.7; both trace these small models)."""
    return torch.export.export(module, args, dynamic_shapes=dynamic_shapes)


def lower_portable(ep, constant_methods=None, backend_config=None):
    """edge -> ExecuTorch program with portable kernels only; the same API in every release since 0.4."""
    from executorch.exir import to_edge
    return to_edge(ep, constant_methods=constant_methods).to_executorch(backend_config)


def lower_xnnpack(ep, backend_config=None):
    """Partition for XNNPACK and serialize.

    0.4.0: ``to_edge(ep).to_backend(XnnpackPartitioner())``, the path its XNNPACK tutorial uses;
    ``to_edge_transform_and_lower`` exists there but was new. 0.5.0 and later: ``to_edge_transform_and_lower``
    (the partitioner sees the graph before edge decompositions, so e.g. linear stays one node)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower
    if ET < (0, 5):
        edge = to_edge(ep).to_backend(XnnpackPartitioner())
    else:
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch(backend_config)


def _capture_for_quantization(module, args):
    """The graph PT2E quantization annotates. torch 2.5/2.6 (ExecuTorch 0.4/0.5) and 2.7/2.8 (0.6/0.7):
    ``torch.export.export_for_training(...).module()``; from torch 2.9 (ExecuTorch 1.0) ``export_for_training``
    is deprecated and ``torch.export.export(...).module()`` gives the same training-IR graph."""
    if TORCH < (2, 9) and hasattr(torch.export, "export_for_training"):
        return torch.export.export_for_training(module, args).module()
    return torch.export.export(module, args).module()


def pt2e_quantize(module, args, calibration: list[tuple]) -> torch.export.ExportedProgram:
    """Static int8 PT2E for XNNPACK (symmetric, per-channel weights), calibrated on ``calibration``.

    Where the pieces live:
    * 0.4.0, 0.5.0: ``XNNPACKQuantizer`` is PyTorch's, ``torch.ao.quantization.quantizer.xnnpack_quantizer``;
      ``prepare_pt2e``/``convert_pt2e`` in ``torch.ao.quantization.quantize_pt2e``.
    * 0.6.0: the quantizer moved into ExecuTorch (``executorch.backends.xnnpack.quantizer``), still built on
      ``torch.ao``'s prepare/convert.
    * 0.7.0 and later: ExecuTorch's quantizer on torchao's PT2E (``torchao.quantization.pt2e``)."""
    if ET < (0, 6):
        from torch.ao.quantization.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torch.ao.quantization.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
    elif ET < (0, 7):
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torch.ao.quantization.quantize_pt2e import convert_pt2e, prepare_pt2e
    else:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    gm = _capture_for_quantization(module, args)
    prepared = prepare_pt2e(gm, XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)))
    for c in calibration:
        prepared(*c)
    return export(convert_pt2e(prepared), args)


def quantize_8da4w(module, group_size: int = 32) -> str:
    """Quantize ``module``'s linears in place to int8 dynamic activations x int4 grouped weights; returns the
    recipe's name for the manifest.

    * 0.4.0, 0.5.0: the release does not depend on torchao (its LLM exporter imports one the user installs):
      ``Unsupported`` unless one is installed (tools/release_matrix.py installs torchao 0.6.1 for 0.4.0 and 0.8.0
      for 0.5.0, the ones of their torch).
    * 0.4.0/0.5.0 with torchao, 0.6.0 (torchao 0.10) .. 1.0.1 (torchao 0.14): ``Int8DynActInt4WeightQuantizer``,
      the quantizer the LLM exporter of those releases uses for ``-qmode 8da4w``.
    * 1.1.0 (torchao 0.15) and later: ``quantize_`` with ``Int8DynamicActivationIntxWeightConfig(int4,
      PerGroup)``, what the exporter moved to."""
    if ET < (0, 6) and importlib.util.find_spec("torchao") is None:
        raise Unsupported(f"ExecuTorch {ET_VERSION} does not depend on torchao, which 8da4w needs")
    if ET < (1, 1):
        from torchao.quantization.quant_api import Int8DynActInt4WeightQuantizer
        Int8DynActInt4WeightQuantizer(groupsize=group_size, precision=torch.float32).quantize(module)
        return f"torchao Int8DynActInt4WeightQuantizer(groupsize={group_size})"
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup
    quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
                                                            weight_granularity=PerGroup(group_size)))
    return f"torchao quantize_(Int8DynamicActivationIntxWeightConfig(int4, PerGroup({group_size})))"


def external_constants_config():
    """``ExecutorchBackendConfig(external_constants=True)``: every constant goes to a ``.ptd``. The field exists
    from 0.5.0, but 0.5.0 has no way to write the data file (``write_tensor_data_to_file`` came in 0.6.0)."""
    if ET < (0, 6):
        raise Unsupported(f"ExecuTorch {ET_VERSION} cannot write a .ptd (write_tensor_data_to_file is from 0.6.0)")
    from executorch.exir import ExecutorchBackendConfig
    return ExecutorchBackendConfig(external_constants=True)


def bundle(et_program, suites: dict[str, list[tuple[list, list]]]) -> bytes:
    """A ``.bpte``: ``et_program`` plus, per method, (inputs, expected outputs) test cases. ``BundledProgram`` has
    lived in ``executorch.devtools`` since 0.4.0 (it was ``executorch.sdk`` before)."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer
    method_suites = [MethodTestSuite(method_name=name, test_cases=[
        MethodTestCase(inputs=ins, expected_outputs=outs) for ins, outs in cases]) for name, cases in suites.items()]
    return serialize_from_bundled_program_to_flatbuffer(BundledProgram(et_program, method_suites))


def llama_exporter():
    """(module with ``build_args_parser``, function taking the parsed args) of the release's LLM exporter.

    0.4.0: ``executorch.examples.models.llama2.export_llama_lib``, ``export_llama(modelname, args)``.
    0.5.0 and later: the folder is ``llama``, ``export_llama(args)``; from 0.7.0 it turns the legacy argparse
    namespace into an ``LlmConfig`` itself (``LlmConfig.from_args``), so the same flags work everywhere."""
    if ET < (0, 5):
        from executorch.examples.models.llama2 import export_llama_lib as lib
        return lib, lambda args: lib.export_llama("llama2", args)
    from executorch.examples.models.llama import export_llama_lib as lib
    return lib, lib.export_llama


def llama_transformer(params: dict):
    """The exporter's own Transformer class built from ``params`` (to make a random checkpoint with the exact
    parameter names the exporter loads). 0.4.0: ``llama2.llama_transformer.ModelArgs``; 0.5.0: ``llama``;
    0.6.0 moved ``ModelArgs`` to ``model_args.py``; 1.x builds through ``construct_transformer``."""
    if ET < (0, 5):
        from executorch.examples.models.llama2.llama_transformer import ModelArgs, Transformer
        return Transformer(ModelArgs(**params))
    if ET < (0, 6):
        from executorch.examples.models.llama.llama_transformer import ModelArgs, Transformer
        return Transformer(ModelArgs(**params))
    from executorch.examples.models.llama import llama_transformer as lt
    from executorch.examples.models.llama.model_args import ModelArgs
    if hasattr(lt, "construct_transformer"):
        return lt.construct_transformer(ModelArgs(**params))
    return lt.Transformer(ModelArgs(**params))
