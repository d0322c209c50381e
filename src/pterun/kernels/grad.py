"""Backward kernels ExecuTorch ships for on-device training: convolution_backward (2-D, not transposed)
and max_pool2d_with_indices_backward.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.grad import max_pool2d_with_indices_backward_grad_input
    >>> g = max_pool2d_with_indices_backward_grad_input(np.ones((1, 1, 1, 1)), np.zeros((1, 1, 2, 2)), (2, 2),
    ...     (2, 2), (0, 0), (1, 1), False, np.array([[[[3]]]]), None)
    >>> g.reshape(-1).tolist()
    [0.0, 0.0, 0.0, 1.0]
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pterun.kernels._common import widen_half
from pterun.kernels.registry import register


def _pair(v):
    v = tuple(v)
    return v * 2 if len(v) == 1 else v


@register("aten::convolution_backward.out")
def convolution_backward_out(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,  # noqa: A002
                             output_padding, groups, output_mask, out0, out1, out2):
    """convolution_backward.out(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    if transposed or weight.ndim != 4:
        raise NotImplementedError("convolution_backward supports 2-D, non-transposed convolutions (as ExecuTorch)")
    ct = widen_half(input.dtype)
    go, x, w = (a.astype(ct, copy=False) for a in (grad_output, input, weight))
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = go.shape[-2:]
    grads = [None, None, None]
    if output_mask[0]:
        gi = np.zeros((n, c, h + 2 * ph + sh * oh + dh * kh, wd + 2 * pw + sw * ow + dw * kw), ct)
        for g in range(groups):
            gog, wg = go[:, g * og:(g + 1) * og], w[g * og:(g + 1) * og]
            for i in range(kh):
                for j in range(kw):
                    tap = np.einsum("nohw,oc->nchw", gog, wg[:, :, i, j])
                    gi[:, g * cg:(g + 1) * cg, i * dh: i * dh + sh * oh: sh, j * dw: j * dw + sw * ow: sw] += tap
        grads[0] = gi[:, :, ph:ph + h, pw:pw + wd]
    if output_mask[1]:
        xp = np.pad(x, ((0, 0), (0, 0), (ph, ph + sh * oh), (pw, pw + sw * ow)))
        win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
        win = win[:, :, : sh * oh: sh, : sw * ow: sw, ::dh, ::dw][:, :, :oh, :ow]  # N C OH OW KH KW
        gw = np.empty_like(w)
        for g in range(groups):
            gw[g * og:(g + 1) * og] = np.einsum("nohw,nchwij->ocij", go[:, g * og:(g + 1) * og],
                                                 win[:, g * cg:(g + 1) * cg])
        grads[1] = gw
    if output_mask[2]:
        grads[2] = go.sum(axis=(0, 2, 3))
    return tuple(grads)


@register("aten::max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward_grad_input(grad_output, self, kernel_size, stride, padding, dilation,
                                                ceil_mode, indices, grad_input):
    """max_pool2d_with_indices_backward.grad_input(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices, *, Tensor(a!) grad_input) -> Tensor(a!)"""
    h, w = self.shape[-2:]
    planes = int(np.prod(self.shape[:-2]))
    result = np.zeros((planes, h * w), widen_half(grad_output.dtype))
    idx = indices.reshape(planes, -1)
    if idx.size and (idx.min() < 0 or idx.max() >= h * w):
        raise IndexError(f"max_pool2d indices must lie in [0, {h * w})")
    rows = np.broadcast_to(np.arange(planes)[:, None], idx.shape)
    np.add.at(result, (rows, idx), grad_output.reshape(planes, -1))  # overlapping windows accumulate
    return result.reshape(self.shape)
