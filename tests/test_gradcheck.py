"""Per-op gradient check: one row per op name in autobatch.ops.OPS.

A row is ``row(c, k) -> scalar Expression``: a small loss for instance k that
exercises its op through the public API. Every row is checked in float64 against
central differences, under each strategy, for one instance and for several
instances in one graph. The instance list (0, 1, 2, 0) repeats instance 0, whose
inputs are memoised, so the same node is a source twice in one batch; the
instances' vectors have different lengths (the mixed-shape elementwise flat path),
are built interleaved (non-contiguous gathers), add the parameter b (broadcast
parameter sources) and look up repeated rows (RowGrad with repeated indices).

Ops that are not differentiable (input, constant) have value rows instead.
Dropout and noise draw from a hash of (graph seed, node id), so rebuilding the
same graph after ``reset_random_seed`` gives the same mask: the loss is then a
fixed, smooth function of the parameters and central differences are valid.
"""
from types import SimpleNamespace

import numpy as np
import pytest

import autobatch as dy
from autobatch.ops import OPS
from gradcheck_kit import Ctx, _data, red, unary, unary_pos
import gradrows_fused
import gradrows_math
import gradrows_reduce
import gradrows_shape
import gradrows_random

STRATS = ("none", "depth", "agenda")
INSTANCES = (0, 1, 2, 0)
SEED = 4242
EPS = 1e-6
RTOL, ATOL = 1e-6, 1e-7


def _vertex_fn(P):
    """A vertex function over P (traced once per parameter set): leaves pull a
    lazy-graph Expression, the root combines its two children."""
    fn = getattr(P, "vertex_fn", None)
    if fn is None:
        @dy.vertex_function(max_children=2)
        def fn(v):
            if v.is_leaf:
                h = dy.tanh(P.V * v.pull("x") + P.b)
            else:
                h = dy.tanh(P.V * v.gather(0) + dy.cmult(v.gather(1), P.q))
            v.scatter(h)
            v.push("h", h)
        P.vertex_fn = fn
    return fn


def _vertex_row(c, k):
    out = _vertex_fn(c.P)([dy.InputGraph([[], [], [0, 1]])], x=[[c.h(k), c.e(k), c.e(k)]])
    return red(out["h"], k)


