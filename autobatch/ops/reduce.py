"""Reductions, softmax and losses. Their signatures include shapes: a row-wise
reduction of a (B, n) block needs every node of the batch to have the same n."""
from __future__ import annotations

import numpy as np

from .base import Op, ShapeError, register


def _vector(name, s):
    if len(s) != 1:
        raise ShapeError(f"{name}: needs a vector, got shape {s}")
    return s


def _flat(x):
    return x.reshape(x.shape[0], -1)


@register
class SumElems(Op):
    name = "sum_elems"

    def shape(self, shapes, attr):
        return (1,)

    def forward(self, xp, xs, attr, data):
        return _flat(xs[0]).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        return [xp.broadcast_to(gy.reshape((-1,) + (1,) * (xs[0].ndim - 1)), xs[0].shape)]


@register
class MeanElems(Op):
    name = "mean_elems"

    def shape(self, shapes, attr):
        return (1,)

    def forward(self, xp, xs, attr, data):
        return _flat(xs[0]).mean(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        n = _flat(xs[0]).shape[1]
        return [xp.broadcast_to(gy.reshape((-1,) + (1,) * (xs[0].ndim - 1)) / n, xs[0].shape)]


@register
class SquaredNorm(Op):
    name = "squared_norm"

    def shape(self, shapes, attr):
        return (1,)

    def forward(self, xp, xs, attr, data):
        x = _flat(xs[0])
        return (x * x).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        return [2 * xs[0] * gy.reshape((-1,) + (1,) * (xs[0].ndim - 1))]


@register
class L2Norm(Op):
    name = "l2_norm"

    def shape(self, shapes, attr):
        return (1,)

    def forward(self, xp, xs, attr, data):
        x = _flat(xs[0])
        return xp.sqrt((x * x).sum(axis=1, keepdims=True))

    def backward(self, xp, xs, y, gy, attr, data):
        s = (gy / y).reshape((-1,) + (1,) * (xs[0].ndim - 1))
        return [xs[0] * s]


@register
class SquaredDistance(Op):
    name = "squared_distance"

    def shape(self, shapes, attr):
        if shapes[0] != shapes[1]:
            raise ShapeError(f"squared_distance: shapes differ: {shapes[0]} and {shapes[1]}")
        return (1,)

    def forward(self, xp, xs, attr, data):
        d = _flat(xs[0] - xs[1])
        return (d * d).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        g = 2 * (xs[0] - xs[1]) * gy.reshape((-1,) + (1,) * (xs[0].ndim - 1))
        return [g, -g]


@register
class MaxDim(Op):
    """max over dimension d (attr); the gradient goes to the first argmax."""
    name = "max_dim"
    extreme = "max"       # min_dim is this op with "min"

    def shape(self, shapes, attr):
        s = shapes[0]
        if not 0 <= attr < len(s):
            raise ShapeError(f"{self.name}: dimension {attr} out of range for shape {s}")
        out = s[:attr] + s[attr + 1:]
        return out or (1,)

    def forward(self, xp, xs, attr, data):
        y = getattr(xs[0], self.extreme)(axis=attr + 1)
        return y.reshape(y.shape[0], -1) if y.ndim == 1 else y

    def backward(self, xp, xs, y, gy, attr, data):
        x, ax = xs[0], attr + 1
        idx = getattr(x, "arg" + self.extreme)(axis=ax)
        # one-hot of the argmax along ax (portable: no put_along_axis needed on CuPy)
        pos = xp.arange(x.shape[ax]).reshape((-1,) + (1,) * (x.ndim - ax - 1))
        hot = pos == xp.expand_dims(idx, ax)
        return [hot * xp.expand_dims(gy.reshape(idx.shape), ax)]


def _shifted_exp(xp, x, out=None):
    """(exp(x - max), max) row-wise, in one array (out, or a new one): the common part of
    softmax losses, written to touch the (B, n) block as few times as possible (n is the
    vocabulary for language models, where this op is a third of the step)."""
    m = x.max(axis=1, keepdims=True)
    e = xp.subtract(x, m, out=out)
    xp.exp(e, out=e)
    return e, m


# Elements of one row block of a softmax: its passes (max, shift, exp, sum) then run in L2
# and read the logits from memory once (a 64-sentence language-model batch is a 1344 x 10000
# block, 54 MB, where each extra pass over memory costs ~6 ms)
_BLOCK = 1 << 18


def _row_blocks(xp, x):
    """Ranges of x's first (batch) axis of about _BLOCK elements; one range for small x and
    for non-NumPy arrays (on a GPU the passes are kernels, not cache traffic)."""
    B = x.shape[0]
    n = x.size // B if B else 1
    step = B if xp.__name__ != "numpy" or x.size <= 2 * _BLOCK else max(1, _BLOCK // n)
    return [(r, min(r + step, B)) for r in range(0, B, step)]


@register
class Softmax(Op):
    """Softmax over dimension 0 of each node (per column for matrices, as in DyNet)."""
    name = "softmax"

    def shape(self, shapes, attr):
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        y = xp.empty_like(x)
        for r0, r1 in _row_blocks(xp, x):
            e, _ = _shifted_exp(xp, x[r0:r1], y[r0:r1])
            e /= e.sum(axis=1, keepdims=True)
        return y

    def backward(self, xp, xs, y, gy, attr, data):
        return [y * (gy - (gy * y).sum(axis=1, keepdims=True))]    # (row blocks: no faster)


def _csoftmax(xp, x, u):
    """(p, saturated, s) of constrained softmax over rows of x (B, n) with bounds u: p =
    min(u, c·exp(x)), c making each row sum to 1 (s: the mass left to the unsaturated). The
    saturated set only grows from one round to the next (c rises), so n rounds suffice."""
    z = xp.exp(x - x.max(axis=1, keepdims=True))
    sat = xp.zeros(x.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):     # every bound binding: p = u
        for _ in range(x.shape[1]):
            s = 1.0 - (u * sat).sum(axis=1, keepdims=True)
            p = xp.where(sat, u, z * (s / (z * ~sat).sum(axis=1, keepdims=True)))
            new = ~sat & (p > u)
            if not bool(new.any()):
                break
            sat |= new
    return p, sat, s


@register
class ConstrainedSoftmax(Op):
    """Softmax with upper bounds u on the probabilities (Martins and Kreutzer, 2017), as
    DyNet's: p = min(u, c·exp(x)) with c such that Σp = 1; x and u vectors of one shape.
    Gradients reach both: with A the saturated set and s = 1 - Σ_A u, for i outside A
    dp_i/dx_j = p_i (δ_ij - p_j/s) and dp_i/du_k = -p_i/s (k in A); p_k = u_k in A."""
    name = "constrained_softmax"

    def shape(self, shapes, attr):
        if len(shapes[0]) != 1 or shapes[1] != shapes[0]:
            raise ShapeError(f"constrained_softmax: needs two vectors of one shape (scores, upper bounds), "
                             f"got {shapes[0]} and {shapes[1]}")
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        return _csoftmax(xp, xs[0], xs[1])[0]

    def backward(self, xp, xs, y, gy, attr, data):
        p, sat, s = _csoftmax(xp, xs[0], xs[1])
        with np.errstate(divide="ignore", invalid="ignore"):
            t = xp.where(s > 0, (gy * p * ~sat).sum(axis=1, keepdims=True) / s, 0.0)
        return [xp.where(sat, 0.0, p * (gy - t)), xp.where(sat, gy - t, 0.0)]


@register
class LogSoftmax(Op):
    name = "log_softmax"

    def shape(self, shapes, attr):
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        y = xp.empty_like(x)
        for r0, r1 in _row_blocks(xp, x):
            z, xc = y[r0:r1], x[r0:r1]
            xp.subtract(xc, xc.max(axis=1, keepdims=True), out=z)
            z -= xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        return y

    def backward(self, xp, xs, y, gy, attr, data):
        g = xp.empty_like(y)
        for r0, r1 in _row_blocks(xp, y):            # gy - exp(y)·Σ gy
            gc, gyc = g[r0:r1], gy[r0:r1]
            xp.exp(y[r0:r1], out=gc)
            gc *= gyc.sum(axis=1, keepdims=True)
            xp.subtract(gyc, gc, out=gc)
        return [g]


@register
class PickNegLogSoftmax(Op):
    """-log softmax(x)[i] = logsumexp(x) - x[i], with the class i as per-node data."""
    name = "pickneglogsoftmax"
    has_data = True

    def shape(self, shapes, attr):
        _vector(self.name, shapes[0])
        return (1,)

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        out = xp.empty((x.shape[0], 1), dtype=x.dtype)
        for r0, r1 in _row_blocks(xp, x):
            e, m = _shifted_exp(xp, x[r0:r1])
            xp.log(e.sum(axis=1, keepdims=True), out=out[r0:r1])
            out[r0:r1] += m
        rows = xp.arange(x.shape[0])
        out -= x[rows, xp.asarray(data)][:, None]
        return out

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        rows, gold = xp.arange(x.shape[0]), xp.asarray(data)
        lse = y + x[rows, gold][:, None]       # forward's logsumexp: no max and sum again
        g = xp.empty_like(x)
        for r0, r1 in _row_blocks(xp, x):
            e = g[r0:r1]
            xp.subtract(x[r0:r1], lse[r0:r1], out=e)
            xp.exp(e, out=e)
            e *= gy[r0:r1]                        # softmax, scaled by the incoming gradient
        g[rows, gold] -= gy[:, 0]
        return [g]


@register
class BinaryLogLoss(Op):
    """-Σ [y·log x + (1-y)·log(1-x)] for probabilities x and targets y. As DyNet's, x and
    1-x are clamped at the smallest normal float before the log: a saturated probability
    (a logistic of 20 is 1 in float32) costs -log(tiny) (87.34), with no gradient to x."""
    name = "binary_log_loss"

    def shape(self, shapes, attr):
        if shapes[0] != shapes[1]:
            raise ShapeError(f"binary_log_loss: shapes differ: {shapes[0]} and {shapes[1]}")
        return (1,)

    @staticmethod
    def _clamped(xp, x):
        tiny = xp.finfo(x.dtype).tiny
        return xp.maximum(x, tiny), xp.maximum(1 - x, tiny), tiny

    def forward(self, xp, xs, attr, data):
        x, t = _flat(xs[0]), _flat(xs[1])
        p, q, _ = self._clamped(xp, x)
        return -(t * xp.log(p) + (1 - t) * xp.log(q)).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        x, t = xs
        p, q, tiny = self._clamped(xp, x)
        g = gy.reshape((-1,) + (1,) * (x.ndim - 1))
        gx = xp.where(1 - x > tiny, (1 - t) / q, 0) - xp.where(x > tiny, t / p, 0)
        return [g * gx, g * (xp.log(q) - xp.log(p))]


@register
class Hinge(Op):
    """Σ_{j≠i} max(0, m - x[i] + x[j]) with the gold class i as data, margin m as attr."""
    name = "hinge"
    has_data = True

    def shape(self, shapes, attr):
        _vector(self.name, shapes[0])
        return (1,)

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        rows = xp.arange(x.shape[0])
        gold = xp.asarray(data)
        v = xp.maximum(attr - x[rows, gold][:, None] + x, 0)
        v[rows, gold] = 0
        return v.sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        rows = xp.arange(x.shape[0])
        gold = xp.asarray(data)
        act = (attr - x[rows, gold][:, None] + x) > 0
        act[rows, gold] = False
        g = act * gy
        g[rows, gold] = -g.sum(axis=1)
        return [g]
