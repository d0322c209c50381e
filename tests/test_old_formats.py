"""Format features that changed over ExecuTorch's releases, each read on purpose: what a file of each release
holds is read as that release meant it, and what pterun cannot run from a file fails naming the file's feature.

The release matrix (``tests/fixtures/releases``, ``test_releases.py``) runs every release's programs end to end;
these tests pin down each difference on its own.
"""

from __future__ import annotations

import pytest

from fixtures_util import FIXTURES
from pterun import NotSupportedError, Runtime
from pterun.config import Settings
from pterun.format.program import read_program
from pterun.format.schema import CPU, CUDA, TENSOR, ExecutionPlan, TensorDesc
from pterun.interp.method import MethodRunner


def _desc(d: TensorDesc, **changes) -> TensorDesc:
    return TensorDesc(**{n: changes.get(n, getattr(d, n)) for n in TensorDesc.__slots__})


def test_the_extended_header_length_is_read_and_kept():
    """ExecuTorch 1.0 grew the extended header from 24 to 32 bytes (segment_data_size): the length is what the
    file says, and without the field the segments are checked against the file's size."""
    pf = read_program((FIXTURES / "mlp.pte").read_bytes(), "mlp.pte")  # written by 1.5.1
    assert pf.header_length == 32
    pf = read_program((FIXTURES / "xnn_mlp.pte").read_bytes(), "xnn_mlp.pte")
    assert pf.header_length == 32 and pf.segment_data_size > 0


def _plan_on(device_plan) -> MethodRunner:
    program = Runtime.get().load_program(FIXTURES / "mlp.pte")
    return MethodRunner(program.file, device_plan, Settings(), shared_arenas={})


def test_a_tensor_placed_on_another_device_is_refused_naming_the_device():
    """ExecuTorch 1.3 added device_type to a tensor's extra info: a file placing a tensor on CUDA cannot run here,
    and says so instead of running it on the CPU as if nothing were said."""
    plan = Runtime.get().load_program(FIXTURES / "mlp.pte")._plan("forward")
    i = next(k for k, (tag, d) in enumerate(plan.values) if tag == TENSOR and d.memory_id is not None)
    assert plan.values[i].val.device == CPU  # what every file of the earlier releases means
    values = list(plan.values)
    values[i] = (TENSOR, _desc(plan.values[i].val, device=CUDA))
    on_cuda = ExecutionPlan(plan.name, values, plan.inputs, plan.outputs, plan.chains, plan.operators,
                            plan.delegates, plan.buffer_sizes)
    with pytest.raises(NotSupportedError, match=rf"method 'forward': tensor value {i} is placed on CUDA \(the file's "
                                                r"device_type, ExecuTorch 1.3\); pterun runs on the CPU only$"):
        _plan_on(on_cuda)


def test_a_memory_arena_placed_on_another_device_is_refused_naming_it():
    plan = Runtime.get().load_program(FIXTURES / "mlp.pte")._plan("forward")
    assert plan.buffer_devices == ()
    on_cuda = ExecutionPlan(plan.name, plan.values, plan.inputs, plan.outputs, plan.chains, plan.operators,
                            plan.delegates, plan.buffer_sizes, buffer_devices=((1, CUDA),))
    with pytest.raises(NotSupportedError, match=r"method 'forward': memory arena 1 is placed on CUDA \(the file's "
                                                r"non_const_buffer_device, ExecuTorch 1.4\); pterun runs on the CPU "
                                                r"only$"):
        _plan_on(on_cuda)
    assert _plan_on(plan).plan is plan  # the same plan on the CPU loads


def test_inspect_says_what_the_container_tells_of_its_origin():
    from pterun.summary import describe, format_text
    info = describe(FIXTURES / "mlp.pte")
    assert info["origin"] == {"extended_header_bytes": 32, "constants_in": "segment", "features": []}
    assert format_text(info).splitlines()[1] == "format: extended header of 32 bytes (ExecuTorch 1.0+); constants in a " \
                                                "segment"
    info = describe(FIXTURES / "xnn_mlp.pte")
    assert info["origin"]["features"] == ["named data (0.6+)"]
    assert [d["payload_format"] for m in info["methods"] for d in m["delegates"]] == ["XN01 in an XH00 header"]
    assert describe(FIXTURES / "ext_mlp.pte")["origin"]["features"] == ["external tensors (0.5+)"]


def test_a_payload_without_its_header_says_so():
    from pterun.delegates.xnnpack.payload import payload_format
    from xnn_payloads import Graph
    g = Graph()
    x = g.input([2])
    g.node("Abs", input_id=x, output_id=g.output([2]))
    blob, _ = g.blob()
    assert payload_format(blob) == "XN01 in an XH00 header"
    fb = blob[int.from_bytes(bytes(blob[10:14]), "little"):]  # the flatbuffer alone, as before the XH00 header
    assert payload_format(fb[: int.from_bytes(bytes(blob[14:18]), "little")]) == "XN01 bare"
