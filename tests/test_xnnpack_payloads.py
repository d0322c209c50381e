"""XNNPACK payload validation: a bad payload or graph fails at load with a DelegateError that says what is wrong
(before any engine is chosen, so once), and a bad input at run time fails the same way on each engine."""

from __future__ import annotations

import importlib.util
import struct

import numpy as np
import pytest

from pterun.delegates.xnnpack import load
from pterun.delegates.xnnpack import payload as P
from pterun.errors import DelegateError
from xnn_payloads import F32, QINT8, Graph, T, V, fc_graph, out_tensor, tensor

ENGINES = pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=pytest.mark.skipif(
    importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed"))])


def _patched(blob: np.ndarray, offset: int, data: bytes) -> np.ndarray:
    b = bytearray(blob.tobytes())
    b[offset : offset + len(data)] = data
    return np.frombuffer(bytes(b), np.uint8)


def _graph_with(mutate) -> Graph:
    g = fc_graph()
    mutate(g)
    return g


BAD_PAYLOADS = {
    "too short": (lambda: (np.zeros(5, np.uint8), None), "too short"),
    "identifier": (lambda: (_patched(fc_graph().blob()[0], 36, b"ZZ99"), None), "identifier"),
    "flatbuffer region": (lambda: (_patched(fc_graph().blob()[0], 14, struct.pack("<I", 10**6)), None),
                          "flatbuffer region"),
    "constant region": (lambda: (_patched(fc_graph().blob()[0], 22, struct.pack("<Q", 10**6)), None),
                        "constant region"),
    "truncated": (lambda: (fc_graph().blob()[0][:60], None), "XNNPACK payload"),
}


@pytest.mark.parametrize("case", sorted(BAD_PAYLOADS))
def test_corrupt_blob_raises_delegate_error(case):
    make, match = BAD_PAYLOADS[case]
    blob, _ = make()
    with pytest.raises(DelegateError, match=match):
        load(blob, lambda key: np.zeros(64, np.uint8))


def _prepend_node(g: Graph, name: str, **fields) -> None:
    g.node(name, **fields)
    g.nodes.insert(0, g.nodes.pop())


def _set_tv(g: Graph, vid: int, slot: int, code: str, value) -> None:
    g.values[vid].fields[6][1].fields[slot] = (code, value)


BAD_GRAPHS = {
    "external id": (lambda g: g.__setattr__("n_in", 0) or _set_tv(g, 0, 12, "I", 40), "external id"),
    "value flags": (lambda g: _set_tv(g, 0, 14, "I", 0x10), "unsupported flags"),
    "datatype": (lambda g: _set_tv(g, 1, 4, "h", 99), "invalid datatype"),
    "unsupported datatype": (lambda g: _set_tv(g, 3, 4, "h", P.QPINT8), "qpint8"),
    "quantized without params": (lambda g: _set_tv(g, 0, 4, "h", QINT8), "per-tensor quantization"),
    "undefined value": (lambda g: g.node("Abs", input_id=77, output_id=3), "value 77"),
    "read before produced": (lambda g: _prepend_node(g, "Abs", input_id=3, output_id=g.internal([2, 4])),
                             "before any node produces it"),
    "unknown node type": (lambda g: g.nodes.append(T({4: ("B", 99), 6: ("o", T({4: ("I", 0)}))})), "type 99"),
    "writes an input": (lambda g: g.node("Abs", input_id=3, output_id=0), "graph input"),
    "num_dims": (lambda g: _set_tv(g, 1, 8, "o", V("I", [4, 3, 1])), "num_dims=2 but has 3"),
    "filter shape": (lambda g: _set_tv(g, 1, 8, "o", V("I", [4, 3, 1])) or _set_tv(g, 1, 6, "I", 3), "2-D"),
    "reshape": (lambda g: g.node("StaticReshape", num_dims=2, new_shape=[0, 0], input_id=3,
                                 output_id=g.internal([4])), "inferred"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_invalid_graph_raises_delegate_error(case):
    mutate, match = BAD_GRAPHS[case]
    g = _graph_with(mutate)
    blob, named = g.blob()
    with pytest.raises(DelegateError, match=match):
        load(blob, named)


def test_missing_named_data_names_the_key():
    blob, _ = fc_graph().blob()
    with pytest.raises(DelegateError, match="key1"):
        load(blob, lambda key: (_ for _ in ()).throw(KeyError(key)))


def test_short_named_data_is_rejected():
    blob, _ = fc_graph().blob()
    with pytest.raises(DelegateError, match="has 8 bytes"):
        load(blob, lambda key: np.zeros(8, np.uint8))


@ENGINES
def test_wrong_input_dtype_at_run_time(engine):
    blob, named = fc_graph().blob()
    plan = load(blob, named, engine)
    with pytest.raises(DelegateError, match="dtype"):
        plan.execute([tensor(np.zeros((2, 3), np.float64)), out_tensor((2, 4), F32)])
    with pytest.raises(DelegateError, match="XNNFullyConnected"):
        plan.execute([tensor(np.zeros((2, 7), F32)), out_tensor((2, 4), F32)])


def test_fuzzed_payloads_never_leak_other_exceptions():
    blob, named = fc_graph().blob()
    rng = np.random.default_rng(7)
    for trial in range(400):
        b = bytearray(blob.tobytes())
        if trial % 4 == 0:
            b = b[: rng.integers(0, len(b))]
        else:
            for _ in range(rng.integers(1, 4)):
                b[rng.integers(0, len(b))] = int(rng.integers(0, 256))
        try:
            load(np.frombuffer(bytes(b), np.uint8), named)
        except DelegateError:
            pass


@ENGINES
def test_rank0_tensors_map_to_one_element_values(engine):
    g = Graph()
    i, o = g.input([1]), g.output([1])  # the exporter serializes scalars as dims [1]
    g.node("Negate", input_id=i, output_id=o)
    blob, named = g.blob()
    out = out_tensor((), F32)
    load(blob, named, engine).execute([tensor(np.array(2.5, F32)), out])
    assert out.array.shape == () and out.array == -2.5
    out = out_tensor((), F32)
    load(blob, named, engine).execute([tensor(np.array([2.5], F32)), out])
    assert out.array == -2.5


#: the fields of pterun's own node kinds (.graph.EXTRA_NODE_TYPES' comment), beyond the payload format's
OWN_NODE_FIELDS = {"input_id", "output_id", "axes", "keepdim", "op", "args", "call", "hkv", "hq", "d", "s", "scale",
                   "causal", "values", "dim", "element"}


def test_a_node_reads_its_fields_as_attributes_and_stays_immutable():
    n = P.Node(0, 1, "FullyConnected", {"input1_id": 3, "filter_id": 4}, -1.0, 1.0, 7)
    assert (n.input1_id, n.filter_id, n.name, n.index) == (3, 4, "FullyConnected", 0)
    moved = n._replace(index=5, fields={"input1_id": 9})
    assert type(moved) is P.Node and (moved.index, moved.input1_id, moved.debug_handle) == (5, 9, 7)
    with pytest.raises(AttributeError, match="has no attribute 'filter_id'"):
        moved.filter_id
    with pytest.raises(AttributeError, match="Node is immutable"):
        n.input1_id = 1
    assert n.fields == {"input1_id": 3, "filter_id": 4}
    assert P.Node._make(tuple(n)).filter_id == 4 and P.Node._make(tuple(n)) == n


def test_no_node_field_hides_or_is_hidden_by_a_name_of_the_node_class():
    names = {f[0] if isinstance(f, tuple) else f for _, fields in P.NODE_TYPES.values() for f in fields}
    assert len(names) > 40 and not {n for n in names | OWN_NODE_FIELDS if hasattr(P.Node, n)}
