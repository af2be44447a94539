"""DyNet's selection, structure and linear-algebra functions (ops in ops/structure.py).

Shapes are numpy-like tuples with DyNet's meaning of each dimension: a matrix (m, n) has m
rows; conv2d's maps are (H, W, C) and its filters (kh, kw, C, Co), as in DyNet. A function
whose weight operand (a filter, the tensor of contract3d_*) is a parameter uses the op's
shared variant, so that a batch of nodes costs one GEMM; biases are stacked inputs."""
from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from . import minibatch, runtime
from .api import _graph, _is_param_node, _numbers, _op, _shape, esum, inputTensor, pickrange
from .errors import GraphError, user_line
from .graph import Expression
from .ops import OPS

__all__ = ["pick_range", "select_cols", "strided_select", "one_hot", "fold_rows", "colwise_add",
           "contract3d_1d", "contract3d_1d_bias", "contract3d_1d_1d", "contract3d_1d_1d_bias",
           "circ_conv", "circ_corr", "filter1d_narrow", "kmax_pooling", "inverse", "logdet",
           "trace_of_product", "conv2d", "conv2d_bias", "maxpooling2d", "kmh_ngram", "inputTensorTranspose"]

_S = runtime.state()


def _int(name: str, what: str, v, lo: int | None = None) -> int:
    """v as an int (>= lo if given), or a GraphError naming the function and the argument."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)) or (lo is not None and v < lo):
        bound = f" >= {lo}" if lo is not None else ""
        raise GraphError(f"{name}: {what} must be an integer{bound}, got {v!r} [at {user_line()}]")
    return int(v)


def _ints(name: str, what: str, vs, lo: int | None = None) -> tuple:
    if isinstance(vs, (numbers.Integral, np.integer)) or not isinstance(vs, (Sequence, np.ndarray)):
        raise GraphError(f"{name}: {what} must be a list of integers, got {vs!r} [at {user_line()}]")
    return tuple(_int(name, what, v, lo) for v in vs)


def _stride(name: str, stride) -> tuple:
    s = _ints(name, "stride", stride, 1)
    if len(s) != 2:
        raise GraphError(f"{name}: stride must be [row_stride, col_stride], got {stride!r} [at {user_line()}]")
    return s


# --- selection -------------------------------------------------------------------------------
def pick_range(x, s: int, e: int, d: int = 0) -> Expression:
    """DyNet's newer name of pickrange: elements s..e-1 along dimension d."""
    return pickrange(x, _int("pick_range", "s", s), _int("pick_range", "e", e), _int("pick_range", "d", d))


def select_cols(x, cs: Sequence[int]) -> Expression:
    """The given columns of a matrix (m, n), in order, repeats allowed: (m, len(cs))."""
    return _op(OPS["select_cols"], x, attr=_ints("select_cols", "cs", cs))


def kmh_ngram(x, v: int) -> Expression:
    """Sums of v consecutive columns of a matrix, as DyNet's: (r, c) -> (r, c - v + 1), column
    j the sum of columns j..j+v-1 (v of 1 to c)."""
    s = _shape(x)
    n = _int("kmh_ngram", "v", v, 1)
    if len(s) != 2 or n > s[1]:
        raise GraphError(f"kmh_ngram: needs a matrix of at least v columns, got shape {s} and v={n} "
                         f"[at {user_line()}]")
    m = s[1] - n + 1
    return esum([select_cols(x, list(range(t, t + m))) for t in range(n)])


def inputTensorTranspose(arr, dim=None, batch_size: int = 1, device: str = "") -> Expression:
    """A constant tensor from a flat array read in DyNet's memory order (column-major): shape
    dim (default: the array's length), batch_size elements (a minibatch, each in turn)."""
    a = _numbers("inputTensorTranspose", arr)
    if a.ndim != 1:
        raise GraphError(f"inputTensorTranspose: takes a one-dimensional array (a view of a tensor's "
                         f"memory), got shape {a.shape} [at {user_line()}]")
    d = (a.size,) if dim is None else (_int("inputTensorTranspose", "dim", dim, 1),) \
        if isinstance(dim, (numbers.Integral, np.integer)) else _ints("inputTensorTranspose", "dim", dim, 1)
    b = _int("inputTensorTranspose", "batch_size", batch_size, 1)
    if int(np.prod(d)) * b != a.size:
        raise GraphError(f"inputTensorTranspose: dim {d} times batch_size {b} do not make the array's "
                         f"{a.size} values [at {user_line()}]")
    return inputTensor(a.reshape(d + ((b,) if b > 1 else ()), order="F"), batched=b > 1)


def strided_select(x, strides: Sequence[int], range_from: Sequence[int] = (),
                   range_to: Sequence[int] = ()) -> Expression:
    """x[from[0]:to[0]:strides[0], from[1]:to[1]:strides[1], ...] in NumPy terms; missing
    trailing entries default to stride 1, from 0 and to the dimension's size. Unlike
    DyNet an empty selection is an error, and there is no batch entry."""
    f = "strided_select"
    attr = (_ints(f, "strides", strides), _ints(f, "range_from", range_from), _ints(f, "range_to", range_to))
    return _op(OPS["strided_select"], x, attr=attr)


