"""Gradcheck rows (see test_gradcheck.py) for the ops of autobatch/ops/ (math).

The rounding and gradient-manipulation ops have analytic gradients that differ from the true
derivative on purpose; their rows combine them so that the two agree again, and a wrong
backward breaks the agreement. Per unit of d(u), (true, analytic) derivatives are:
u (1, 1), nobackprop(u) (1, 0), scale_gradient(u, λ) (1, λ), round(u, straight-through) (0, 1),
round_zero(u) (0, 0). So round(u, straight-through) + nobackprop(u) - u is (0, 0) and would
be (0, -1) with a zero backward, or (0, 1) if nobackprop let the gradient through. Tests in
test_api_math.py check these gradients directly as well."""
import autobatch as dy
from autobatch.api import _op1
from autobatch.ops import OPS
from gradcheck_kit import red, unary, unary_pos

_ST = "straight_through_gradient"


def _rounding(f):
    """Zero mode at non-integer points (the function is locally constant there), and the
    straight-through mode in the combination above."""
    def row(c, k):
        u = 3 * c.pos(k)
        return (red(dy.cmult(c.mix(k), f(u)), k) + red(f(2 * c.P.q), k)
                + red(f(u, _ST) + dy.nobackprop(u) - u, k))
    return row


def _rounding_zero(name):
    """The zero-gradient op (built directly: dy.round(x) reaches it once api_math picks it for
    that mode) at non-integer points, in a product whose other factor still carries u's
    gradient: it must stop only its own path."""
    op = OPS[name + "_zero"]

    def row(c, k):
        u = 3 * c.pos(k)
        return (red(dy.cmult(c.mix(k), _op1(op, u)), k) + red(_op1(op, 2 * c.P.q), k)
                + red(dy.cmult(_op1(op, u), u), k))
    return row


def _pow(c, k):
    expo = 1.5 + 0.5 * dy.tanh(dy.pick(c.e(k), 0))               # a (1,) exponent with a gradient
    return (red(dy.pow(dy.exp(c.h(k)), expo), k)
            + red(dy.pow(dy.square(c.m(k)) + 0.5, dy.pick(c.h(k), 1)), k)   # a matrix base
            + red(dy.pow(c.P.q, expo), k)                           # a parameter base
            + red(dy.pow(dy.square(c.h(k)) + 0.1, 2.5), k))         # a number exponent


ROWS = {
    "sin": unary(dy.sin),
    "cos": unary(dy.cos),
    "tan": unary(lambda x: dy.tan(0.4 * x)),                    # |0.4·x| < π/2 on the rows' data
    "asin": unary(lambda x: dy.asin(0.8 * dy.tanh(x))),
    "acos": unary(lambda x: dy.acos(0.8 * dy.tanh(x))),
    "atan": unary(dy.atan),
    "sinh": unary(dy.sinh),
    "cosh": unary(dy.cosh),
    "asinh": unary(dy.asinh),
    "acosh": unary_pos(lambda x: dy.acosh(x + 1)),
    "atanh": unary(lambda x: dy.atanh(0.8 * dy.tanh(x))),
    # both sides of the series / continued-fraction split at |x| = 2.5
    "erf": lambda c, k: unary(dy.erf)(c, k) + red(dy.erf(3 * c.mix(k)), k),
    # x >= 0.5 (recurrence and Stirling), large x, and -1 < x < 0 (reflection)
    "lgamma": lambda c, k: (unary_pos(dy.lgamma)(c, k) + red(dy.lgamma(5 * c.pos(k)), k)
                            + red(dy.lgamma(0.3 * dy.tanh(c.mix(k)) - 0.5), k)),
    "cube": unary(dy.cube),
    "log_sigmoid": lambda c, k: unary(dy.log_sigmoid)(c, k) + red(dy.log_sigmoid(-5 * c.mix(k)), k),
    "softsign": unary(dy.softsign),
    "selu": unary(dy.selu),
    "silu": lambda c, k: unary(dy.silu)(c, k) + red(dy.silu(c.mix(k), 1.7), k),
    "pow": _pow,
    "bmin": lambda c, k: (red(dy.bmin(c.mix(k), 0.3 - c.mix(k)), k) + red(dy.bmin(c.h(k), c.P.b), k)
                          + red(dy.bmin(c.P.b, c.e(k)), k)),
    "round": _rounding(dy.round),
    "ceil": _rounding(dy.ceil),
    "floor": _rounding(dy.floor),
    "round_zero": _rounding_zero("round"),
    "ceil_zero": _rounding_zero("ceil"),
    "floor_zero": _rounding_zero("floor"),
    # (true, analytic): flip(u) + u - 2·nobackprop(u) is (0, 0) (with an identity backward: (0, 2));
    # scale_gradient(u, 2) + nobackprop(u) - u is (1, 1) (identity backward: (1, 0))
    "scale_gradient": lambda c, k: (red(dy.flip_gradient(c.mix(k)) + c.mix(k) - 2 * dy.nobackprop(c.mix(k)), k)
                                    + red(dy.scale_gradient(c.mix(k), 2.0) + dy.nobackprop(c.mix(k)) - c.mix(k), k)
                                    + red(dy.scale_gradient(c.mix(k)), k)
                                    + red(dy.flip_gradient(c.P.b) + c.P.b - 2 * dy.nobackprop(c.P.b), k)),
    # as above: nobackprop letting the gradient through gives (1, 2)
    "nobackprop": lambda c, k: (red(dy.nobackprop(c.mix(k)) + dy.scale_gradient(c.mix(k), 2.0) - c.mix(k), k)
                                + red(dy.nobackprop(c.P.b) + dy.scale_gradient(c.P.b, 2.0) - c.P.b, k)),
}
