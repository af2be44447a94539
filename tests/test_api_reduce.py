"""Values, gradients and errors of api_reduce (sum_dim ... sparsemax) against NumPy
references written here, in DyNet's conventions (checked against DyNet 2.x): dimension 0
is the rows, a reduction removes its dimensions and (1,) is what is left of a vector.

Value cases run three instances with different inputs in one graph under every
strategy, so the numbers come from batched kernels."""
import math

import numpy as np
import pytest

import autobatch as dy
from autobatch import GraphError
from autobatch.api import _op
from autobatch.ops import OPS
from check_kit import check_instances, uniform_inputs

STRATS = ("none", "depth", "agenda")
_ST = "straight_through_gradient"
R, POS = (-2.0, 2.0), (0.2, 2.0)


# --- NumPy references ---------------------------------------------------------------------
def _layer_norm(x, g, b):
    pad = (1,) * (x.ndim - g.ndim)
    return g.reshape(g.shape + pad) * (x - x.mean()) / (x.std() + 1e-8) + b.reshape(b.shape + pad)


def _huber(x, y, c):
    total = 0.0
    for d in (x - y).ravel():
        total += 0.5 * d * d if abs(d) <= c else c * abs(d) - 0.5 * c * c
    return [total]


def _hinge_dim(x, gold, d, m):
    x = x if d == 0 else x.T
    out = []
    for j, v in enumerate(gold):
        out.append(sum(max(0.0, m - x[v, j] + x[i, j]) for i in range(x.shape[0]) if i != v))
    return out


def _sparsemax(x):
    """Projection onto the simplex by bisection on the threshold τ (Σ max(x - τ, 0) = 1)."""
    z = x.ravel()
    lo, hi = z.max() - 1, z.max()
    for _ in range(200):
        tau = (lo + hi) / 2
        if np.maximum(z - tau, 0).sum() > 1:
            lo = tau
        else:
            hi = tau
    return np.maximum(z - (lo + hi) / 2, 0).reshape(x.shape)


def _poisson(ll, k):
    return np.exp(ll) - k * ll + math.log(math.factorial(k))


CUBE = ((2, 3, 4), R)

