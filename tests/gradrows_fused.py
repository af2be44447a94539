"""Gradcheck rows (see test_gradcheck.py) for the fused ops of autobatch/ops/fused.py: one
row per (product, activation) pair that the ops declare, built the way users write it, with
the product a temporary (that is what fuses). A product op newly declared fusable needs an
entry in PRODUCTS, or importing this file fails."""
import autobatch as dy
from autobatch.ops.fused import FUSED
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


ROWS = {op.name: _row(op.base.name, op.act.name) for op in FUSED.values()}
