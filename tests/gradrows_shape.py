"""Gradcheck rows (see test_gradcheck.py) for the ops of autobatch/ops/ (shape)."""
import numpy as np

import autobatch as dy  # noqa: F401
from gradcheck_kit import _data, red


def _param(c, name, shape, salt):
    """A parameter of a shape the fixture lacks (3-D, 4-D), made once per fixture and
    added to P.all so that its gradient is checked too."""
    p = getattr(c.P, name, None)
    if p is None:
        p = dy.ParameterCollection().add_parameters(shape, init=_data(shape, 9, salt))
        setattr(c.P, name, p)
        c.P.all.append(p)
    return p


def _t3(c, k):       # a computed (2, 3, 4) tensor
    return dy.reshape(dy.concatenate([c.m(k), dy.tanh(c.m(k))]), (2, 3, 4))


def _he(c, k):       # a computed (6,) vector
    return dy.concatenate([c.h(k), c.e(k)])


def _spd(c, k):      # m·mᵀ + I: symmetric positive definite (3, 3), well conditioned
    return c.m(k) * dy.transpose(c.m(k)) + dy.inputTensor(np.eye(3))


def _map(c, k):      # a computed (3, 2, 2) map (H, W, C)
    return dy.reshape(c.m(k), (3, 2, 2))


ROWS = {
    # DyNet's broadcasting operators: a column, a row, a parameter vector, a scalar
    "broadcast": lambda c, k: (red(c.m(k) + dy.reshape(c.e(k), (3, 1)), k)
                               + red(dy.cmult(c.m(k), dy.transpose(c.x(k))), k)
                               + red(c.m(k) - c.P.b, k)
                               + red(dy.cdiv(c.h(k), dy.sum_elems(c.e(k)) + 3.0), k)),
    "select_cols": lambda c, k: (red(dy.select_cols(c.m(k), [3, 0, 3]), k)
                                 + red(dy.select_cols(c.P.M, [k % 4, 2]), k)),
    "strided_select": lambda c, k: (red(dy.strided_select(c.m(k), [2, 3], [0, 1], [3, 4]), k)
                                    + red(dy.strided_select(_t3(c, k), [1, 2], [1]), k)
                                    + red(dy.strided_select(c.h(k), [2]), k)),
    "fold_rows": lambda c, k: (red(dy.fold_rows(dy.transpose(c.m(k))), k) + red(dy.fold_rows(c.m(k), 3), k)
                               + red(dy.fold_rows(_he(c, k), 3), k)),
    "kmax_pooling": lambda c, k: (red(dy.kmax_pooling(c.m(k), 2), k) + red(dy.kmax_pooling(c.m(k), 2, 0), k)
                                  + red(dy.kmax_pooling(c.h(k), 2, 0), k) + red(dy.kmax_pooling(_t3(c, k), 2, 1), k)),
    "colwise_add": lambda c, k: (red(dy.colwise_add(c.m(k), c.h(k)), k) + red(dy.colwise_add(c.m(k), c.P.b), k)
                                 + red(dy.colwise_add(c.P.M, dy.reshape(c.e(k), (3, 1))), k)),
    "contract3d_1d": lambda c, k: (red(dy.contract3d_1d(_t3(c, k), dy.pickrange(c.mix(k), 0, 4)), k)
                                   + red(dy.contract3d_1d_bias(_t3(c, k), c.x(k), dy.reshape(_he(c, k), (2, 3))), k)),
    "contract3d_1d_shared": lambda c, k: (
        red(dy.contract3d_1d(_param(c, "T3", (2, 3, 4), 1), dy.pickrange(c.mix(k), 0, 4)), k)
        + red(dy.contract3d_1d_bias(_param(c, "T3", (2, 3, 4), 1), c.x(k), dy.reshape(_he(c, k), (2, 3))), k)),
    "contract3d_1d_1d": lambda c, k: (
        red(dy.contract3d_1d_1d(_t3(c, k), dy.pickrange(c.mix(k), 0, 4), c.e(k)), k)
        + red(dy.contract3d_1d_1d_bias(_t3(c, k), c.x(k), c.h(k), dy.pickrange(c.e(k), 1, 3)), k)),
    "contract3d_1d_1d_shared": lambda c, k: (
        red(dy.contract3d_1d_1d(_param(c, "T3", (2, 3, 4), 1), dy.pickrange(c.mix(k), 0, 4), c.e(k)), k)
        + red(dy.contract3d_1d_1d_bias(_param(c, "T3", (2, 3, 4), 1), c.x(k), c.h(k),
                                       dy.pickrange(c.e(k), 1, 3)), k)),
    "trace_of_product": lambda c, k: (dy.trace_of_product(c.m(k), c.P.M) + dy.trace_of_product(c.h(k), c.e(k))),
    "circ_conv": lambda c, k: (red(dy.circ_conv(c.h(k), c.e(k)), k) + red(dy.circ_conv(c.mix(k), c.pos(k)), k)
                               + red(dy.circ_conv(c.P.b, _he(c, k)[1:4]), k)),
    "circ_corr": lambda c, k: (red(dy.circ_corr(c.h(k), c.e(k)), k) + red(dy.circ_corr(c.mix(k), c.pos(k)), k)
                               + red(dy.circ_corr(_he(c, k)[1:4], c.P.b), k)),
    "filter1d_narrow": lambda c, k: (
        red(dy.filter1d_narrow(c.m(k), dy.reshape(_he(c, k), (3, 2))), k)
        + red(dy.filter1d_narrow(dy.transpose(c.m(k)), dy.reshape(dy.tanh(c.m(k)), (4, 1, 3))), k)),
    "filter1d_narrow_shared": lambda c, k: (
        red(dy.filter1d_narrow(c.m(k), c.P.V), k)
        + red(dy.filter1d_narrow(c.m(k), _param(c, "F3", (3, 2, 2), 2)), k)),
    "inverse": lambda c, k: (red(dy.inverse(_spd(c, k)), k) + red(dy.inverse(dy.square(c.h(k)[k % 3]) + 1), k)),
    "logdet": lambda c, k: dy.logdet(_spd(c, k)) + dy.logdet(dy.square(c.e(k)[1]) + 0.5),
    "conv2d": lambda c, k: (
        red(dy.conv2d(_map(c, k), dy.reshape(dy.concatenate([c.h(k), c.e(k), c.h(k)])[0:8], (2, 2, 2, 1)), [1, 1]), k)
        + red(dy.conv2d_bias(_map(c, k), dy.reshape(dy.tanh(c.m(k)), (1, 2, 2, 3)), c.e(k), [2, 1], False), k)),
    "conv2d_shared": lambda c, k: (
        red(dy.conv2d(_map(c, k), _param(c, "F4", (2, 2, 2, 3), 3), [1, 1]), k)
        + red(dy.conv2d_bias(dy.reshape(dy.tanh(c.m(k)), (4, 3, 1)), _param(c, "G4", (3, 2, 1, 3), 4), c.P.b,
                             [2, 1], False), k)),
    "maxpooling2d": lambda c, k: (
        red(dy.maxpooling2d(dy.reshape(c.m(k), (3, 4, 1)), [2, 2], [1, 1]), k)
        + red(dy.maxpooling2d(_map(c, k), [2, 2], [2, 1], False), k)
        + red(dy.maxpooling2d(dy.transpose(c.m(k)), [2, 3], [2, 1], False), k)),
}
