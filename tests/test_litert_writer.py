"""The LiteRT engine's TFLite writer (``litert_engine/tflite.py``), read back by LiteRT's own generated schema module
(``ai_edge_litert.schema_py_generated``, the independent reader): its schema facts are LiteRT's, and every model
the committed programs and the kernel-node lowerings translate into holds what the writer was given, field by field,
and what LiteRT's object API packed from the same tables (the writer pterun used before)."""

from __future__ import annotations

import ast
import copy
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from fixtures_util import FIXTURES, run_python

from pterun import Runtime
from pterun.delegates.xnnpack.litert_engine import tflite as TFL
from pterun.delegates.xnnpack.litert_engine import writer as W

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                reason="ai-edge-litert is not installed")
ENGINE = Path(__file__).resolve().parents[1] / "src" / "pterun" / "delegates" / "xnnpack" / "litert_engine"


def _reader():
    """LiteRT's generated schema module: the reader the writer is checked with."""
    from ai_edge_litert import schema_py_generated as S
    return S


# -- the schema's facts ------------------------------------------------------------------------------------------
def test_the_codes_are_litert_s():
    S = _reader()
    for enum in ("BuiltinOperator", "TensorType", "Padding", "ActivationFunctionType", "QuantizationDetails",
                 "BuiltinOptions"):
        ours = vars(getattr(TFL, enum))
        assert ours == {k: getattr(getattr(S, enum), k) for k in ours}, enum


