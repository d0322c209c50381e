"""Format features that changed over ExecuTorch's releases, each read on purpose: what a file of each release
holds is read as that release meant it, and what pterun cannot run from a file fails naming the file's feature.

The release matrix (``tests/fixtures/releases``, ``test_releases.py``) runs every release's programs end to end;
these tests pin down each difference on its own.
"""

from __future__ import annotations

import numpy as np
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
    line = format_text(info).splitlines()[1]
    assert line == "format: extended header of 32 bytes (ExecuTorch 1.0+); constants in a segment"
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


def test_blockwise_scales_are_read_from_each_field_a_release_wrote():
    """PerChannelGroupQuant scales: fp32 ``scale`` (0.5/0.6, rounded to bf16 as the runtime does), bf16 bits in
    ``scale_bf16`` (read first by the runtimes up to 0.6) and bf16 constants behind ``scale_buffer_idx`` (0.7+):
    the same scales in each of the three places give the same graph."""
    from pterun.delegates.xnnpack import payload as P
    from xnn_payloads import qb4_fc_graph

    rng = np.random.default_rng(3)
    wq = rng.integers(-8, 8, (4, 64)).astype(np.int8)
    scales = (rng.random((4, 2)) * 0.1 + 0.01).astype(np.float32)
    bf16 = P.round_to_bf16(scales)

    def scales_of(g):
        graph = P.read_graph(*g.blob())
        (w,) = [v for v in graph.values.values() if v.quant is not None and v.quant.kind == P.PER_CHANNEL_GROUP]
        return w.quant.scale

    as_fp32 = qb4_fc_graph(wq, scales, 32)
    as_bits = qb4_fc_graph(wq, bf16, 32, bf16_bits=True)  # the same scales, as bf16 bits in the deprecated field
    np.testing.assert_array_equal(scales_of(as_fp32), bf16.reshape(-1))
    np.testing.assert_array_equal(scales_of(as_bits), bf16.reshape(-1))
    x = rng.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_array_equal(as_bits.run([x])[0], as_fp32.run([x])[0])


# -- on the files each release wrote (tests/fixtures/releases) ------------------------------------------------------
RELEASES = FIXTURES / "releases"
OLD_HEADER = ["0.4.0", "0.5.0", "0.6.0", "0.7.0"]
NEW_HEADER = ["1.0.1", "1.1.0", "1.2.0", "1.3.1", "1.4.1", "1.5.1"]


@pytest.mark.parametrize("release", OLD_HEADER + NEW_HEADER)
def test_each_releases_extended_header_is_read_as_that_release_wrote_it(release):
    pf = read_program((RELEASES / release / "xnnpack_cnn.pte").read_bytes(), f"{release}/xnnpack_cnn.pte")
    if release in OLD_HEADER:  # 24 bytes: no segment_data_size, segments checked against the file's size
        assert (pf.header_length, pf.segment_data_size) == (24, 0) and pf.segments
    else:
        assert pf.header_length == 32 and pf.segment_data_size > 0


@pytest.mark.parametrize("release", OLD_HEADER + NEW_HEADER)
def test_xnnpack_constants_are_found_where_each_release_put_them(release):
    """0.4.0 and 0.5.0 put an XNNPACK graph's constants in its payload's constant region; from 0.6.0 they are the
    program's named data, found through each ConstantDataOffset's named_key."""
    from pterun.delegates.xnnpack import payload as P
    pf = read_program((RELEASES / release / "xnnpack_cnn.pte").read_bytes(), f"{release}/xnnpack_cnn.pte")
    plan = pf.plan(pf.plan_index("forward"))
    blob = pf.delegate_blob(plan.delegates[0])
    assert P.payload_format(blob) == "XN01 in an XH00 header"  # every release from 0.4.0 on
    asked = []
    graph = P.read_graph(blob, lambda key: asked.append(key) or pf.named(key))
    assert any(v.data is not None for v in graph.values.values())
    assert bool(asked) == (release not in ("0.4.0", "0.5.0")) == bool(pf.named_data)


@pytest.mark.parametrize("release", ["0.5.0", "0.6.0", "0.7.0", "1.0.1", "1.5.1"])
def test_8da4w_block_scales_are_read_from_the_field_each_release_wrote(release):
    """0.5.0 and 0.6.0 wrote fp32 block scales into the flatbuffer (the runtime rounds them to bf16); from 0.7.0
    they are bf16 constants behind scale_buffer_idx. Either way the weights' scales are bf16 values."""
    from pterun.delegates.xnnpack import payload as P
    from pterun.format.flatbuffer import Buffer, Table
    pf = read_program((RELEASES / release / "xnnpack_8da4w.pte").read_bytes(), f"{release}/xnnpack_8da4w.pte")
    plan = pf.plan(pf.plan_index("forward"))
    blob = pf.delegate_blob(plan.delegates[0])
    graph = P.read_graph(blob, pf.named)
    weights = [v for v in graph.values.values() if v.quant is not None and v.quant.kind == P.PER_CHANNEL_GROUP]
    assert weights
    for w in weights:
        assert w.quant.scale.size and ((w.quant.scale.view(np.uint32) & 0xFFFF) == 0).all()  # bf16 values
    fb, _ = P.split_blob(np.asarray(blob))
    root = Table.root(Buffer(fb, "payload"), "XNNGraph")
    buffered = [q.u32(12) for xv in root.tables(8, "XValue") for tag, u in [xv.union(4, 6, "v")] if tag == 2
                for kind, q in [u.union(6, 8, "q")] if kind == P.PER_CHANNEL_GROUP]
    assert len(buffered) == len(weights)
    assert all((b != 0) == (release not in ("0.5.0", "0.6.0")) for b in buffered)


@pytest.mark.parametrize("release", ["0.4.0", "1.0.1"])
def test_a_tensors_data_location_is_read_where_the_release_has_one(release):
    """ExtraTensorInfo.location came in 0.5: a 0.4.0 file has none (every constant is in the program); a 1.0.1
    program with a .ptd names its external tensors."""
    name = "ptd_mlp" if release == "1.0.1" else "portable_mlp"
    plan = read_program((RELEASES / release / f"{name}.pte").read_bytes(), name).plan(0)
    locations = {d.location for tag, d in plan.values if tag == TENSOR}
    assert locations == ({0, 1} if release == "1.0.1" else {0})


def test_inspect_tells_an_old_file_from_a_new_one():
    from pterun.summary import describe, format_text
    old = format_text(describe(RELEASES / "0.4.0" / "xnnpack_cnn.pte")).splitlines()[1]
    new = format_text(describe(RELEASES / "1.5.1" / "xnnpack_cnn.pte")).splitlines()[1]
    assert old == "format: extended header of 24 bytes (before ExecuTorch 1.0); no constants; XNNPACK payloads XN01 " \
                  "in an XH00 header"
    assert new == "format: extended header of 32 bytes (ExecuTorch 1.0+); no constants; XNNPACK payloads XN01 in an " \
                  "XH00 header; named data (0.6+)"