# name: (input specs [(shape, (lo, hi))], build(*exprs), numpy ref(*arrays))
CASES = {
    "sum_dim_0": ([((3, 4), R)], lambda x: dy.sum_dim(x, [0]), lambda x: x.sum(axis=0)),
    "sum_dim_1": ([((3, 4), R)], lambda x: dy.sum_dim(x, [1]), lambda x: x.sum(axis=1)),
    "sum_dim_int": ([((3, 4), R)], lambda x: dy.sum_dim(x, 1), lambda x: x.sum(axis=1)),
    "sum_dim_both": ([((3, 4), R)], lambda x: dy.sum_dim(x, [1, 0]), lambda x: [x.sum()]),
    "sum_dim_vec": ([((5,), R)], lambda x: dy.sum_dim(x, [0]), lambda x: [x.sum()]),
    "sum_dim_cube": ([CUBE], lambda x: dy.sum_dim(x, [0, 2]), lambda x: x.sum(axis=(0, 2))),
    "mean_dim": ([((3, 4), R)], lambda x: dy.mean_dim(x, [1], False), lambda x: x.mean(axis=1)),
    "mean_dim_n": ([((3, 4), R)], lambda x: dy.mean_dim(x, [0], False, 5), lambda x: x.sum(axis=0) / 5),
    "mean_dim_cube": ([CUBE], lambda x: dy.mean_dim(x, [1], False), lambda x: x.mean(axis=1)),
    "moment_dim": ([((3, 4), R)], lambda x: dy.moment_dim(x, [0], 3, False), lambda x: (x ** 3).mean(axis=0)),
    "moment_dim_n": ([((3, 4), R)], lambda x: dy.moment_dim(x, [0, 1], 2, False, 7),
                     lambda x: [(x ** 2).sum() / 7]),
    "moment_elems": ([((3, 4), R)], lambda x: dy.moment_elems(x, 4), lambda x: [(x ** 4).mean()]),
    "moment_elems_1": ([((5,), R)], lambda x: dy.moment_elems(x, 1), lambda x: [x.mean()]),
    "std_dim_0": ([((3, 4), R)], lambda x: dy.std_dim(x, [0], False), lambda x: x.std(axis=0)),
    "std_dim_1": ([((3, 4), R)], lambda x: dy.std_dim(x, [1], False), lambda x: x.std(axis=1)),
    # DyNet's std_dim ignores n (verified with DyNet 2.x): so does autobatch
    "std_dim_n": ([((3, 4), R)], lambda x: dy.std_dim(x, [1], False, 2), lambda x: x.std(axis=1)),
    "std_dim_cube": ([CUBE], lambda x: dy.std_dim(x, [0, 2], False), lambda x: x.std(axis=(0, 2))),
    "std_elems": ([((3, 4), R)], dy.std_elems, lambda x: [x.std()]),
    "min_dim_vec": ([((5,), R)], dy.min_dim, lambda x: [x.min()]),
    "min_dim_0": ([((3, 4), R)], lambda x: dy.min_dim(x, 0), lambda x: x.min(axis=0)),
    "min_dim_1": ([((3, 4), R)], lambda x: dy.min_dim(x, 1), lambda x: x.min(axis=1)),
    "min_dim_cube": ([CUBE], lambda x: dy.min_dim(x, 2), lambda x: x.min(axis=2)),
    "logsumexp": ([((4,), R)] * 3, lambda *xs: dy.logsumexp(list(xs)),
                  lambda *xs: np.logaddexp(np.logaddexp(xs[0], xs[1]), xs[2])),
    "logsumexp_one": ([((2, 3), R)], lambda x: dy.logsumexp([x]), lambda x: x),
    "logsumexp_dim_vec": ([((5,), R)], dy.logsumexp_dim, lambda x: [np.log(np.exp(x).sum())]),
    "logsumexp_dim_0": ([((3, 4), R)], lambda x: dy.logsumexp_dim(x, 0), lambda x: np.log(np.exp(x).sum(axis=0))),
    "logsumexp_dim_1": ([((3, 4), R)], lambda x: dy.logsumexp_dim(x, 1), lambda x: np.log(np.exp(x).sum(axis=1))),
    "cumsum_vec": ([((5,), R)], dy.cumsum, np.cumsum),
    "cumsum_0": ([((3, 4), R)], lambda x: dy.cumsum(x, 0), lambda x: np.cumsum(x, axis=0)),
    "cumsum_1": ([((3, 4), R)], lambda x: dy.cumsum(x, 1), lambda x: np.cumsum(x, axis=1)),
    "cumsum_cube": ([CUBE], lambda x: dy.cumsum(x, 1), lambda x: np.cumsum(x, axis=1)),
    "argmax": ([((5,), R)], lambda x: dy.argmax(x, "zero_gradient"), lambda x: np.eye(5)[np.argmax(x)]),
    "argmax_st": ([((5,), R)], lambda x: dy.argmax(x, "straight_through_gradient"),
                  lambda x: np.eye(5)[np.argmax(x)]),
    "layer_norm": ([((5,), R)] * 3, dy.layer_norm, _layer_norm),
    "layer_norm_mat": ([((3, 4), R)] * 3, dy.layer_norm, _layer_norm),
    "layer_norm_rows": ([((3, 4), R), ((3,), R), ((3,), R)], dy.layer_norm, _layer_norm),   # g scales rows
    "weight_norm": ([((3, 4), R), ((1,), POS)], dy.weight_norm, lambda w, g: g[0] * w / np.sqrt((w * w).sum())),
    "weight_norm_vec": ([((5,), R), ((1, 1), R)], dy.weight_norm, lambda w, g: g[0, 0] * w / np.linalg.norm(w)),
    "l1_distance": ([((4,), R)] * 2, dy.l1_distance, lambda x, y: [np.abs(x - y).sum()]),
    "l1_distance_mat": ([((3, 4), R)] * 2, dy.l1_distance, lambda x, y: [np.abs(x - y).sum()]),
    "huber_distance": ([((6,), R)] * 2, dy.huber_distance, lambda x, y: _huber(x, y, 1.345)),
    "huber_distance_c": ([((3, 4), R)] * 2, lambda x, y: dy.huber_distance(x, y, 0.4),
                         lambda x, y: _huber(x, y, 0.4)),
    "hinge_dim_0": ([((3, 4), R)], lambda x: dy.hinge_dim(x, [2, 0, 1, 1]),
                    lambda x: _hinge_dim(x, [2, 0, 1, 1], 0, 1.0)),
    "hinge_dim_1": ([((3, 4), R)], lambda x: dy.hinge_dim(x, [3, 0, 2], 1, 0.5),
                    lambda x: _hinge_dim(x, [3, 0, 2], 1, 0.5)),
    "poisson_loss": ([((1,), R)], lambda x: dy.poisson_loss(x, 3), lambda x: _poisson(x, 3)),
    "poisson_loss_zero": ([((1, 1), R)], lambda x: dy.poisson_loss(x, 0), lambda x: _poisson(x, 0)),
    "pairwise_rank_loss": ([((1,), R)] * 2, dy.pairwise_rank_loss, lambda x, y: np.maximum(0, 1 - x + y)),
    "pairwise_rank_loss_row": ([((1, 5), R)] * 2, lambda x, y: dy.pairwise_rank_loss(x, y, 0.3),
                               lambda x, y: np.maximum(0, 0.3 - x + y)),
    "sparsemax": ([((6,), (-0.5, 0.5))], dy.sparsemax, _sparsemax),
    "sparsemax_wide": ([((6,), (-3.0, 3.0))], dy.sparsemax, _sparsemax),
    "sparsemax_col": ([((5, 1), (-0.5, 0.5))], dy.sparsemax, _sparsemax),
}