def test_every_operator_the_rules_emit_has_a_code():
    # every upper-case string of the translation's modules that names a LiteRT operator is one the writer knows
    S = _reader()
    names = set()
    for module in ("nodes.py", "lower.py", "exact.py", "translate.py"):
        for node in ast.walk(ast.parse((ENGINE / module).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isupper():
                names.add(node.value)
    emitted = {n for n in names if hasattr(S.BuiltinOperator, n)}
    assert len(emitted) > 50
    assert emitted <= set(vars(TFL.BuiltinOperator)), emitted - set(vars(TFL.BuiltinOperator))


def _nondefault(kind: str, default, slot: int):
    return {"bool": not default, "f32": 0.5 + slot, "i8": 2 + slot, "i32": 7 + slot}[kind]


@pytest.mark.parametrize("table", sorted(TFL.OPTIONS))
def test_each_options_field_lands_in_litert_s_field(table):
    # one field at a time away from its default: a wrong slot shows as another field's value, a wrong default as a
    # field LiteRT reads back differently from what was meant
    S = _reader()
    index, layout = TFL.OPTIONS[table]
    assert index == getattr(S.BuiltinOptions, table)
    for name, (slot, kind, default) in layout.items():
        assert getattr(getattr(S, table + "T")(), name) == default, name
        value = _nondefault(kind, default, slot)
        w = W.ModelWriter()
        w.op("ADD", [0, 0], [0], table, **{name: value})
        w.add_tensor([1], TFL.TensorType.FLOAT32)
        (o,) = S.ModelT.InitFromPackedBuf(bytes(w.serialize([0], [0])), 0).subgraphs[0].operators
        assert o.builtinOptionsType == index
        want = {**vars(getattr(S, table + "T")()), name: value}
        assert vars(o.builtinOptions) == want, name


def test_an_operator_or_field_the_writer_does_not_know_is_refused():
    with pytest.raises(ValueError, match="pterun writes no TFLite NO_SUCH operator"):
        W.ModelWriter().op("NO_SUCH", [0], [1])
    with pytest.raises(ValueError, match="AddOptions has no field keepDims"):
        W.ModelWriter().op("ADD", [0, 1], [2], "AddOptions", keepDims=True)
    with pytest.raises(ValueError, match="no options table NoOptions"):
        W.ModelWriter().op("ADD", [0, 1], [2], "NoOptions")


# -- the flatbuffer writer itself (fbwrite.py), read by the flatbuffers package's generic table reader ------------
def test_every_scalar_kind_reads_back_aligned_and_tables_of_one_shape_share_a_vtable():
    from flatbuffers import number_types as N
    from flatbuffers.table import Table

    from pterun.delegates.xnnpack.litert_engine.fbwrite import Shape, Writer

    kinds = {"u64": (N.Uint64Flags, 8), "u32": (N.Uint32Flags, 4), "i32": (N.Int32Flags, 4),
             "f32": (N.Float32Flags, 4), "u8": (N.Uint8Flags, 1), "i8": (N.Int8Flags, 1), "bool": (N.BoolFlags, 1)}
    fields = ((0, "u8"), (1, "off"), (3, "u64"), (4, "i32"), (5, "bool"), (6, "f32"), (7, "i8"), (8, "u32"),
              (9, "off"))
    shape = Shape(fields)
    w = Writer(b"ABCD")
    rows = [(200, 0, 2**40 + 3, -5, True, 0.25, -7, 4_000_000_000, 0), (1, 0, 9, 6, False, -1.5, 3, 0, 0)]
    vec = w.slots(2)
    at = []
    for k, row in enumerate(rows):
        w.buf += bytes(k + 1)  # each table starts at another remainder of 8
        pos = w.table(shape, row)
        w.patch(pos + shape.at[1], w.vector(np.array([-1, 2**40], "<i8")))
        w.patch(pos + shape.at[8], w.string("name"))
        at.append(pos)
    w.point(vec, at)
    w.patch(0, vec)
    buf = bytes(w.buf)
    assert buf[4:8] == b"ABCD"
    root = N.UOffsetTFlags.py_type(int.from_bytes(buf[:4], "little"))
    assert root == vec and int.from_bytes(buf[vec:vec + 4], "little") == 2
    vtables = set()
    for k, row in enumerate(rows):
        slot = vec + 4 + 4 * k
        t = Table(bytearray(buf), slot + int.from_bytes(buf[slot:slot + 4], "little"))
        assert t.Pos == at[k]
        vtables.add(t.Pos - int.from_bytes(buf[t.Pos:t.Pos + 4], "little", signed=True))
        for (slot_id, kind), value in zip(fields, row):
            o = t.Offset(4 + 2 * slot_id)
            assert o != 0, slot_id
            if kind == "off":
                continue
            flags, size = kinds[kind]
            assert (t.Pos + o) % size == 0, (kind, t.Pos + o)
            assert t.Get(flags, t.Pos + o) == value, (kind, value)
        assert t.Offset(4 + 2 * 2) == 0  # slot 2 is not in the shape
        v = t.Vector(t.Offset(4 + 2 * 1))
        assert v % 8 == 0 and t.VectorLen(t.Offset(4 + 2 * 1)) == 2
        assert [t.Get(N.Int64Flags, v + 8 * j) for j in range(2)] == [-1, 2**40]
        assert t.String(t.Pos + t.Offset(4 + 2 * 9)) == b"name"
    assert len(vtables) == 1


def test_a_file_identifier_is_four_bytes_and_offsets_point_forward():
    import struct

    from pterun.delegates.xnnpack.litert_engine.fbwrite import Writer

    with pytest.raises(ValueError, match=r"^a file identifier is 4 bytes, got b'TFL'$"):
        Writer(b"TFL")
    w = Writer(b"TFL3")
    early = w.string("written before the vector")
    vec = w.slots(2)
    with pytest.raises(ValueError, match=r"^an offset must point forward: object at 8 before the vector at \d+$"):
        w.point(vec, [w.string("after"), early])
    with pytest.raises(struct.error):
        w.patch(vec, early)


def test_a_model_is_written_without_the_flatbuffers_package():
    r = run_python("""
        import sys
        sys.modules["flatbuffers"] = None  # an import of it fails
        import pterun
        m = pterun.Runtime().load_program("%s").load_method("forward")
        print([d.engine for d in m.delegates])
    """ % (FIXTURES / "xnn_mlp.pte"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['litert']"


# -- what LiteRT's object API made of the same tables (the writer pterun used before) ----------------------------
def _object_api_quantization(S, q, made: dict):
    if q is None:
        return None
    if id(q) not in made:
        p = made[id(q)] = S.QuantizationParametersT()
        p.scale, p.zeroPoint, p.quantizedDimension = q.scale, q.zeroPoint, q.quantizedDimension
        if q.details is not None:
            d = S.BlockwiseQuantizationT()
            d.scales, d.zeroPoints, d.blockSize = q.details.scales, q.details.zeroPoints, q.details.blockSize
            p.detailsType, p.details = q.detailsType, d
    return made[id(q)]


def _object_api_subgraph(S, sg, made: dict):
    g = S.SubGraphT()
    g.tensors = []
    for t in sg.tensors:
        x = S.TensorT()
        x.shape, x.type, x.buffer, x.name = np.asarray(t.shape, np.int32), t.type, t.buffer, t.name
        x.externalBuffer = t.external
        x.quantization = _object_api_quantization(S, t.quantization, made)
        g.tensors.append(x)
    g.operators = []
    for o in sg.operators:
        x = S.OperatorT()
        x.opcodeIndex, x.inputs, x.outputs = o.opcodeIndex, o.inputs, o.outputs
        if o.builtinOptions is not None:
            x.builtinOptionsType, x.builtinOptions = o.builtinOptionsType, getattr(S, o.builtinOptions.table + "T")()
            for k, v in o.builtinOptions.fields.items():
                setattr(x.builtinOptions, k, v)
        g.operators.append(x)
    g.inputs, g.outputs, g.name = np.asarray(sg.inputs, np.int32), np.asarray(sg.outputs, np.int32), sg.name
    return g


def _object_api_pack(S, m) -> bytes:
    """The flatbuffer LiteRT's object API packs from the writer's records ``m`` (a tflite.Model)."""
    import flatbuffers

    x = S.ModelT()
    x.version, x.description = m.version, m.description
    x.operatorCodes = []
    for oc in m.operatorCodes:
        c = S.OperatorCodeT()
        c.builtinCode, c.deprecatedBuiltinCode, c.version = oc.builtinCode, oc.deprecatedBuiltinCode, oc.version
        x.operatorCodes.append(c)
    made: dict = {}
    x.subgraphs = [_object_api_subgraph(S, sg, made) for sg in m.subgraphs]
    x.buffers = []
    for buf in m.buffers:
        b = S.BufferT()
        b.offset, b.size = buf.offset, buf.size
        x.buffers.append(b)
    if m.externalBuffers:
        x.externalBufferGroups, x.externalBuffers = [], []
        for path in m.externalGroups:
            g = S.ExternalBufferGroupT()
            g.name = path
            x.externalBufferGroups.append(g)
        for e in m.externalBuffers:
            b = S.ExternalBufferT()
            b.id, b.group, b.offset, b.length = e.id, e.group, e.offset, e.length
            x.externalBuffers.append(b)
    if m.signatureDefs is not None:
        x.signatureDefs = []
        for sd in m.signatureDefs:
            d = S.SignatureDefT()
            d.signatureKey, d.subgraphIndex, d.inputs, d.outputs = sd.signatureKey, sd.subgraphIndex, [], []
            for src, dst in ((sd.inputs, d.inputs), (sd.outputs, d.outputs)):
                for tm in src:
                    t = S.TensorMapT()
                    t.name, t.tensorIndex = tm.name, tm.tensorIndex
                    dst.append(t)
            x.signatureDefs.append(d)
    b = flatbuffers.Builder(1 << 16)
    b.Finish(x.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _differences(a, b, path: str = "model") -> list[str]:
    """Where two objects LiteRT's reader made differ, field by field (arrays by dtype and values)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        same = isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
        return [] if same else [path]
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} against {type(b).__name__}"]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} against {len(b)} items"]
        return [d for k, (u, v) in enumerate(zip(a, b)) for d in _differences(u, v, f"{path}[{k}]")]
    if hasattr(a, "__dict__"):
        return [d for k in vars(a) for d in _differences(getattr(a, k), getattr(b, k), f"{path}.{k}")]
    return [] if a == b else [f"{path}: {a!r} against {b!r}"]


# -- what the writer was given ---------------------------------------------------------------------------------------
def _check_tensors(got: list, want: list, where: str) -> None:
    assert len(got) == len(want), where
    for k, (g, t) in enumerate(zip(got, want)):
        assert (g.shape.tolist(), g.type, g.buffer, g.name, g.externalBuffer) == \
            (t.shape.tolist(), t.type, t.buffer, t.name.encode(), t.external), f"{where} tensor {k}"
        q, p = t.quantization, g.quantization
        if q is None:
            assert p is None, f"{where} tensor {k}"
            continue
        assert p.quantizedDimension == q.quantizedDimension and p.detailsType == q.detailsType, f"{where} tensor {k}"
        for mine, theirs in ((q.scale, p.scale), (q.zeroPoint, p.zeroPoint)):
            assert (theirs is None) if mine is None else np.array_equal(theirs, mine), f"{where} tensor {k}"
        if q.detailsType == TFL.QuantizationDetails.BlockwiseQuantization:
            d = p.details
            assert (d.scales, d.zeroPoints, d.blockSize) == (q.details.scales, 0, q.details.blockSize)
            assert got[d.scales].type == TFL.TensorType.FLOAT16, f"{where} tensor {k}"


def _check_operators(got: list, want: list, where: str) -> None:
    assert len(got) == len(want), where
    for k, (g, o) in enumerate(zip(got, want)):
        assert g.opcodeIndex == o.opcodeIndex, f"{where} operator {k}"
        assert g.inputs.tolist() == o.inputs.tolist() and g.outputs.tolist() == o.outputs.tolist(), f"{where} op {k}"
        assert g.builtinOptionsType == o.builtinOptionsType, f"{where} operator {k}"
        if o.builtinOptions is None:
            assert g.builtinOptions is None, f"{where} operator {k}"
            continue
        _, layout = TFL.OPTIONS[o.builtinOptions.table]
        for name, (_, kind, default) in layout.items():
            want_value = o.builtinOptions.fields.get(name, default)
            have = getattr(g.builtinOptions, name)
            assert have == (np.float32(want_value) if kind == "f32" else want_value), f"{where} operator {k} {name}"


def _check_written(S, model: bytes, m, blobs: list) -> int:
    """``model`` (bytes) holds the records ``m`` and, at each buffer's offset, its data; the number of tensors."""
    got = S.ModelT.InitFromPackedBuf(model, 0)
    assert (got.version, got.description) == (3, b"pterun XNNPACK delegate")
    assert [(c.builtinCode, c.deprecatedBuiltinCode, c.version) for c in got.operatorCodes] == \
        [(c.builtinCode, min(c.builtinCode, 127), c.version) for c in m.operatorCodes]
    assert len(got.subgraphs) == len(m.subgraphs)
    for k, (g, sg) in enumerate(zip(got.subgraphs, m.subgraphs)):
        assert (g.name, g.inputs.tolist(), g.outputs.tolist()) == (sg.name.encode(), list(sg.inputs), list(sg.outputs))
        _check_tensors(g.tensors, sg.tensors, f"subgraph {k}")
        _check_operators(g.operators, sg.operators, f"subgraph {k}")
    assert [(b.offset, b.size, b.data) for b in got.buffers] == [(b.offset, b.size, None) for b in m.buffers]
    view = np.frombuffer(model, np.uint8)
    external = {t.buffer: t.external for sg in m.subgraphs for t in sg.tensors if t.external}
    for b, data, xor in blobs:
        if b in external:  # read in place: the file holds the bytes where the model says, and none are copied
            e = got.externalBuffers[external[b] - 1]
            assert (e.id, m.buffers[b].offset, m.buffers[b].size, xor) == (external[b], 0, 0, 0), f"buffer {b}"
            with open(got.externalBufferGroups[e.group].name, "rb") as f:
                f.seek(e.offset)
                placed = np.frombuffer(f.read(e.length), np.uint8)
            assert e.offset % 64 == 0 and np.array_equal(placed, data), f"buffer {b}"
            continue
        placed = view[m.buffers[b].offset:m.buffers[b].offset + m.buffers[b].size]
        assert np.array_equal(placed, data ^ np.uint8(xor)), f"buffer {b}"
    if m.signatureDefs is None:
        assert got.signatureDefs is None
    else:
        maps = [(s.signatureKey, s.subgraphIndex, [(t.name, t.tensorIndex) for t in s.inputs],
                 [(t.name, t.tensorIndex) for t in s.outputs]) for s in m.signatureDefs]
        assert [(s.signatureKey.decode(), s.subgraphIndex, [(t.name.decode(), t.tensorIndex) for t in s.inputs],
                 [(t.name.decode(), t.tensorIndex) for t in s.outputs]) for s in got.signatureDefs] == maps
    reference = S.ModelT.InitFromPackedBuf(_object_api_pack(S, m), 0)
    assert _differences(got, reference) == []
    return sum(len(sg.tensors) for sg in m.subgraphs)


class Written:
    """Every model the writer writes while active, checked as it is written (before the weights' pages are given
    back); a failure is kept, not raised, which the translation would take for a graph it cannot write."""

    def __init__(self, monkeypatch):
        S = _reader()
        self.models = self.subgraphs = self.tensors = self.combined = self.external = 0
        self.failures: list[str] = []
        pack, layout, fill, given = W.ModelWriter._pack, W.ModelWriter._layout, W.Unwritten.fill, {}

        def keep_pack(writer, m, *args):
            given[id(writer)] = copy.deepcopy(m)  # as packed: a later layout of the same writer changes the records
            return pack(writer, m, *args)

        def keep_layout(writer, *args, **kwargs):
            try:
                laid = layout(writer, *args, **kwargs)
            except Exception as e:  # the translation would run the graph on the NumPy engine, saying nothing
                self.failures.append(f"layout raised {type(e).__name__}: {e}")
                raise
            given[id(laid.fb)] = (given.pop(id(writer)), list(writer.blobs), laid.fb)  # the same fb when combined
            return laid

        def checked_fill(laid):
            model = fill(laid)
            m, blobs, _ = given.pop(id(laid.fb))
            try:
                self.tensors += _check_written(S, model, m, blobs)
            except Exception as e:  # noqa: BLE001  (kept: see the class docstring)
                self.failures.append(f"{len(m.subgraphs)} subgraphs: {type(e).__name__}: {e}")
            self.models, self.subgraphs = self.models + 1, self.subgraphs + len(m.subgraphs)
            self.combined += m.signatureDefs is not None
            self.external += bool(m.externalBuffers)
            return model

        monkeypatch.setattr(W.ModelWriter, "_pack", keep_pack)
        monkeypatch.setattr(W.ModelWriter, "_layout", keep_layout)
        monkeypatch.setattr(W.Unwritten, "fill", checked_fill)


_PROGRAMS = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.pte"))


@pytest.mark.parametrize("merge, external", [(None, False), (False, False), (None, True)],
                         ids=["merged", "unmerged", "merged-in-place"])
def test_every_committed_programs_models_read_back_as_written(monkeypatch, merge, external):
    from pterun.delegates.xnnpack.litert_engine import compiled

    if external:  # every model whose constants are runs of the program file reads them there (not only large ones)
        monkeypatch.setattr(compiled, "EXTERNAL_MIN_BYTES", 0)
    written = Written(monkeypatch)
    for name in _PROGRAMS:
        try:
            program = Runtime(merge_delegates=merge, num_threads=2).load_program(FIXTURES / name)
        except Exception:  # noqa: BLE001  (a program that needs its external data file)
            continue
        for method in sorted(program.method_names):
            try:
                program.load_method(method)
            except Exception:  # noqa: BLE001
                pass
    assert written.failures == []
    # xnn_*, llm/, multimodal/, releases/ ... (and portable programs compiled into LiteRT programs)
    assert written.models > 300 and written.tensors > 4000, (written.models, written.tensors)  # 344 / 439 models
    assert written.combined >= 3 and written.subgraphs > written.models  # Batch's several graphs in one model
    assert (written.external > 100) if external else (written.external == 0), written.external


def test_every_kernel_node_lowerings_model_reads_back_as_written(monkeypatch):
    from kernel_nodes import absorbed, graph_of
    from test_merge_kernels import CASES

    from pterun.delegates.xnnpack.litert_engine.translate import combine, translate, translate_part

    written = Written(monkeypatch)
    graphs = []
    for name, args in CASES + [c for c in CASES if c[0] == "aten::native_layer_norm.out"]:
        graph, _ = graph_of(*absorbed(name, args))
        if len(graphs) >= len(CASES):
            graph.nodes[0].fields["bitwise"] = True  # ExecuTorch's scalar loop (exact.py)
        graphs.append(graph)
        translate(graph)
    parts = [translate_part(g) for g in graphs[:6]]
    combine(parts).fill()
    assert written.failures == []
    assert (written.models, written.combined, written.subgraphs) == (len(graphs) + 1, 1, len(graphs) + 6)


def test_a_load_does_not_import_litert_s_generated_schema_module():
    r = run_python("""
        import sys
        import pterun
        m = pterun.Runtime().load_program("%s").load_method("forward")
        assert [d.engine for d in m.delegates] == ["litert"]
        print([k for k in sys.modules if k.startswith("ai_edge_litert.schema")])
    """ % (FIXTURES / "xnn_mlp.pte"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# -- state and run-time shapes: what the in-graph KV cache is built from (bench/probe_decode_attention.py) --------
def _tensor_fields(data: bytes):
    S = _reader()
    sg = S.Model.GetRootAsModel(data, 0).Subgraphs(0)
    return {sg.Tensors(i).Name().decode(): sg.Tensors(i) for i in range(sg.TensorsLength())}


def test_variable_and_shape_signature_fields_read_back():
    w = W.ModelWriter()
    T = w.S.TensorType
    c = w.add_tensor([8, 4], T.FLOAT32, name="cache", variable=True)
    n = w.add_tensor([2], T.INT32, name="size")
    y = w.add_tensor([8, 4], T.FLOAT32, name="y", signature=[-1, 4])
    w.op("SLICE", [c, w.i32([0, 0]), n], [y])
    fields = _tensor_fields(bytes(w.serialize([n], [y])))
    assert fields["cache"].IsVariable() is True and fields["y"].IsVariable() is False
    assert fields["y"].ShapeSignatureAsNumpy().tolist() == [-1, 4]
    assert fields["cache"].ShapeSignatureIsNone() and fields["size"].ShapeSignatureIsNone()
    assert fields["y"].ShapeAsNumpy().tolist() == [8, 4]


def test_a_variable_written_in_place_persists_and_a_run_time_slice_resizes():
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    w = W.ModelWriter()
    T = w.S.TensorType
    c = w.add_tensor([8, 4], T.FLOAT32, name="cache", variable=True)
    row = w.add_tensor([1, 4], T.FLOAT32, name="row")
    at = w.add_tensor([2], T.INT32, name="at")
    size = w.add_tensor([2], T.INT32, name="size")
    used = w.add_tensor([8, 4], T.FLOAT32, name="used", signature=[-1, 4])
    w.op("DYNAMIC_UPDATE_SLICE", [c, row, at], [c])  # in place: the operator's output is its operand
    w.op("SLICE", [c, w.i32([0, 0]), size], [used])
    data = w.serialize([row, at, size], [used])  # held: LiteRT reads the constants from these bytes
    it = Interpreter(model_content=data, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    wr = it._interpreter
    for pos in range(3):
        wr.SetTensor(row, np.full((1, 4), pos + 1, np.float32), 0)
        wr.SetTensor(at, np.array([pos, 0], np.int32), 0)
        wr.SetTensor(size, np.array([pos + 1, 4], np.int32), 0)
        wr.Invoke(0)
        got = wr.GetTensor(used, 0)
        assert got.shape == (pos + 1, 4)
        assert got[:, 0].tolist() == [1.0, 2.0, 3.0][:pos + 1]