GRAD_ROWS = {
    "tanh": unary(dy.tanh),
    "logistic": unary(dy.logistic),
    "rectify": unary(dy.rectify),
    "elu": lambda c, k: unary(dy.elu)(c, k) + red(dy.elu(c.mix(k), 0.7), k),
    "exp": unary(dy.exp),
    "square": unary(dy.square),
    "abs": unary(dy.abs),
    "log": unary_pos(dy.log),
    "sqrt": unary_pos(dy.sqrt),
    "scalar_div": unary_pos(lambda x: 2.5 / x),
    "scale_shift": lambda c, k: (red((1.5 - 3 * c.mix(k)) / 2 + 1, k) + red(-c.h(k), k)
                                 + red(c.P.b * 2 - 1, k)),
    "add": lambda c, k: (red(c.mix(k) + c.pos(k), k)
                         + red(dy.esum([c.h(k), c.e(k), c.h(k), c.P.b]), k)
                         + red(c.h(k) + dy.constant(3, 0.25), k)),
    "sub": lambda c, k: (red(c.mix(k) - c.pos(k), k) + red(c.h(k) - c.P.b, k)
                         + red(dy.ones(3) - c.e(k), k)),
    "cmult": lambda c, k: (red(dy.cmult(c.mix(k), c.pos(k)), k) + red(dy.cmult(c.h(k), c.h(k)), k)
                           + red(dy.cmult(c.P.b, c.e(k)), k)),
    "cdiv": lambda c, k: (red(dy.cdiv(c.mix(k), c.pos(k)), k) + red(c.P.b / c.P.q, k)
                          + red(dy.cdiv(c.h(k), c.P.q), k)),
    "average": lambda c, k: (red(dy.average([c.h(k), c.e(k), c.h(k)]), k)
                             + red(dy.average([c.mix(k), c.pos(k)]), k)),
    "emax": lambda c, k: (red(dy.emax([c.h(k), c.e(k), c.P.b]), k)
                          + red(dy.bmax(c.mix(k), 0.3 - c.mix(k)), k)),
    "matmul_shared": lambda c, k: (red(c.P.U * dy.tanh(c.h(k)), k) + red(c.P.U * c.m(k), k)
                                   + red(c.P.V * c.e(k), k)),
    "matmul": lambda c, k: (red(c.m(k) * dy.pickrange(c.mix(k), 0, 4), k)       # matrix · vector
                            + red(c.h(k) * dy.transpose(c.e(k)), k)               # outer product
                            + red(c.m(k) * dy.transpose(c.m(k)), k)               # matrix · matrix
                            + red(dy.transpose(c.m(k)) * c.P.V, k)                # parameter on the right
                            + red(c.mix(k) * c.h(k)[1], k)),                     # vector · (1,): a scaling
    "affine": lambda c, k: (red(dy.affine_transform([c.P.b, c.P.W, c.x(k), c.P.V, c.e(k)]), k)
                            + red(dy.affine_transform([c.P.b, c.P.V, dy.tanh(c.h(k))]), k)
                            + red(dy.affine_transform([c.P.b, c.P.V, c.P.q]), k)),
    "matmul_add": lambda c, k: (red(dy.affine_transform([c.h(k), c.P.W, c.x(k), c.P.V, c.e(k)]), k)
                                + red(dy.affine_transform([dy.tanh(c.e(k)), c.P.V, c.h(k)]), k)),
    "transpose": lambda c, k: (red(dy.transpose(c.m(k)), k) + red(dy.transpose(c.h(k)), k)
                               + red(dy.transpose(dy.reshape(c.m(k), (2, 3, 2)), [2, 0, 1]), k)
                               + red(dy.transpose(c.m(k), [0, 1, 2]), k)),
    "dot_product": lambda c, k: (dy.dot_product(c.h(k), c.e(k)) + dy.dot_product(c.h(k), c.h(k))
                                 + dy.dot_product(c.P.b, c.mix(k)[0:3])),
    "lookup": lambda c, k: (red(c.e(k), k) + red(c.P.E[3], k)
                            + red(dy.cmult(c.P.E[1], dy.lookup(c.P.E, 1)), k)),
    "sum_elems": lambda c, k: (dy.sum_elems(c.m(k)) + dy.sum_elems(dy.square(c.mix(k)))
                               + dy.sum_elems(c.P.b)),
    "mean_elems": lambda c, k: dy.mean_elems(dy.square(c.m(k))) + dy.mean_elems(dy.tanh(c.mix(k))),
    "squared_norm": lambda c, k: dy.squared_norm(c.m(k)) + dy.squared_norm(c.mix(k)),
    "l2_norm": lambda c, k: dy.l2_norm(c.m(k)) + dy.l2_norm(c.mix(k)),
    "squared_distance": lambda c, k: (dy.squared_distance(c.h(k), c.e(k))
                                      + dy.squared_distance(c.m(k), dy.cmult(c.P.M, c.P.M))),
    "max_dim": lambda c, k: (red(dy.max_dim(c.m(k), 0), k) + red(dy.max_dim(c.m(k), 1), k)
                             + dy.max_dim(c.mix(k))),
    "softmax": lambda c, k: (red(dy.softmax(c.h(k)), k) + red(dy.softmax(c.m(k)), k)
                             + red(dy.softmax(c.mix(k)), k)),
    # bounds in (0.4, 0.7) over 3 entries: feasible, and binding for some instances
    "constrained_softmax": lambda c, k: red(dy.constrained_softmax(c.h(k) * 2, 0.4 + 0.3 * dy.logistic(c.e(k))), k),
    "log_softmax": lambda c, k: (red(dy.log_softmax(c.h(k)), k) + red(dy.log_softmax(c.m(k)), k)
                                 + red(dy.log_softmax(c.mix(k)), k)),
    "pickneglogsoftmax": lambda c, k: (dy.pickneglogsoftmax(c.h(k), k % 3)
                                       + dy.pickneglogsoftmax(c.mix(k), (k + 2) % 4)),
    "binary_log_loss": lambda c, k: (
        dy.binary_log_loss(dy.logistic(c.h(k)), dy.logistic(c.e(k)))
        + dy.binary_log_loss(dy.logistic(c.m(k)), dy.inputTensor(_data((3, 4), 4, k) > 0))),
    "hinge": lambda c, k: dy.hinge(c.h(k) * 3, k % 3) + dy.hinge(c.mix(k), 1, 0.5),
    "concatenate": lambda c, k: (red(dy.concatenate([c.h(k), c.e(k), c.mix(k)]), k)
                                 + red(dy.concatenate([c.m(k), dy.cmult(c.P.M, c.P.M)], 0), k)
                                 + red(dy.concatenate([c.m(k), dy.reshape(c.h(k), (3, 1))], 1), k)),
    "concatenate_cols": lambda c, k: red(dy.concatenate_cols([c.h(k), c.e(k), c.h(k)]), k),
    "reshape": lambda c, k: (red(dy.reshape(c.m(k), (4, 3)), k) + red(dy.reshape(c.m(k), (12,)), k)
                             + red(dy.reshape(c.h(k), (1, 3)), k) + red(dy.reshape(c.P.M, (2, 6)), k)),
    "select_rows": lambda c, k: (red(dy.select_rows(c.m(k), [2, 0, 2]), k)
                                 + red(dy.select_rows(c.h(k), [1, 1, 0]), k)),
    "pickrange": lambda c, k: (red(dy.pickrange(c.m(k), 1, 3, 0), k) + red(dy.pickrange(c.m(k), 0, 2, 1), k)
                               + red(c.mix(k)[1:3], k)),
    "pick": lambda c, k: (red(dy.pick(c.m(k), k % 3, 0), k) + red(dy.pick(c.m(k), (k + 1) % 4, 1), k)
                          + c.mix(k)[k % 3] * 2 + c.h(k)[2]),
    "dropout": lambda c, k: (red(dy.dropout(c.mix(k), 0.4), k) + red(dy.dropout(c.m(k), 0.3), k)
                             + red(dy.dropout(c.P.b, 0.5), k)),
    "vertex_call": _vertex_row,
    # gates (4H,) with H = 3 from stacked and parameter sources; c_prev as a vector (H,),
    # as the previous cell's [h; c] (2H,), and absent (first step)
    "lstm_cell": lambda c, k: (red(dy.lstm_cell(dy.concatenate([c.h(k), c.e(k), c.h(k), c.e(k)]), c.e(k), 0.7), k)
                               + red(dy.lstm_cell(dy.concatenate([c.P.b, c.h(k), c.e(k), c.P.b]),
                                                  dy.lstm_cell(dy.concatenate([c.e(k), c.h(k), c.h(k), c.e(k)]))), k)
                               + red(dy.lstm_cell(dy.concatenate([c.h(k), c.h(k), c.e(k), c.e(k)]), c.P.b), k)),
    "noise": lambda c, k: red(dy.square(dy.noise(c.mix(k), 0.5)), k) + red(dy.noise(c.m(k), 0.3), k),
}
for _more in (gradrows_math, gradrows_reduce, gradrows_shape, gradrows_random, gradrows_fused):
    assert not set(_more.ROWS) & set(GRAD_ROWS), f"{_more.__name__}: rows defined twice"
    GRAD_ROWS.update(_more.ROWS)


