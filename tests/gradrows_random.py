"""Gradcheck rows (see test_gradcheck.py) for the ops of autobatch/ops/ (random)."""
import autobatch as dy  # noqa: F401
from gradcheck_kit import Ctx, _data, red, unary, unary_pos  # noqa: F401

# The random leaves receive no gradient; their rows multiply them into differentiable
# sub-expressions, so a wrong or strategy-dependent value shows up in the loss and gradients.
ROWS = {
    "dropout_dim": lambda c, k: (red(dy.dropout_dim(c.m(k), 0, 0.4), k) + red(dy.dropout_dim(c.m(k), 1, 0.3), k)
                                 + red(dy.dropout_dim(c.h(k), 0, 0.5), k)
                                 + red(dy.dropout_dim(c.P.M, 1, 0.5), k)),
    "block_dropout": lambda c, k: (red(dy.block_dropout(c.mix(k), 0.4), k) + red(dy.block_dropout(c.m(k), 0.3), k)
                                   + red(dy.block_dropout(c.P.b, 0.5), k)),
    "random_normal": lambda c, k: (red(dy.cmult(c.h(k), dy.random_normal(3, 0.5, 2.0)), k)
                                   + red(dy.cmult(c.m(k), dy.random_normal((3, 4))), k)),
    "random_uniform": lambda c, k: (red(dy.cmult(c.h(k), dy.random_uniform(3, -1.0, 2.0)), k)
                                    + red(dy.cmult(c.P.M, dy.random_uniform((3, 4), 0.5, 1.0)), k)),
    "random_bernoulli": lambda c, k: (red(dy.cmult(c.mix(k), dy.random_bernoulli(4 + k % 3, 0.6, 2.0)), k)
                                      + red(dy.cmult(c.e(k), dy.random_bernoulli(3, 0.5)), k)),
    "random_gumbel": lambda c, k: (red(dy.cmult(c.h(k), dy.random_gumbel(3)), k)
                                   + red(dy.cmult(c.e(k), dy.random_gumbel(3, 0.5, 2.0)), k)),
}
