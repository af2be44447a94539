"""Values of the selection / structure / linear-algebra functions (api_shape.py) against
plain NumPy written from DyNet's definitions (loops, not the kernels' tricks), with several
instances in one graph under every strategy; and their error messages."""
import numpy as np
import pytest

import autobatch as dy
from autobatch.errors import GraphError
from autobatch.ops import OPS
from check_kit import check_instances

STRATS = ("none", "depth", "agenda")
rng = np.random.default_rng(2024)


def _distinct(*shape):
    """Values far apart (no ties for max/kmax), in random order."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.37 - n * 0.15).reshape(shape)


# --- NumPy references ------------------------------------------------------------------------
def _out_pad(n, f, s, valid):
    if valid:
        return -(-(n - f + 1) // s), 0
    y = -(-n // s)
    return y, max((y - 1) * s + f - n, 0) // 2


def conv2d_ref(x, f, stride, valid, b=None):
    if x.ndim == 2:
        x = x[:, :, None]
    (yh, top), (yw, left) = (_out_pad(x.shape[a], f.shape[a], stride[a], valid) for a in (0, 1))
    y = np.zeros((yh, yw, f.shape[3]))
    for i in range(yh):
        for j in range(yw):
            for a in range(f.shape[0]):
                for c in range(f.shape[1]):
                    r, q = i * stride[0] + a - top, j * stride[1] + c - left
                    if 0 <= r < x.shape[0] and 0 <= q < x.shape[1]:
                        y[i, j] += x[r, q] @ f[a, c]
    return y if b is None else y + b


def maxpool_ref(x, k, stride, valid):
    (yh, top), (yw, left) = (_out_pad(x.shape[a], k[a], stride[a], valid) for a in (0, 1))
    y = np.full((yh, yw) + x.shape[2:], -np.inf)
    for i in range(yh):
        for j in range(yw):
            for a in range(k[0]):
                for c in range(k[1]):
                    r, q = i * stride[0] + a - top, j * stride[1] + c - left
                    if 0 <= r < x.shape[0] and 0 <= q < x.shape[1]:
                        y[i, j] = np.maximum(y[i, j], x[r, q])
    return y


def kmax_ref(x, k, d):
    xm = np.moveaxis(x, d, -1)
    out = np.empty(xm.shape[:-1] + (k,))
    for idx in np.ndindex(xm.shape[:-1]):
        row = list(xm[idx])
        keep = sorted(sorted(range(len(row)), key=lambda t: -row[t])[:k])
        out[idx] = [row[t] for t in keep]
    return np.moveaxis(out, -1, d)


def circ_conv_ref(u, v):
    n = len(u)
    return np.array([sum(u[i] * v[(k - i) % n] for i in range(n)) for k in range(n)])


def circ_corr_ref(u, v):
    n = len(u)
    return np.array([sum(u[i] * v[(i + k) % n] for i in range(n)) for k in range(n)])


def filter1d_ref(x, f):
    f3 = f if f.ndim == 3 else f[:, :, None]
    w = f3.shape[1]
    return np.array([[np.sum(x[:, j:j + w] * f3[:, :, o]) for j in range(x.shape[1] - w + 1)]
                     for o in range(f3.shape[2])])


def fold_rows_ref(x, n):
    return np.array([x[i * n:(i + 1) * n].sum(axis=0) for i in range(x.shape[0] // n)])


R = rng.normal
# name: (input shapes or generators, build(*exprs), ref(*arrays))
CASES = {
    "pick_range": ([(3, 4)], lambda x: dy.pick_range(x, 1, 3, 1), lambda x: x[:, 1:3]),
    "select_cols": ([(3, 4)], lambda x: dy.select_cols(x, [2, 0, 2]), lambda x: x[:, [2, 0, 2]]),
    "strided_select": ([(5, 7)], lambda x: dy.strided_select(x, [2, 3], [1, 0], [5, 6]), lambda x: x[1:5:2, 0:6:3]),
    "strided_select_defaults": ([(2, 3, 4)], lambda x: dy.strided_select(x, [1, 2], [1]), lambda x: x[1:, ::2, :]),
    "strided_select_vec": ([(7,)], lambda x: dy.strided_select(x, [3], [], []), lambda x: x[::3]),
    "fold_rows": ([(6, 4)], dy.fold_rows, lambda x: fold_rows_ref(x, 2)),
    "fold_rows_3": ([(6, 4)], lambda x: dy.fold_rows(x, 3), lambda x: fold_rows_ref(x, 3)),
    "fold_rows_vec": ([(6,)], lambda x: dy.fold_rows(x, 3), lambda x: fold_rows_ref(x, 3)),
    "kmax_pooling": ([lambda: _distinct(3, 5)], lambda x: dy.kmax_pooling(x, 3), lambda x: kmax_ref(x, 3, 1)),
    "kmax_pooling_d0": ([lambda: _distinct(4, 3)], lambda x: dy.kmax_pooling(x, 2, 0), lambda x: kmax_ref(x, 2, 0)),
    "kmax_pooling_3d": ([lambda: _distinct(2, 4, 3)], lambda x: dy.kmax_pooling(x, 2, 1),
                        lambda x: kmax_ref(x, 2, 1)),
    "kmax_pooling_vec": ([lambda: _distinct(6)], lambda x: dy.kmax_pooling(x, 4, 0), lambda x: kmax_ref(x, 4, 0)),
    "colwise_add": ([(3, 4), (3,)], dy.colwise_add, lambda x, b: x + b[:, None]),
    "colwise_add_col": ([(3, 4), (3, 1)], dy.colwise_add, lambda x, b: x + b),
    "contract3d_1d": ([(2, 3, 4), (4,)], dy.contract3d_1d,
                      lambda x, y: np.array([[x[i, j] @ y for j in range(3)] for i in range(2)])),
    "contract3d_1d_bias": ([(2, 3, 4), (4,), (2, 3)], dy.contract3d_1d_bias,
                           lambda x, y, b: np.tensordot(x, y, axes=([2], [0])) + b),
    "contract3d_1d_1d": ([(2, 3, 4), (4,), (3,)], dy.contract3d_1d_1d,
                         lambda x, y, z: np.array([sum(x[i, j, k] * y[k] * z[j] for j in range(3) for k in range(4))
                                                   for i in range(2)])),
    "contract3d_1d_1d_bias": ([(2, 3, 4), (4,), (3,), (2,)], dy.contract3d_1d_1d_bias,
                              lambda x, y, z, b: (x @ y) @ z + b),
    "trace_of_product": ([(3, 4), (3, 4)], dy.trace_of_product, lambda x, y: [np.trace(x @ y.T)]),
    "trace_of_product_vec": ([(5,), (5,)], dy.trace_of_product, lambda x, y: [x @ y]),
    "circ_conv": ([(6,), (6,)], dy.circ_conv, circ_conv_ref),
    "circ_corr": ([(7,), (7,)], dy.circ_corr, circ_corr_ref),
    "filter1d_narrow": ([(3, 7), (3, 2)], dy.filter1d_narrow, filter1d_ref),
    "filter1d_narrow_multi": ([(3, 7), (3, 3, 4)], dy.filter1d_narrow, filter1d_ref),
    "inverse": ([lambda: R(size=(3, 3)) + 3 * np.eye(3)], dy.inverse, np.linalg.inv),
    "inverse_1": ([lambda: R(size=1) + 3], dy.inverse, lambda x: 1 / x),
    "logdet": ([lambda: R(size=(3, 3)) + 3 * np.eye(3)], dy.logdet, lambda x: [np.log(np.linalg.det(x))]),
    "conv2d_valid": ([(5, 6, 2), (2, 3, 2, 3)], lambda x, f: dy.conv2d(x, f, [1, 1]),
                     lambda x, f: conv2d_ref(x, f, (1, 1), True)),
    "conv2d_same_strided": ([(7, 8, 3), (3, 2, 3, 2)], lambda x, f: dy.conv2d(x, f, [2, 3], is_valid=False),
                            lambda x, f: conv2d_ref(x, f, (2, 3), False)),
    "conv2d_valid_strided": ([(7, 8, 3), (3, 2, 3, 2)], lambda x, f: dy.conv2d(x, f, [2, 3]),
                             lambda x, f: conv2d_ref(x, f, (2, 3), True)),
    "conv2d_2d_map": ([(4, 5), (2, 2, 1, 3)], lambda x, f: dy.conv2d(x, f, [1, 1]),
                      lambda x, f: conv2d_ref(x, f, (1, 1), True)),
    "conv2d_bias": ([(5, 7, 2), (4, 2, 2, 2), (2,)], lambda x, f, b: dy.conv2d_bias(x, f, b, [3, 2], False),
                    lambda x, f, b: conv2d_ref(x, f, (3, 2), False, b)),
    "maxpooling2d_valid": ([lambda: _distinct(5, 6, 2)], lambda x: dy.maxpooling2d(x, [2, 3], [1, 1]),
                           lambda x: maxpool_ref(x, (2, 3), (1, 1), True)),
    "maxpooling2d_same": ([lambda: _distinct(7, 8, 3)], lambda x: dy.maxpooling2d(x, [3, 2], [2, 3], False),
                          lambda x: maxpool_ref(x, (3, 2), (2, 3), False)),
    "maxpooling2d_2d_map": ([lambda: _distinct(4, 5)], lambda x: dy.maxpooling2d(x, [2, 2], [2, 2], False),
                            lambda x: maxpool_ref(x, (2, 2), (2, 2), False)),
}


def _inputs(specs):
    return [s() if callable(s) else R(size=s) for s in specs]


@pytest.mark.parametrize("strategy", STRATS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values(name, strategy, f64):
    specs, build, ref = CASES[name]
    check_instances(build, ref, [_inputs(specs) for _ in range(3)], strategy, 1e-10, 1e-10, name)


def test_values_float32():
    """The default dtype: the FFT and linear-algebra kernels give float32 back."""
    x, f, u, v = R(size=(5, 6, 2)), R(size=(2, 3, 2, 3)), R(size=8), R(size=8)
    dy.renew_cg()
    es = [dy.conv2d(dy.inputTensor(x), dy.inputTensor(f), [1, 1]), dy.circ_conv(dy.inputTensor(u), dy.inputTensor(v)),
          dy.logdet(dy.inputTensor(np.eye(3) * 2))]
    for e, want in zip(es, [conv2d_ref(x, f, (1, 1), True), circ_conv_ref(u, v), [3 * np.log(2)]]):
        assert e.npvalue().dtype == np.float32
        np.testing.assert_allclose(e.npvalue(), want, rtol=1e-4, atol=1e-4)


def test_one_hot():
    dy.renew_cg()
    es = [dy.one_hot(5, i) for i in (0, 2, 4)]
    for i, e in enumerate(es):
        np.testing.assert_array_equal(e.npvalue(), np.eye(5)[2 * i])
        assert e.dim() == ((5,), 1)


def test_logdet_of_a_negative_determinant_is_nan_as_in_dynet():
    dy.renew_cg()
    assert np.isnan(dy.logdet(dy.inputTensor(-np.eye(3))).scalar_value())


# --- shared weights: one batch, one GEMM, gradients summed --------------------------------------
@pytest.mark.parametrize("strategy", ("depth", "agenda"))
def test_parameter_weights_are_shared_and_batch(strategy, f64):
    m = dy.ParameterCollection()
    F = m.add_parameters((2, 2, 3, 4), init=R(size=(2, 2, 3, 4)))
    T = m.add_parameters((2, 3, 4), init=R(size=(2, 3, 4)))
    G = m.add_parameters((3, 2, 2), init=R(size=(3, 2, 2)))
    dy.renew_cg(strategy)
    xs, ys = [R(size=(4, 5, 3)) for _ in range(4)], [R(size=4) for _ in range(4)]
    ws = [R(size=(4, 3, 4)) for _ in range(4)]       # the output (YH, YW, Co)
    loss = []
    for x, y, w in zip(xs, ys, ws):
        c = dy.conv2d(dy.inputTensor(x), F, [1, 2], is_valid=False)
        t = dy.contract3d_1d(T, dy.inputTensor(y))
        h = dy.filter1d_narrow(dy.inputTensor(x[:3, :, 0]), G)
        loss.append(dy.sum_elems(dy.cmult(c, dy.inputTensor(w))) + dy.sum_elems(t) + dy.sum_elems(h))
    total = dy.esum(loss)
    ops = {dy.cg().ops[e.i].name for e in (c, t, h)}
    assert ops == {"conv2d_shared", "contract3d_1d_shared", "filter1d_narrow_shared"}
    total.backward()
    sizes = dy.stats()["signatures"]
    for name in ops:
        assert [s for sig, ss in sizes.items() if sig.split("#")[0] == name for s in ss] == [4], name
    # the filter's gradient: Σ over instances of the padded windows times the output weights
    gF = np.zeros((2, 2, 3, 4))
    for x, w in zip(xs, ws):
        xp = np.zeros((5, 6, 3))
        xp[0:4, 0:5] = x                       # SAME, stride (1, 2): one zero row below, one column right
        for i in range(4):
            for j in range(3):
                gF += np.einsum("abc,o->abco", xp[i:i + 2, 2 * j:2 * j + 2], w[i, j])
    np.testing.assert_allclose(F.grad_as_array(), gF, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(T.grad_as_array(), np.einsum("ij,k->ijk", np.ones((2, 3)), sum(ys)), rtol=1e-10)


def test_computed_weights_use_the_stacked_ops():
    dy.renew_cg()
    x = dy.inputTensor(R(size=(4, 4, 1)))
    f = dy.inputTensor(R(size=(2, 2, 1, 2)))
    assert dy.cg().ops[dy.conv2d(x, f, [1, 1]).i] is OPS["conv2d"]
    assert dy.cg().ops[dy.contract3d_1d(dy.inputTensor(R(size=(2, 2, 2))), dy.inputTensor(R(size=2))).i] \
        is OPS["contract3d_1d"]


# --- errors -------------------------------------------------------------------------------------
def _x(*shape):
    return dy.inputTensor(np.ones(shape))


ERRORS = {
    "select_cols_range": (lambda: dy.select_cols(_x(3, 4), [4]), ["select_cols", "column 4", "(3, 4)"]),
    "select_cols_vector": (lambda: dy.select_cols(_x(3), [0]), ["select_cols", "matrix", "(3,)"]),
    "select_cols_not_ints": (lambda: dy.select_cols(_x(3, 4), [0.5]), ["select_cols", "cols", "0.5"]),
    "strided_stride": (lambda: dy.strided_select(_x(3, 4), [0]), ["strided_select", "stride 0"]),
    "strided_empty": (lambda: dy.strided_select(_x(3, 4), [1], [2], [2]), ["strided_select", "from 2", "to 2"]),
    "strided_to": (lambda: dy.strided_select(_x(3, 4), [1, 1], [0, 0], [3, 5]), ["strided_select", "to 5"]),
    "strided_too_many": (lambda: dy.strided_select(_x(3), [1, 1]), ["strided_select", "batch dimension"]),
    "one_hot_range": (lambda: dy.one_hot(3, 3), ["one_hot", "index 3", "dimension 3"]),
    "fold_rows": (lambda: dy.fold_rows(_x(5, 2)), ["fold_rows", "nrows=2", "(5, 2)"]),
    "kmax_k": (lambda: dy.kmax_pooling(_x(3, 5), 6), ["kmax_pooling", "k=6", "(3, 5)"]),
    "kmax_d": (lambda: dy.kmax_pooling(_x(5), 2), ["kmax_pooling", "dimension 1", "(5,)"]),
    "colwise_add": (lambda: dy.colwise_add(_x(3, 4), _x(4)), ["colwise_add", "(3, 4)", "(4,)"]),
    "contract3d_1d": (lambda: dy.contract3d_1d(_x(2, 3), _x(3)), ["contract3d_1d", "rank-3", "(2, 3)"]),
    "contract3d_1d_bias": (lambda: dy.contract3d_1d_bias(_x(2, 3, 4), _x(4), _x(2)),
                           ["contract3d_1d", "bias", "(2, 3)"]),
    "contract3d_1d_1d": (lambda: dy.contract3d_1d_1d(_x(2, 3, 4), _x(3), _x(4)), ["contract3d_1d_1d", "(3,)", "(4,)"]),
    "trace_of_product": (lambda: dy.trace_of_product(_x(3, 4), _x(4, 3)), ["trace_of_product", "(3, 4)", "(4, 3)"]),
    "circ_conv": (lambda: dy.circ_conv(_x(5), _x(4)), ["circ_conv", "(5,)", "(4,)"]),
    "circ_corr_matrix": (lambda: dy.circ_corr(_x(3, 4), _x(3, 4)), ["circ_corr", "vectors"]),
    "filter1d_narrow": (lambda: dy.filter1d_narrow(_x(3, 7), _x(2, 2)), ["filter1d_narrow", "(3, 7)", "(2, 2)"]),
    "filter1d_narrow_wide": (lambda: dy.filter1d_narrow(_x(3, 2), _x(3, 3)), ["filter1d_narrow", "w <= n"]),
    "inverse": (lambda: dy.inverse(_x(2, 3)), ["inverse", "square", "(2, 3)"]),
    "logdet": (lambda: dy.logdet(_x(3)), ["logdet", "square", "(3,)"]),
    "conv2d_channels": (lambda: dy.conv2d(_x(4, 4, 2), _x(2, 2, 3, 1), [1, 1]),
                        ["conv2d", "(4, 4, 2)", "(2, 2, 3, 1)"]),
    "conv2d_valid_fit": (lambda: dy.conv2d(_x(4, 4, 2), _x(5, 2, 2, 1), [1, 1]), ["conv2d", "VALID", "(5, 2)"]),
    "conv2d_stride": (lambda: dy.conv2d(_x(4, 4, 2), _x(2, 2, 2, 1), [1]), ["conv2d", "stride"]),
    "conv2d_stride_zero": (lambda: dy.conv2d(_x(4, 4, 2), _x(2, 2, 2, 1), [0, 1]), ["conv2d", "stride", ">= 1"]),
    "conv2d_bias": (lambda: dy.conv2d_bias(_x(4, 4, 2), _x(2, 2, 2, 3), _x(2), [1, 1]), ["conv2d", "bias", "(3,)"]),
    "maxpooling2d_fit": (lambda: dy.maxpooling2d(_x(4, 4, 2), [5, 2], [1, 1]), ["maxpooling2d", "VALID", "(4, 4)"]),
    "maxpooling2d_ksize": (lambda: dy.maxpooling2d(_x(4, 4, 2), [2], [1, 1]), ["maxpooling2d", "ksize"]),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_name_the_op_and_leave_the_graph_usable(name):
    dy.renew_cg()
    ok = dy.inputVector([1.0, 2.0])
    make, parts = ERRORS[name]
    with pytest.raises(GraphError) as err:
        make()
    msg = str(err.value)
    for p in parts:
        assert p in msg, (p, msg)
    assert "test_api_shape.py" in msg                  # the user's line
    assert dy.sum_elems(ok * 2).scalar_value() == 6.0


def test_one_hot_of_a_list_is_a_minibatch():
    e = dy.one_hot(3, [0, 2])
    assert e.dim() == ((3,), 2) and e.npvalue().tolist() == [[1, 0], [0, 0], [0, 1]]


def test_public_names():
    import autobatch.api_shape as api_shape
    for name in api_shape.__all__:
        assert getattr(dy, name) is getattr(api_shape, name)
