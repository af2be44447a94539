"""Gradcheck rows (see test_gradcheck.py) for the fused ops of autobatch/ops/fused.py: one
row per (product, activation) pair and per (op, activation, input) triple that the ops
declare, built the way users write it, with the product or the activation a temporary (that
is what fuses). A product op newly declared fusable needs an entry in PRODUCTS, or importing
this file fails."""
import autobatch as dy
from autobatch.ops.fused import FUSED, FUSED_IN
from gradcheck_kit import red

# the product of instance k, each in two forms: one and two pairs, or two shapes of input
PRODUCTS = {
    "affine": (lambda c, k: dy.affine_transform([c.P.b, c.P.W, c.x(k)]),
               lambda c, k: dy.affine_transform([c.P.b, c.P.V, c.e(k), c.P.W, c.x(k)])),
    "matmul_add": (lambda c, k: dy.affine_transform([c.h(k), c.P.V, c.e(k)]),
                   lambda c, k: dy.affine_transform([c.e(k), c.P.W, c.x(k)])),
    "matmul_shared": (lambda c, k: c.P.V * c.e(k),
                      lambda c, k: c.P.W * c.x(k)),
}


def _row(base, act):
    f = getattr(dy, act)
    one, two = PRODUCTS[base]
    return lambda c, k: red(f(one(c, k)), k) + red(f(two(c, k)), k)


# the other operand of an op that takes an activation in: mixed sizes, a parameter, computed
OTHERS = (lambda c, k: c.pos(k), lambda c, k: c.P.b, lambda c, k: c.h(k) * 0.5)
ACTED = (lambda c, k: c.mix(k) * 0.3, lambda c, k: c.e(k), lambda c, k: c.h(k) * 0.3)


def _row_in(op, act, j):
    f, g = getattr(dy, op), getattr(dy, act)

    def row(c, k):
        terms = []
        for other, acted in zip(OTHERS, ACTED):
            o = other(c, k)
            terms.append(red(f(g(acted(c, k)), o) if j == 0 else f(o, g(acted(c, k))), k))
        return dy.esum(terms)
    return row


ROWS = {op.name: _row(op.base.name, op.act.name) for op in FUSED.values()}
ROWS.update({op.name: _row_in(op.base.name, op.act.name, op.j) for op in FUSED_IN.values()})
