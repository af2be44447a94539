"""Settable inputs (vecInput, matInput, Expression.set), random tensors, dropout variants
and the minibatch functions that autobatch does not have. Expected values come from
NumPy or from the distributions' known moments; semantics were checked against DyNet."""
import math

import numpy as np
import pytest

import autobatch as dy
from autobatch.errors import GraphError, StaleExpressionError

STRATS = ("none", "depth", "agenda")


# --- inputs ------------------------------------------------------------------------------
def test_vecinput_and_matinput_are_zeros_of_the_given_size():
    x = dy.vecInput(64)
    m = dy.matInput(2, 3)
    assert x.dim() == ((64,), 1) and m.dim() == ((2, 3), 1)
    np.testing.assert_array_equal(x.npvalue(), np.zeros(64))
    np.testing.assert_array_equal(m.npvalue(), np.zeros((2, 3)))


@pytest.mark.parametrize("bad", [-1, 2.5, (2, 3), "3", True])
def test_vecinput_rejects_bad_dims(bad):
    with pytest.raises(GraphError, match="vecInput"):
        dy.vecInput(bad)
    with pytest.raises(GraphError, match="matInput"):
        dy.matInput(2, bad)


def test_zeroes_is_zeros():
    np.testing.assert_array_equal(dy.zeroes((2, 3)).npvalue(), np.zeros((2, 3)))
    np.testing.assert_array_equal(dy.zeroes(4).npvalue(), np.zeros(4))
    assert dy.zeroes(3, batch_size=2).dim() == ((3,), 2)        # DyNet's minibatch (test_minibatch.py)
    with pytest.raises(GraphError, match="zeroes: batch_size"):
        dy.zeroes(3, batch_size=0)