def _check_input(strategy):
    """inputVector / inputTensor / scalarInput / inputMatrix give back their values,
    also when several of them run in one batch."""
    dy.renew_cg(strategy)
    vs = [np.arange(4.0) + k for k in range(3)]
    ts = [np.arange(6.0).reshape(2, 3) * (k + 1) for k in range(3)]
    ev = [dy.inputVector(v) for v in vs]
    et = [dy.inputTensor(t) for t in ts]
    es = [dy.scalarInput(2.5 + k) for k in range(3)]
    em = dy.inputMatrix([1, 2, 3, 4, 5, 6], (2, 3))        # column-major, as in DyNet
    for e, v in zip(ev + et, vs + ts):
        np.testing.assert_array_equal(e.npvalue(), v)
    assert [e.value() for e in es] == [2.5, 3.5, 4.5]
    np.testing.assert_array_equal(em.npvalue(), [[1, 3, 5], [2, 4, 6]])
    assert ev[0].dim() == ((4,), 1) and et[0].dim() == ((2, 3), 1) and es[0].dim() == ((1,), 1)


def _check_constant(strategy):
    dy.renew_cg(strategy)
    es = [dy.zeros(3), dy.ones((2, 2)), dy.constant(3, -1.5), dy.constant((2, 2), 4), dy.zeros(5)]
    want = [np.zeros(3), np.ones((2, 2)), np.full(3, -1.5), np.full((2, 2), 4.0), np.zeros(5)]
    for e, w in zip(es, want):
        np.testing.assert_array_equal(e.npvalue(), w)


VALUE_ROWS = {"input": _check_input, "constant": _check_constant}


