"""Reductions along chosen dimensions, normalisations and the remaining DyNet losses.

Node dimension d is axis d + 1 of a stacked (B, *shape) block. Dimensions, orders and
margins are attributes (they enter the signature, so one batch shares them); per-node
integers (gold indices, Poisson counts) are data."""
from __future__ import annotations

import math

import numpy as np

from .base import Op, ShapeError, prod, register
from .elementwise import _same
from .reduce import MaxDim

_LN_EPS = 1e-8     # layer_norm divides by σ + 1e-8, as DyNet does (a constant input gives 0)


def _check_dims(name, s, dims):
    for d in dims:
        if not 0 <= d < len(s):
            raise ShapeError(f"{name}: dimension {d} out of range for shape {s}")


def _without(name, s, dims):
    """Shape s with dims (checked) removed; (1,) when nothing is left, as in DyNet."""
    _check_dims(name, s, dims)
    return tuple(n for k, n in enumerate(s) if k not in dims) or (1,)


def _axes(dims):
    return tuple(d + 1 for d in dims)


def _kept(x, dims):
    """Shape of x (B, *shape) with the reduced axes kept as 1: for broadcasting back."""
    return tuple(1 if k - 1 in dims else n for k, n in enumerate(x.shape))


def _per_node(g, x):
    """A (B, ...) per-node quantity broadcastable against x."""
    return g.reshape((-1,) + (1,) * (x.ndim - 1))


def _one_hot(xp, idx, n, ax, ndim):
    """Boolean mask, true where position along axis ax equals idx (idx has ax removed)."""
    pos = xp.arange(n).reshape((-1,) + (1,) * (ndim - ax - 1))
    return pos == xp.expand_dims(idx, ax)


@register
class SumDim(Op):
    """Sum over the dimensions in attr (a sorted tuple)."""
    name = "sum_dim"

    def shape(self, shapes, attr):
        return _without(self.name, shapes[0], attr)

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return x.sum(axis=_axes(attr)).reshape(x.shape[0], -1)

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [xp.broadcast_to(gy.reshape(_kept(x, attr)), x.shape)]


@register
class MomentDim(Op):
    """Σ x^r / n over the dimensions of attr = (dims, r, n); n = 0: the number of elements
    reduced. mean_dim is r = 1, moment_elems the reduction over every dimension."""
    name = "moment_dim"

    def shape(self, shapes, attr):
        dims, r, n = attr
        out = _without(self.name, shapes[0], dims)
        if r < 1:
            raise ShapeError(f"{self.name}: the order r must be at least 1, got {r}")
        return out

    @staticmethod
    def _count(x, attr):
        dims, _, n = attr
        return n if n > 0 else prod(x.shape[d + 1] for d in dims)

    def forward(self, xp, xs, attr, data):
        x, r = xs[0], attr[1]
        p = x if r == 1 else x * x if r == 2 else x ** r
        return p.sum(axis=_axes(attr[0])).reshape(x.shape[0], -1) * (1.0 / self._count(x, attr))

    def backward(self, xp, xs, y, gy, attr, data):
        x, r = xs[0], attr[1]
        g = gy.reshape(_kept(x, attr[0])) * (1.0 / self._count(x, attr))
        if r == 1:
            return [xp.broadcast_to(g, x.shape)]
        return [g * (r * (x if r == 2 else x ** (r - 1)))]


def _centred_std(xp, x, dims):
    """(x - μ, σ with the reduced axes kept, element count) over dims."""
    ax = _axes(dims)
    d = x - x.mean(axis=ax, keepdims=True)
    return d, xp.sqrt((d * d).mean(axis=ax, keepdims=True)), prod(x.shape[a] for a in ax)


@register
class StdDim(Op):
    """Population standard deviation √(mean((x - μ)²)) over the dimensions in attr."""
    name = "std_dim"

    def shape(self, shapes, attr):
        return _without(self.name, shapes[0], attr)

    def forward(self, xp, xs, attr, data):
        _, s, _ = _centred_std(xp, xs[0], attr)
        return s.reshape(s.shape[0], -1)

    def backward(self, xp, xs, y, gy, attr, data):
        d, s, n = _centred_std(xp, xs[0], attr)
        # σ = 0 only when every d is 0: the gradient there is taken as 0, not 0/0
        s = xp.where(s > 0, s, 1)
        return [d * (gy.reshape(s.shape) / (n * s))]


