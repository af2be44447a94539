"""DyNet's further elementwise math: trigonometric and hyperbolic functions, erf, lgamma,
activations (cube, log_sigmoid, softsign, selu, silu), bmin, pow, rounding and the ops that
only change the gradient (scale_gradient, nobackprop).

NumPy has no erf, lgamma or digamma and SciPy is not a dependency, so they are computed here
from xp operations (float64 error ~1e-14: central-difference gradchecks need smooth, accurate
values). Each evaluates every branch on clamped inputs and picks with where(), which keeps
them free of data-dependent indexing (one code path for NumPy and CuPy)."""
from __future__ import annotations

import functools
import math

import numpy as np

from .base import Op, ShapeError, register
from .elementwise import NAry, Unary

_SQRT_PI = math.sqrt(math.pi)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG_PI = math.log(math.pi)

# erf: series below the split, erfc's continued fraction above; term counts reach 1e-16
# on both sides of 2.5 (measured against 40-digit references)
_ERF_SPLIT, _ERF_SERIES_N, _ERF_CF_N = 2.5, 36, 32
# lgamma / digamma: recurrence up to z >= _SHIFT, then the asymptotic series
_SHIFT = 10
_LGAMMA_C = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400)
_DIGAMMA_C = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)

SELU_LAMBDA = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717


@functools.lru_cache(maxsize=None)
def _device_special(xp, name):
    """cupyx.scipy.special's ufunc ``name`` where xp is CuPy and it imports (one kernel
    instead of the ~70 array passes of the series below), else None. Imported here, not at
    the top: the package must import with NumPy alone."""
    if xp is np:
        return None
    try:
        import cupyx.scipy.special as special
    except ImportError:
        return None
    return getattr(special, name, None)


def erf(xp, x):
    """erf(x) elementwise."""
    f = _device_special(xp, "erf")
    if f is not None:
        return f(x).astype(x.dtype, copy=False)
    a = xp.abs(x)
    # |x| < 2.5: erf(a) = 2a/√π · e^(-a²) · Σ (2a²)^n / (2n+1)!!  (positive terms: no cancellation)
    s = xp.minimum(a, _ERF_SPLIT)
    t2 = 2 * s * s
    term = xp.ones_like(s)
    total = xp.ones_like(s)
    for n in range(1, _ERF_SERIES_N + 1):
        term = term * t2 * (1.0 / (2 * n + 1))
        total += term
    small = (2 / _SQRT_PI) * s * xp.exp(-s * s) * total
    # |x| >= 2.5: erfc(b) = e^(-b²)/√π / (b + (1/2)/(b + 1/(b + (3/2)/(b + ...)))), from the tail;
    # erfc(6) < 2^-54 already rounds 1 - erfc to 1, and the clamp keeps b² finite
    b = xp.clip(a, _ERF_SPLIT, 6.0)
    f = b
    for k in range(_ERF_CF_N, 0, -1):
        f = b + (k / 2) / f
    big = 1 - xp.exp(-b * b) / (_SQRT_PI * f)
    return xp.sign(x) * xp.where(a < _ERF_SPLIT, small, big)


def _reduced(xp, x, left, fill):
    """For the reflection formulas: r = x - round(x) in [-1/2, 1/2] (sin πr = ±sin πx and
    tan πr = tan πx, without the rounding error of π·x near a pole, where they matter) where
    ``left`` and x is no pole, ``fill`` elsewhere (the branch is unused there, and must not
    divide by 0 or take log 0); and the poles (0 and the negative integers)."""
    r = x - xp.floor(x)               # exact, as is r - 1 for r > 1/2
    pole = (x <= 0) & (r == 0)
    r = xp.where(r > 0.5, r - 1, r)
    return xp.where(left & ~pole, r, fill), pole


