"""What a gradcheck row is built from: fixed pseudo-random data, the shared
sub-expressions of one instance (Ctx) and the weighted reductions to a scalar.
Rows live in test_gradcheck.py and in the gradrows_*.py files beside it."""
import numpy as np

import autobatch as dy

IDX = (1, 3, 1, 4)          # lookup rows of instances 0..3: row 1 repeats


def _data(shape, *salt, lo=-1.0, hi=1.0):
    """Fixed pseudo-random input data, a function of shape and salt only."""
    return np.random.default_rng([abs(hash(tuple(shape))) % 2**32, *salt]).uniform(lo, hi, shape)


class Ctx:
    """Builds the shared sub-expressions of one graph, memoised per instance k,
    so that repeated instances reuse the same nodes."""

    def __init__(self, P):
        self.P = P
        self.memo = {}

    def _m(self, key, make):
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def x(self, k):      # input (4,)
        return self._m(("x", k), lambda: dy.inputVector(_data((4,), 1, k)))

    def h(self, k):      # W·x + b: matmul_shared, then add with a broadcast parameter
        return self._m(("h", k), lambda: self.P.W * self.x(k) + self.P.b)

    def e(self, k):      # a lookup (3,), with repeated rows across instances
        return self._m(("e", k), lambda: self.P.E[IDX[k]])

    def m(self, k):      # a (3, 4) matrix that depends on M
        return self._m(("m", k), lambda: dy.cmult(self.P.M, dy.inputTensor(_data((3, 4), 2, k, lo=0.5, hi=1.5))))

    def mix(self, k):    # a vector of length 4 + k % 3: elementwise batches mix sizes
        return self._m(("mix", k), lambda: dy.concatenate(
            [self.h(k) + self.e(k), dy.pickrange(self.e(k), 0, 1 + k % 3)]))

    def pos(self, k):    # a positive vector, same length as mix(k)
        return self._m(("pos", k), lambda: dy.square(self.mix(k)) + 0.5)


def red(e, k):
    """A weighted sum of all elements with fixed random weights, so that a gradient
    that lands on the wrong element is caught (a plain sum would not see it)."""
    shape = e.dim()[0]
    return dy.sum_elems(dy.cmult(e, dy.inputTensor(_data(shape, 3, k))))


def unary(f):
    return lambda c, k: red(f(c.mix(k)), k) + red(f(c.P.b), k)


def unary_pos(f):
    return lambda c, k: red(f(c.pos(k)), k) + red(f(c.P.q), k)
