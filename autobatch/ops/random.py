"""Dropout and noise. The random numbers of a node are a hash of (graph seed, node
id, element), so they do not depend on which batch the node lands in: every
strategy gives the same values, and backward recomputes the mask instead of storing it."""
from __future__ import annotations

from .base import Op, register

_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLD = 0x9E3779B97F4A7C15


def uniform(xp, seeds, n):
    """(B, n) uniforms in [0, 1) from per-node integer seeds (splitmix64 finaliser)."""
    z = (xp.asarray(seeds, dtype=xp.uint64)[:, None] * xp.uint64(_GOLD)
         + xp.arange(1, n + 1, dtype=xp.uint64)[None, :] * xp.uint64(_M1))
    z ^= z >> xp.uint64(30)
    z *= xp.uint64(_M1)
    z ^= z >> xp.uint64(27)
    z *= xp.uint64(_M2)
    z ^= z >> xp.uint64(31)
    return (z >> xp.uint64(11)).astype(xp.float64) * (1.0 / (1 << 53))


class _Random(Op):
    has_data = True  # data = per-node seed

    def shape(self, shapes, attr):
        return shapes[0]


@register
class Dropout(_Random):
    """Inverted dropout with rate p (attr): kept units are scaled by 1/(1-p)."""
    name = "dropout"

    def _mask(self, xp, x, p, data):
        u = uniform(xp, data, x[0].size).reshape(x.shape)
        return (u >= p).astype(x.dtype) * (1.0 / (1.0 - p))

    def forward(self, xp, xs, attr, data):
        return xs[0] * self._mask(xp, xs[0], attr, data)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * self._mask(xp, xs[0], attr, data)]


@register
class Noise(_Random):
    """x + N(0, stddev²) (stddev in attr), Gaussian by Box–Muller from two hashed uniforms."""
    name = "noise"

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        n = x[0].size
        u = uniform(xp, data, 2 * n)
        g = xp.sqrt(-2.0 * xp.log1p(-u[:, :n])) * xp.cos(2 * xp.pi * u[:, n:])
        return x + (attr * g).astype(x.dtype).reshape(x.shape)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy]
