"""Forward values of the ops against plain NumPy, in DyNet's conventions (vectors are
(n,), softmax runs down each column, reshape and vec_value are column-major).

Each case runs three instances with different inputs in one graph, so the values
come from batched kernels, under every strategy."""
import numpy as np
import pytest

import autobatch as dy
from check_kit import check_instances, uniform_inputs

STRATS = ("none", "depth", "agenda")
R, POS, PROB = (-2.0, 2.0), (0.2, 2.0), (0.05, 0.95)


def _softmax(x):
    z = np.exp(x - x.max(axis=0))
    return z / z.sum(axis=0)


def _log_softmax(x):
    z = x - x.max(axis=0)
    return z - np.log(np.exp(z).sum(axis=0))


def _hinge(x, i, m):
    v = np.maximum(0, m - x[i] + x)
    v[i] = 0
    return v.sum()


T01 = np.array([1.0, 0.0, 1.0, 1.0])
T = dy.transpose

# name: (input specs [(shape, (lo, hi))], build(*exprs), numpy ref(*arrays))
CASES = {
    "tanh": ([((5,), R)], dy.tanh, np.tanh),
    "logistic": ([((5,), R)], dy.logistic, lambda x: 1 / (1 + np.exp(-x))),
    "rectify": ([((2, 3), R)], dy.rectify, lambda x: np.maximum(x, 0)),
    "elu": ([((5,), R)], dy.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "elu_alpha": ([((5,), R)], lambda x: dy.elu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "exp": ([((5,), R)], dy.exp, np.exp),
    "log": ([((5,), POS)], dy.log, np.log),
    "sqrt": ([((5,), POS)], dy.sqrt, np.sqrt),
    "square": ([((5,), R)], dy.square, np.square),
    "abs": ([((5,), R)], dy.abs, np.abs),
    "neg": ([((5,), R)], lambda x: -x, lambda x: -x),
    "scale_shift": ([((5,), R)], lambda x: (1 - 2 * x) / 4 + 3, lambda x: (1 - 2 * x) / 4 + 3),
    "scalar_div": ([((5,), POS)], lambda x: 3 / x, lambda x: 3 / x),
    "add": ([((4,), R), ((4,), R)], lambda a, b: a + b, np.add),
    "sub": ([((4,), R), ((4,), R)], lambda a, b: a - b, np.subtract),
    "cmult": ([((2, 3), R), ((2, 3), R)], dy.cmult, np.multiply),
    "cdiv": ([((4,), R), ((4,), POS)], dy.cdiv, np.divide),
    "esum": ([((4,), R)] * 3, lambda *xs: dy.esum(xs), lambda *xs: sum(xs)),
    "average": ([((4,), R)] * 3, lambda *xs: dy.average(xs), lambda *xs: sum(xs) / 3),
    "emax": ([((4,), R)] * 3, lambda *xs: dy.emax(xs), lambda *xs: np.max(xs, axis=0)),
    "bmax": ([((4,), R)] * 2, dy.bmax, np.maximum),
    "matmul_vec": ([((3, 4), R), ((4,), R)], lambda a, x: a * x, np.dot),
    "matmul_mat": ([((3, 4), R), ((4, 2), R)], lambda a, b: a * b, np.dot),
    "matmul_outer": ([((3,), R), ((2,), R)], lambda u, v: u * T(v), np.outer),
    "transpose_mat": ([((3, 4), R)], T, np.transpose),
    "transpose_vec": ([((3,), R)], T, lambda x: x.reshape(1, 3)),
    "dot_product": ([((4,), R), ((4,), R)], dy.dot_product, lambda a, b: [a @ b]),
    "sum_elems": ([((3, 4), R)], dy.sum_elems, lambda x: [x.sum()]),
    "mean_elems": ([((3, 4), R)], dy.mean_elems, lambda x: [x.mean()]),
    "squared_norm": ([((5,), R)], dy.squared_norm, lambda x: [x @ x]),
    "l2_norm": ([((3, 4), R)], dy.l2_norm, lambda x: [np.sqrt((x * x).sum())]),
    "squared_distance": ([((4,), R), ((4,), R)], dy.squared_distance, lambda a, b: [((a - b) ** 2).sum()]),
    "max_dim_vec": ([((5,), R)], dy.max_dim, lambda x: [x.max()]),
    "max_dim_0": ([((3, 4), R)], lambda x: dy.max_dim(x, 0), lambda x: x.max(axis=0)),
    "max_dim_1": ([((3, 4), R)], lambda x: dy.max_dim(x, 1), lambda x: x.max(axis=1)),
    "softmax_vec": ([((5,), R)], dy.softmax, _softmax),
    "softmax_mat": ([((3, 4), R)], dy.softmax, _softmax),            # per column
    "log_softmax_vec": ([((5,), R)], dy.log_softmax, _log_softmax),
    "log_softmax_mat": ([((3, 4), R)], dy.log_softmax, _log_softmax),
    "pickneglogsoftmax": ([((5,), R)], lambda x: dy.pickneglogsoftmax(x, 3), lambda x: [-_log_softmax(x)[3]]),
    "hinge": ([((5,), R)], lambda x: dy.hinge(x, 2), lambda x: [_hinge(x, 2, 1.0)]),
    "hinge_margin": ([((5,), R)], lambda x: dy.hinge(x, 0, 0.3), lambda x: [_hinge(x, 0, 0.3)]),
    "binary_log_loss": ([((4,), PROB)], lambda x: dy.binary_log_loss(x, dy.inputVector(T01)),
                        lambda x: [-(T01 * np.log(x) + (1 - T01) * np.log(1 - x)).sum()]),
    "pick_vec": ([((5,), R)], lambda x: dy.pick(x, 2), lambda x: [x[2]]),
    "pick_getitem": ([((5,), R)], lambda x: x[4], lambda x: [x[4]]),
    "pick_mat_0": ([((3, 4), R)], lambda x: dy.pick(x, 1, 0), lambda x: x[1, :]),
    "pick_mat_1": ([((3, 4), R)], lambda x: dy.pick(x, 2, 1), lambda x: x[:, 2]),
    "pickrange_vec": ([((5,), R)], lambda x: dy.pickrange(x, 1, 4), lambda x: x[1:4]),
    "pickrange_slice": ([((5,), R)], lambda x: x[2:], lambda x: x[2:]),
    "pickrange_mat_0": ([((3, 4), R)], lambda x: dy.pickrange(x, 1, 3, 0), lambda x: x[1:3]),
    "pickrange_mat_1": ([((3, 4), R)], lambda x: dy.pickrange(x, 0, 2, 1), lambda x: x[:, 0:2]),
    "select_rows_mat": ([((3, 4), R)], lambda x: dy.select_rows(x, [2, 0, 2]), lambda x: x[[2, 0, 2]]),
    "select_rows_vec": ([((5,), R)], lambda x: dy.select_rows(x, [3, 3, 0]), lambda x: x[[3, 3, 0]]),
    "concatenate_vec": ([((2,), R), ((3,), R)], lambda a, b: dy.concatenate([a, b]), lambda a, b: np.r_[a, b]),
    "concatenate_0": ([((3, 4), R), ((2, 4), R)], lambda a, b: dy.concatenate([a, b], 0),
                      lambda a, b: np.concatenate([a, b], 0)),
    "concatenate_1": ([((3, 4), R), ((3, 2), R)], lambda a, b: dy.concatenate([a, b], 1),
                      lambda a, b: np.concatenate([a, b], 1)),
    "concatenate_cols": ([((3,), R)] * 3, lambda *xs: dy.concatenate_cols(xs), lambda *xs: np.stack(xs, 1)),
    # DyNet reshapes in column-major order (the layout is never changed)
    "reshape_mat": ([((3, 4), R)], lambda x: dy.reshape(x, (2, 6)), lambda x: x.reshape((2, 6), order="F")),
    "reshape_flat": ([((3, 4), R)], lambda x: dy.reshape(x, (12,)), lambda x: x.reshape(-1, order="F")),
    "reshape_vec": ([((6,), R)], lambda x: dy.reshape(x, (2, 3)), lambda x: x.reshape((2, 3), order="F")),
}


@pytest.mark.parametrize("strategy", STRATS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_value(name, strategy, backend, f64):
    specs, build, ref = CASES[name]
    check_instances(build, ref, [uniform_inputs(specs, 100 + k) for k in range(3)], strategy, 1e-12, 1e-12, name)


def test_values_float32(backend):
    """Default dtype: values come back as float32 and close to the float64 reference."""
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    e = dy.softmax(dy.tanh(dy.inputTensor(x)))
    assert e.npvalue().dtype == np.float32
    np.testing.assert_allclose(e.npvalue(), _softmax(np.tanh(x)), rtol=1e-5)


def test_parameter_products(f64, backend):
    """W·x, W·X (matrix right side), affine_transform and lookups with parameters."""
    rng = np.random.default_rng(3)
    m = dy.ParameterCollection()
    W, V = rng.normal(size=(3, 4)), rng.normal(size=(3, 2))
    b, E = rng.normal(size=3), rng.normal(size=(6, 3))
    pW, pV, pb = m.add_parameters((3, 4), init=W), m.add_parameters((3, 2), init=V), m.add_parameters(3, init=b)
    pE = m.add_lookup_parameters((6, 3), init=E)
    xs = [rng.normal(size=4) for _ in range(3)]
    Xs = [rng.normal(size=(4, 5)) for _ in range(3)]
    zs = [rng.normal(size=2) for _ in range(3)]
    for strategy in STRATS:
        dy.renew_cg(strategy)
        wx = [pW * dy.inputVector(x) for x in xs]
        wX = [pW * dy.inputTensor(X) for X in Xs]
        aff = [dy.affine_transform([pb, pW, dy.inputVector(x), pV, dy.inputVector(z)]) for x, z in zip(xs, zs)]
        lk = [pE[i] for i in (5, 0, 5)]
        for k in range(3):
            np.testing.assert_allclose(wx[k].npvalue(), W @ xs[k], rtol=1e-12)
            np.testing.assert_allclose(wX[k].npvalue(), W @ Xs[k], rtol=1e-12)
            np.testing.assert_allclose(aff[k].npvalue(), b + W @ xs[k] + V @ zs[k], rtol=1e-12)
            np.testing.assert_allclose(lk[k].npvalue(), E[(5, 0, 5)[k]], rtol=0)


# --- dropout and noise ------------------------------------------------------------
N = 40000


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_statistics(p, f64, backend):
    x = np.random.default_rng(0).uniform(1, 2, N)
    y = dy.dropout(dy.inputVector(x), p).npvalue()
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 0.015, kept.mean()
    np.testing.assert_allclose(y[kept], x[kept] / (1 - p), rtol=1e-12)   # inverted dropout


def test_dropout_same_mask_every_strategy(f64, backend):
    """The mask is a function of (graph seed, node id) only, so batching cannot change it."""
    vals = []
    for s in STRATS:
        dy.reset_random_seed(9)
        dy.renew_cg(s)
        es = [dy.dropout(dy.inputVector(np.ones(50) * (k + 1)), 0.5) for k in range(3)]
        vals.append([e.npvalue() for e in es])
    for v in vals[1:]:
        for a, b in zip(v, vals[0]):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(vals[0][0] != 0, vals[0][1] != 0)   # nodes get different masks


def test_dropout_identity(f64, backend):
    x = np.random.default_rng(1).normal(size=20)
    e = dy.inputVector(x)
    np.testing.assert_array_equal(dy.dropout(e, 0.0).npvalue(), x)
    dy.set_dropout(False)
    np.testing.assert_array_equal(dy.dropout(e, 0.7).npvalue(), x)
    dy.set_dropout(True)
    assert (dy.dropout(e, 0.7).npvalue() == 0).any()


@pytest.mark.parametrize("sd", [0.1, 2.0])
def test_noise_statistics(sd, f64, backend):
    x = np.full(N, 3.0)
    y = dy.noise(dy.inputVector(x), sd).npvalue() - x
    assert abs(y.mean()) < 4 * sd / np.sqrt(N)
    assert abs(y.std() / sd - 1) < 0.02
    # roughly Gaussian: about 68% within one standard deviation
    assert abs((np.abs(y) < sd).mean() - 0.6827) < 0.01


# --- value conventions (DyNet) ----------------------------------------------------------
def test_value_conventions(f64, backend):
    M = np.arange(6.0).reshape(2, 3)
    s, v, m = dy.scalarInput(2.5), dy.inputVector([1.0, 2.0, 3.0]), dy.inputTensor(M)
    assert type(s.value()) is float and s.value() == 2.5
    assert type(dy.sum_elems(v).value()) is float
    assert s.scalar_value() == 2.5 and dy.sum_elems(v).scalar_value() == 6.0
    assert v.value() == [1.0, 2.0, 3.0] and type(v.value()) is list
    assert isinstance(m.value(), np.ndarray)                       # 2+ dimensions: npvalue
    np.testing.assert_array_equal(m.value(), M)
    assert v.vec_value() == [1.0, 2.0, 3.0]
    assert m.vec_value() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]         # column-major
    assert s.dim() == ((1,), 1) and v.dim() == ((3,), 1) and m.dim() == ((2, 3), 1)
    assert dy.transpose(v).dim() == ((1, 3), 1)
    assert s.npvalue().shape == (1,) and m.npvalue().shape == (2, 3)
    assert type(m.npvalue()) is np.ndarray                          # on the host, also for CuPy
    m.npvalue()[0, 0] = 99                                          # a copy: the graph is unchanged
    assert m.npvalue()[0, 0] == 0
    with pytest.raises(dy.GraphError):
        v.scalar_value()


def test_negative_index(f64, backend):
    x = np.arange(5.0)
    assert dy.inputVector(x)[-1].value() == 4.0 and dy.inputVector(x)[-5].value() == 0.0
    with pytest.raises(dy.GraphError):
        dy.inputVector(x)[-6]


V3, M34 = (lambda: dy.inputVector([1.0, 2, 3])), (lambda: dy.inputTensor(np.ones((3, 4))))
SHAPE_ERRORS = {
    "add": lambda: V3() + dy.inputVector([1.0, 2]),
    "cmult": lambda: dy.cmult(V3(), dy.inputTensor(np.ones((2, 4)))),   # (3, 1) does not broadcast to (2, 4)
    "matmul": lambda: M34() * V3(),
    "dot_product": lambda: dy.dot_product(V3(), dy.inputVector([1.0, 2])),
    "concatenate": lambda: dy.concatenate([M34(), dy.inputTensor(np.ones((2, 3)))], 0),
    "concatenate_cols": lambda: dy.concatenate_cols([V3(), dy.inputVector([1.0, 2])]),
    "reshape": lambda: dy.reshape(M34(), (5, 2)),
    "select_rows": lambda: dy.select_rows(M34(), [0, 3]),
    "pickrange": lambda: dy.pickrange(V3(), 1, 4),
    "pick": lambda: dy.pick(M34(), 4, 1),
    "max_dim": lambda: dy.max_dim(V3(), 1),
    "squared_distance": lambda: dy.squared_distance(V3(), M34()),
    "pickneglogsoftmax": lambda: dy.pickneglogsoftmax(M34(), 0),
}


@pytest.mark.parametrize("name", sorted(SHAPE_ERRORS))
def test_shape_errors(name):
    """Bad shapes fail when the expression is built, with a GraphError naming the op."""
    n = dy.cg().node_count()
    with pytest.raises(dy.GraphError, match=name):
        SHAPE_ERRORS[name]()
    assert dy.cg().node_count() <= n + 2       # at most the inputs were added


@pytest.mark.parametrize("block", [7, 11])
def test_pickneglogsoftmax_in_row_blocks(block, monkeypatch):
    """Big softmax losses run over row blocks (to stay in cache) and backward reuses forward's
    logsumexp: with blocks of a few rows, loss and gradient still equal the formula."""
    from autobatch.ops import reduce
    monkeypatch.setattr(reduce, "_BLOCK", block)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9, 5)) * 4
    gold = [0, 4, 2, 2, 1, 3, 0, 4, 1]
    gy = rng.standard_normal((9, 1))
    op = reduce.PickNegLogSoftmax
    assert len(reduce._row_blocks(np, x)) > 1
    y = op.forward(np, [x], None, gold)
    lse = np.log(np.exp(x).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(y, lse - x[np.arange(9), gold][:, None], rtol=1e-10, atol=1e-12)
    p = np.exp(x - lse)
    p[np.arange(9), gold] -= 1
    np.testing.assert_allclose(op.backward(np, [x], y, gy, None, gold)[0], p * gy, rtol=1e-10, atol=1e-12)


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("shape", [(9, 5), (9, 4, 3)])
@pytest.mark.parametrize("block", [7, 11])
def test_softmax_and_log_softmax_in_row_blocks(block, shape, monkeypatch):
    """softmax and log_softmax (per column of a matrix node) over row blocks equal the formulas,
    values and gradients."""
    from autobatch.ops import reduce
    monkeypatch.setattr(reduce, "_BLOCK", block)
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape) * 4
    gy = rng.standard_normal(shape)
    assert len(reduce._row_blocks(np, x)) > 1
    p = _softmax_ref(x)
    y = reduce.Softmax.forward(np, [x], None, None)
    np.testing.assert_allclose(y, p, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(reduce.Softmax.backward(np, [x], y, gy, None, None)[0],
                               p * (gy - (gy * p).sum(axis=1, keepdims=True)), rtol=1e-10, atol=1e-12)
    y = reduce.LogSoftmax.forward(np, [x], None, None)
    np.testing.assert_allclose(y, np.log(p), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(reduce.LogSoftmax.backward(np, [x], y, gy, None, None)[0],
                               gy - p * gy.sum(axis=1, keepdims=True), rtol=1e-10, atol=1e-12)


def test_affine_product_layout_by_batch_rows():
    """W·x over a batch of stacked x's: small batches run W·Xᵀ (copied into the batch's block),
    bigger ones X·Wᵀ straight into the block (xp.matmul with out=, no temporary) from 97 rows
    on (with W out of cache, as it is in a real pass, that is the faster one from ~100 rows);
    every size equals the formula."""
    from autobatch.ops import linalg

    class SpyNumpy:
        __name__ = "numpy"

        def __init__(self):
            self.calls = 0

        def matmul(self, *a, **k):
            self.calls += 1
            return np.matmul(*a, **k)

    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 4))
    b = rng.standard_normal(6)
    for rows, direct in ((8, False), (96, False), (97, True), (128, True), (300, True)):
        x = rng.standard_normal((rows, 4))
        out = np.empty((rows, 6))
        xp = SpyNumpy()
        linalg.Affine.forward_into(xp, [b, w, x], None, None, out)
        assert (xp.calls == 1) == direct, rows
        np.testing.assert_allclose(out, x @ w.T + b, rtol=1e-12, atol=1e-12)
