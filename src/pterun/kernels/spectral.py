"""Complex-number kernels: the real FFTs of ExecuTorch's optimized library (_fft_r2c, _fft_c2r),
view_as_real_copy and _conj_physical, on NumPy's complex64/complex128.

``normalization`` is ATen's enum: 0 = none, 1 = 1/sqrt(n), 2 = 1/n, applied in the transform's own direction.
Example::

    >>> import numpy as np
    >>> from pterun.kernels.spectral import fft_r2c_out
    >>> fft_r2c_out(np.ones(4, np.float32), (0,), 0, True, None).tolist()
    [(4+0j), 0j, 0j]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import wrap_dims
from pterun.kernels.registry import register

# numpy's ``norm`` names which direction carries the scaling; ATen's enum gives the scaling of *this* call
_FORWARD_NORM = {0: "backward", 1: "ortho", 2: "forward"}
_INVERSE_NORM = {0: "forward", 1: "ortho", 2: "backward"}


def _complex_type(dtype):
    return np.complex128 if dtype == np.float64 or dtype == np.complex128 else np.complex64


@register("aten::_fft_r2c.out")
def fft_r2c_out(self, dim, normalization, onesided, out):
    """_fft_r2c.out(Tensor self, int[] dim, int normalization, bool onesided, *, Tensor(a!) out) -> Tensor(a!)"""
    axes = wrap_dims(dim, self.ndim)
    x = self.astype(np.float64 if self.dtype == np.float64 else np.float32, copy=False)
    norm = _FORWARD_NORM[normalization]
    y = np.fft.rfftn(x, axes=axes, norm=norm) if onesided else np.fft.fftn(x, axes=axes, norm=norm)
    return y.astype(_complex_type(self.dtype), copy=False)


@register("aten::_fft_c2r.out")
def fft_c2r_out(self, dim, normalization, last_dim_size, out):
    """_fft_c2r.out(Tensor self, int[] dim, int normalization, SymInt last_dim_size, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.dtype.kind != "c":
        raise TypeError(f"_fft_c2r needs a complex tensor, got {self.dtype}")
    axes = wrap_dims(dim, self.ndim)
    sizes = [self.shape[a] for a in axes[:-1]] + [last_dim_size]
    y = np.fft.irfftn(self, s=sizes, axes=axes, norm=_INVERSE_NORM[normalization])
    return y.astype(np.float64 if self.dtype == np.complex128 else np.float32, copy=False)


@register("aten::view_as_real_copy.out")
def view_as_real_copy_out(self, out):
    """view_as_real_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.dtype.kind != "c":
        raise TypeError(f"view_as_real needs a complex tensor, got {self.dtype}")
    return np.stack([self.real, self.imag], axis=-1)


@register("aten::_conj_physical.out")
def conj_physical_out(self, out):
    """_conj_physical.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.conj(self) if self.dtype.kind == "c" else self