def _lgamma_right(xp, x):
    """log Γ(x) for x >= 0.5: Γ(x) = Γ(x + n) / (x (x+1) … (x+n-1)), then Stirling's series."""
    z = x
    p = xp.ones_like(x)
    for _ in range(_SHIFT):
        m = z < _SHIFT
        p = xp.where(m, p * z, p)
        z = xp.where(m, z + 1, z)
    r = 1 / z
    r2 = r * r
    s = 0.0
    for c in reversed(_LGAMMA_C):
        s = s * r2 + c
    return (z - 0.5) * xp.log(z) - z + _HALF_LOG_2PI + s * r - xp.log(p)


def lgamma(xp, x):
    """log |Γ(x)| elementwise (as C's lgamma: +inf at the poles 0, -1, -2, ...)."""
    f = _device_special(xp, "gammaln")          # the same function, poles included
    if f is not None:
        return f(x).astype(x.dtype, copy=False)
    left = x < 0.5
    g = _lgamma_right(xp, xp.where(left, 1 - x, x))
    r, pole = _reduced(xp, x, left, 0.5)
    # reflection: |Γ(x)| = π / (|sin πx| Γ(1-x))
    sin = xp.abs(xp.sin(math.pi * r))
    out = xp.where(left, _LOG_PI - xp.log(sin) - g, g)
    return xp.where(pole, xp.inf, out).astype(x.dtype, copy=False)


def _digamma_right(xp, x):
    """ψ(x) for x >= 0.5: ψ(x) = ψ(x + n) - Σ 1/(x+k), then the asymptotic series."""
    z = x
    acc = xp.zeros_like(x)
    for _ in range(_SHIFT):
        m = z < _SHIFT
        acc = xp.where(m, acc + 1 / z, acc)
        z = xp.where(m, z + 1, z)
    r = 1 / z
    r2 = r * r
    s = 0.0
    for c in reversed(_DIGAMMA_C):
        s = s * r2 + c
    return xp.log(z) - 0.5 * r - s * r2 - acc


def digamma(xp, x):
    """ψ(x) = d/dx log |Γ(x)| elementwise (+inf at the poles, as lgamma)."""
    left = x < 0.5
    d = _digamma_right(xp, xp.where(left, 1 - x, x))
    r, pole = _reduced(xp, x, left, 0.25)
    # reflection: ψ(x) = ψ(1-x) - π cot(πx)
    tan = xp.tan(math.pi * r)
    out = xp.where(left, d - math.pi / tan, d)
    return xp.where(pole, xp.inf, out).astype(x.dtype, copy=False)


def _lit(v) -> str | None:
    """A C literal of the element type, or None where C has none (inf, nan)."""
    v = float(v)
    return f"(T){v!r}" if np.isfinite(v) else None


# --- one-formula functions ------------------------------------------------------------
class _Fn(Unary):
    """y = f(x) for the array-module ufunc named ``fn``, C's ``cfn`` in fused kernels;
    subclasses give the derivative."""
    fn = cfn = "?"

    def c_expr(self, a, attr):
        return f"{self.cfn}({a[0]})"

    def forward_into(self, xp, xs, attr, data, out):
        getattr(xp, self.fn)(xs[0], out=out)


@register
class Sin(_Fn):
    name = fn = cfn = "sin"

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * xp.cos(xs[0])]


@register
class Cos(_Fn):
    name = fn = cfn = "cos"

    def backward(self, xp, xs, y, gy, attr, data):
        return [-gy * xp.sin(xs[0])]


@register
class Tan(_Fn):
    name = fn = cfn = "tan"

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * (1 + y * y)]


@register
class Asin(_Fn):
    name, fn, cfn = "asin", "arcsin", "asin"

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [gy / xp.sqrt(1 - x * x)]


@register
class Acos(_Fn):
    name, fn, cfn = "acos", "arccos", "acos"

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [-gy / xp.sqrt(1 - x * x)]


@register
class Atan(_Fn):
    name, fn, cfn = "atan", "arctan", "atan"

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [gy / (1 + x * x)]


@register
class Sinh(_Fn):
    name = fn = cfn = "sinh"

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * xp.cosh(xs[0])]


@register
class Cosh(_Fn):
    name = fn = cfn = "cosh"

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * xp.sinh(xs[0])]