def one_hot(d: int, idx: int, device: str = "") -> Expression:
    """A constant vector (d,) with 1 at idx and 0 elsewhere; a list idx makes DyNet's
    minibatch of them. device: DyNet's, accepted and unused (a graph lives on one backend)."""
    if isinstance(idx, (list, tuple, np.ndarray)):      # DyNet's minibatch: one vector per index
        return minibatch.batch_of([one_hot(d, i) for i in idx])
    d = _int("one_hot", "d", d, 1)
    i = _int("one_hot", "idx", idx)
    if not 0 <= i < d:
        raise GraphError(f"one_hot: index {i} out of range for dimension {d} [at {user_line()}]")
    a = np.zeros(d, dtype=_S.dtype)
    a[i] = 1
    return _graph().add(OPS["input"], (), (d,), a)


def fold_rows(x, nrows: int = 2) -> Expression:
    """Sums each group of nrows consecutive rows: (r, c) -> (r/nrows, c). A vector (r,)
    gives a vector (r/nrows,) (DyNet gives the matrix (r/nrows, 1))."""
    return _op(OPS["fold_rows"], x, attr=_int("fold_rows", "nrows", nrows, 1))


def kmax_pooling(x, k: int, d: int = 1) -> Expression:
    """The k largest values along dimension d, kept in their original order; dimension d
    becomes k. Ties: the gradient goes to the elements chosen, whichever they are."""
    return _op(OPS["kmax_pooling"], x, attr=(_int("kmax_pooling", "k", k), _int("kmax_pooling", "d", d, 0)))


# --- columns, contractions ---------------------------------------------------------------------
def colwise_add(x, y) -> Expression:
    """y (m,) added to each column of the matrix x (m, n); shape (m, n)."""
    return _op(OPS["colwise_add"], x, y)


def _shared_or(name: str, w):
    g = _graph()
    return OPS[name + "_shared"] if _is_param_node(w, g) else OPS[name]


def contract3d_1d(x, y) -> Expression:
    """z_ij = Σ_k x_ijk·y_k for x (i, j, k) and y (k,); shape (i, j)."""
    return _op(_shared_or("contract3d_1d", x), x, y)


def contract3d_1d_bias(x, y, b) -> Expression:
    """z_ij = b_ij + Σ_k x_ijk·y_k; b (i, j)."""
    return _op(_shared_or("contract3d_1d", x), x, y, b)


def contract3d_1d_1d(x, y, z) -> Expression:
    """t_i = Σ_jk x_ijk·y_k·z_j for x (i, j, k), y (k,), z (j,); shape (i,)."""
    return _op(_shared_or("contract3d_1d_1d", x), x, y, z)


def contract3d_1d_1d_bias(x, y, z, b) -> Expression:
    """t_i = b_i + Σ_jk x_ijk·y_k·z_j; b (i,)."""
    return _op(_shared_or("contract3d_1d_1d", x), x, y, z, b)


def trace_of_product(x, y) -> Expression:
    """Tr(x·yᵀ) = Σ x⊙y of two same-shape matrices (or vectors), as DyNet computes it; (1,)."""
    return _op(OPS["trace_of_product"], x, y)


def circ_conv(u, v) -> Expression:
    """Circular convolution of two vectors (n,): [u∗v]_k = Σ_i u_i·v_{(k-i) mod n}."""
    return _op(OPS["circ_conv"], u, v)


def circ_corr(u, v) -> Expression:
    """Circular correlation of two vectors (n,): [u⋆v]_k = Σ_i u_i·v_{(i+k) mod n}."""
    return _op(OPS["circ_corr"], u, v)


# --- linear algebra ------------------------------------------------------------------------------
def inverse(x) -> Expression:
    """The inverse of a square matrix (n, n); same shape."""
    return _op(OPS["inverse"], x)


def logdet(x) -> Expression:
    """log(det x) of a square matrix, shape (1,); NaN where det x < 0, as in DyNet."""
    return _op(OPS["logdet"], x)


# --- convolution, pooling --------------------------------------------------------------------------
def filter1d_narrow(x, y) -> Expression:
    """Narrow 1-D convolution (a cross-correlation) of x (d, n) with filters y (d, w), or m of
    them, y (d, w, m): out[o, j] = Σ_{r,c} x[r, j+c]·y[r, c, o]; shape (1 or m, n-w+1)."""
    return _op(_shared_or("filter1d_narrow", y), x, y)


def conv2d(x, f, stride: Sequence[int], is_valid: bool = True) -> Expression:
    """2-D convolution (a cross-correlation, as in DyNet) of x (H, W, C) (or (H, W), C = 1)
    with filters f (kh, kw, C, Co): (YH, YW, Co). stride = [row, col]. VALID:
    YH = ceil((H-kh+1)/stride_h); SAME: YH = ceil(H/stride_h), zero padding split evenly
    with the odd row/column at the bottom/right."""
    return _op(_shared_or("conv2d", f), x, f, attr=_stride("conv2d", stride) + (bool(is_valid),))


def conv2d_bias(x, f, b, stride: Sequence[int], is_valid: bool = True) -> Expression:
    """conv2d plus a bias b (Co,) on each output channel."""
    return _op(_shared_or("conv2d", f), x, f, b, attr=_stride("conv2d_bias", stride) + (bool(is_valid),))


def maxpooling2d(x, ksize: Sequence[int], stride: Sequence[int], is_valid: bool = True) -> Expression:
    """The maximum of each ksize = [kh, kw] window of x (H, W, C) (or (H, W)), per channel:
    (YH, YW, C); sizes and SAME padding as in conv2d (padding never wins a maximum)."""
    k = _ints("maxpooling2d", "ksize", ksize, 1)
    if len(k) != 2:
        raise GraphError(f"maxpooling2d: ksize must be [kh, kw], got {ksize!r} [at {user_line()}]")
    return _op(OPS["maxpooling2d"], x, attr=k + _stride("maxpooling2d", stride) + (bool(is_valid),))