@register
class MinDim(type(MaxDim)):      # (register keeps instances under the class names)
    """Minimum over dimension attr; the gradient goes to the first argmin."""
    name = "min_dim"
    extreme = "min"


def _finite_shift(xp, m):
    """The maxima logsumexp subtracts before exp, 0 where one is infinite: all -inf inputs
    then give -inf (exp(-inf - -inf) would be nan), and a +inf gives +inf, as NumPy's logaddexp."""
    return xp.where(xp.isfinite(m), m, 0)


def _log(xp, s):
    """log s, -inf where s is 0 (every input -inf: log 0 in the log semiring) with no warning."""
    with np.errstate(divide="ignore"):
        return xp.log(s)


def _weights(xp, x, y):
    """exp(x - y), logsumexp's gradient: 0 where y is -inf (every input -inf, log 0: a sum
    that contributes nothing, as in a CTC or forward-algorithm chart), not exp(-inf - -inf),
    nan."""
    return xp.exp(x - xp.where(y == -np.inf, np.inf, y))


@register
class LogSumExp(Op):
    """Elementwise log Σ_k exp(x_k) of same-shape inputs."""
    name = "logsumexp"
    elementwise = True

    def shape(self, shapes, attr):
        return _same(self.name, shapes)

    def forward(self, xp, xs, attr, data):
        m = xs[0]
        for x in xs[1:]:
            m = xp.maximum(m, x)
        m = _finite_shift(xp, m)
        s = xp.exp(xs[0] - m)
        for x in xs[1:]:
            s += xp.exp(x - m)
        return m + _log(xp, s)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * _weights(xp, x, y) for x in xs]


@register
class LogSumExpDim(Op):
    """log Σ exp(x) over dimension attr (the dimension is removed)."""
    name = "logsumexp_dim"

    def shape(self, shapes, attr):
        return _without(self.name, shapes[0], (attr,))

    def forward(self, xp, xs, attr, data):
        x, ax = xs[0], attr + 1
        m = _finite_shift(xp, x.max(axis=ax, keepdims=True))
        y = m + _log(xp, xp.exp(x - m).sum(axis=ax, keepdims=True))
        return y.reshape(x.shape[0], -1)

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        k = _kept(x, (attr,))
        return [_weights(xp, x, y.reshape(k)) * gy.reshape(k)]


@register
class CumSum(Op):
    """Running sum along dimension attr; same shape."""
    name = "cumsum"

    def shape(self, shapes, attr):
        _check_dims(self.name, shapes[0], (attr,))
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        return xp.cumsum(xs[0], axis=attr + 1)

    def backward(self, xp, xs, y, gy, attr, data):
        ax = attr + 1          # x_j feeds every y_i with i >= j: a reversed running sum
        return [xp.flip(xp.cumsum(xp.flip(gy, ax), axis=ax), ax)]


ARGMAX_MODES = ("zero_gradient", "straight_through_gradient")


@register
class ArgMax(Op):
    """One-hot vector of the first maximum. attr: the gradient mode; straight_through_gradient
    passes the gradient on unchanged, zero_gradient stops it (argmax_zero is that mode as an
    op of its own: not differentiable, so nothing upstream of it runs backward; the engine
    reads differentiability per op, never per attribute)."""
    name = "argmax"

    def shape(self, shapes, attr):
        if len(shapes[0]) != 1:
            raise ShapeError(f"{self.name}: needs a vector, got shape {shapes[0]}")
        if attr not in ARGMAX_MODES:
            raise ShapeError(f"{self.name}: unknown gradient mode {attr!r}")
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return _one_hot(xp, x.argmax(axis=1), x.shape[1], 1, 2).astype(x.dtype)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy if attr == "straight_through_gradient" else None]


@register
class ArgMaxZero(type(ArgMax)):     # (register keeps instances under the class names)
    """argmax with the zero gradient, its true derivative almost everywhere."""
    name = "argmax_zero"
    differentiable = False

    def backward(self, xp, xs, y, gy, attr, data):
        return [None]


def _fits(name, what, s, x):
    """DyNet's broadcast of g and b against x: trailing dimensions padded with 1, each
    dimension equal to x's or 1."""
    if len(s) > len(x) or any(a != b and a != 1 for a, b in zip(s, x)):
        raise ShapeError(f"{name}: {what} of shape {s} does not fit x of shape {x}")


def _pad(a, ndim):
    return a.reshape(a.shape + (1,) * (ndim - a.ndim))