@register
class Asinh(_Fn):
    name, fn, cfn = "asinh", "arcsinh", "asinh"

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [gy / xp.sqrt(x * x + 1)]


@register
class Acosh(_Fn):
    name, fn, cfn = "acosh", "arccosh", "acosh"

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [gy / (xp.sqrt(x - 1) * xp.sqrt(x + 1))]    # x² - 1 would cancel near x = 1


@register
class Atanh(_Fn):
    name, fn, cfn = "atanh", "arctanh", "atanh"

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [gy / (1 - x * x)]


@register
class Erf(Unary):
    name = "erf"

    def c_expr(self, a, attr):
        return f"erf({a[0]})"

    def forward(self, xp, xs, attr, data):
        return erf(xp, xs[0])

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [gy * (2 / _SQRT_PI) * xp.exp(-x * x)]


@register
class LGamma(Unary):
    name = "lgamma"

    def c_expr(self, a, attr):
        return f"lgamma({a[0]})"

    def forward(self, xp, xs, attr, data):
        return lgamma(xp, xs[0])

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * digamma(xp, xs[0])]


# --- activations ----------------------------------------------------------------------
@register
class Cube(Unary):
    name = "cube"

    def c_expr(self, a, attr):
        return f"({a[0]} * {a[0]} * {a[0]})"

    def forward_into(self, xp, xs, attr, data, out):
        x = xs[0]
        xp.multiply(x, x, out=out)
        out *= x

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        return [3 * gy * x * x]


def _logistic(xp, x):
    """1/(1+e^-x) as 0.5·(tanh(x/2)+1): no overflow for large |x|."""
    return 0.5 * (xp.tanh(0.5 * x) + 1)


@register
class LogSigmoid(Unary):
    """log σ(x) = min(x, 0) - log(1 + e^-|x|): finite for every finite x."""
    name = "log_sigmoid"

    def c_expr(self, a, attr):
        return f"(fmin({a[0]}, (T)0) - log1p(exp(-fabs({a[0]}))))"

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return xp.minimum(x, 0) - xp.log1p(xp.exp(-xp.abs(x)))

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * _logistic(xp, -xs[0])]


@register
class Softsign(Unary):
    name = "softsign"

    def c_expr(self, a, attr):
        return f"({a[0]} / ((T)1 + fabs({a[0]})))"

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return x / (1 + xp.abs(x))

    def backward(self, xp, xs, y, gy, attr, data):
        d = 1 + xp.abs(xs[0])
        return [gy / (d * d)]


@register
class Selu(Unary):
    """λ·x for x > 0, λ·α·(e^x - 1) otherwise, with DyNet's (and Klambauer et al.'s) λ, α."""
    name = "selu"

    def c_expr(self, a, attr):
        return (f"((T){SELU_LAMBDA!r} * (fmax({a[0]}, (T)0)"
                f" + (T){SELU_ALPHA!r} * expm1(fmin({a[0]}, (T)0))))")

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return SELU_LAMBDA * (xp.maximum(x, 0) + SELU_ALPHA * xp.expm1(xp.minimum(x, 0)))

    def backward(self, xp, xs, y, gy, attr, data):
        # for x <= 0, dy/dx = λα e^x = y + λα (DyNet's derivative at 0 is this side's)
        return [gy * xp.where(xs[0] > 0, SELU_LAMBDA, y + SELU_LAMBDA * SELU_ALPHA)]


@register
class Silu(Unary):
    """x·σ(βx) with β = attr (swish)."""
    name = "silu"

    def c_expr(self, a, attr):
        b = _lit(0.5 * attr)
        if b is None:
            return None
        return f"({a[0]} * (T)0.5 * (tanh({a[0]} * {b}) + (T)1))"

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return x * _logistic(xp, attr * x)

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        s = _logistic(xp, attr * x)
        return [gy * (s + attr * x * s * (1 - s))]


