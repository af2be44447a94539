"""DyNet's further elementwise math functions (ops in ops/unary_math.py). Every function keeps
its input's shape except where said; inputs are Expressions (or Parameters)."""
from __future__ import annotations

import numbers

from .api import _op, _op1, _op2, _real, constant
from .errors import GraphError, user_line
from .graph import Expression
from .ops import OPS
from .params import Parameter

__all__ = ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
           "erf", "lgamma", "cube", "log_sigmoid", "softsign", "selu", "silu", "pow", "bmin",
           "round", "ceil", "floor", "scale_gradient", "flip_gradient", "nobackprop"]

_SIN, _COS, _TAN = OPS["sin"], OPS["cos"], OPS["tan"]
_ASIN, _ACOS, _ATAN = OPS["asin"], OPS["acos"], OPS["atan"]
_SINH, _COSH, _ASINH, _ACOSH, _ATANH = OPS["sinh"], OPS["cosh"], OPS["asinh"], OPS["acosh"], OPS["atanh"]
_ERF, _LGAMMA, _CUBE = OPS["erf"], OPS["lgamma"], OPS["cube"]
_LOG_SIGMOID, _SOFTSIGN, _SELU, _SILU = OPS["log_sigmoid"], OPS["softsign"], OPS["selu"], OPS["silu"]
_POW, _BMIN = OPS["pow"], OPS["bmin"]
_ROUND, _CEIL, _FLOOR = OPS["round"], OPS["ceil"], OPS["floor"]
_SCALE_GRAD, _NOBACKPROP = OPS["scale_gradient"], OPS["nobackprop"]

_GRADIENT_MODES = {"zero_gradient": False, "straight_through_gradient": True}



# --- trigonometric and hyperbolic ------------------------------------------------------
def sin(x) -> Expression:
    """Elementwise sine; same shape."""
    return _op1(_SIN, x)


def cos(x) -> Expression:
    """Elementwise cosine; same shape."""
    return _op1(_COS, x)


def tan(x) -> Expression:
    """Elementwise tangent; same shape."""
    return _op1(_TAN, x)


def asin(x) -> Expression:
    """Elementwise inverse sine (NaN outside [-1, 1]); same shape."""
    return _op1(_ASIN, x)


def acos(x) -> Expression:
    """Elementwise inverse cosine (NaN outside [-1, 1]); same shape."""
    return _op1(_ACOS, x)


def atan(x) -> Expression:
    """Elementwise inverse tangent; same shape."""
    return _op1(_ATAN, x)


def sinh(x) -> Expression:
    """Elementwise hyperbolic sine; same shape."""
    return _op1(_SINH, x)


def cosh(x) -> Expression:
    """Elementwise hyperbolic cosine; same shape."""
    return _op1(_COSH, x)


def asinh(x) -> Expression:
    """Elementwise inverse hyperbolic sine; same shape."""
    return _op1(_ASINH, x)


def acosh(x) -> Expression:
    """Elementwise inverse hyperbolic cosine (NaN below 1); same shape."""
    return _op1(_ACOSH, x)


def atanh(x) -> Expression:
    """Elementwise inverse hyperbolic tangent (±inf at ±1, NaN beyond); same shape."""
    return _op1(_ATANH, x)


# --- special functions and activations ----------------------------------------------------
def erf(x) -> Expression:
    """Elementwise Gaussian error function 2/√π ∫₀ˣ e^(-t²) dt; same shape."""
    return _op1(_ERF, x)


def lgamma(x) -> Expression:
    """Elementwise log |Γ(x)| (+inf at 0, -1, -2, ...); same shape. Its gradient is the
    digamma function."""
    return _op1(_LGAMMA, x)


def cube(x) -> Expression:
    """Elementwise x³; same shape."""
    return _op1(_CUBE, x)


def log_sigmoid(x) -> Expression:
    """Elementwise log(1/(1+e^-x)), finite for all finite x (unlike log(logistic(x))); same shape."""
    return _op1(_LOG_SIGMOID, x)


def softsign(x) -> Expression:
    """Elementwise x / (1 + |x|); same shape."""
    return _op1(_SOFTSIGN, x)


def selu(x) -> Expression:
    """Elementwise SELU: λx for x > 0, λα(e^x - 1) otherwise (λ ≈ 1.0507, α ≈ 1.6733); same shape."""
    return _op1(_SELU, x)


def silu(x, beta: float = 1.0) -> Expression:
    """Elementwise SiLU / swish: x / (1 + e^(-beta·x)); same shape. The gradient is the true
    derivative σ(βx)(1 + βx(1 - σ(βx))); DyNet's backward leaves out the β of the second term."""
    return _op(_SILU, x, attr=_real("silu", "beta", beta))


# --- two inputs ---------------------------------------------------------------------------
def pow(x, y) -> Expression:  # noqa: A001  (DyNet's name)
    """x_i ** y elementwise for a scalar exponent y: an Expression of shape (1,) (DyNet's
    requirement), or here also a plain number; x's shape. Gradients flow to x and to y."""
    if isinstance(y, numbers.Real) and not isinstance(y, bool):
        y = constant(1, float(y))
    return _op(_POW, x, y)


# x ** 2.5 and x ** e for a (1,) expression e, as DyNet's Expression.__pow__
Expression.__pow__ = lambda self, y: pow(self, y)
Parameter.__pow__ = lambda self, y: pow(self, y)


def bmin(x, y) -> Expression:
    """Elementwise minimum of two same-shape expressions (ties: the gradient goes to y); same shape."""
    return _op2(_BMIN, x, y)


# --- rounding -------------------------------------------------------------------------------
def _rounding(op, x, gradient_mode):
    st = _GRADIENT_MODES.get(gradient_mode) if isinstance(gradient_mode, str) else None
    if st is None:
        raise GraphError(f"{op.name}: gradient_mode must be 'zero_gradient' or "
                         f"'straight_through_gradient', got {gradient_mode!r} [at {user_line()}]")
    # the zero-gradient forms are ops of their own that are not differentiable, so what
    # depends on x only through them needs no gradient and its backward never runs
    return _op1(op if st else OPS[op.name + "_zero"], x)


def round(x, gradient_mode: str = "zero_gradient") -> Expression:  # noqa: A001
    """Elementwise rounding to the nearest integer, halves to even (2.5 -> 2, -0.5 -> -0).
    gradient_mode: "zero_gradient" (the default) or "straight_through_gradient" (the
    gradient passes as if this were the identity)."""
    return _rounding(_ROUND, x, gradient_mode)


def ceil(x, gradient_mode: str = "zero_gradient") -> Expression:
    """Elementwise smallest integer >= x; gradient_mode as in round(); same shape."""
    return _rounding(_CEIL, x, gradient_mode)


def floor(x, gradient_mode: str = "zero_gradient") -> Expression:
    """Elementwise largest integer <= x; gradient_mode as in round(); same shape."""
    return _rounding(_FLOOR, x, gradient_mode)


# --- gradient manipulation -------------------------------------------------------------------
def scale_gradient(x, lambd: float = 1.0) -> Expression:
    """x unchanged (same shape); backward multiplies the gradient by lambd."""
    return _op(_SCALE_GRAD, x, attr=_real("scale_gradient", "lambd", lambd))


def flip_gradient(x) -> Expression:
    """x unchanged (same shape); backward negates the gradient (adversarial training)."""
    return _op(_SCALE_GRAD, x, attr=-1.0)


def nobackprop(x) -> Expression:
    """x unchanged (same shape); no gradient flows back through it."""
    return _op1(_NOBACKPROP, x)
