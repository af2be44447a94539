"""Dropout, noise and random tensors. The random numbers of a node are a hash of (graph
seed, node id, element), so they do not depend on which batch the node lands in: every
strategy gives the same values, and backward recomputes the mask instead of storing it."""
from __future__ import annotations

from .base import Op, prod, register

_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLD = 0x9E3779B97F4A7C15
_TINY = 2.0 ** -54        # below every nonzero uniform: keeps log(u) finite where u == 0


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


def normal(xp, seeds, n):
    """(B, n) standard normals by Box–Muller from 2n hashed uniforms."""
    u = uniform(xp, seeds, 2 * n)
    return xp.sqrt(-2.0 * xp.log1p(-u[:, :n])) * xp.cos(2 * xp.pi * u[:, n:])


def reseed(seed: int) -> int:
    """A new seed from an old one (splitmix64 step): a node drawing again after its graph's
    inputs changed gets fresh numbers that still do not depend on the strategy."""
    z = (seed + _GOLD) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * _M1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * _M2) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


class _Random(Op):
    """Every op whose per-node data is a seed (the vertex tracer and Expression.set find them
    by this class)."""
    has_data = True  # data = per-node seed
    redraws = True

    def shape(self, shapes, attr):
        return shapes[0]


def _keep(u, p, dtype):
    """The inverted-dropout mask of uniforms u: 1/(1-p) where kept, 0 where dropped."""
    return (u >= p).astype(dtype) * (1.0 / (1.0 - p))


class _Masked(_Random):
    """x times a mask drawn again in backward; subclasses define _mask(xp, x, attr, data)."""

    def forward(self, xp, xs, attr, data):
        return xs[0] * self._mask(xp, xs[0], attr, data)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * self._mask(xp, xs[0], attr, data)]


@register
class Dropout(_Masked):
    """Inverted dropout with rate p (attr): kept units are scaled by 1/(1-p)."""
    name = "dropout"

    def _mask(self, xp, x, p, data):
        return _keep(uniform(xp, data, x[0].size).reshape(x.shape), p, x.dtype)


@register
class DropoutDim(_Masked):
    """Dropout with one decision per slice along dimension d (attr = (p, d)): the mask has
    size 1 in dimension d, so d = 0 of a matrix drops whole columns and d = 1 whole rows."""
    name = "dropout_dim"

    def _mask(self, xp, x, attr, data):
        p, d = attr
        ms = list(x.shape)
        ms[d + 1] = 1                       # x is (B, *node_shape)
        return _keep(uniform(xp, data, prod(ms[1:])).reshape(ms), p, x.dtype)


@register
class BlockDropout(_Masked):
    """All of a node's values kept (scaled by 1/(1-p)) or all dropped, with probability p
    (attr); p = 1 drops every node."""
    name = "block_dropout"

    def _mask(self, xp, x, p, data):
        u = uniform(xp, data, 1).reshape((x.shape[0],) + (1,) * (x.ndim - 1))
        return _keep(u, p, x.dtype) if p < 1 else xp.zeros(u.shape, dtype=x.dtype)


@register
class Noise(_Random):
    """x + N(0, stddev²) (stddev in attr), Gaussian by Box–Muller from two hashed uniforms."""
    name = "noise"

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        g = normal(xp, data, x[0].size)
        return x + (attr * g).astype(x.dtype).reshape(x.shape)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy]


class _Sample(_Random):
    """A leaf of random numbers: attr = (shape, a, b), the distribution's two parameters."""
    differentiable = False

    def shape(self, shapes, attr):
        return attr[0]

    def sig(self, shapes, attr):
        return attr

    def forward(self, xp, xs, attr, data):
        shape, a, b = attr
        return self.draw(xp, data, prod(shape), a, b).reshape((len(data),) + shape)


@register
class RandomNormal(_Sample):
    """N(mean, stddev²) values: attr = (shape, mean, stddev)."""
    name = "random_normal"

    def draw(self, xp, seeds, n, mean, stddev):
        return mean + stddev * normal(xp, seeds, n)


@register
class RandomUniform(_Sample):
    """Uniform values in [left, right): attr = (shape, left, right)."""
    name = "random_uniform"

    def draw(self, xp, seeds, n, left, right):
        return left + (right - left) * uniform(xp, seeds, n)


@register
class RandomBernoulli(_Sample):
    """scale with probability p, else 0: attr = (shape, p, scale)."""
    name = "random_bernoulli"

    def draw(self, xp, seeds, n, p, scale):
        return (uniform(xp, seeds, n) < p) * scale


@register
class RandomGumbel(_Sample):
    """Gumbel(mu, beta) values, mu - beta·log(-log u): attr = (shape, mu, beta)."""
    name = "random_gumbel"

    def draw(self, xp, seeds, n, mu, beta):
        u = xp.maximum(uniform(xp, seeds, n), _TINY)
        return mu - beta * xp.log(-xp.log(u))