def _unbroadcast(g, a):
    """Sum g (x's layout) down to a's (B, ...) shape."""
    p = _pad(a, g.ndim)
    ax = tuple(k for k in range(1, g.ndim) if p.shape[k] == 1 and g.shape[k] != 1)
    return (g.sum(axis=ax, keepdims=True) if ax else g).reshape(a.shape)


@register
class LayerNorm(Op):
    """g ⊙ (x - μ) / (σ + 1e-8) + b, with μ and σ over all elements of x."""
    name = "layer_norm"

    def shape(self, shapes, attr):
        x, g, b = shapes
        _fits(self.name, "g", g, x)
        _fits(self.name, "b", b, x)
        return x

    def forward(self, xp, xs, attr, data):
        x, g, b = xs
        d, s, _ = _centred_std(xp, x, range(x.ndim - 1))
        return _pad(g, x.ndim) * (d / (s + _LN_EPS)) + _pad(b, x.ndim)

    def backward(self, xp, xs, y, gy, attr, data):
        x, g, b = xs
        d, s, n = _centred_std(xp, x, range(x.ndim - 1))
        ax = tuple(range(1, x.ndim))
        z = d / (s + _LN_EPS)
        gz = gy * _pad(g, x.ndim)
        # z = d / (σ + ε): d moves with x minus its mean, σ with d / (n σ)
        gx = (gz - gz.mean(axis=ax, keepdims=True)) / (s + _LN_EPS)
        gx -= d * ((gz * d).sum(axis=ax, keepdims=True) / (n * xp.where(s > 0, s, 1) * (s + _LN_EPS) ** 2))
        return [gx, _unbroadcast(gy * z, g), _unbroadcast(gy, b)]


@register
class WeightNorm(Op):
    """g · w / ‖w‖ for a tensor w and a gain g of one element."""
    name = "weight_norm"

    def shape(self, shapes, attr):
        w, g = shapes
        if prod(g) != 1:
            raise ShapeError(f"{self.name}: the gain g must have one element, got shape {g}")
        return w

    def forward(self, xp, xs, attr, data):
        w, g = xs
        norm = xp.sqrt((w * w).reshape(w.shape[0], -1).sum(axis=1))
        return w * _per_node(g.reshape(-1) / norm, w)

    def backward(self, xp, xs, y, gy, attr, data):
        w, g = xs
        norm = _per_node(xp.sqrt((w * w).reshape(w.shape[0], -1).sum(axis=1)), w)
        u = w / norm
        gu = (gy * u).reshape(w.shape[0], -1).sum(axis=1)
        gw = (gy - u * _per_node(gu, w)) * (_per_node(g.reshape(-1), w) / norm)
        return [gw, gu.reshape(g.shape)]


def _same_shape(name, shapes):
    if shapes[0] != shapes[1]:
        raise ShapeError(f"{name}: shapes differ: {shapes[0]} and {shapes[1]}")


@register
class L1Distance(Op):
    """Σ |x - y|; shape (1,)."""
    name = "l1_distance"

    def shape(self, shapes, attr):
        _same_shape(self.name, shapes)
        return (1,)

    def forward(self, xp, xs, attr, data):
        d = xs[0] - xs[1]
        return xp.abs(d).reshape(d.shape[0], -1).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        g = xp.sign(xs[0] - xs[1]) * _per_node(gy, xs[0])
        return [g, -g]


@register
class HuberDistance(Op):
    """Σ L_c(x - y): d²/2 where |d| <= c, c|d| - c²/2 beyond; c = attr; shape (1,)."""
    name = "huber_distance"

    def shape(self, shapes, attr):
        _same_shape(self.name, shapes)
        return (1,)

    def forward(self, xp, xs, attr, data):
        c = attr
        d = xs[0] - xs[1]
        a = xp.abs(d)
        v = xp.where(a <= c, 0.5 * d * d, c * a - 0.5 * c * c)
        return v.reshape(d.shape[0], -1).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        d = xs[0] - xs[1]
        g = xp.clip(d, -attr, attr) * _per_node(gy, d)
        return [g, -g]


