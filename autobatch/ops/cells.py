"""Fused recurrent cells. The elementwise part of an LSTM step written with separate ops is
a dozen small nodes (four slices, three logistics, two tanh, three products, a sum), each
its own batch with its own gathers; as one op it is one batch per step that reads the gate
block once. The LSTM builders use it; the result equals the separate ops up to rounding."""
from __future__ import annotations

from .base import Op, ShapeError, register


_ROWS: dict = {}   # (xp, dtype, H, fb) -> the per-column constants of _rows


def _rows(xp, dtype, H, fb):
    """The per-column constants of the cell's whole-row passes, made once per backend, dtype,
    H and forget bias: (scale: x/2 under σ, x under tanh; shift: fb/2 on f, or None; half:
    +1/2 under σ; alpha, beta: the slopes' alpha + z·(beta - z))."""
    key = (xp, dtype, H, fb)
    r = _ROWS.get(key)
    if r is None:
        def row(*runs):
            return xp.asarray([v for v, n in runs for _ in range(n)], dtype=dtype)
        r = _ROWS[key] = (row((0.5, 3 * H), (1.0, H)),
                          row((0.0, H), (0.5 * fb, H), (0.0, 2 * H)) if fb else None,
                          row((0.5, 3 * H), (0.0, H)),
                          row((0.0, 3 * H), (1.0, H)), row((1.0, 3 * H), (0.0, H)))
    return r


def _gates(xp, a, fb):
    """σ(i), σ(f + fb), σ(o), tanh(g) of the stacked pre-activations a = [i; f; o; g] (B, 4H),
    as one (B, 4H) block (σ(x) = (tanh(x/2)+1)/2: no exp overflow). Every pass runs over
    whole rows with per-column constants: on the (B, 3H) column slice of a (B, 4H) block a
    pass costs 1.4-2x as much (NumPy walks it row by row)."""
    scale, shift, half, _, _ = _rows(xp, a.dtype, a.shape[1] // 4, fb)
    z = xp.multiply(a, scale)
    if shift is not None:
        z += shift
    xp.tanh(z, out=z)
    z *= scale
    z += half
    return z


def _slopes(xp, z, fb):
    """The activations' derivatives from their outputs z = _gates(..., fb): σ' = z - z² on
    i, f, o, tanh' = 1 - z² on g, i.e. alpha + z·(beta - z) with per-column constants, in
    whole-row passes (see _gates)."""
    _, _, _, alpha, beta = _rows(xp, z.dtype, z.shape[1] // 4, fb)
    d = xp.subtract(beta, z)
    d *= z
    d += alpha
    return d


@register
class LSTMCell(Op):
    """lstm_cell(a[, c_prev]) -> [h; c] of shape (2H,), from the gate pre-activations
    a = [i; f; o; g] (4H,) and the previous cell c_prev, given either as a vector (H,) or as
    the previous step's [h; c] (2H,) (its second half is used); attr: the forget bias fb, a
    constant added to f (DyNet's LSTMs add 1 at every step), or None for 0::

        c = σ(f + fb)⊙c_prev + σ(i)⊙tanh(g)      (without c_prev: σ(i)⊙tanh(g))
        h = σ(o)⊙tanh(c)
    """
    name = "lstm_cell"

    def shape(self, shapes, attr):
        a = shapes[0]
        if len(a) != 1 or a[0] % 4 or len(shapes) > 2:
            raise ShapeError(f"lstm_cell: needs gate pre-activations of shape (4H,) and optionally the "
                             f"previous cell, got {list(shapes)}")
        H = a[0] // 4
        if len(shapes) == 2 and shapes[1] not in ((H,), (2 * H,)):
            raise ShapeError(f"lstm_cell: the previous cell must have shape ({H},) or ({2 * H},) "
                             f"for gates of shape {a}, got {shapes[1]}")
        return (2 * H,)

    @staticmethod
    def _c_prev(xs, H):
        if len(xs) < 2:
            return None
        c = xs[1]
        return c if c.shape[1] == H else c[:, H:]

    def forward(self, xp, xs, attr, data):
        a = xs[0]
        y = xp.empty((a.shape[0], a.shape[1] // 2), dtype=a.dtype)
        self.forward_into(xp, xs, attr, data, y)
        return y

    def forward_into(self, xp, xs, attr, data, out):
        a = xs[0]
        H = a.shape[1] // 4
        z = _gates(xp, a, attr)
        # c in a block of its own, then copied into out's half: passes over the halves of out,
        # column slices, cost more than one copy (see _gates)
        c = xp.multiply(z[:, :H], z[:, 3 * H:])
        cp = self._c_prev(xs, H)
        if cp is not None:
            c += xp.multiply(z[:, H:2 * H], cp)
        out[:, H:] = c
        xp.tanh(c, out=c)
        xp.multiply(c, z[:, 2 * H:3 * H], out=out[:, :H])

    def backward(self, xp, xs, y, gy, attr, data):
        a = xs[0]
        H = a.shape[1] // 4
        z = _gates(xp, a, attr)               # recomputed: cheaper than keeping (B, 4H) per step
        i, f, o, g = z[:, :H], z[:, H:2 * H], z[:, 2 * H:3 * H], z[:, 3 * H:]
        tc = xp.tanh(y[:, H:])
        gh = gy[:, :H]
        gc = gh * o
        gc *= 1 - tc * tc
        gc += gy[:, H:]
        ga = xp.empty_like(a)
        cp = self._c_prev(xs, H)
        # the gradients reaching σ(i), σ(f), σ(o) and tanh(g), then times their slopes in one pass
        xp.multiply(gc, g, out=ga[:, :H])
        if cp is None:
            ga[:, H:2 * H] = 0
        else:
            xp.multiply(gc, cp, out=ga[:, H:2 * H])
        xp.multiply(gh, tc, out=ga[:, 2 * H:3 * H])
        xp.multiply(gc, i, out=ga[:, 3 * H:])
        ga *= _slopes(xp, z, attr)
        if cp is None:
            return [ga]
        gcp = gc * f
        if xs[1].shape[1] == H:
            return [ga, gcp]
        g2 = xp.zeros_like(xs[1])
        g2[:, H:] = gcp
        return [ga, g2]
