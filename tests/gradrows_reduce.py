"""Gradcheck rows (see test_gradcheck.py) for the ops of autobatch/ops/ (reduce).

The inputs are smooth functions of the parameters with no ties (min_dim, argmax), no
element on the hinge's or sparsemax's kink and no zero difference (l1_distance) at the
checked point; huber_distance is continuously differentiable, so its kink is harmless."""
import autobatch as dy
from autobatch.api import _op
from autobatch.ops import OPS
from gradcheck_kit import red

_ST = "straight_through_gradient"
_ARGMAX_ZERO = OPS["argmax_zero"]


def _cube(c, k):
    """A (2, 3, 2) tensor: reductions over the first and last of three dimensions."""
    return dy.reshape(c.m(k), (2, 3, 2))


def _scalar(c, k):
    return dy.dot_product(c.h(k), c.e(k))


ROWS = {
    "sum_dim": lambda c, k: (red(dy.sum_dim(c.m(k), [0]), k) + red(dy.sum_dim(c.m(k), [1]), k)
                             + dy.sum_dim(c.m(k), [0, 1]) + dy.sum_dim(c.h(k), [0])
                             + red(dy.sum_dim(_cube(c, k), [2, 0]), k)),
    "moment_dim": lambda c, k: (red(dy.mean_dim(c.m(k), [1], False), k)
                                + red(dy.moment_dim(c.m(k), [0], 3, False), k)
                                + dy.moment_dim(c.m(k), [0, 1], 2, False, 5)
                                + red(dy.mean_dim(_cube(c, k), [0, 2], False, 3), k)
                                + dy.moment_elems(c.h(k), 4) + dy.moment_elems(c.P.b, 1)),
    "std_dim": lambda c, k: (red(dy.std_dim(c.m(k), [0], False), k) + red(dy.std_dim(c.m(k), [1], False), k)
                             + dy.std_elems(c.h(k)) + dy.std_elems(c.m(k))
                             + red(dy.std_dim(_cube(c, k), [0, 2], False), k)),
    "min_dim": lambda c, k: (red(dy.min_dim(c.m(k), 0), k) + red(dy.min_dim(c.m(k), 1), k)
                             + dy.min_dim(c.h(k)) + red(dy.min_dim(_cube(c, k), 2), k)),
    "logsumexp": lambda c, k: (red(dy.logsumexp([c.mix(k), c.pos(k)]), k)
                               + red(dy.logsumexp([c.h(k), c.e(k), c.P.b]), k)
                               + red(dy.logsumexp([c.h(k)]), k)),
    "logsumexp_dim": lambda c, k: (red(dy.logsumexp_dim(c.m(k), 0), k) + red(dy.logsumexp_dim(c.m(k), 1), k)
                                   + dy.logsumexp_dim(c.h(k))),
    "cumsum": lambda c, k: (red(dy.cumsum(c.m(k), 0), k) + red(dy.cumsum(c.m(k), 1), k)
                            + red(dy.cumsum(c.h(k)), k) + red(dy.cumsum(_cube(c, k), 2), k)),
    # zero_gradient: only the cmult's other factor carries a gradient. The straight-through
    # mode is no derivative of anything; per unit of d(u), (true, analytic) derivatives of
    # argmax_st(u) + nobackprop(u) - u are (0 + 1 - 1, 1 + 0 - 1) = (0, 0), (0, -1) if it
    # stopped the gradient (test_api_reduce.py checks it directly as well)
    "argmax": lambda c, k: (red(dy.cmult(dy.argmax(c.h(k), "zero_gradient"), c.h(k)), k)
                            + red(dy.cmult(dy.argmax(c.e(k)), c.h(k)), k)
                            + red(dy.argmax(c.h(k), _ST) + dy.nobackprop(c.h(k)) - c.h(k), k)),
    # the zero-gradient op built directly (dy.argmax reaches it once api_reduce picks it)
    "argmax_zero": lambda c, k: (red(dy.cmult(_op(_ARGMAX_ZERO, c.h(k), attr="zero_gradient"), c.h(k)), k)
                                 + red(dy.cmult(_op(_ARGMAX_ZERO, c.e(k), attr="zero_gradient"), c.e(k)), k)),
    "layer_norm": lambda c, k: (red(dy.layer_norm(c.h(k), c.P.q, c.P.b), k)
                                + red(dy.layer_norm(c.m(k), c.e(k), c.h(k)), k)
                                + red(dy.layer_norm(c.m(k), c.P.M, dy.cmult(c.P.M, c.P.M)), k)
                                + red(dy.layer_norm(c.mix(k), c.pos(k), c.mix(k)), k)),
    "weight_norm": lambda c, k: (red(dy.weight_norm(c.m(k), c.h(k)[0]), k)
                                 + red(dy.weight_norm(c.P.W, _scalar(c, k)), k)
                                 + red(dy.weight_norm(c.e(k), dy.reshape(c.h(k)[1], (1, 1))), k)),
    "l1_distance": lambda c, k: (dy.l1_distance(c.h(k), c.e(k))
                                 + dy.l1_distance(c.m(k), dy.cmult(c.P.M, c.P.M))),
    "huber_distance": lambda c, k: (dy.huber_distance(c.h(k), c.e(k), 0.5)
                                    + dy.huber_distance(c.m(k) * 2, dy.cmult(c.P.M, c.P.M))),
    "hinge_dim": lambda c, k: (red(dy.hinge_dim(c.m(k) * 3, [k % 3, 2, (k + 1) % 3, 0]), k)
                               + red(dy.hinge_dim(c.m(k), [3, k % 4, 1], 1, 0.5), k)),
    "poisson_loss": lambda c, k: (dy.poisson_loss(c.h(k)[0], k + 1) + dy.poisson_loss(_scalar(c, k), 0)
                                  + red(dy.poisson_loss(dy.reshape(c.e(k)[2], (1, 1)), 2 * k), k)),
    "pairwise_rank_loss": lambda c, k: (dy.pairwise_rank_loss(_scalar(c, k), c.h(k)[1], 5.0)
                                        + red(dy.pairwise_rank_loss(dy.reshape(c.h(k), (1, 3)),
                                                                    dy.reshape(c.e(k), (1, 3))), k)),
    "sparsemax": lambda c, k: (red(dy.sparsemax(c.h(k) * 0.5), k)
                               + red(dy.sparsemax(dy.reshape(dy.tanh(c.m(k)), (12, 1))), k)
                               + red(dy.sparsemax(c.e(k) * 0.3), k)),
}