# --- two inputs ---------------------------------------------------------------------------
@register
class BMin(NAry):
    """Elementwise minimum of two inputs; on ties the gradient goes to the second (as DyNet)."""
    name = "bmin"

    def c_expr(self, a, attr):
        return f"fmin({a[0]}, {a[1]})"

    def forward_into(self, xp, xs, attr, data, out):
        xp.minimum(xs[0], xs[1], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        first = xs[0] < xs[1]
        return [gy * first, gy * ~first]


@register
class Pow(Op):
    """x_i ** y for any x and a scalar exponent y of shape (1,). Not elementwise in the
    batching sense: each node's y spreads over its own x, so batches share one x shape."""
    name = "pow"

    def shape(self, shapes, attr):
        if len(shapes) != 2:
            raise ShapeError(f"pow: needs two inputs (x, y), got {len(shapes)}")
        if tuple(shapes[1]) != (1,):
            raise ShapeError(f"pow: the exponent y must be a scalar expression of shape (1,), "
                             f"got {shapes[1]} (x has shape {shapes[0]})")
        return shapes[0]

    @staticmethod
    def _exponent(x, y):
        return y.reshape(y.shape[:1] + (1,) * (x.ndim - 1))    # (B, 1) against (B, *shape)

    def forward(self, xp, xs, attr, data):
        x, y = xs
        return xp.power(x, self._exponent(x, y))

    def backward(self, xp, xs, y, gy, attr, data):
        x, e = xs[0], self._exponent(*xs)
        gx = gy * e * xp.power(x, e - 1)
        # d(x^e)/de = x^e log x: 0 where x = 0 < e (x^e stays 0), undefined (NaN) for x < 0;
        # the log only sees positive values, so no warnings where e needs no gradient
        pos = x > 0
        d = xp.where(pos, y * xp.log(xp.where(pos, x, 1)), xp.where((x == 0) & (e > 0), 0, xp.nan))
        ge = (gy * d).reshape(x.shape[0], -1).sum(axis=1, keepdims=True)
        return [gx, ge.reshape(xs[1].shape).astype(x.dtype, copy=False)]


# --- rounding and gradient manipulation ---------------------------------------------------
# Each rounding function is two ops, one per gradient mode: differentiability is a property of
# the op (the graph, its recipes and the vertex traces read it per op, never per attribute),
# and the zero-gradient op must be non-differentiable so that nothing upstream of it runs backward.
class _Rounding(_Fn):
    """The straight-through mode: the gradient passes unchanged, as through the identity."""

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy]


class _ZeroGradient:
    """Mixin for the zero-gradient mode, the rounding's true derivative almost everywhere:
    not differentiable, so a node that depends on parameters only through it needs no
    gradient and backward never reaches it. attr is ignored."""
    differentiable = False

    def backward(self, xp, xs, y, gy, attr, data):
        return [None]


@register
class Round(_Rounding):
    """Half-way cases go to the even integer: 2.5 -> 2, -0.5 -> -0, as DyNet's vectorised
    kernel does (its scalar tail, past the last multiple of 8 elements, rounds them away from 0)."""
    name, fn, cfn = "round", "rint", "rint"


@register
class Ceil(_Rounding):
    name = fn = cfn = "ceil"


@register
class Floor(_Rounding):
    name = fn = cfn = "floor"


@register
class RoundZero(_ZeroGradient, type(Round)):     # (register keeps instances under the class names)
    name = "round_zero"


@register
class CeilZero(_ZeroGradient, type(Ceil)):
    name = "ceil_zero"


@register
class FloorZero(_ZeroGradient, type(Floor)):
    name = "floor_zero"


class _Identity(Unary):
    def c_expr(self, a, attr):
        return f"({a[0]})"

    def forward_into(self, xp, xs, attr, data, out):
        out[...] = xs[0]


@register
class ScaleGradient(_Identity):
    """The identity forward; backward multiplies the gradient by lambd (attr). -1 is
    DyNet's flip_gradient."""
    name = "scale_gradient"

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy if attr == 1 else gy * attr]


@register
class NoBackprop(_Identity):
    """The identity forward; no gradient flows back (its output needs none, so the engine
    never calls backward)."""
    name = "nobackprop"
    differentiable = False

    def backward(self, xp, xs, y, gy, attr, data):
        return [None]