@pytest.mark.parametrize("strategy", STRATS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_value(name, strategy, backend, f64):
    specs, build, ref = CASES[name]
    check_instances(build, ref, [uniform_inputs(specs, 200 + k) for k in range(3)], strategy, 1e-9, 1e-12, name)


def test_shapes_follow_dynet():
    """Output shapes as DyNet 2.x gives them (its dim() without the batch)."""
    x, v = dy.inputTensor(np.ones((3, 4))), dy.inputVector([1.0, 2.0, 3.0, 4.0])
    shapes = {
        (4,): [dy.sum_dim(x, [0]), dy.min_dim(x), dy.logsumexp_dim(x), dy.hinge_dim(x, [0, 1, 2, 0]),
               dy.std_dim(x, [0], False), dy.argmax(v, "zero_gradient")],
        (3,): [dy.mean_dim(x, [1], False), dy.min_dim(x, 1), dy.hinge_dim(x, [0, 1, 3], 1)],
        (1,): [dy.sum_dim(v, [0]), dy.sum_dim(x, [0, 1]), dy.moment_elems(x, 2), dy.std_elems(v),
               dy.l1_distance(x, x), dy.huber_distance(v, v), dy.min_dim(v)],
        (3, 4): [dy.cumsum(x, 1), dy.layer_norm(x, dy.inputVector([1.0, 2.0, 3.0]), dy.zeros(3)),
                 dy.weight_norm(x, dy.scalarInput(2.0))],
        (1, 4): [dy.pairwise_rank_loss(dy.reshape(v, (1, 4)), dy.zeros((1, 4)))],
        (1, 1): [dy.poisson_loss(dy.inputTensor([[0.5]]), 2)],
        (4, 1): [dy.sparsemax(dy.reshape(v, (4, 1)))],
    }
    for shape, es in shapes.items():
        for e in es:
            assert e.dim() == (shape, 1)
            assert e.npvalue().shape == shape


def test_hand_computed_values():
    """A few values worked out by hand (and matching DyNet 2.x)."""
    v = dy.inputVector([0.4, 0.1, 0.35, -0.3])
    # τ = (0.4 + 0.35 + 0.1 - 1) / 3 = -0.05: support {0.4, 0.35, 0.1}
    np.testing.assert_allclose(dy.sparsemax(v).npvalue(), [0.45, 0.15, 0.4, 0.0], atol=1e-6)
    np.testing.assert_allclose(dy.sparsemax(dy.inputVector([0.4, 0.1])).npvalue(), [0.65, 0.35], atol=1e-6)
    np.testing.assert_array_equal(dy.argmax(dy.inputVector([1.0, 3.0, 3.0, 0.0])).npvalue(), [0, 1, 0, 0])
    # e^0.7 - 3·0.7 + log 3!
    assert dy.poisson_loss(dy.scalarInput(0.7), 3).value() == pytest.approx(np.exp(0.7) - 2.1 + np.log(6), 1e-6)
    # huber: |d| = 0.4 <= 0.5 twice (0.08 each), |d| = 3.7 twice (0.5·3.7 - 0.125 each)
    x, y = dy.inputVector([0.3, -1.2, 2.5, 0.7]), dy.inputVector([0.7, 2.5, -1.2, 0.3])
    assert dy.huber_distance(x, y, 0.5).value() == pytest.approx(0.16 + 2 * 1.725, 1e-6)
    assert dy.layer_norm(dy.inputVector([1.0, 1.0, 1.0]), dy.ones(3), dy.constant(3, 0.5)).vec_value() == [0.5] * 3


# --- gradients -------------------------------------------------------------------------------
def _grad(x0, f, w=None):
    """Gradient of Σ w ⊙ f(p) with respect to a parameter p = x0."""
    m = dy.ParameterCollection()
    p = m.add_parameters(np.shape(x0), init=np.asarray(x0, dtype=float))
    dy.renew_cg()
    y = f(p)
    w = np.arange(1.0, y.dim()[0][0] + 1) if w is None else w
    loss = dy.sum_elems(dy.cmult(y, dy.inputTensor(w)))
    loss.backward()
    return p.grad_as_array()


def test_argmax_gradient_modes(f64):
    x = [0.3, -1.2, 2.5, 0.7]
    w = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(_grad(x, lambda p: dy.argmax(p, "zero_gradient")), np.zeros(4))
    np.testing.assert_array_equal(_grad(x, lambda p: dy.argmax(p, "straight_through_gradient")), w)
    # the zero mode stops only its own path
    np.testing.assert_array_equal(_grad(x, lambda p: dy.cmult(dy.argmax(p), p)), [0, 0, 3, 0])


def test_argmax_zero_is_not_differentiable(f64, monkeypatch):
    """argmax_zero stops the gradient without a backward: its node needs none, so the engine
    never calls it; argmax (straight-through) still passes the gradient."""
    def boom(*a):
        raise AssertionError("argmax_zero's backward ran")
    monkeypatch.setattr(type(OPS["argmax_zero"]), "backward", boom)
    m = dy.ParameterCollection()
    p = m.add_parameters(4, init=np.array([0.3, -1.2, 2.5, 0.7]))
    w = m.add_parameters(4, init=np.array([1.0, 2.0, 3.0, 4.0]))
    for op, want in ((OPS["argmax_zero"], np.zeros(4)), (OPS["argmax"], 2 * np.array([1.0, 2.0, 3.0, 4.0]))):
        p.zero_grad()
        w.zero_grad()
        dy.renew_cg()
        x = 2 * p
        y = _op(op, x, attr="zero_gradient" if op is OPS["argmax_zero"] else _ST)
        dy.sum_elems(dy.cmult(y, w)).backward()
        g = dy.cg()
        assert g.needs[x.i] and g.needs[y.i] == (op is OPS["argmax"])
        np.testing.assert_array_equal(p.grad_as_array(), want)
        np.testing.assert_array_equal(w.grad_as_array(), [0, 0, 1, 0])


def test_argmax_zero_gradient_mode_uses_the_non_differentiable_op(f64):
    m = dy.ParameterCollection()
    p = m.add_parameters(4, init=np.array([0.3, -1.2, 2.5, 0.7]))
    for build in (dy.argmax, lambda x: dy.argmax(x, "zero_gradient")):
        dy.renew_cg()
        y = build(2 * p)
        assert dy.cg().ops[y.i] is OPS["argmax_zero"] and not dy.cg().needs[y.i]


def test_first_minimum_takes_the_gradient(f64):
    np.testing.assert_array_equal(_grad([1.0, 0.0, 0.0, 2.0], lambda p: dy.min_dim(p)), [0, 1, 0, 0])


def test_cumsum_gradient_is_a_reversed_running_sum(f64):
    w = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(_grad([0.3, -1.2, 2.5, 0.7], lambda p: dy.cumsum(p)), np.cumsum(w[::-1])[::-1])


def test_sparsemax_gradient_on_its_support(f64):
    # support {0, 1, 2}: the Jacobian is I - 11ᵀ/3 there, so w - mean(w on the support)
    g = _grad([0.4, 0.1, 0.35, -0.3], dy.sparsemax, w=np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(g, [-1.0, 0.0, 1.0, 0.0], atol=1e-12)


def test_per_instance_data_batches(f64):
    """hinge_dim's gold indices and poisson_loss's counts differ per instance, and the
    instances still run as one batch each."""
    dy.renew_cg("agenda")
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-2, 2, (3, 4)) for _ in range(4)]
    golds = [[0, 1, 2, 0], [2, 2, 1, 0], [1, 0, 0, 2], [0, 0, 0, 0]]
    hs = [dy.hinge_dim(dy.inputTensor(x), gd) for x, gd in zip(xs, golds)]
    ps = [dy.poisson_loss(dy.scalarInput(x[0, 0]), k) for k, x in enumerate(xs)]
    total = dy.esum([dy.sum_elems(h) for h in hs] + ps)
    want = sum(sum(_hinge_dim(x, gd, 0, 1.0)) for x, gd in zip(xs, golds))
    want += sum(_poisson(x[0, 0], k) for k, x in enumerate(xs))
    assert total.value() == pytest.approx(want, rel=1e-12)
    sizes = {sig.split("#")[0]: s for sig, s in dy.stats()["signatures"].items()}
    assert sizes["hinge_dim"] == [4] and sizes["poisson_loss"] == [4]


