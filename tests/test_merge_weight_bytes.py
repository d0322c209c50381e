"""What a delegate's weights cost a merged call (``XnnpackBackend.weight_bytes``, bounded by ``merge_bytes``): 4-bit
weights, which LiteRT's engine copies into its model until XNNPACK packs them, in full; weights read from the
program file in place at half their size (a 130M fp32 Llama's delegates were four calls, now two)."""

from __future__ import annotations

import numpy as np

from pterun.delegates import BACKENDS
from pterun.delegates.xnnpack import payload as P
from xnn_payloads import Graph, T, V, fc_graph, per_token, qb4_fc_graph

RNG = np.random.default_rng(3)


def test_weights_read_in_place_count_half_their_bytes():
    blob, _ = fc_graph().blob()  # fp32 weights [4, 3] (48 bytes) and bias [4] (16 bytes)
    assert P.weight_bytes(blob) == blob.nbytes + 48 // 2 + 16 // 2


def test_four_bit_weights_count_in_full():
    wq = RNG.integers(-8, 8, (8, 64))
    blob, _ = qb4_fc_graph(wq, np.ones((8, 2), np.float32), 32).blob()
    # two weights a byte, copied (converted) by LiteRT's engine
    assert P.weight_bytes(blob) == blob.nbytes + 8 * 64 // 2


def test_a_graph_with_both_counts_each_constant_by_its_own_kind():
    g = Graph()
    x = g.input([2, 64])
    qd = g.internal([2, 64], P.QDINT8, per_token(1))
    packed = RNG.integers(0, 256, (8, 32)).astype(np.uint8)
    quant = (P.PER_CHANNEL_GROUP, T({4: ("o", V("f", [1.0] * 16)), 6: ("i", 0), 8: ("i", 32)}))
    w4 = g.value([8, 64], P.QBINT4, data=packed, quant=quant)
    bias = g.value([8], data=np.zeros(8, np.float32))
    y = g.output([2, 8])
    g.node("Convert", input_id=x, output_id=qd)
    g.node("FullyConnected", input1_id=qd, filter_id=w4, bias_id=bias, output_id=y)
    blob, _ = g.blob()
    assert P.weight_bytes(blob) == blob.nbytes + 256 + 32 // 2
    assert BACKENDS["XnnpackBackend"].weight_bytes(blob) == P.weight_bytes(blob)


def test_a_payload_whose_tables_cannot_be_read_counts_its_size():
    blob = np.frombuffer(b"\x00" * 40, np.uint8)
    assert P.weight_bytes(blob) == 40
