"""The load-time rules the fuzzer holds pterun to, each on a file corrupted in exactly one field.

The field positions come from the fuzzer's own recorder (tools/fuzz.py), which notes every flatbuffer field the
reader touches, with its table and vtable slot.
"""

from __future__ import annotations

import importlib.util
import math
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pterun.interp.method as method_module
from fixtures_util import FIXTURES, assert_matches, load_calls
from pterun import DelegateError, InvalidProgramError, Runtime
from pterun.delegates.xnnpack import payload as P
from pterun.delegates.xnnpack.validate import GROWTH_LIMIT, MAX_GEOMETRY, validate

_spec = importlib.util.spec_from_file_location("pterun_fuzz", FIXTURES.parent.parent / "tools" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


def recorded(name: str) -> fuzz.Target:
    (target,) = [t for t in fuzz.discover([name]) if t.kind == "pte"]
    fuzz.record(target)
    return target


def positions(target, kind: str, slot: int, code: str, role: str = "scalar") -> list[tuple[int, int]]:
    return [(pos, size) for pos, size, r, ctx in target.fields if r == role and ctx == (kind, slot, code)]


def patched(data: bytes, pos: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def load(data: bytes, method: str = "forward"):
    return Runtime.get().load_program(data).load_method(method)


# -- 1. method inputs and outputs are never constants ---------------------------------------------------------
@pytest.mark.parametrize("which,slot", [("input", 10), ("output", 12)])
def test_an_input_or_output_that_is_a_constant_is_refused_at_load(which, slot):
    t = recorded("mlp")
    pf = Runtime.get().load_program(t.data)._pf
    plan = pf.plan(0)
    const = next(i for i, (tag, d) in enumerate(plan.values) if tag == 5 and d.data_buffer_idx > 0)
    (pos, _), = positions(t, "ExecutionPlan", slot, "i", role="elem")
    bad = patched(t.data, pos, "<i", const)
    with pytest.raises(InvalidProgramError, match=rf"method 'forward': {which} 0 \(value {const}\) is a constant "
                                                  rf"tensor \(constant buffer \d+\); a method {which} must be a "
                                                  "tensor the method can write$"):
        Runtime.get().load_program(bad)


def test_an_input_that_is_a_list_is_refused_at_load():
    # found by the long campaign (case 177216 of seed 14): an input index moved onto an IntList value
    t = recorded("mlp")
    plan = Runtime.get().load_program(t.data)._pf.plan(0)
    ints = next(i for i, (tag, _) in enumerate(plan.values) if tag == 7)  # IntList
    (pos, _), = positions(t, "ExecutionPlan", 10, "i", role="elem")
    with pytest.raises(InvalidProgramError, match=rf"method 'forward': input 0 \(value {ints}\) is of type IntList; a "
                                                  r"method input must be a Tensor, Int, Double, Bool, String or None$"):
        Runtime.get().load_program(patched(t.data, pos, "<i", ints))


# -- 2. memory sizes ------------------------------------------------------------------------------------------
def test_a_corrupt_arena_size_costs_nothing():
    t = recorded("mlp")
    (pos, _), = [p for p in positions(t, "ExecutionPlan", 20, "q", role="elem")][1:2]
    bad = patched(t.data, pos, "<q", 20 << 30)  # 20 GiB declared for arena 1
    m = load(bad)
    plan = m._runner.plan
    assert plan.buffer_sizes[1] == 20 << 30
    assert m._runner.arenas[1].nbytes == plan.arena_extents[1] == 5120  # what its tensors really span
    call = load_calls("mlp")[0]
    assert_matches(m.execute(call["inputs"])[0], call["outputs"][0], "corrupt arena size")


def test_memory_error_anywhere_in_load_is_an_invalid_program_error(monkeypatch):
    def refuse(self, i, ev):
        raise MemoryError("Unable to allocate 12.0 GiB for an array with shape (3221225472,) and data type float32")

    monkeypatch.setattr("pterun.format.program._PlanReader.read_value", refuse)
    with pytest.raises(InvalidProgramError, match=r"^<bytes>: loading ran out of memory: Unable to allocate 12.0 GiB "
                                                  r"for an array .* \(corrupt file\?\)$") as info:
        Runtime.get().load_program((FIXTURES / "mlp.pte").read_bytes())
    assert isinstance(info.value.__cause__, MemoryError)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS behaves like this on Linux only")
def test_an_unplanned_tensor_larger_than_the_address_space_limit_says_how_much():
    # unplanned_io's value 0 is an unplanned [3, 5] float input: give it 2^28 x 5 floats (5 GiB) and run the
    # load under a 1 GiB address-space cap, as on a small board or under ulimit -v
    t = recorded("unplanned_io")
    sizes = positions(t, "EValue payload", 8, "i", role="elem")
    bad = patched(t.data, sizes[0][0], "<i", 1 << 28)
    script = textwrap.dedent("""
        import resource, sys
        import pterun
        vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
        try:
            pterun.Runtime.get().load_program(sys.stdin.buffer.read()).load_method("forward")
        except pterun.InvalidProgramError as e:
            print("InvalidProgramError:", e)
    """)
    out = subprocess.run([sys.executable, "-c", script], input=bad, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert re.fullmatch(r"InvalidProgramError: <bytes>: method 'forward': unplanned tensor value \d+ "
                        rf"\(\[268435456, 5\]\) needs {(1 << 28) * 5 * 4} bytes, more memory than is available "
                        r"\(corrupt file\?\)", out.stdout.decode().strip()), out.stdout.decode()


# -- 4. runaway control flow -----------------------------------------------------------------------------------
def test_a_loop_that_never_ends_fails_within_the_method_budget():
    t = recorded("cond")
    # instruction 8 of cond.pte jumps forward to 12 unconditionally (JumpFalse on a constant False); send it
    # back to instruction 0 and the method loops forever
    (pos, _), = [(p, s) for p, s in positions(t, "Instruction arguments", 6, "i")
                 if struct.unpack_from("<i", t.data, p)[0] == 12]
    m = load(patched(t.data, pos, "<i", 0))
    assert m._runner.loop_budget == method_module.MIN_LOOP_BUDGET
    with pytest.raises(InvalidProgramError, match=r"method 'forward': executed more than 100000 instructions, the "
                                                  r"budget of a method with 13 instructions \(infinite loop in the "
                                                  r"program\?\)$"):
        m.execute(load_calls("cond")[0]["inputs"])


def test_the_loop_budget_grows_with_the_program():
    m = load((FIXTURES / "cond.pte").read_bytes())
    r = m._runner
    planned = [max(d.sizes, default=1) for tag, d in r.plan.values
               if tag == 5 and (d.memory_id is not None or d.data_buffer_idx > 0)]
    steps = sum(len(c.steps) for c in r.chains)
    assert r.loop_budget == max(method_module.MIN_LOOP_BUDGET, method_module.LOOP_BUDGET_FACTOR * steps * max(planned))
    plain = load((FIXTURES / "mlp.pte").read_bytes())
    assert plain._runner.loop_budget == 0  # no jumps: the loop is a plain for, nothing is counted


# -- 6. names that are not UTF-8 ---------------------------------------------------------------------------------
def _string_bytes(t, kind: str, slot: int) -> int:
    (pos, _), = positions(t, kind, slot, "I", role="length")[:1]
    return pos + 4  # the string's first byte


def test_metadata_strings_that_are_not_utf8_are_accepted():
    t = recorded("mlp")
    bad = patched(t.data, _string_bytes(t, "ContainerMetadata", 4), "<B", 0xFF)
    m = load(bad)
    assert m._runner.plan.input_spec.startswith("\ufffd")
    call = load_calls("mlp")[0]
    assert_matches(m.execute(call["inputs"])[0], call["outputs"][0], "garbled metadata")


def test_an_operator_name_that_is_not_utf8_fails_when_an_instruction_calls_it():
    t = recorded("mlp")
    bad = patched(t.data, _string_bytes(t, "Operator", 4), "<B", 0xFF)
    with pytest.raises(InvalidProgramError, match=r"method 'forward': KernelCall calls operator \d+, whose name is "
                                                  r"not valid UTF-8 \(.*Operator string field 4 \(b'\\xff"):
        Runtime.get().load_program(bad)


def test_a_method_name_that_is_not_utf8_is_refused():
    t = recorded("mlp")
    bad = patched(t.data, _string_bytes(t, "ExecutionPlan", 4), "<B", 0xC3)  # a lead byte with no continuation
    with pytest.raises(InvalidProgramError, match=r"ExecutionPlan string field 4 \(b'\\xc3orward'\) is not valid "
                                                  r"UTF-8 \(byte 0\)$"):
        Runtime.get().load_program(bad)


# -- 3. XNNPACK geometry ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cnn_graph():
    program = Runtime.get().load_program(FIXTURES / "xnn_cnn.pte")
    pf = program._pf
    d = pf.plan(0).delegates[0]
    return P.read_graph(pf.delegate_blob(d), pf.named)


def _with(graph, name: str, **fields):
    k = next(i for i, n in enumerate(graph.nodes) if n.name == name)
    node = graph.nodes[k]
    nodes = list(graph.nodes)
    nodes[k] = node._replace(fields={**node.fields, **fields})
    return graph._replace(nodes=nodes), k


def _value_with(graph, vid: int, dims):
    values = dict(graph.values)
    values[vid] = values[vid]._replace(dims=tuple(dims))
    return graph._replace(values=values)


def test_the_fixture_graph_is_valid(cnn_graph):
    assert validate(cnn_graph) is cnn_graph


@pytest.mark.parametrize("name,fields,match", [
    ("MaxPooling2d", {"pooling_height": 1 << 31}, r"pooling_height is 2147483648; it must be between 1 and 16777216"),
    ("MaxPooling2d", {"pooling_height": 32767}, r"pooling_height 32767 \(dilated to 32767\) does not fit the padded "
                                                r"input height \d+"),
    ("MaxPooling2d", {"stride_width": 0}, r"stride_width is 0; it must be between 1"),
    ("MaxPooling2d", {"padding_top": 1 << 30}, r"padding_top is 1073741824, above the limit of 16777216"),
    ("Conv2d", {"kernel_width": 40}, r"kernel_width 40 \(dilated to 40\) does not fit the padded input width"),
    ("Conv2d", {"dilation_height": 9}, r"kernel_height 3 \(dilated to 19\) does not fit"),
    ("Conv2d", {"group_input_channels": 5}, r"groups 1 x group_input_channels 5 = 5, but input1_id value \d+ "
                                            r"\(fp32 \[1, \d+, \d+, \d+\]\) has \d+ channels"),
    ("DepthwiseConv2d", {"groups": 3}, r"groups 3 does not match the \d+ channels of input1_id"),
])
def test_delegate_geometry_is_checked_against_the_values(cnn_graph, name, fields, match):
    graph, k = _with(cnn_graph, name, **fields)
    with pytest.raises(DelegateError, match=rf"^XNNPACK payload: node {k} \(XNN{name}\): {match}"):
        validate(graph)


def test_a_fully_connected_input_must_match_its_filter(cnn_graph):
    k = next(i for i, n in enumerate(cnn_graph.nodes) if n.name == "FullyConnected")
    w = cnn_graph.values[cnn_graph.nodes[k].filter_id]
    graph = _value_with(cnn_graph, w.id, (w.dims[0], w.dims[1] + 1))
    with pytest.raises(DelegateError, match=rf"node {k} \(XNNFullyConnected\): input1_id .* does not end in the "
                                            rf"filter's {w.dims[1] + 1} input channels"):
        validate(graph)


def test_an_enlarged_graph_input_is_refused_before_it_drives_work(cnn_graph):
    # a graph input whose batch dim was corrupted: the first node that combines it with the rest disagrees
    first = cnn_graph.nodes[0]
    vid = first.input_id if "input_id" in first.fields else first.input1_id
    v = cnn_graph.values[vid]
    big = (v.dims[0] * 4096,) + tuple(v.dims[1:])
    with pytest.raises(DelegateError, match=r"^XNNPACK payload: node \d+ \(XNN\w+\): .*\[4096, "):
        validate(_value_with(cnn_graph, vid, big))


def test_geometry_that_would_grow_a_value_past_the_program_is_refused(cnn_graph):
    # padding within MAX_GEOMETRY, window fits: the output would still be millions of times the graph's values
    graph, k = _with(cnn_graph, "MaxPooling2d", padding_top=1 << 12, padding_bottom=1 << 12, pooling_height=1,
                     pooling_width=1, stride_height=1, stride_width=1)
    with pytest.raises(DelegateError, match=rf"^XNNPACK payload: node {k} \(XNNMaxPooling2d\): output_id value \d+ "
                                            r"\(fp32 \[.*\]\) would get dims \[1, 8\d{3}, \d+, \d+\] \(pooling of "
                                            r"input .*\): \d+ elements, more than the \d+ this graph allows "
                                            rf"\({GROWTH_LIMIT} x its largest declared value\)$"):
        validate(graph)
    assert MAX_GEOMETRY == 1 << 24


def test_a_pooling_window_of_two_to_the_31_fails_at_load_not_at_execute():
    data = bytearray((FIXTURES / "xnn_cnn.pte").read_bytes())
    t = recorded("xnn_cnn")
    hits = []
    for pos, size in positions(t, "XNode payload", 12, "I"):  # pooling_height of pooling nodes (slot 12)
        bad = patched(bytes(data), pos, "<I", 1 << 31)
        try:
            Runtime.get().load_program(bad).load_method("forward")
        except DelegateError as e:
            if "pooling_height is 2147483648" in str(e):
                hits.append(str(e))
        except InvalidProgramError:
            pass
    assert hits and all(h.startswith("<bytes>: method 'forward'") or "XNNPACK payload: node" in h for h in hits)


def test_geometry_limits_are_far_above_real_models():
    # mobilenet's largest value and window stay orders of magnitude below the limits
    program = Runtime.get().load_program(FIXTURES / "xnn_mobilenet_v2.pte")
    pf = program._pf
    for d in pf.plan(0).delegates:
        g = P.read_graph(pf.delegate_blob(d), pf.named)
        assert max(math.prod(v.dims) for v in g.values.values()) < MAX_GEOMETRY
        assert np.all([n.fields.get("kernel_height", 1) < 64 for n in g.nodes])


# -- portable kernels: arguments that drive work must give the out tensor's static shape ----------------------
def test_a_corrupt_convolution_padding_is_refused_at_load():
    t = recorded("cnn")
    refused = []
    for pos, _ in positions(t, "EValue payload", 4, "q"):  # every Int value of the program
        try:
            load(patched(t.data, pos, "<q", 1 << 20))
        except InvalidProgramError as e:
            if "(aten::convolution.out): " in str(e):
                refused.append(str(e))
    assert refused
    # a corrupt padding or stride gives another output shape; a corrupt dilation a window that cannot fit
    shape = (r"its arguments give an output of shape \[\d+, \d+, \d+(, \d+)?\], but the program's out tensor has shape "
             r"\[\d+, \d+, \d+(, \d+)?\]")  # cnn.pte has 2-d and 1-d convolutions
    window = r"window 3 \(dilated to 2097153\) does not fit the input size \d+ padded by \d on each side"
    conv = r"^<bytes>: method 'forward': instruction \d+ \(aten::convolution\.out\): "
    assert all(re.search(rf"{conv}({shape}|{window})$", m) for m in refused), refused
    assert any(re.search(shape, m) for m in refused) and any(re.search(window, m) for m in refused)


from pterun.interp import checks  # noqa: E402


@pytest.mark.parametrize("name,args,outs,problem", [
    ("aten::max_pool2d_with_indices.out", (np.zeros((1, 3, 8, 8)), (2, 2), (), (0, 0), (1, 1), False, None, None),
     [((1, 3, 4, 4), True)] * 2, None),
    ("aten::max_pool2d_with_indices.out", (np.zeros((1, 3, 8, 8)), (1 << 31, 2), (), (0, 0), (1, 1), False, None,
                                           None), [((1, 3, 4, 4), True)] * 2,
     r"window 2147483648 \(dilated to 2147483648\) does not fit the input size 8 padded by 0 on each side"),
    ("aten::max_pool2d_with_indices.out", (np.zeros((1, 3, 8, 8)), (2, 2), (), (5, 0), (1, 1), False, None, None),
     [((1, 3, 4, 4), True)] * 2, r"padding \[5, 0\] must be between 0 and half the kernel_size \[2, 2\]"),
    ("aten::avg_pool2d.out", (np.zeros((1, 3, 8, 8)), (3, 3), (0,), (1,), False, True, None, None),
     [((1, 3, 8, 8), True)], r"stride \[0, 0\] must be positive"),
    ("aten::convolution.out", (np.zeros((1, 3, 8, 8)), np.zeros((4, 3, 3, 3)), None, (1, 1), (1, 1), (1, 1), False,
                               (0, 0), 1, None), [((1, 4, 8, 8), True)], None),
    ("aten::convolution.out", (np.zeros((1, 3, 8, 8)), np.zeros((4, 3, 3, 3)), None, (1, 1), (1 << 20, 1), (1, 1),
                               False, (0, 0), 1, None), [((1, 4, 8, 8), True)],
     r"its arguments give an output of shape \[1, 4, 2097158, 8\], but the program's out tensor has shape "
     r"\[1, 4, 8, 8\]"),
    ("aten::convolution.out", (np.zeros((1, 4, 5, 5)), np.zeros((4, 2, 3, 3)), None, (2, 2), (1, 1), (1, 1), True,
                               (1, 1), 1, None), [((1, 2, 10, 10), True)], None),  # transposed: (5-1)*2-2+2+1+1
    ("aten::convolution.out", (np.zeros((1, 3, 8, 8)), np.zeros((4, 3, 3, 3)), None, (1, 1), (1, 1), (1, 1), False,
                               (0, 0), 1, None), [((1, 4, 9, 9), False)], None),  # a dynamic out: run-time check
    ("aten::full.out", ((2, 1 << 30), 1.0, None), [((2, 3), True)],
     r"its arguments give an output of shape \[2, 1073741824\]"),
    ("aten::arange.start_out", (0, 10, 0, None), [((10,), True)], r"step is 0"),
    ("aten::arange.start_out", (0, 1e300, 1, None), [((10,), True)], r"output of shape \[1\d{300}\], but"),
    ("aten::upsample_nearest2d.vec_out", (np.zeros((1, 3, 4, 4)), None, (2.0, 2.0), None), [((1, 3, 8, 8), True)],
     None),
    ("aten::upsample_nearest2d.vec_out", (np.zeros((1, 3, 4, 4)), None, (float("inf"), 2.0), None),
     [((1, 3, 8, 8), True)], r"scale_factors \[inf, 2.0\] must be positive and finite"),
    ("aten::constant_pad_nd.out", (np.zeros((2, 3)), (1, 1 << 40), 0, None), [((2, 5), True)],
     r"output of shape \[2, 1099511627780\]"),
])
def test_portable_geometry_checks(name, args, outs, problem):
    got = checks.check(name, list(args), outs)
    if problem is None:
        assert got is None
    else:
        assert got is not None and re.search(problem, got), got


def test_a_huge_window_over_a_huge_padding_is_refused(cnn_graph):
    # every field within MAX_GEOMETRY, the window fits and the output is a single pixel: the work is not
    graph, k = _with(cnn_graph, "MaxPooling2d", pooling_height=1 << 12, pooling_width=1 << 12,
                     padding_top=1 << 11, padding_bottom=1 << 11, padding_left=1 << 11, padding_right=1 << 11,
                     stride_height=1 << 12, stride_width=1 << 12)
    with pytest.raises(DelegateError, match=rf"^XNNPACK payload: node {k} \(XNNMaxPooling2d\): window 4096x4096 over "
                                            r"an output of \[1, 1, 1, \d+\] is \d+ multiply-adds per channel, more "
                                            r"than the \d+ this graph allows$"):
        validate(graph)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), 1e-45])