# --- errors ------------------------------------------------------------------------------------
def _m():
    return dy.inputTensor(np.arange(12.0).reshape(3, 4))


def _v():
    return dy.inputVector([1.0, 2.0, 3.0, 4.0])


ERRORS = {
    "sum_dim_range": (lambda: dy.sum_dim(_m(), [2]), ["sum_dim", "dimension 2", "(3, 4)"]),
    "sum_dim_repeat": (lambda: dy.sum_dim(_m(), [1, 1]), ["sum_dim", "distinct", "(3, 4)"]),
    "sum_dim_empty": (lambda: dy.sum_dim(_m(), []), ["sum_dim", "distinct"]),
    "mean_dim_negative": (lambda: dy.mean_dim(_m(), [-1], False), ["mean_dim", "-1"]),
    "moment_order": (lambda: dy.moment_dim(_m(), [0], 0, False), ["moment_dim", "order", "0"]),
    "moment_order_float": (lambda: dy.moment_elems(_m(), 2.5), ["moment_elems", "order", "2.5"]),
    "std_dim_range": (lambda: dy.std_dim(_v(), [1], False), ["std_dim", "dimension 1", "(4,)"]),
    "min_dim_range": (lambda: dy.min_dim(_m(), 2), ["min_dim", "dimension 2", "(3, 4)"]),
    "logsumexp_empty": (lambda: dy.logsumexp([]), ["logsumexp", "empty"]),
    "logsumexp_shapes": (lambda: dy.logsumexp([_v(), _m()]), ["logsumexp", "(4,)", "(3, 4)"]),
    "logsumexp_dim_range": (lambda: dy.logsumexp_dim(_m(), 2), ["logsumexp_dim", "dimension 2"]),
    "cumsum_dim": (lambda: dy.cumsum(_v(), -1), ["cumsum", "-1"]),
    "argmax_mode": (lambda: dy.argmax(_v(), "foo"), ["argmax", "foo", "straight_through_gradient"]),
    "argmax_matrix": (lambda: dy.argmax(_m(), "zero_gradient"), ["argmax", "vector", "(3, 4)"]),
    "layer_norm_gain": (lambda: dy.layer_norm(_v(), dy.ones(3), dy.zeros(4)), ["layer_norm", "g", "(3,)", "(4,)"]),
    "layer_norm_bias": (lambda: dy.layer_norm(_m(), dy.ones(3), dy.zeros(4)), ["layer_norm", "b", "(4,)"]),
    "weight_norm_gain": (lambda: dy.weight_norm(_m(), dy.ones(2)), ["weight_norm", "one element", "(2,)"]),
    "l1_shapes": (lambda: dy.l1_distance(_v(), _m()), ["l1_distance", "(4,)", "(3, 4)"]),
    "huber_shapes": (lambda: dy.huber_distance(_v(), dy.ones(3)), ["huber_distance", "(4,)", "(3,)"]),
    "huber_c": (lambda: dy.huber_distance(_v(), _v(), 0.0), ["huber_distance", "positive"]),
    "hinge_dim_vector": (lambda: dy.hinge_dim(_v(), [1]), ["hinge_dim", "matrix", "(4,)"]),
    "hinge_dim_count": (lambda: dy.hinge_dim(_m(), [0, 1, 2]), ["hinge_dim", "4 gold", "got 3", "(3, 4)"]),
    "hinge_dim_index": (lambda: dy.hinge_dim(_m(), [0, 3, 1, 1]), ["hinge_dim", "index 3", "(3, 4)"]),
    "hinge_dim_d": (lambda: dy.hinge_dim(_m(), [0, 1, 2], 2), ["hinge_dim", "d=2"]),
    "poisson_shape": (lambda: dy.poisson_loss(_v(), 2), ["poisson_loss", "single value", "(4,)"]),
    "poisson_negative": (lambda: dy.poisson_loss(dy.scalarInput(0.5), -1), ["poisson_loss", "count", "-1"]),
    "poisson_fraction": (lambda: dy.poisson_loss(dy.scalarInput(0.5), 2.5), ["poisson_loss", "count", "2.5"]),
    "pairwise_vectors": (lambda: dy.pairwise_rank_loss(_v(), _v()), ["pairwise_rank_loss", "(1,)", "(4,)"]),
    "sparsemax_matrix": (lambda: dy.sparsemax(_m()), ["sparsemax", "vector", "(3, 4)"]),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors(case):
    build, parts = ERRORS[case]
    dy.renew_cg()
    kept = dy.sum_elems(_v())
    n = len(dy.cg().ops)
    with pytest.raises(GraphError) as err:
        build()
    msg = str(err.value)
    for part in parts:
        assert part in msg, (part, msg)
    assert "test_api_reduce.py" in msg          # the user's line, not the library's
    assert len(dy.cg().ops) <= n + 3             # at most the inputs the case built itself
    # the graph is still usable
    assert kept.value() == 10.0
    assert dy.sum_dim(_m(), [0]).vec_value() == [12.0, 15.0, 18.0, 21.0]


def test_every_public_name_is_exported():
    from autobatch import api_reduce
    for name in api_reduce.__all__:
        assert getattr(dy, name) is getattr(api_reduce, name)


@pytest.mark.parametrize("strategy", ["none", "agenda"])
@pytest.mark.parametrize("form", ["logsumexp", "logsumexp_dim"])
def test_logsumexp_of_log_zero_has_value_minus_inf_and_gradient_zero(strategy, form):
    """All inputs -inf is log 0 (a chart cell no path reaches, in a CTC or forward algorithm):
    logsumexp gives -inf with no warning, and its gradient is 0, not exp(-inf - -inf) = nan,
    so the summed loss around it keeps finite gradients. Another row of the same batch is
    finite and keeps its own gradient."""
    pc = dy.ParameterCollection()
    p = pc.add_parameters((2,), init=dy.ConstInitializer(0.5))
    dy.renew_cg(autobatching=strategy)
    with np.errstate(all="raise"):
        dead = p + dy.inputVector([-np.inf, -np.inf])
        live = p + dy.inputVector([0.0, 1.0])
        if form == "logsumexp":
            zs = [dy.logsumexp([dead, dead * 2]), dy.logsumexp([live, live * 2])]
        else:
            zs = [dy.logsumexp_dim(dead, 0), dy.logsumexp_dim(live, 0)]
        assert np.all(np.asarray(zs[0].value()) == -np.inf)
        loss = dy.sum_elems(dy.logsumexp([dy.sum_elems(zs[0]) if form == "logsumexp" else zs[0],
                                          dy.scalarInput(1.0)])) + dy.sum_elems(zs[1])
        loss.backward()
    g = p.grad_as_array()
    # only the live row contributes: d/dp of logsumexp(live, 2 live) or of logsumexp_dim(live)
    v = np.array([0.5, 1.5])
    if form == "logsumexp":
        expect = (np.exp(v) + 2 * np.exp(2 * v)) / (np.exp(v) + np.exp(2 * v))
    else:
        expect = np.exp(v) / np.exp(v).sum()
    assert np.allclose(g, expect, rtol=1e-5)