@pytest.mark.parametrize("strategy", STRATS)
def test_set_before_and_after_a_forward(strategy):
    dy.renew_cg(strategy)
    W = np.arange(6.0).reshape(2, 3) - 2
    x = dy.vecInput(3)
    v = dy.inputVector([1.0, 2.0])
    s = dy.scalarInput(0.5)
    t = dy.inputTensor(np.ones((2, 3)), reusable_expr=True)
    m = dy.matInput(2, 3)
    im = dy.inputMatrix([1, 2, 3, 4, 5, 6], (2, 3))
    y = dy.inputTensor(W) * x + dy.cmult(v, dy.concatenate([s, s]))
    z = dy.sum_elems(dy.cmult(t, m) + im)
    np.testing.assert_allclose(y.npvalue(), [0.5, 1.0])
    assert z.scalar_value() == pytest.approx(21.0)
    x.set([1.0, -1.0, 2.0])
    v.set(np.array([3.0, 4.0]))
    s.set(2)
    t.set([1, 2, 3, 4, 5, 6])                   # flat values are column-major, as in DyNet
    m.set(np.full((2, 3), 2.0))                 # or an array of the input's own shape
    im.set([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    T = np.array([[1, 3, 5], [2, 4, 6]], dtype=float)
    np.testing.assert_allclose(y.npvalue(), W @ [1.0, -1.0, 2.0] + 2 * np.array([3.0, 4.0]))
    assert z.scalar_value() == pytest.approx((T * 2).sum() + 2)
    np.testing.assert_array_equal(t.npvalue(), T)
    assert s.value() == 2.0
    x.set([0.0, 0.0, 1.0])                      # and again, after the second forward
    np.testing.assert_allclose(y.npvalue(), W[:, 2] + 2 * np.array([3.0, 4.0]))


def test_set_copies_the_values():
    a = np.array([1.0, 2.0])
    x = dy.vecInput(2)
    x.set(a)
    a[0] = 100.0
    np.testing.assert_array_equal(x.npvalue(), [1.0, 2.0])


def test_only_the_last_of_several_sets_counts():
    x = dy.vecInput(2)
    y = x * 3
    x.set([1, 2])
    x.set([5, 6])
    np.testing.assert_array_equal(y.npvalue(), [15, 18])


@pytest.mark.parametrize("bad", [[1.0, 2.0], [1, 2, 3, 4], np.ones((3, 1)), "abc", [[1], [2, 3]]])
def test_set_rejects_values_of_the_wrong_size_and_leaves_the_graph_usable(bad):
    x = dy.vecInput(3)
    y = x + 1
    x.set([1, 2, 3])
    np.testing.assert_array_equal(y.npvalue(), [2, 3, 4])
    with pytest.raises(GraphError, match=r"set: .*shape \(3,\)"):
        x.set(bad)
    np.testing.assert_array_equal(y.npvalue(), [2, 3, 4])
    x.set([0, 0, 0])
    np.testing.assert_array_equal(y.npvalue(), [1, 1, 1])


def test_set_is_only_for_inputs_and_lookups():
    m = dy.ParameterCollection()
    W = m.add_parameters((2, 2))
    x = dy.vecInput(2)
    with pytest.raises(GraphError, match="set: only input expressions.*tanh"):
        dy.tanh(x).set([1, 2])
    with pytest.raises(GraphError, match="set: .*parameter"):
        dy.parameter(W).set([1, 2, 3, 4])
    with pytest.raises(GraphError, match="set: .*constant"):
        dy.zeros(2).set([1, 2])


def test_set_on_a_stale_expression():
    x = dy.vecInput(2)
    dy.renew_cg()
    with pytest.raises(StaleExpressionError):
        x.set([1, 2])


@pytest.mark.parametrize("strategy", STRATS)
def test_lookup_set_changes_the_row_and_its_gradient(strategy):
    dy.renew_cg(strategy)
    m = dy.ParameterCollection()
    table = np.arange(15.0).reshape(5, 3)
    E = m.add_lookup_parameters((5, 3), init=dy.NumpyInitializer(table))
    e = dy.lookup(E, 1)
    loss = dy.dot_product(e, dy.inputVector([1.0, 2.0, 3.0]))
    assert loss.scalar_value() == pytest.approx(table[1] @ [1, 2, 3])
    e.set(np.int64(4))
    assert loss.scalar_value() == pytest.approx(table[4] @ [1, 2, 3])
    loss.backward()
    want = np.zeros((5, 3))
    want[4] = [1, 2, 3]
    np.testing.assert_allclose(E.grad_as_array(), want)
    for bad in (5, -1, 1.5):
        with pytest.raises(GraphError, match="set: .*index"):
            e.set(bad)


@pytest.mark.parametrize("strategy", STRATS)
def test_backward_after_set_without_a_forward(strategy):
    dy.renew_cg(strategy)
    m = dy.ParameterCollection()
    W = m.add_parameters((1, 2), init=dy.NumpyInitializer(np.array([[1.0, -2.0]])))
    x = dy.vecInput(2)
    loss = dy.squared_norm(W * x)
    x.set([1.0, 1.0])
    assert loss.scalar_value() == pytest.approx(1.0)
    loss.backward()
    W.zero_grad()
    x.set([2.0, 3.0])
    loss.backward()                               # no value() in between: backward recomputes
    r = 2.0 - 6.0
    np.testing.assert_allclose(W.grad_as_array(), [[2 * r * 2, 2 * r * 3]])


def _xor_reference(Wv, bv, Vv, av, x, y):
    """Loss and gradients of binary_log_loss(logistic(V·tanh(W·x + b) + a), y), by hand."""
    h = np.tanh(Wv @ x + bv)
    p = 1 / (1 + np.exp(-(Vv @ h + av)))
    loss = float(-(y * np.log(p) + (1 - y) * np.log(1 - p))[0])
    dz = p - y                                   # d loss / d pre-logistic
    dh = (Vv.T @ dz) * (1 - h ** 2)
    return loss, {"W": np.outer(dh, x), "b": dh, "V": np.outer(dz, h), "a": dz}


@pytest.mark.parametrize("strategy", STRATS)
def test_the_dynet_xor_example_builds_once_and_sets_inputs(strategy, f64):
    """DyNet's xor example: one graph, then x.set / y.set / scalar_value / backward / update."""
    rng = np.random.default_rng(5)
    m = dy.ParameterCollection()
    P = {"W": m.add_parameters((8, 2), init=dy.NumpyInitializer(rng.normal(size=(8, 2)))),
         "b": m.add_parameters(8, init=dy.NumpyInitializer(rng.normal(size=8))),
         "V": m.add_parameters((1, 8), init=dy.NumpyInitializer(rng.normal(size=(1, 8)))),
         "a": m.add_parameters(1, init=dy.NumpyInitializer(rng.normal(size=1)))}
    trainer = dy.SimpleSGDTrainer(m, 0.1)
    dy.renew_cg(strategy)
    x = dy.vecInput(2)
    y = dy.scalarInput(0)
    h = dy.tanh(P["W"] * x + P["b"])
    y_pred = dy.logistic(P["V"] * h + P["a"])
    loss = dy.binary_log_loss(y_pred, y)
    losses = []
    for it in range(5):
        for mi in range(4):
            x1, x2 = mi % 2, (mi // 2) % 2
            xv = np.array([1.0 if x1 else -1.0, 1.0 if x2 else -1.0])
            yv = 1.0 if x1 != x2 else 0.0
            x.set(list(xv))
            y.set(yv)
            want, grads = _xor_reference(*(P[k].as_array() for k in "WbVa"), xv, np.array([yv]))
            got = loss.scalar_value()
            assert got == pytest.approx(want, rel=1e-12)
            loss.backward()
            for k in "WbVa":
                np.testing.assert_allclose(P[k].grad_as_array(), grads[k], rtol=1e-10, atol=1e-12)
            losses.append(got)
            trainer.update()
    assert len(set(losses)) == len(losses)       # inputs and parameters changed every step
    assert sum(losses[-4:]) < sum(losses[:4])     # and it learns
    x.set([-1.0, 1.0])
    p_xor = y_pred.scalar_value()
    x.set([-1.0, -1.0])
    assert y_pred.scalar_value() != p_xor


def test_set_draws_new_random_numbers_the_same_under_every_strategy():
    runs = []
    for strategy in STRATS:
        dy.reset_random_seed(7)
        dy.renew_cg(strategy)
        x = dy.vecInput(50)
        outs = [dy.dropout(x + 1, 0.5), dy.random_normal(5), dy.noise(x, 1.0), dy.block_dropout(x + 1, 0.5)]
        vals = [np.concatenate([o.npvalue().ravel() for o in outs])]
        x.set(np.zeros(50))
        vals.append(np.concatenate([o.npvalue().ravel() for o in outs]))
        x.set(np.zeros(50))
        vals.append(np.concatenate([o.npvalue().ravel() for o in outs]))
        runs.append(vals)
    for vals in runs:
        assert not np.array_equal(vals[0], vals[1]) and not np.array_equal(vals[1], vals[2])
    for vals in runs[1:]:
        for a, b in zip(vals, runs[0]):
            np.testing.assert_array_equal(a, b)


def test_a_set_of_a_node_not_yet_computed_keeps_computed_values():
    r = dy.random_normal(4)
    before = r.npvalue()
    x = dy.vecInput(2)
    x.set([1, 2])
    np.testing.assert_array_equal(r.npvalue(), before)
    np.testing.assert_array_equal((x * 2).npvalue(), [2, 4])


def test_a_nested_list_is_one_tensor():
    assert dy.inputTensor([np.ones(2), [3.0, 4.0]]).dim() == ((2, 2), 1)   # a nested list, as DyNet


# --- random tensors ------------------------------------------------------------------------
N = 40000


def _draw(f, *args):
    return f(N, *args).npvalue().astype(np.float64)


def _mean_ok(v, mean, var):
    assert abs(v.mean() - mean) < 5 * math.sqrt(var / v.size), (v.mean(), mean)


def test_random_normal_moments():
    v = _draw(dy.random_normal, 2.0, 3.0)
    _mean_ok(v, 2.0, 9.0)
    assert v.std() == pytest.approx(3.0, rel=0.03)
    assert abs(((v - 2) / 3) ** 3).mean() < 5 and abs((((v - 2) / 3) ** 3).mean()) < 0.1   # symmetric
    assert (((v - 2) / 3) ** 4).mean() == pytest.approx(3.0, rel=0.1)                      # Gaussian kurtosis
    d = dy.random_normal(5).npvalue()
    assert d.shape == (5,)


def test_random_uniform_moments_and_range():
    v = _draw(dy.random_uniform, -1.0, 3.0)
    assert v.min() >= -1.0 and v.max() < 3.0
    _mean_ok(v, 1.0, 16 / 12)
    assert v.var() == pytest.approx(16 / 12, rel=0.03)
    hist = np.histogram(v, bins=8, range=(-1, 3))[0]
    assert hist.min() > 0.9 * N / 8


def test_random_bernoulli_values_and_rate():
    v = _draw(dy.random_bernoulli, 0.3, 2.5)
    assert set(np.unique(v)) == {0.0, 2.5}
    _mean_ok(v / 2.5, 0.3, 0.3 * 0.7)
    assert set(np.unique(dy.random_bernoulli((3, 4), 0.5).npvalue())) <= {0.0, 1.0}
    np.testing.assert_array_equal(dy.random_bernoulli(10, 0.0).npvalue(), np.zeros(10))
    np.testing.assert_array_equal(dy.random_bernoulli(10, 1.0, 3.0).npvalue(), np.full(10, 3.0))


@pytest.mark.parametrize("mu, beta", [(0.0, 1.0), (1.5, 0.5)])
def test_random_gumbel_moments(mu, beta):
    v = _draw(dy.random_gumbel, mu, beta)
    var = math.pi ** 2 / 6 * beta ** 2
    assert np.isfinite(v).all()
    _mean_ok(v, mu + 0.5772156649 * beta, var)
    assert v.var() == pytest.approx(var, rel=0.05)
    assert np.median(v) == pytest.approx(mu - beta * math.log(math.log(2)), abs=0.03)


def test_random_shapes_and_strategy_independence():
    runs = []
    for strategy in STRATS:
        dy.reset_random_seed(3)
        dy.renew_cg(strategy)
        es = [dy.random_normal((2, 3)), dy.random_normal((2, 3)), dy.random_uniform(4, 0, 1),
              dy.random_bernoulli((2, 2), 0.5), dy.random_gumbel(3), dy.random_uniform(4, 0, 1)]
        runs.append([e.npvalue() for e in es])
    assert [v.shape for v in runs[0]] == [(2, 3), (2, 3), (4,), (2, 2), (3,), (4,)]
    assert not np.array_equal(runs[0][0], runs[0][1])      # each node draws its own numbers
    assert not np.array_equal(runs[0][2], runs[0][5])
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("call, match", [
    (lambda: dy.random_normal(3, 0.0, -1.0), "random_normal: stddev"),
    (lambda: dy.random_normal(-2), "random_normal: dim"),
    (lambda: dy.random_normal("x"), "random_normal: dim"),
    (lambda: dy.random_normal(3, float("nan")), "random_normal: mean"),
    (lambda: dy.random_uniform(3, 2.0, 1.0), "random_uniform: needs left <= right"),
    (lambda: dy.random_bernoulli(3, 1.5), "random_bernoulli: p"),
    (lambda: dy.random_gumbel(3, 0.0, 0.0), "random_gumbel: beta"),
])
def test_random_argument_errors(call, match):
    with pytest.raises(GraphError, match=match):
        call()
    assert dy.random_normal(2).dim() == ((2,), 1)          # the graph is still usable


# --- dropout variants --------------------------------------------------------------------------
def _ones_nodes(shape, k):
    return [dy.inputTensor(np.ones(shape)) for _ in range(k)]


@pytest.mark.parametrize("strategy", STRATS)
def test_dropout_dim_shares_its_mask_along_d(strategy):
    dy.renew_cg(strategy)
    p = 0.4
    scale = 1 / (1 - p)
    xs = _ones_nodes((4, 5), 200)
    cols = [dy.dropout_dim(x, 0, p).npvalue() for x in xs]     # d = 0: whole columns
    rows = [dy.dropout_dim(x, 1, p).npvalue() for x in xs]     # d = 1: whole rows
    t = dy.dropout_dim(dy.inputTensor(np.ones((2, 3, 4))), 1, p).npvalue()
    for v in cols:
        assert (v == v[0:1, :]).all()
    for v in rows:
        assert (v == v[:, 0:1]).all()
    assert (t == t[:, 0:1, :]).all()
    allv = np.concatenate([np.ravel(v) for v in cols + rows])
    assert set(np.unique(allv)) <= {0.0, np.float32(scale)}
    kept = np.mean([v[0, :] != 0 for v in cols])
    assert abs(kept - (1 - p)) < 5 * math.sqrt(p * (1 - p) / (200 * 5))
    vec = dy.dropout_dim(dy.inputVector(np.arange(1.0, 7.0)), 0, 0.5).npvalue()   # all or nothing
    assert np.array_equal(vec, np.zeros(6)) or np.allclose(vec, 2 * np.arange(1.0, 7.0))


def test_dropout_dim_errors_and_identities():
    x = dy.inputTensor(np.ones((2, 3)))
    with pytest.raises(GraphError, match=r"dropout_dim: dimension 2 out of range .*\(2, 3\)"):
        dy.dropout_dim(x, 2, 0.5)
    with pytest.raises(GraphError, match="dropout_dim: rate"):
        dy.dropout_dim(x, 0, 1.0)
    assert dy.dropout_dim(x, 0, 0.0) is x
    dy.set_dropout(False)
    assert dy.dropout_dim(x, 1, 0.5) is x and dy.block_dropout(x, 0.5) is x


@pytest.mark.parametrize("strategy", STRATS)
def test_block_dropout_is_all_or_nothing(strategy):
    dy.renew_cg(strategy)
    p = 0.3
    xs = _ones_nodes((3, 2), 400)
    vs = [dy.block_dropout(x, p).npvalue() for x in xs]
    for v in vs:
        assert np.array_equal(v, np.zeros((3, 2))) or np.allclose(v, 1 / (1 - p))
    kept = np.mean([v[0, 0] != 0 for v in vs])
    assert abs(kept - (1 - p)) < 5 * math.sqrt(p * (1 - p) / 400)
    np.testing.assert_array_equal(dy.block_dropout(xs[0], 1.0).npvalue(), np.zeros((3, 2)))
    assert dy.block_dropout(xs[0], 0.0) is xs[0]
    with pytest.raises(GraphError, match="block_dropout: rate"):
        dy.block_dropout(xs[0], 1.5)


def test_block_dropout_gradient_follows_the_mask():
    m = dy.ParameterCollection()
    W = m.add_parameters((2, 2), init=dy.NumpyInitializer(np.ones((2, 2))))
    outs = [dy.sum_elems(dy.block_dropout(W, 0.5)) for _ in range(20)]
    vals = [o.scalar_value() for o in outs]
    loss = dy.esum(outs)
    loss.backward()
    kept = sum(v != 0 for v in vals)
    np.testing.assert_allclose(W.grad_as_array(), np.full((2, 2), 2.0 * kept))


# --- class names ------------------------------------------------------------------------------------
def test_parameters_class_names():
    m = dy.ParameterCollection()
    assert dy.Parameters is dy.Parameter and dy.LookupParameters is dy.LookupParameter
    assert isinstance(m.add_parameters(3), dy.Parameters)
    assert isinstance(m.add_lookup_parameters((4, 2)), dy.LookupParameters)


def test_every_public_name_is_exported():
    from autobatch import api_random
    for name in api_random.__all__:
        assert getattr(dy, name) is getattr(api_random, name)
