"""Shape and layout kernels: views, permutes, expand, cat/stack/split, slice/select, copies, dim-order copies.

Each returns the (possibly strided) NumPy view; the interpreter copies it into the planned output.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.shape import view_copy_out
    >>> view_copy_out(np.arange(6), (2, -1), np.empty((2, 3))).shape
    (2, 3)
"""

from __future__ import annotations

import numpy as np

from pterun.kernels import fast
from pterun.kernels._common import wrap_dim, wrap_dims
from pterun.kernels.registry import register


@register("aten::view_copy.out", specialize=fast.copy_of_view, returns_view=True)
def view_copy_out(self, size, out):
    """view_copy.out(Tensor self, SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    return self.reshape(size)


@register("aten::permute_copy.out", specialize=fast.copy_of_view, returns_view=True)
def permute_copy_out(self, dims, out):
    """permute_copy.out(Tensor self, int[] dims, *, Tensor(a!) out) -> Tensor(a!)"""
    return self.transpose(wrap_dims(dims, self.ndim))


@register("aten::transpose_copy.int_out", specialize=fast.copy_of_view, returns_view=True)
def transpose_copy_int_out(self, dim0, dim1, out):
    """transpose_copy.int_out(Tensor self, int dim0, int dim1, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim == 0:
        return self
    return np.swapaxes(self, wrap_dim(dim0, self.ndim), wrap_dim(dim1, self.ndim))


@register("aten::t_copy.out", specialize=fast.copy_of_view, returns_view=True)
def t_copy_out(self, out):
    """t_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim > 2:
        raise ValueError(f"t() expects a tensor with <= 2 dims, got {self.ndim}")
    return self.T


@register("aten::expand_copy.out", specialize=fast.copy_of_view, returns_view=True)
def expand_copy_out(self, size, implicit, out):
    """expand_copy.out(Tensor self, SymInt[] size, *, bool implicit=False, Tensor(a!) out) -> Tensor(a!)"""
    lead = len(size) - self.ndim
    if lead < 0:
        raise ValueError(f"cannot expand shape {list(self.shape)} to fewer dims {list(size)}")
    target = tuple(self.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(size))
    return np.broadcast_to(self, target)


@register("aten::squeeze_copy.dim_out", specialize=fast.copy_of_view, returns_view=True)
def squeeze_copy_dim_out(self, dim, out):
    """squeeze_copy.dim_out(Tensor self, int dim, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim == 0:
        return self
    d = wrap_dim(dim, self.ndim)
    return np.squeeze(self, d) if self.shape[d] == 1 else self


@register("aten::squeeze_copy.dims_out", specialize=fast.copy_of_view, returns_view=True)
def squeeze_copy_dims_out(self, dim, out):
    """squeeze_copy.dims_out(Tensor self, int[] dim, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim == 0:
        return self
    axes = tuple(d for d in wrap_dims(dim, self.ndim) if self.shape[d] == 1)
    return np.squeeze(self, axes) if axes else self


@register("aten::unsqueeze_copy.out", specialize=fast.copy_of_view, returns_view=True)
def unsqueeze_copy_out(self, dim, out):
    """unsqueeze_copy.out(Tensor self, int dim, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.expand_dims(self, wrap_dim(dim, self.ndim + 1))


@register("aten::cat.out")
def cat_out(tensors, dim, out):
    """cat.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out) -> Tensor(a!)"""
    # ExecuTorch skips empty inputs (the legacy 1-D [0] placeholder included) and casts every element
    # straight to the output dtype
    keep = [t for t in tensors if t.size] or [t for t in tensors if not (t.ndim == 1 and t.size == 0)]
    if not keep:
        return np.zeros(out.shape, out.dtype)
    return np.concatenate([t.astype(out.dtype, copy=False) for t in keep], axis=wrap_dim(dim, keep[0].ndim))


@register("aten::stack.out")
def stack_out(tensors, dim, out):
    """stack.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.stack([t.astype(out.dtype, copy=False) for t in tensors], axis=wrap_dim(dim, tensors[0].ndim + 1))


@register("aten::split_with_sizes_copy.out", specialize=fast.copies_of_views, returns_view=True)
def split_with_sizes_copy_out(self, split_sizes, dim, out):
    """split_with_sizes_copy.out(Tensor self, SymInt[] split_sizes, int dim=0, *, Tensor(a!)[] out) -> ()"""
    d = wrap_dim(dim, self.ndim)
    if sum(split_sizes) != self.shape[d]:
        raise ValueError(f"split sizes {list(split_sizes)} do not add up to dim {d} of size {self.shape[d]}")
    return np.split(self, np.cumsum(split_sizes)[:-1], axis=d)


@register("aten::split_copy.Tensor_out", specialize=fast.copies_of_views, returns_view=True)
def split_copy_tensor_out(self, split_size, dim, out):
    """split_copy.Tensor_out(Tensor self, SymInt split_size, int dim=0, *, Tensor(a!)[] out) -> ()"""
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    bounds = list(range(split_size, n, split_size)) if split_size > 0 else []
    return np.split(self, bounds, axis=d)


@register("aten::unbind_copy.int_out", returns_view=True)
def unbind_copy_int_out(self, dim, out):
    """unbind_copy.int_out(Tensor self, int dim=0, *, Tensor(a!)[] out) -> ()"""
    d = wrap_dim(dim, self.ndim)
    return [np.take(self, i, axis=d) for i in range(self.shape[d])]


@register("aten::slice_copy.Tensor_out", specialize=fast.copy_of_view, returns_view=True)
def slice_copy_tensor_out(self, dim, start, end, step, out):
    """slice_copy.Tensor_out(Tensor self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1, *, Tensor(a!) out) -> Tensor(a!)"""
    if step <= 0:
        raise ValueError(f"slice step must be positive, got {step}")
    d = wrap_dim(dim, self.ndim)
    index = [slice(None)] * self.ndim
    index[d] = slice(start, end, step)
    return self[tuple(index)]


@register("aten::select_copy.int_out", returns_view=True)
def select_copy_int_out(self, dim, index, out):
    """select_copy.int_out(Tensor self, int dim, SymInt index, *, Tensor(a!) out) -> Tensor(a!)"""
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    if not -n <= index < n:
        raise IndexError(f"index {index} is out of range for dim {d} of size {n}")
    return self[(slice(None),) * d + (index, Ellipsis)]  # a view (0-D too): ~0.3 us where np.take took ~2.7


def _identity(name, schema):
    def kernel(*args):
        return args[0]
    kernel.__doc__ = schema
    kernel.__name__ = name
    return kernel


_COPY_FAST = {"aten::clone.out", "aten::alias_copy.out", "aten::detach_copy.out", "dim_order_ops::_clone_dim_order.out",
              "dim_order_ops::_to_dim_order_copy.out"}
_ALIASES = {"aten::alias_copy.out", "aten::detach_copy.out"}
for _op, _schema in {
    "aten::clone.out": "clone.out(Tensor self, *, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)",
    "aten::alias_copy.out": "alias_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
    "aten::detach_copy.out": "detach_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
    "aten::lift_fresh_copy.out": "lift_fresh_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
    "aten::_to_copy.out": "_to_copy.out(Tensor self, *, bool non_blocking=False, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)",
    "dim_order_ops::_to_dim_order_copy.out": "_to_dim_order_copy.out(Tensor self, *, bool non_blocking=False, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    "dim_order_ops::_clone_dim_order.out": "_clone_dim_order.out(Tensor self, *, bool non_blocking=False, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    "et_copy::_h2d_copy.out": "_h2d_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
    "et_copy::_d2h_copy.out": "_d2h_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
}.items():
    # the interpreter's write casts to out's dtype and lays data out in out's dim order; where out has self's
    # dtype, the fast path is the same copy, and alias/detach are views in the folding sense too
    register(_op, specialize=fast.copy_of_view if _op in _COPY_FAST else None, returns_view=_op in _ALIASES)(
        _identity(_op.split("::")[1].replace(".", "_"), _schema))


@register("aten::copy_")
def copy_(self, src, non_blocking):
    """copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)"""
    return np.broadcast_to(src, self.shape)


@register("aten::copy.out")
def copy_out(self, src, non_blocking, out):
    """copy.out(Tensor self, Tensor src, bool non_blocking=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.broadcast_to(src, self.shape).astype(self.dtype)