def test_a_quantization_scale_xnnpack_would_refuse_is_refused_at_load(scale):
    # found by a campaign on the LiteRT engine: a per-tensor scale of 0 crashed it (signal 11) at load
    program = Runtime.get().load_program(FIXTURES / "xnn_qint8_ops.pte")
    pf = program._pf
    graph = P.read_graph(pf.delegate_blob(pf.plan(0).delegates[0]), pf.named)
    vid, v = next((i, v) for i, v in graph.values.items() if v.quant is not None and v.quant.kind == P.PER_TENSOR)
    values = dict(graph.values)
    values[vid] = v._replace(quant=v.quant._replace(scale=scale))
    with pytest.raises(DelegateError, match=rf"^XNNPACK payload: value {vid} \(\w+ \[.*\]\) has quantization scale "
                                            r".*; scales must be positive normal numbers$"):
        validate(graph._replace(values=values))
    values[vid] = v._replace(quant=v.quant._replace(zero_point=300))
    with pytest.raises(DelegateError, match=rf"value {vid} \(qu?int8 .*\) has zero point 300, outside \["):
        validate(graph._replace(values=values))


# -- XNNPACK external values fit the DelegateCall's arguments ----------------------------------------------------
def test_a_graph_input_larger_than_its_delegate_argument_is_refused_at_load():
    # a flipped dim of a graph input made LiteRT plan 2 GB for a program whose input holds 64 floats
    from xnn_payloads import Graph
    from pterun.delegates.xnnpack import load as load_delegate

    g = Graph()
    x = g.input([7405576, 8], P.FP32)
    g.node("Sigmoid", input_id=x, output_id=g.output([7405576, 8], P.FP32))
    blob, named = g.blob()
    with pytest.raises(DelegateError, match=r"^XNNPACK payload: value 0 \(fp32 \[7405576, 8\]\) has 59244608 "
                                            r"elements, but DelegateCall argument 0 holds at most 64$"):
        load_delegate(blob, named, "auto", ((64, 64),))
    with pytest.raises(DelegateError, match=r"external value 1, but the DelegateCall passes 1 argument"):
        load_delegate(blob, named, "numpy", ((59244608,),))
    assert load_delegate(blob, named, "numpy", ((59244608, 59244608),)).engine == "numpy"


