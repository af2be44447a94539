"""Selection, structure and small linear-algebra ops (DyNet's select_cols, strided_select,
fold_rows, colwise_add, contract3d_*, circ_conv/corr, filter1d_narrow, kmax_pooling, inverse,
logdet, trace_of_product, conv2d, maxpooling2d).

Ops with a weight operand that is usually a parameter (a filter, the tensor of a bilinear
contraction) come twice: ``<name>_shared`` takes it shared, so that a batch costs one GEMM
over all its nodes' rows, and ``<name>`` takes it stacked, for weights computed per node.
Biases are always stacked: a parameter in a stacked slot already arrives as a broadcast
view (no copy), and a computed bias then still batches."""
from __future__ import annotations

import numpy as np

from .base import Op, ProductGrad, ShapeError, prod, register


def _register_stacked_and_shared(base, name, weight):
    """Registers the op of class base twice: ``name`` takes every input stacked, and
    ``name``_shared takes input ``weight`` shared."""
    cls = base.__name__.lstrip("_")
    register(type(cls, (base,), {"name": name}))
    register(type(cls + "Shared", (base,), {"name": name + "_shared", "shared": (weight,)}))


# --- selection ----------------------------------------------------------------------------
@register
class SelectCols(Op):
    """select_cols(x, cols): columns of a matrix, in order, repeats allowed; cols in attr."""
    name = "select_cols"

    def shape(self, shapes, attr):
        s = shapes[0]
        if len(s) != 2:
            raise ShapeError(f"select_cols: needs a matrix (m, n), got {s}")
        if not attr:
            raise ShapeError("select_cols: needs at least one column")
        for c in attr:
            if not 0 <= c < s[1]:
                raise ShapeError(f"select_cols: column {c} out of range for shape {s}")
        return (s[0], len(attr))

    def forward(self, xp, xs, attr, data):
        return xs[0][:, :, list(attr)]

    def backward(self, xp, xs, y, gy, attr, data):
        g = xp.zeros_like(xs[0])
        if len(set(attr)) == len(attr):
            g[:, :, list(attr)] = gy
        else:
            for k, c in enumerate(attr):   # repeated columns accumulate
                g[:, :, c] += gy[:, :, k]
        return [g]


def _strided_slices(shape, attr):
    """DyNet's strided_select arguments (strides, range_from, range_to; missing trailing
    entries default to 1, 0 and the dimension's size) as one slice per dimension."""
    strides, froms, tos = attr
    if max(len(strides), len(froms), len(tos)) > len(shape):
        raise ShapeError(f"strided_select: more entries than the {len(shape)} dimension(s) of {shape} "
                         f"(strides {list(strides)}, range_from {list(froms)}, range_to {list(tos)}; "
                         "there is no batch dimension)")
    out = []
    for d, n in enumerate(shape):
        s = strides[d] if d < len(strides) else 1
        f = froms[d] if d < len(froms) else 0
        t = tos[d] if d < len(tos) else n
        if s < 1 or not 0 <= f < t <= n:
            raise ShapeError(f"strided_select: dimension {d} of {shape}: needs stride >= 1 and "
                             f"0 <= from < to <= {n}, got stride {s}, from {f}, to {t}")
        out.append(slice(f, t, s))
    return out


@register
class StridedSelect(Op):
    """strided_select(x, strides, range_from, range_to): x[from:to:stride, ...] per dimension;
    attr = (strides, range_from, range_to) as given (defaults resolved against the shape)."""
    name = "strided_select"

    def shape(self, shapes, attr):
        return tuple(len(range(sl.start, sl.stop, sl.step)) for sl in _strided_slices(shapes[0], attr))

    def forward(self, xp, xs, attr, data):
        return xs[0][(slice(None),) + tuple(_strided_slices(xs[0].shape[1:], attr))]

    def backward(self, xp, xs, y, gy, attr, data):
        g = xp.zeros_like(xs[0])
        g[(slice(None),) + tuple(_strided_slices(xs[0].shape[1:], attr))] = gy
        return [g]