@register
class HingeDim(Op):
    """Per slice along dimension d of a matrix: Σ_{i≠v} max(0, m - x[v] + x[i]), with the
    slice's gold index v from the node's data (one per slice); attr = (d, m). A (r, c)
    matrix gives (c,) for d = 0 (one loss per column) and (r,) for d = 1."""
    name = "hinge_dim"
    has_data = True

    def shape(self, shapes, attr):
        s, d = shapes[0], attr[0]
        if len(s) != 2:
            raise ShapeError(f"{self.name}: needs a matrix, got shape {s}")
        _check_dims(self.name, s, (d,))
        return (s[1 - d],)

    @staticmethod
    def _parts(xp, xs, attr, data):
        """x with the compared dimension as axis 1, the gold mask, and the margins."""
        x = xs[0] if attr[0] == 0 else xp.swapaxes(xs[0], 1, 2)
        gold = xp.asarray(data).reshape(x.shape[0], x.shape[2])
        hot = _one_hot(xp, gold, x.shape[1], 1, 3)
        xg = (x * hot).sum(axis=1, keepdims=True)
        return x, hot, attr[1] - xg + x

    def forward(self, xp, xs, attr, data):
        x, hot, v = self._parts(xp, xs, attr, data)
        return (xp.maximum(v, 0) * ~hot).sum(axis=1)

    def backward(self, xp, xs, y, gy, attr, data):
        x, hot, v = self._parts(xp, xs, attr, data)
        act = (v > 0) & ~hot
        g = act * gy[:, None, :]
        g = g - hot * g.sum(axis=1, keepdims=True)     # the gold entry loses what the rest gain
        return [g if attr[0] == 0 else xp.swapaxes(g, 1, 2)]


@register
class PoissonLoss(Op):
    """-log Poisson(k; λ = exp(x)) = exp(x) - k·x + log k! for a one-element x and the
    count k (data); same shape as x."""
    name = "poisson_loss"
    has_data = True

    def shape(self, shapes, attr):
        if prod(shapes[0]) != 1:
            raise ShapeError(f"{self.name}: needs a single value (log lambda), got shape {shapes[0]}")
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        k = _per_node(xp.asarray(data, dtype=x.dtype), x)
        logfact = _per_node(xp.asarray([math.lgamma(c + 1) for c in data], dtype=x.dtype), x)
        return xp.exp(x) - k * x + logfact

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [gy * (xp.exp(x) - _per_node(xp.asarray(data, dtype=x.dtype), x))]


@register
class PairwiseRankLoss(Op):
    """max(0, m - x + y) elementwise (m = attr) for x, y of shape (1,) or (1, n), DyNet's
    batched scalars."""
    name = "pairwise_rank_loss"
    elementwise = True

    def shape(self, shapes, attr):
        s = shapes[0]
        if s != shapes[1] or len(s) > 2 or s[0] != 1:
            raise ShapeError(f"{self.name}: needs two inputs of the same shape (1,) or (1, n), "
                             f"got {shapes[0]} and {shapes[1]}")
        return s

    def forward(self, xp, xs, attr, data):
        return xp.maximum(attr - xs[0] + xs[1], 0)

    def backward(self, xp, xs, y, gy, attr, data):
        g = gy * (y > 0)
        return [-g, g]


@register
class Sparsemax(Op):
    """The Euclidean projection of a vector onto the probability simplex (Martins and
    Astudillo, 2016): max(x - τ, 0) with τ chosen so that the result sums to 1."""
    name = "sparsemax"

    def shape(self, shapes, attr):
        s = shapes[0]
        if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)):
            raise ShapeError(f"{self.name}: needs a vector (n,) or a column (n, 1), got shape {s}")
        return s

    def forward(self, xp, xs, attr, data):
        x = xs[0].reshape(xs[0].shape[0], -1)
        B, n = x.shape
        z = xp.flip(xp.sort(x, axis=1), axis=1)
        cs = xp.cumsum(z, axis=1)
        # the support is the k largest, for the largest k with 1 + k·z_k > Σ_{j<=k} z_j;
        # that test holds exactly for a prefix of the sorted order, so counting finds k
        k = (1 + xp.arange(1, n + 1, dtype=x.dtype) * z > cs).sum(axis=1)
        tau = (cs[xp.arange(B), k - 1] - 1) / k
        return xp.maximum(x - tau[:, None], 0).reshape(xs[0].shape)

    def backward(self, xp, xs, y, gy, attr, data):
        B = y.shape[0]
        sup = y.reshape(B, -1) > 0
        g = gy.reshape(B, -1) * sup
        g = sup * (g - g.sum(axis=1, keepdims=True) / sup.sum(axis=1, keepdims=True))
        return [g.reshape(y.shape)]