def test_the_interpreter_tells_delegates_what_each_argument_holds(monkeypatch):
    from pterun.delegates.xnnpack import XnnpackBackend
    seen = []
    real = XnnpackBackend.init
    monkeypatch.setattr(XnnpackBackend, "init", lambda self, blob, specs, ctx: seen.append(ctx.call_args) or
                        real(self, blob, specs, ctx))
    Runtime().load_program(FIXTURES / "xnn_dynamic_reshape.pte").load_method("forward")
    # a constant 0-d tensor (the graph's scalar), the input [8, 8] and the output [32, 8] (upper bounds)
    assert seen == [((1, 64, 256),)]


@pytest.mark.parametrize("fixture, case, message", [
    ("stateful", 41, "aten::add.out failed at instruction 2 with inputs (float32[2, 3], complex64[2, 3] = input 0, 1, "
                     "float32[2, 3], float32[2, 3]): TypeError: cannot write a complex64 result into a float32 tensor"),
    ("demo", 843, "aten::convolution.out failed at instruction 8 with inputs (complex128[1, 32, 8, 8], "),
    ("xnn_ops", 3083, "aten::sum.IntList_out failed at instruction 14 with inputs (complex128[2, 4, 6, 8], False, "),
])
def test_a_complex_value_where_a_real_one_is_expected_is_a_kernel_error_not_a_warning(fixture, case, message):
    """Found by fuzzing: a value mutated to complex reached a float tensor, and NumPy printed a ComplexWarning
    while dropping the imaginary part. ExecuTorch's kernels refuse the dtype mix; so does pterun. (Seed 77 over
    this fixture alone: the case number picks a mutation among the targets given.)"""
    import warnings

    from pterun import KernelError
    from pterun._fpstate import warning_rules

    seed = 91 if fixture == "xnn_ops" else 77  # the sum case: a warning raised inside NumPy's np.sum wrapper
    target, cls, rng = fuzz.case_plan(seed, case, fuzz.prepare([fixture], None), fuzz.CLASSES)
    data = fuzz.mutate(target, cls, rng)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warning_rules()  # as in a user's process, where importing pterun installed it
        with pytest.raises(KernelError) as e:
            fuzz.run_file(target, data, rng)
    assert message in str(e.value)
    assert [w.category.__name__ for w in caught] == []


def test_declared_sizes_no_array_can_hold_are_an_invalid_program_naming_the_tensor():
    """Sizes whose product overflows what NumPy can hold fail at load with the file's error, not NumPy's
    "array is too big" from the first view of the tensor (a fuzzed bundled program once reached that)."""
    t = recorded("unplanned_io")
    (first, _), (second, _) = positions(t, "EValue payload", 8, "i", role="elem")[:2]
    bad = patched(patched(t.data, first, "<i", 2**31 - 1), second, "<i", 2**31 - 1)
    with pytest.raises(InvalidProgramError, match=r"^<bytes>: method 'forward': tensor value 4 has sizes "
                                                  r"\[2147483647, 2147483647\]: 4611686014132420609 elements, more "
                                                  r"than any array can hold \(corrupt file\?\)$"):
        Runtime.get().load_program(bad)
    zero = patched(patched(t.data, first, "<i", 0), second, "<i", 2**31 - 1)  # no elements at all: holdable
    assert Runtime.get().load_program(zero)._plan("forward").values[4].val.sizes == (0, 2**31 - 1)