@register
class FoldRows(Op):
    """fold_rows(x, nrows): row i of the result is the sum of rows i·nrows … i·nrows+nrows-1
    (consecutive groups); attr = nrows. A vector stays a vector."""
    name = "fold_rows"

    def shape(self, shapes, attr):
        s = shapes[0]
        if len(s) not in (1, 2) or attr < 1 or s[0] % attr:
            raise ShapeError(f"fold_rows: needs a vector or matrix whose rows divide by nrows={attr}, got {s}")
        return (s[0] // attr,) + s[1:]

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return x.reshape((x.shape[0], x.shape[1] // attr, attr) + x.shape[2:]).sum(axis=2)

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        g = xp.broadcast_to(gy.reshape((x.shape[0], gy.shape[1], 1) + gy.shape[2:]),
                            (x.shape[0], gy.shape[1], attr) + gy.shape[2:])
        return [g.reshape(x.shape)]


@register
class KMaxPooling(Op):
    """kmax_pooling(x, k, d): the k largest values along dimension d, in their original
    order; attr = (k, d)."""
    name = "kmax_pooling"

    def shape(self, shapes, attr):
        k, d = attr
        s = shapes[0]
        if not 0 <= d < len(s):
            raise ShapeError(f"kmax_pooling: dimension {d} out of range for shape {s}")
        if not 1 <= k <= s[d]:
            raise ShapeError(f"kmax_pooling: k={k} must be in [1, {s[d]}] (size of dimension {d} of {s})")
        return s[:d] + (k,) + s[d + 1:]

    @staticmethod
    def _rows(xp, x, attr):
        """x as rows (R, n) along d, and the sorted positions (R, k) of each row's k largest;
        of equal values the earliest win (as DyNet's: after a rectify, which zeros win matters)."""
        k, d = attr
        xm = xp.moveaxis(x, d + 1, -1)
        rows = xm.reshape(-1, xm.shape[-1])
        idx = xp.sort(xp.argsort(-rows, axis=1, kind="stable")[:, :k], axis=1)
        return xm.shape, rows, idx

    def forward(self, xp, xs, attr, data):
        k, d = attr
        shape, rows, idx = self._rows(xp, xs[0], attr)
        y = xp.take_along_axis(rows, idx, axis=1)
        return xp.moveaxis(y.reshape(shape[:-1] + (k,)), -1, d + 1)

    def backward(self, xp, xs, y, gy, attr, data):
        k, d = attr
        shape, rows, idx = self._rows(xp, xs[0], attr)
        g = xp.zeros(rows.shape, dtype=gy.dtype)
        g[xp.arange(rows.shape[0])[:, None], idx] = xp.moveaxis(gy, d + 1, -1).reshape(-1, k)
        return [xp.moveaxis(g.reshape(shape), -1, d + 1)]


# --- columns, contractions ------------------------------------------------------------------
@register
class ColwiseAdd(Op):
    """colwise_add(x, bias): bias (m,) (or (m, 1)) added to every column of x (m, n)."""
    name = "colwise_add"

    def shape(self, shapes, attr):
        x, b = shapes
        if len(x) != 2 or b not in ((x[0],), (x[0], 1)):
            raise ShapeError(f"colwise_add: needs a matrix (m, n) and a bias (m,), got {x} and {b}")
        return x

    def forward(self, xp, xs, attr, data):
        x, b = xs
        return x + b.reshape(b.shape[0], -1, 1)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy, gy.sum(axis=2).reshape(xs[1].shape)]


def _c3_shape(name, shapes, n_vec):
    """Shape rule of contract3d_1d (n_vec=1) and contract3d_1d_1d (n_vec=2), with an
    optional trailing bias."""
    x = shapes[0]
    vec = shapes[1:1 + n_vec]
    want = [(x[2],), (x[1],)][:n_vec] if len(x) == 3 else None
    if want is None or list(vec) != want:
        raise ShapeError(f"{name}: needs a rank-3 tensor (i, j, k), y (k,)"
                         + (" and z (j,)" if n_vec == 2 else "") + f", got {list(shapes[:1 + n_vec])}")
    out = (x[0], x[1]) if n_vec == 1 else (x[0],)
    if len(shapes) == 2 + n_vec and shapes[-1] != out:
        raise ShapeError(f"{name}: the bias must have the result's shape {out}, got {shapes[-1]}")
    return out


def _c3(xp, x, y):
    """Σ_k x[ij, k]·y[b, k] -> (B, ij); x is (ij, k) shared or (B, ij, k) stacked."""
    if x.ndim == 2:
        return y @ x.T                              # one GEMM for the whole batch
    return xp.matmul(x, y[:, :, None])[:, :, 0]


def _c3_grads(xp, x, y, gw, xshape):
    """Gradients of _c3 for x and y, given gw (B, ij); x's gradient in the shape xshape."""
    if x.ndim == 2:
        gx = ProductGrad(gw, y)                     # (ij, k) = gwᵀ·y, mergeable across batches
    else:
        gx = (gw[:, :, None] * y[:, None, :]).reshape(xshape)
    gy = gw @ x if x.ndim == 2 else xp.matmul(gw[:, None, :], x)[:, 0, :]
    return gx, gy


class _Contract3d1d(Op):
    """z_ij = Σ_k x_ijk·y_k (+ b_ij): inputs (x, y[, b])."""
    heavy = True

    def shape(self, shapes, attr):
        if len(shapes) not in (2, 3):
            raise ShapeError(f"contract3d_1d: needs (x, y) or (x, y, b), got {len(shapes)} inputs")
        return _c3_shape("contract3d_1d", shapes, 1)

    def forward(self, xp, xs, attr, data):
        x, y = xs[0], xs[1]
        i, j = x.shape[-3:-1]
        z = _c3(xp, x.reshape(x.shape[:-3] + (i * j, x.shape[-1])), y).reshape(y.shape[0], i, j)
        return z + xs[2] if len(xs) == 3 else z

    def backward(self, xp, xs, y, gy, attr, data):
        x, v = xs[0], xs[1]
        i, j = x.shape[-3:-1]
        gx, gv = _c3_grads(xp, x.reshape(x.shape[:-3] + (i * j, x.shape[-1])), v,
                           gy.reshape(gy.shape[0], i * j), x.shape)
        return [gx, gv] + ([gy] if len(xs) == 3 else [])


_register_stacked_and_shared(_Contract3d1d, "contract3d_1d", 0)


class _Contract3d1d1d(Op):
    """t_i = Σ_jk x_ijk·y_k·z_j (+ b_i): inputs (x, y, z[, b])."""
    heavy = True

    def shape(self, shapes, attr):
        if len(shapes) not in (3, 4):
            raise ShapeError(f"contract3d_1d_1d: needs (x, y, z) or (x, y, z, b), got {len(shapes)} inputs")
        return _c3_shape("contract3d_1d_1d", shapes, 2)

    def forward(self, xp, xs, attr, data):
        x, y, z = xs[0], xs[1], xs[2]
        i, j = x.shape[-3:-1]
        w = _c3(xp, x.reshape(x.shape[:-3] + (i * j, x.shape[-1])), y).reshape(y.shape[0], i, j)
        t = xp.matmul(w, z[:, :, None])[:, :, 0]
        return t + xs[3] if len(xs) == 4 else t

    def backward(self, xp, xs, y, gy, attr, data):
        x, v, z = xs[0], xs[1], xs[2]
        i, j = x.shape[-3:-1]
        xr = x.reshape(x.shape[:-3] + (i * j, x.shape[-1]))
        w = _c3(xp, xr, v).reshape(v.shape[0], i, j)
        gz = xp.matmul(gy[:, None, :], w)[:, 0, :]
        gw = (gy[:, :, None] * z[:, None, :]).reshape(gy.shape[0], i * j)
        gx, gv = _c3_grads(xp, xr, v, gw, x.shape)
        return [gx, gv, gz] + ([gy] if len(xs) == 4 else [])


_register_stacked_and_shared(_Contract3d1d1d, "contract3d_1d_1d", 0)


@register
class TraceOfProduct(Op):
    """trace_of_product(x, y) = Tr(x·yᵀ) = Σ x⊙y for two same-shape inputs; shape (1,)."""
    name = "trace_of_product"

    def shape(self, shapes, attr):
        a, b = shapes
        if a != b or len(a) > 2:
            raise ShapeError(f"trace_of_product: needs two vectors or matrices of the same shape, got {a} and {b}")
        return (1,)

    def forward(self, xp, xs, attr, data):
        a, b = xs
        return (a * b).reshape(a.shape[0], -1).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        a, b = xs
        g = gy.reshape((gy.shape[0],) + (1,) * (a.ndim - 1))
        return [g * b, g * a]


# --- circular convolution / correlation --------------------------------------------------------
class _Circular(Op):
    """Products of the two inputs' real FFTs: O(n log n) per node where the direct sum is
    O(n²), and one FFT call for the whole batch."""

    def shape(self, shapes, attr):
        a, b = shapes
        if a != b or len(a) != 1:
            raise ShapeError(f"{self.name}: needs two vectors of equal length, got {a} and {b}")
        return a

    @staticmethod
    def _fft(xp, a, b, conj_a, dtype):
        """irfft(F(a)·F(b)), with F(a) conjugated if conj_a, in dtype."""
        n = a.shape[1]
        fa = xp.fft.rfft(a, axis=1)
        r = xp.fft.irfft((fa.conj() if conj_a else fa) * xp.fft.rfft(b, axis=1), n=n, axis=1)
        return r.astype(dtype, copy=False)


@register
class CircConv(_Circular):
    """circ_conv(u, v)_k = Σ_i u_i·v_{(k-i) mod n}."""
    name = "circ_conv"

    def forward(self, xp, xs, attr, data):
        return self._fft(xp, xs[0], xs[1], False, xs[0].dtype)

    def backward(self, xp, xs, y, gy, attr, data):
        u, v = xs
        return [self._fft(xp, v, gy, True, u.dtype), self._fft(xp, u, gy, True, v.dtype)]


@register
class CircCorr(_Circular):
    """circ_corr(u, v)_k = Σ_i u_i·v_{(i+k) mod n}."""
    name = "circ_corr"

    def forward(self, xp, xs, attr, data):
        return self._fft(xp, xs[0], xs[1], True, xs[0].dtype)

    def backward(self, xp, xs, y, gy, attr, data):
        u, v = xs
        return [self._fft(xp, gy, v, True, u.dtype), self._fft(xp, gy, u, False, v.dtype)]


# --- 2-D windows: conv2d, filter1d_narrow, maxpooling2d ------------------------------------------
def _out_pad(n, f, s, valid):
    """Output length and (before, after) padding along one axis, as DyNet (and TensorFlow)
    define VALID and SAME: SAME pads the odd element after."""
    if valid:
        return (n - f) // s + 1, (0, 0)
    y = -(-n // s)
    p = max((y - 1) * s + f - n, 0)
    return y, (p // 2, p - p // 2)


def _geometry(name, hw, k, stride, valid):
    """((YH, YW), (pad_top, pad_bottom), (pad_left, pad_right)) for an (H, W) map."""
    if valid and (k[0] > hw[0] or k[1] > hw[1]):
        raise ShapeError(f"{name}: in VALID mode the window {tuple(k)} must fit in the map {tuple(hw)}")
    (yh, ph), (yw, pw) = (_out_pad(hw[a], k[a], stride[a], valid) for a in (0, 1))
    return (yh, yw), ph, pw


def _padded(xp, x, ph, pw, fill):
    """x (B, H, W, C) with ph rows and pw columns of fill around it (x itself if none)."""
    if ph == (0, 0) and pw == (0, 0):
        return x
    b, h, w, c = x.shape
    out = xp.full((b, h + ph[0] + ph[1], w + pw[0] + pw[1], c), fill, dtype=x.dtype)
    out[:, ph[0]:ph[0] + h, pw[0]:pw[0] + w] = x
    return out


def _windows(xp, x, k, stride, out_hw):
    """The (B, YH, YW, kh, kw, C) strided view of x (B, H, W, C): im2col without a copy."""
    s0, s1, s2, s3 = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, (x.shape[0],) + tuple(out_hw) + tuple(k) + (x.shape[3],),
        (s0, s1 * stride[0], s2 * stride[1], s1, s2, s3))


def _unwindow(xp, gw, shape, k, stride, ph, pw):
    """The adjoint of _windows: window gradients gw (B, YH, YW, kh, kw, C) summed back into a
    padded map (one strided add per window offset; windows overlap), padding cut off."""
    b, h, w, c = shape
    g = xp.zeros((b, h + ph[0] + ph[1], w + pw[0] + pw[1], c), dtype=gw.dtype)
    (yh, yw), (sh, sw) = gw.shape[1:3], stride
    for i in range(k[0]):
        for j in range(k[1]):
            g[:, i:i + sh * (yh - 1) + 1:sh, j:j + sw * (yw - 1) + 1:sw] += gw[:, :, :, i, j]
    return g[:, ph[0]:ph[0] + h, pw[0]:pw[0] + w]


def _conv_fwd(xp, x, f, k, stride, out_hw, ph, pw):
    """Cross-correlation of x (B, H, W, C) with f (kh·kw·C, Co) shared or (B, kh·kw·C, Co)
    stacked: returns (y (B, YH·YW, Co), cols (B, YH·YW, kh·kw·C))."""
    b = x.shape[0]
    cols = _windows(xp, _padded(xp, x, ph, pw, 0), k, stride, out_hw).reshape(b, out_hw[0] * out_hw[1], -1)
    if f.ndim == 2:                                  # shared filter: one GEMM over all rows
        y = (cols.reshape(-1, cols.shape[2]) @ f).reshape(b, -1, f.shape[1])
    else:
        y = xp.matmul(cols, f)
    return y, cols


def _conv_bwd(xp, x_shape, f, cols, gy, k, stride, out_hw, ph, pw):
    """(gx (B, H, W, C), gf shaped like f: a ProductGrad if shared) for _conv_fwd; gy (B, P, Co)."""
    b = gy.shape[0]
    if f.ndim == 2:
        gcols = gy.reshape(-1, gy.shape[2]) @ f.T
        gf = ProductGrad(cols.reshape(-1, cols.shape[2]), gy.reshape(-1, gy.shape[2]))
    else:
        gcols = xp.matmul(gy, f.transpose(0, 2, 1))
        gf = xp.matmul(cols.transpose(0, 2, 1), gy)
    gw = gcols.reshape((b,) + tuple(out_hw) + tuple(k) + (x_shape[3],))
    return _unwindow(xp, gw, x_shape, k, stride, ph, pw), gf


class _Conv2D(Op):
    """conv2d(x, f[, b]): x (H, W, C) (or (H, W): C = 1), f (kh, kw, C, Co), b (Co,) ->
    (YH, YW, Co); attr = (stride_h, stride_w, is_valid). A cross-correlation, as in DyNet."""
    heavy = True

    def shape(self, shapes, attr):
        x, f = shapes[0], shapes[1]
        sh, sw, valid = attr
        c = x[2] if len(x) == 3 else 1
        if len(x) not in (2, 3) or len(f) != 4 or f[2] != c:
            raise ShapeError(f"conv2d: needs x (H, W, C) and a filter (kh, kw, C, Co), got {x} and {f}")
        if len(shapes) == 3 and shapes[2] != (f[3],):
            raise ShapeError(f"conv2d: the bias must have shape ({f[3]},) (one per output channel), got {shapes[2]}")
        out_hw, _, _ = _geometry("conv2d", x[:2], f[:2], (sh, sw), valid)
        return out_hw + (f[3],)

    @staticmethod
    def _parts(xs, attr):
        x, f = xs[0], xs[1]
        if x.ndim == 3:
            x = x[:, :, :, None]
        k, stride = f.shape[-4:-2], attr[:2]
        out_hw, ph, pw = _geometry("conv2d", x.shape[1:3], k, stride, attr[2])
        return x, f.reshape(f.shape[:-4] + (-1, f.shape[-1])), k, stride, out_hw, ph, pw

    def forward(self, xp, xs, attr, data):
        x, f, k, stride, out_hw, ph, pw = self._parts(xs, attr)
        y, _ = _conv_fwd(xp, x, f, k, stride, out_hw, ph, pw)
        if len(xs) == 3:
            y = y + xs[2][:, None, :]
        return y.reshape((x.shape[0],) + out_hw + (f.shape[-1],))

    def backward(self, xp, xs, y, gy, attr, data):
        x, f, k, stride, out_hw, ph, pw = self._parts(xs, attr)
        # cols again rather than kept from forward: the engine keeps no per-batch scratch
        cols = _windows(xp, _padded(xp, x, ph, pw, 0), k, stride, out_hw).reshape(x.shape[0], out_hw[0] * out_hw[1], -1)
        g = gy.reshape(gy.shape[0], -1, gy.shape[-1])
        gx, gf = _conv_bwd(xp, x.shape, f, cols, g, k, stride, out_hw, ph, pw)
        if not isinstance(gf, ProductGrad):
            gf = gf.reshape(xs[1].shape)
        return [gx.reshape(xs[0].shape), gf] + ([g.sum(axis=1)] if len(xs) == 3 else [])


_register_stacked_and_shared(_Conv2D, "conv2d", 1)


class _Filter1DNarrow(Op):
    """filter1d_narrow(x, f): x (d, n), f (d, w) or (d, w, m) -> (1 or m, n-w+1) with
    y[o, j] = Σ_{r,c} x[r, j+c]·f[r, c, o]: conv2d of the (d, n, 1) map with a (d, w, 1, m)
    filter, transposed."""
    heavy = True

    def shape(self, shapes, attr):
        x, f = shapes
        if len(x) != 2 or len(f) not in (2, 3) or f[0] != x[0] or f[1] > x[1]:
            raise ShapeError(f"filter1d_narrow: needs x (d, n) and a filter (d, w) or (d, w, m) "
                             f"with w <= n, got {x} and {f}")
        return (f[2] if len(f) == 3 else 1, x[1] - f[1] + 1)

    def forward(self, xp, xs, attr, data):
        x, f = xs
        k, ff, out_hw = self._geom(x, f)
        y, _ = _conv_fwd(xp, x[:, :, :, None], ff, k, (1, 1), out_hw, (0, 0), (0, 0))
        return y.transpose(0, 2, 1)

    def backward(self, xp, xs, y, gy, attr, data):
        x, f = xs
        k, ff, out_hw = self._geom(x, f)
        xm = x[:, :, :, None]
        cols = _windows(xp, xm, k, (1, 1), out_hw).reshape(x.shape[0], out_hw[1], -1)
        gx, gf = _conv_bwd(xp, xm.shape, ff, cols, gy.transpose(0, 2, 1), k, (1, 1), out_hw, (0, 0), (0, 0))
        if not isinstance(gf, ProductGrad):
            gf = gf.reshape(f.shape)
        return [gx.reshape(x.shape), gf]

    def _geom(self, x, f):
        """Window (d, w), the filter as (d·w, m) (or (B, d·w, m)) and the output map (1, L)."""
        lead = () if self.shared else f.shape[:1]
        d, w = f.shape[len(lead):len(lead) + 2]
        m = prod(f.shape[len(lead) + 2:])
        return (d, w), f.reshape(lead + (d * w, m)), (1, x.shape[2] - w + 1)


_register_stacked_and_shared(_Filter1DNarrow, "filter1d_narrow", 1)


@register
class MaxPooling2D(Op):
    """maxpooling2d(x, ksize, stride, is_valid): x (H, W, C) (or (H, W)) -> (YH, YW, C) (or
    (YH, YW)), the maximum of each window; SAME pads with -inf. attr = (kh, kw, sh, sw, valid).
    Ties send the gradient to the first maximum of the window."""
    name = "maxpooling2d"

    def shape(self, shapes, attr):
        x = shapes[0]
        kh, kw, sh, sw, valid = attr
        if len(x) not in (2, 3):
            raise ShapeError(f"maxpooling2d: needs x (H, W, C) or (H, W), got {x}")
        out_hw, _, _ = _geometry("maxpooling2d", x[:2], (kh, kw), (sh, sw), valid)
        return out_hw + x[2:]

    @staticmethod
    def _win(xp, xs, attr):
        x = xs[0] if xs[0].ndim == 4 else xs[0][:, :, :, None]
        k, stride = attr[:2], attr[2:4]
        out_hw, ph, pw = _geometry("maxpooling2d", x.shape[1:3], k, stride, attr[4])
        win = _windows(xp, _padded(xp, x, ph, pw, -xp.inf), k, stride, out_hw)
        b, c = x.shape[0], x.shape[3]
        # (B, YH, YW, kh·kw, C): the window's cells on one axis
        return x, win.reshape(b, out_hw[0], out_hw[1], k[0] * k[1], c), k, stride, ph, pw

    def forward(self, xp, xs, attr, data):
        x, win, *_ = self._win(xp, xs, attr)
        return win.max(axis=3).reshape((x.shape[0],) + self.shape([xs[0].shape[1:]], attr))

    def backward(self, xp, xs, y, gy, attr, data):
        x, win, k, stride, ph, pw = self._win(xp, xs, attr)
        first = win.argmax(axis=3)[:, :, :, None, :]
        cells = xp.arange(win.shape[3]).reshape(1, 1, 1, -1, 1)
        gw = (cells == first) * gy.reshape(first.shape)
        gw = gw.reshape(win.shape[:3] + tuple(k) + win.shape[4:])
        return [_unwindow(xp, gw, x.shape, k, stride, ph, pw).reshape(xs[0].shape)]


# --- square matrices ---------------------------------------------------------------------------
def _square(name, s):
    if not (s == (1,) or (len(s) == 2 and s[0] == s[1])):
        raise ShapeError(f"{name}: needs a square matrix (n, n), got {s}")


def _mats(x):
    """A stack of (1,) 'matrices' as (B, 1, 1)."""
    return x.reshape(x.shape[0], 1, 1) if x.ndim == 2 else x


def _inv(xp, m):
    """Inverses of a stack of matrices; a singular one gives NaN (as Eigen's, in DyNet, gives
    non-finite values) instead of an error that would fail every later forward of its graph,
    and the other matrices of its batch keep their inverses."""
    try:
        return xp.linalg.inv(m)
    except np.linalg.LinAlgError:
        out = xp.empty_like(m)
        for k in range(m.shape[0]):
            try:
                out[k] = xp.linalg.inv(m[k])
            except np.linalg.LinAlgError:
                out[k] = xp.nan
        return out


@register
class Inverse(Op):
    """inverse(x) of square matrices, batched; backward -Yᵀ·gy·Yᵀ from the output Y."""
    name = "inverse"
    heavy = True

    def shape(self, shapes, attr):
        _square(self.name, shapes[0])
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        return _inv(xp, _mats(xs[0])).reshape(xs[0].shape)

    def backward(self, xp, xs, y, gy, attr, data):
        yt = _mats(y).transpose(0, 2, 1)
        return [-xp.matmul(xp.matmul(yt, _mats(gy)), yt).reshape(xs[0].shape)]


@register
class LogDet(Op):
    """logdet(x) = log(det x), shape (1,): NaN where det < 0 and -inf where det = 0, as
    DyNet's log of the determinant gives; the gradient is x⁻ᵀ (that of log|det x|)."""
    name = "logdet"
    heavy = True

    def shape(self, shapes, attr):
        _square(self.name, shapes[0])
        return (1,)

    def forward(self, xp, xs, attr, data):
        sign, logabs = xp.linalg.slogdet(_mats(xs[0]))
        out = logabs.astype(xs[0].dtype)
        out[sign < 0] = xp.nan
        out[sign == 0] = -xp.inf
        return out.reshape(-1, 1)

    def backward(self, xp, xs, y, gy, attr, data):
        inv = _inv(xp, _mats(xs[0])).transpose(0, 2, 1)
        return [(gy[:, :, None] * inv).reshape(xs[0].shape)]
