"""Kernels for the custom operators ExecuTorch's LLM exporter emits (namespace ``llama``).

The KV cache is method state in planned memory: ``update_cache`` writes the new rows straight into the
``cache`` array the interpreter hands over (a live view of the arena) and returns ``None`` for it, so a decode
step never copies the whole cache. Attention reads the cache through views as well. Layouts follow
ExecuTorch: q/k/v and caches are ``[batch, seq, heads, head_dim]`` (``is_seq_at_dim_2`` flips to
``[batch, heads, seq, head_dim]`` for the quantized op). Example::

    >>> import numpy as np
    >>> from pterun.kernels.llm import update_cache_out, custom_sdpa_out
    >>> cache = np.zeros((1, 8, 2, 4), np.float32)
    >>> update_cache_out(np.ones((1, 3, 2, 4), np.float32), cache, 2, np.zeros(1, np.float32))
    (None, None)
    >>> float(cache[0, 2:5].sum()), float(cache.sum())
    (24.0, 24.0)
    >>> q = np.ones((1, 1, 2, 4), np.float32)
    >>> custom_sdpa_out(q, cache, cache, 4, None, 0.0, True, None, None).shape
    (1, 1, 2, 4)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from pterun.kernels._common import F32
from pterun.kernels.registry import register


def _check_cache_write(value, cache, what: str = "cache") -> None:
    if value.ndim != 4 or cache.ndim != 4:
        raise ValueError(f"value and {what} must be 4-D, got shapes {list(value.shape)} and {list(cache.shape)}")
    if (value.shape[0], value.shape[2], value.shape[3]) != (cache.shape[0], cache.shape[2], cache.shape[3]):
        raise ValueError(f"value {list(value.shape)} does not match {what} {list(cache.shape)} in batch, heads or "
                         "head dim")
    if value.dtype.itemsize != cache.dtype.itemsize:
        raise ValueError(f"value dtype {value.dtype} and {what} dtype {cache.dtype} differ in element size")


@register("llama::update_cache.out", unwritten=(3,))
def update_cache_out(value, cache, start_pos, out):
    """update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, Tensor(b!) out) -> Tensor(b!)"""
    vs, cs = value.shape, cache.shape
    # a decode step's checks, in a few comparisons (it runs twice per layer per token); the full check names
    # what is wrong
    if len(vs) != 4 or len(cs) != 4 or vs[0] != cs[0] or vs[2] != cs[2] or vs[3] != cs[3] or \
            value.dtype.itemsize != cache.dtype.itemsize:
        _check_cache_write(value, cache)
    seq = vs[1]
    if not 0 <= start_pos < cs[1] or start_pos + seq > cs[1]:
        raise ValueError(f"start_pos {start_pos} + seq_len {seq} does not fit the cache's {cs[1]} positions")
    # in place, into the method's planned memory; ExecuTorch leaves ``out`` (a [1] placeholder) untouched too
    cache[:, start_pos:start_pos + seq] = value if value.dtype == cache.dtype else value.view(cache.dtype)
    return None, None


@register("llama::update_cache_with_indices.out", unwritten=(4,))
def update_cache_with_indices_out(value, cache, start_pos, indices, out):
    """update_cache_with_indices.out(Tensor value, Tensor(a!) cache, SymInt start_pos, Tensor indices, *, Tensor(b!) out) -> Tensor(b!)"""
    _check_cache_write(value, cache)
    if indices.ndim != 2 or indices.shape != value.shape[:2] or indices.dtype != np.int64:
        raise ValueError(f"indices must be int64 [batch, seq] = {list(value.shape[:2])}, got {indices.dtype} "
                         f"{list(indices.shape)}")
    if indices.size and (indices.min() < 0 or indices.max() >= cache.shape[1]):
        raise ValueError(f"cache index out of range [0, {cache.shape[1]}): {indices.tolist()}")
    cache[np.arange(value.shape[0])[:, None], indices] = value.view(cache.dtype)
    return None, None


def _attend(q, k, v, start_pos: int, mask, is_causal: bool, scale, out=None):
    """Attention over ``[B, S, H, D]`` views; k/v are caches ``[B, L, Hkv, D]`` read up to the used length. A
    decode step (S == 1) writes its result straight into ``out`` when that is a float32 array of its shape in
    memory order, and returns it."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"query, key and value must be 4-D, got {q.ndim}, {k.ndim} and {v.ndim} dims")
    if mask is not None and is_causal:
        raise ValueError("attn_mask and is_causal cannot be set at the same time")
    b, s, hq, d = q.shape
    hkv = k.shape[2]
    if k.shape[3] != d or v.shape[3] != d or hkv == 0 or hq % hkv:
        raise ValueError(f"query {list(q.shape)} does not fit key {list(k.shape)} / value {list(v.shape)} "
                         "(head dims must match and query heads must be a multiple of kv heads)")
    if mask is None:
        kv_len = start_pos + s
    else:  # with a mask ExecuTorch attends over the whole cache, and the mask must span it
        kv_len = k.shape[1]
        if mask.ndim != 2 or mask.shape != (s, kv_len):
            raise ValueError(f"attn_mask must be 2-D [{s}, {kv_len}], got {list(mask.shape)}")
    if start_pos < 0 or kv_len > k.shape[1] or kv_len > v.shape[1]:
        raise ValueError(f"start_pos {start_pos} + seq_len {s} exceeds the cache's {k.shape[1]} positions")
    scale = np.float32(1.0 / math.sqrt(d) if scale is None else scale)
    rep = hq // hkv
    if q.dtype != F32:
        q, k, v = q.astype(F32), k[:, :kv_len].astype(F32), v[:, :kv_len].astype(F32)
    # group query heads by their kv head: [B, Hkv, rep*S, D] so one matmul per kv head serves all its queries
    # (a decode step, S == 1, needs no transpose: [B, 1, Hq, D] is already [B, Hkv, rep, D]). As ExecuTorch's
    # kernel does, the products are scaled, then masked, and the output, not the weights, is multiplied by the
    # reciprocal of the softmax's sum
    vt = v[:, :kv_len].transpose(0, 2, 1, 3)
    if s == 1:
        scores = np.matmul(q.reshape(b, hkv, rep, d), k[:, :kv_len].transpose(0, 2, 3, 1))  # [B, Hkv, rep, kv]
        scores *= scale
        if mask is not None:
            scores += mask.astype(F32, copy=False)
        scores -= np.maximum.reduce(scores, axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        inv = np.reciprocal(np.add.reduce(scores, axis=-1, keepdims=True))
        if out is not None and out.shape == (b, 1, hq, d) and out.dtype == F32 and out.flags.c_contiguous:
            ctx = np.matmul(scores, vt, out=out.reshape(b, hkv, rep, d))
            ctx *= inv
            return out
        ctx = np.matmul(scores, vt)
        ctx *= inv
        return ctx.reshape(b, 1, hq, d)
    return _attend_queries(q, k, vt, kv_len, start_pos, mask, is_causal, scale)


def _attend_queries(q, k, vt, kv_len: int, start_pos: int, mask, is_causal: bool, scale):
    """:func:`_attend` for several queries (S > 1), the arguments checked: the scores keys-first, [B, Hkv, kv,
    rep*S], so the softmax reduces across rows of the array (NumPy reduces across contiguous rows 4-6x faster
    than along rows of ~100 elements) and a mask is one broadcast add (-inf where masked, as ExecuTorch sets
    them; +0 elsewhere changes no score)."""
    b, s, hq, d = q.shape
    hkv = k.shape[2]
    rep = hq // hkv
    qg = q.reshape(b, s, hkv, rep, d).transpose(0, 2, 3, 1, 4).reshape(b, hkv, rep * s, d)
    scores = np.matmul(k[:, :kv_len].transpose(0, 2, 1, 3), qg.transpose(0, 1, 3, 2))  # [B, Hkv, kv, rep*S]
    scores *= scale
    grid = scores.reshape(b, hkv, kv_len, rep, s)  # a view: scores is fresh and contiguous
    if mask is not None:
        grid += mask.astype(F32, copy=False).T[:, None, :]
    elif is_causal:
        grid += _causal_bias(s, kv_len, start_pos)
    scores -= np.maximum.reduce(scores, axis=-2, keepdims=True)
    np.exp(scores, out=scores)
    inv = np.reciprocal(np.add.reduce(scores, axis=-2, keepdims=True))  # [B, Hkv, 1, rep*S]
    ctx = np.matmul(scores.transpose(0, 1, 3, 2), vt)  # [B, Hkv, rep*S, D]
    ctx *= inv.transpose(0, 1, 3, 2)
    return ctx.reshape(b, hkv, rep, s, d).transpose(0, 3, 1, 2, 4).reshape(b, s, hq, d)


@functools.lru_cache(maxsize=1)
def _causal_bias(s: int, kv_len: int, start_pos: int) -> np.ndarray:
    """[kv, 1, S]: -inf where key j is after query i's position (start_pos + i), else 0 (read-only; the layers of
    one call share it, and only the last one is kept: it is a twelfth of the size of one layer's scores)."""
    bias = np.where(np.arange(kv_len)[:, None] > start_pos + np.arange(s)[None, :], np.float32(-np.inf),
                    np.float32(0))[:, None, :]
    bias.flags.writeable = False
    return bias


@register("llama::custom_sdpa.out")
def custom_sdpa_out(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, out):
    """custom_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, *, Tensor(a!) out) -> Tensor(a!)"""
    if query.dtype == F32:
        return _attend(query, key, value, start_pos, attn_mask, is_causal, scale, out)
    return _attend(query, key, value, start_pos, attn_mask, is_causal, scale).astype(query.dtype, copy=False)


@register("llama::sdpa_with_kv_cache.out")
def sdpa_with_kv_cache_out(query, key, value, key_cache, value_cache, start_pos, seq_len, attn_mask, drpout_p,
                           is_causal, scale, out):
    """sdpa_with_kv_cache.out(Tensor query, Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, SymInt start_pos, SymInt seq_len, Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, *, Tensor(c!) out) -> Tensor(c!)"""
    if start_pos + seq_len > key_cache.shape[1] or start_pos + seq_len > value_cache.shape[1]:
        raise ValueError(f"start_pos {start_pos} + seq_len {seq_len} exceeds the cache's {key_cache.shape[1]} "
                         "positions")
    update_cache_out(key, key_cache, start_pos, None)
    update_cache_out(value, value_cache, start_pos, None)
    ctx = _attend(query, key_cache, value_cache, start_pos, attn_mask, is_causal, scale)
    return None, None, ctx.astype(query.dtype, copy=False)


def _dequant(x, zero_points, scales, what: str):
    if zero_points is None or scales is None:
        raise ValueError(f"{what}: zero points and scales are required")
    return (x.astype(F32) - zero_points.astype(F32)) * scales.astype(F32, copy=False)


@register("llama::custom_quantized_sdpa.out")
def custom_quantized_sdpa_out(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, q_zero_points,
                              q_scales, k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2, out):
    """custom_quantized_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, Tensor? q_zero_points=None, Tensor? q_scales=None, Tensor? k_zero_points=None, Tensor? k_scales=None, Tensor? v_zero_points=None, Tensor? v_scales=None, bool is_seq_at_dim_2=False, *, Tensor(a!) out) -> Tensor(a!)"""
    if is_seq_at_dim_2:  # [B, H, S, D] layout: view it as [B, S, H, D] (zero points/scales follow the same layout)
        query, key, value = (t.transpose(0, 2, 1, 3) for t in (query, key, value))
        q_zero_points, q_scales, k_zero_points, k_scales, v_zero_points, v_scales = (
            t.transpose(0, 2, 1, 3) if t is not None else None
            for t in (q_zero_points, q_scales, k_zero_points, k_scales, v_zero_points, v_scales))
    s = query.shape[1]
    kv_len = start_pos + s if attn_mask is None else key.shape[1]
    # only the used part of the int8 cache is dequantized: per token, (x - zero_point) * scale
    q = _dequant(query, q_zero_points, q_scales, "query")
    k = _dequant(key[:, :kv_len], k_zero_points[:, :kv_len], k_scales[:, :kv_len], "key") \
        if k_zero_points is not None and k_scales is not None else _dequant(key, None, None, "key")
    v = _dequant(value[:, :kv_len], v_zero_points[:, :kv_len], v_scales[:, :kv_len], "value") \
        if v_zero_points is not None and v_scales is not None else _dequant(value, None, None, "value")
    if attn_mask is None and kv_len > k.shape[1]:
        raise ValueError(f"start_pos {start_pos} + seq_len {s} exceeds the cache's {key.shape[1]} positions")
    ctx = _attend(q, k, v, start_pos, attn_mask, is_causal, scale)
    return ctx.transpose(0, 2, 1, 3) if is_seq_at_dim_2 else ctx
