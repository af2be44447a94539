"""DyNet's dimension rules where shapes differ (autobatch/api_dims.py): elementwise operators
broadcast dimensions of size 1 with shapes aligned at their first dimension, and a column
(n, 1) stands for a vector (n,) in sums, concatenations, losses and affine transforms. Each
expected shape is what DyNet 2.1 gives for the same call (and each refusal one it refuses)."""
import numpy as np
import pytest

import autobatch as dy
from check_kit import assert_batching_agrees, check_param_grads, value_grads_stats

COL = [[1.0], [2.0]]                     # (2, 1)
VEC = [3.0, 4.0]                         # (2,)
MAT = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]  # (2, 3)
ROW = [[1.0, 2.0, 3.0]]                  # (1, 3)


def t(a):
    return dy.inputTensor(np.array(a, dtype=np.float64))


def dynet_like(a, b, nd):
    """NumPy's broadcasting with DyNet's alignment: trailing 1s, not leading ones."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.reshape(a.shape + (1,) * (nd - a.ndim)), b.reshape(b.shape + (1,) * (nd - b.ndim))


OPERATORS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y,
             "cmult": dy.cmult, "cdiv": dy.cdiv}
NUMPY = {"+": np.add, "-": np.subtract, "cmult": np.multiply, "cdiv": np.divide}


@pytest.mark.parametrize("op", sorted(OPERATORS))
@pytest.mark.parametrize("a, b, shape", [
    (COL, VEC, (2, 1)), (VEC, COL, (2, 1)), (MAT, VEC, (2, 3)), (VEC, MAT, (2, 3)),
    (MAT, ROW, (2, 3)), (MAT, COL, (2, 3)), (COL, ROW, (2, 3)), (VEC, [2.0], (2,)),
    ([2.0], MAT, (2, 3))])
def test_elementwise_operators_broadcast_as_dynet(op, a, b, shape, f64):
    dy.renew_cg()
    e = OPERATORS[op](t(a), t(b))
    assert e.dim() == (shape, 1)
    x, y = dynet_like(a, b, len(shape))
    np.testing.assert_allclose(e.npvalue(), NUMPY[op](x, y).reshape(shape))


@pytest.mark.parametrize("a, b", [(MAT, [1.0, 2.0, 3.0]), (MAT, [[1.0, 2.0]])])
def test_shapes_that_do_not_broadcast_are_refused_naming_both(a, b):
    dy.renew_cg()
    x, y = t(a), t(b)
    n = len(dy.cg().sigs)
    with pytest.raises(dy.GraphError) as info:
        x + y
    msg = str(info.value)
    assert "add" in msg and str(np.shape(a)) in msg and str(np.shape(b)) in msg and __file__ in msg
    assert len(dy.cg().sigs) == n                # nothing was added


def test_a_column_stands_for_a_vector(f64):
    dy.renew_cg()
    assert dy.esum([t(COL), t(VEC)]).dim() == ((2, 1), 1)        # the first's shape
    assert dy.esum([t(VEC), t(COL), t(VEC)]).npvalue().tolist() == [7.0, 10.0]
    assert dy.concatenate([t(COL), t(VEC)]).dim() == ((4, 1), 1)
    assert dy.concatenate([t(VEC), t(COL)]).npvalue().tolist() == [3.0, 4.0, 1.0, 2.0]
    assert dy.concatenate([t(VEC), t(VEC)], d=1).npvalue().tolist() == [[3.0, 3.0], [4.0, 4.0]]
    assert dy.concatenate_cols([t(COL), t(COL)]).npvalue().tolist() == [[1.0, 1.0], [2.0, 2.0]]
    assert dy.concatenate_cols([t(MAT), t(VEC)]).npvalue().tolist() == [[1, 2, 3, 3], [4, 5, 6, 4]]
    assert dy.pickneglogsoftmax(t(COL), 0).value() == pytest.approx(np.log1p(np.e))
    assert dy.squared_distance(t(COL), t(VEC)).value() == 8.0
    with pytest.raises(dy.GraphError, match="add"):
        dy.esum([t(MAT), t(VEC)])                                  # DyNet refuses it too


def test_affine_transform_takes_a_bias_to_broadcast(f64):
    dy.renew_cg()
    X = t([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    e = dy.affine_transform([t(VEC), t(MAT), X])                   # b added to every column
    assert e.npvalue().tolist() == [[7.0, 8.0], [14.0, 15.0]]
    e = dy.affine_transform([t(COL), t(MAT), dy.inputVector([1.0, 2.0, 3.0])])
    assert e.dim() == ((2,), 1) and e.npvalue().tolist() == [15.0, 34.0]    # the product's shape
    assert (t(MAT) * X + t(VEC)).npvalue().tolist() == [[7.0, 8.0], [14.0, 15.0]]


def test_affine_transform_of_parameters_over_a_matrix(f64):
    """The parameters' own paths (Parameters, and their dy.parameter handles, as DyNet 2.0's
    programs pass them; biaffine parsers do) add the bias to every column of W·X too."""
    m = dy.ParameterCollection()
    W, b = m.add_parameters((2, 3), init=np.array(MAT)), m.add_parameters(2, init=np.array(VEC))
    dy.renew_cg()
    X = t([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    for e in (dy.affine_transform([b, W, X]), dy.affine_transform([dy.parameter(b), dy.parameter(W), X])):
        assert e.npvalue().tolist() == [[7.0, 8.0], [14.0, 15.0]]
    assert dy.affine_transform([b, W, dy.inputVector([1.0, 2.0, 3.0])]).npvalue().tolist() == [17.0, 36.0]


def _model():
    m = dy.ParameterCollection()
    rng = np.random.default_rng(3)
    return [m.add_parameters(s, init=rng.normal(size=s)) for s in ((2, 3), (2,), (2, 1), (1, 3), (1,))]


def _loss(P, k=0):
    M, v, c, r, s = P
    x = dy.inputTensor(np.linspace(0.5, 1.5, 6).reshape(2, 3) + k)
    y = dy.cmult(M + v, x) - dy.cdiv(x, r * 1.0 + 3.0) + dy.cmult(c, s)
    z = dy.concatenate_cols([y, c, v])
    return dy.sum_elems(dy.cmult(z, z)) + dy.squared_distance(c, dy.tanh(v)) + dy.pickneglogsoftmax(c + v, 1)


def test_gradients_through_broadcasts(f64):
    P = _model()

    def loss():
        dy.renew_cg()
        return _loss(P)

    check_param_grads(loss, P)


@pytest.mark.parametrize("strategy", ["depth", "agenda"])
def test_broadcasting_instances_batch_to_the_same_result(strategy, f64):
    P = _model()

    def run(s):
        for p in P:
            p.zero_grad()
        dy.renew_cg(autobatching=s)
        return value_grads_stats(dy.esum([_loss(P, k) for k in range(6)]), P)

    assert_batching_agrees(lambda s: run(s if s == "none" else strategy))