# --- machinery --------------------------------------------------------------------
@pytest.fixture
def P(backend, f64):
    rng = np.random.default_rng(11)
    m = dy.ParameterCollection()
    ps = SimpleNamespace(
        W=m.add_parameters((3, 4), init=rng.normal(size=(3, 4))),
        b=m.add_parameters(3, init=rng.normal(size=3)),
        q=m.add_parameters(3, init=rng.uniform(0.5, 1.5, 3)),   # positive: log, sqrt, division
        M=m.add_parameters((3, 4), init=rng.normal(size=(3, 4))),
        U=m.add_parameters((2, 3), init=rng.normal(size=(2, 3))),
        V=m.add_parameters((3, 3), init=rng.normal(size=(3, 3))),
        E=m.add_lookup_parameters((5, 3), init=rng.normal(size=(5, 3))),
    )
    ps.all = m.parameters_list() + m.lookup_parameters_list()
    return ps


def _build(row, P, strategy, instances):
    dy.reset_random_seed(SEED)   # same graph seed every time: same dropout masks / noise
    dy.renew_cg(strategy)
    c = Ctx(P)
    return dy.esum([row(c, k) for k in instances])


def _numeric(row, P, instances, params):
    out = []
    for p in params:
        v0 = p.as_array()
        g = np.zeros_like(v0)
        for j in range(v0.size):
            f = []
            for d in (EPS, -EPS):
                v = v0.copy()
                v.flat[j] += d
                p.set_value(v)
                f.append(_build(row, P, "none", instances).scalar_value())
            g.flat[j] = (f[0] - f[1]) / (2 * EPS)
        p.set_value(v0)
        out.append(g)
    return out


def test_every_op_has_a_row():
    missing = sorted(set(OPS) - set(GRAD_ROWS) - set(VALUE_ROWS))
    assert not missing, (f"ops without a gradcheck row in tests/test_gradcheck.py: {missing}; add "
                         "row(c, k) -> scalar loss to GRAD_ROWS (or a value check to VALUE_ROWS)")
    stale = sorted((set(GRAD_ROWS) | set(VALUE_ROWS)) - set(OPS))
    assert not stale, f"gradcheck rows for ops that do not exist: {stale}"


@pytest.mark.parametrize("strategy", STRATS)
@pytest.mark.parametrize("name", sorted(VALUE_ROWS))
def test_value_row(name, strategy, backend, f64):
    VALUE_ROWS[name](strategy)


@pytest.mark.parametrize("instances", [(0,), INSTANCES], ids=["one", "many"])
@pytest.mark.parametrize("name", sorted(GRAD_ROWS))
def test_gradcheck(name, instances, P):
    row = GRAD_ROWS[name]
    loss = _build(row, P, "none", instances)
    g = dy.cg()
    assert any(op is OPS[name] for op in g.ops), f"row {name!r} does not use op {name!r}"
    params = [p for p in P.all if (id(p), True) in g.pnode]
    ref_value = loss.scalar_value()
    assert np.isfinite(ref_value)
    numeric = _numeric(row, P, instances, params)
    for strategy in STRATS:
        for p in P.all:
            p.zero_grad()
        loss = _build(row, P, strategy, instances)
        np.testing.assert_allclose(loss.scalar_value(), ref_value, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{name}: forward value under {strategy}")
        loss.backward()
        if strategy == "agenda" and len(instances) > 1 and OPS[name].batchable:   # the row really batched its op
            sizes = [s for sig, ss in dy.stats()["signatures"].items()
                     if sig.split("#")[0] == name for s in ss]
            assert max(sizes) > 1, f"{name}: never batched ({sizes})"
        for k, (p, num) in enumerate(zip(params, numeric)):
            np.testing.assert_allclose(p.grad_as_array(), num, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name}: gradient of {p!r} (#{k}) under {strategy}")


INTO = sorted(n for n in GRAD_ROWS if OPS[n].has_into)


def test_the_ops_that_write_into_their_block_are_covered():
    assert {"tanh", "logistic", "cmult", "add", "lookup", "affine", "matmul_add"} <= set(INTO)


@pytest.mark.parametrize("name", INTO)
def test_forward_into_matches_forward(name, P, monkeypatch):
    """An op with forward_into runs it on its block of the arena; the same graph run through
    forward() and a copy (the path of ops without one) has the same value and gradients."""
    row = GRAD_ROWS[name]
    runs = []
    for into in (True, False):
        if not into:
            for op in OPS.values():
                monkeypatch.setattr(type(op), "has_into", False)
        for p in P.all:
            p.zero_grad()
        loss = _build(row, P, "agenda", INSTANCES)
        value = loss.scalar_value()
        loss.backward()
        runs.append((value, [p.grad_as_array() for p in P.all]))
    (v1, g1), (v2, g2) = runs
    assert v1 == v2
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)
