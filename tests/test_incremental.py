"""Incremental evaluation: value() in the middle of building computes only what is new
(and batches it), and backward after several partial forwards equals one-shot backward."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy

from programs import all_params, build, make_params, programs


@pytest.fixture
def m():
    dy.reset_random_seed(9)
    model = dy.Model()
    return {"W": model.add_parameters((3, 3)), "b": model.add_parameters(3),
            "E": model.add_lookup_parameters((6, 3)), "O": model.add_parameters((4, 3)),
            "model": model}


def _step(m, h, t):
    return dy.tanh(m["W"] * h + m["E"][t % 6] + m["b"])


def _computable(g, lo, hi):
    """Nodes in [lo, hi) that forward computes (parameters are not computed)."""
    return sum(1 for i in range(lo, hi) if g.sigs[i] >= 0)


@pytest.mark.parametrize("strategy", ["none", "depth", "agenda"])
def test_next_forward_computes_only_new_nodes(m, strategy):
    g = dy.renew_cg(autobatching=strategy)
    hs = [dy.zeros(3) for _ in range(4)]
    hs = [_step(m, h, k) for k, h in enumerate(hs)]
    dy.esum(hs).value()
    s1 = dy.stats()
    n1 = g.node_count()
    assert s1["forward_nodes"] == _computable(g, 0, n1)

    # value() again on an old node: nothing new to compute
    hs[0].value()
    assert dy.stats()["forward_nodes"] == s1["forward_nodes"]
    assert dy.stats()["forward_batches"] == s1["forward_batches"]

    # grow the graph: one more step of each of the 4 chains
    hs2 = [_step(m, h, k + 1) for k, h in enumerate(hs)]
    loss = dy.esum(hs2)
    loss.value()
    s2 = dy.stats()
    new = _computable(g, n1, g.node_count())
    assert s2["forward_nodes"] - s1["forward_nodes"] == new
    if strategy == "none":
        assert s2["forward_batches"] - s1["forward_batches"] == new
    else:
        # the new step of all 4 chains batches together: W*h, two adds, tanh, lookup, esum
        assert s2["forward_batches"] - s1["forward_batches"] == 6
        mm = [v for k, v in s2["signatures"].items() if k.startswith("matmul_shared")]
        assert mm == [[4, 4]]


def test_forward_of_a_prefix_leaves_later_nodes_uncomputed(m):
    g = dy.renew_cg()
    a = _step(m, dy.zeros(3), 0)
    b = _step(m, a, 1)          # built, not yet asked for
    a.value()
    fwd = dy.stats()["forward_nodes"]
    assert fwd == _computable(g, 0, a.i + 1)
    b.value()
    assert dy.stats()["forward_nodes"] == _computable(g, 0, g.node_count())


def _grads(P):
    return [np.array(p.grad_as_array(), copy=True) for p in all_params(P)]


def _zero(P):
    for p in all_params(P):
        p.zero_grad()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(prog=programs, cuts=st.lists(st.integers(0, 10 ** 6), max_size=4),
       strategy=st.sampled_from(["none", "depth", "agenda"]))
def test_incremental_forwards_then_backward_equal_one_shot(prog, cuts, strategy):
    """Forcing values of random intermediate nodes between builds changes batching,
    never the loss or the gradients."""
    dy.set_dtype("float64")
    P = _params64()
    _zero(P)
    dy.renew_cg(autobatching=strategy)
    loss = build(prog, P)
    want_v = loss.value()
    loss.backward()
    want = _grads(P)

    _zero(P)
    g = dy.renew_cg(autobatching=strategy)
    # build instance by instance, forcing a value after each (and at random nodes)
    parts = []
    for k, inst in enumerate(prog):
        parts.append(build([inst], P))
        parts[-1].value()
        for c in cuts:
            n = g.node_count()
            dy.cg()  # the same graph
            if c % (len(prog) + 1) == k:
                i = c % n
                if g.sigs[i] >= 0:
                    g.forward_to(i)
    loss = dy.esum(parts)
    np.testing.assert_allclose(loss.value(), want_v, rtol=1e-9)
    loss.backward()
    for a, b in zip(_grads(P), want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert dy.stats()["forward_calls"] >= len(prog)


_P64 = {}


def _params64():
    if "P" not in _P64:
        _P64["P"] = make_params(21)
    return _P64["P"]


def test_backward_twice_accumulates(m):
    dy.renew_cg()
    loss = dy.sum_elems(_step(m, dy.zeros(3), 2))
    loss.backward()
    g1 = m["W"].grad_as_array().copy()
    loss.backward()
    np.testing.assert_allclose(m["W"].grad_as_array(), 2 * g1, rtol=1e-6)


def test_backward_of_intermediate_then_grown_graph(m):
    """backward() on an early loss, then grow the graph and backward() on a later loss:
    the second backward sees only its own subgraph's gradient."""
    dy.set_dtype("float64")
    dy.reset_random_seed(9)
    model = dy.Model()
    W, b, E = model.add_parameters((3, 3)), model.add_parameters(3), model.add_lookup_parameters((6, 3))
    mm = {"W": W, "b": b, "E": E}

    def chain(n):
        h = dy.zeros(3)
        for t in range(n):
            h = _step(mm, h, t)
        return dy.sum_elems(h)

    dy.renew_cg()
    l1 = chain(2)
    l1.backward()
    W.zero_grad(), b.zero_grad(), E.zero_grad()
    l2 = chain(3)
    l2.backward()
    got = W.grad_as_array().copy()
    W.zero_grad(), b.zero_grad(), E.zero_grad()
    dy.renew_cg()
    chain(3).backward()
    np.testing.assert_allclose(got, W.grad_as_array(), rtol=1e-12)


def test_graph_as_context_manager(m):
    with dy.ComputationGraph("depth") as g:
        assert dy.cg() is g
        x = _step(m, dy.zeros(3), 1)
        v = x.npvalue()
        assert dy.stats()["strategy"] == "depth"
    assert not g.alive
    with pytest.raises(dy.StaleExpressionError):
        x.value()
    # the next operation starts a fresh graph with the default strategy
    y = _step(m, dy.zeros(3), 1)
    assert dy.cg() is not g and dy.cg().strategy.value == "agenda"
    np.testing.assert_allclose(y.npvalue(), v, rtol=1e-6)


def test_renew_cg_as_context_manager(m):
    with dy.renew_cg(autobatching="none") as g:
        assert dy.cg() is g
        loss = dy.sum_elems(_step(m, dy.zeros(3), 0))
        loss.backward()
    assert m["b"].grad_as_array().any()      # (W*0 has no W gradient)
    with pytest.raises(dy.StaleExpressionError):
        loss.value()


def test_context_manager_closes_graph_on_error(m):
    with pytest.raises(ZeroDivisionError):
        with dy.renew_cg() as g:
            _step(m, dy.zeros(3), 0)
            1 / 0
    assert not g.alive
    assert dy.sum_elems(_step(m, dy.zeros(3), 0)).value() == pytest.approx(
        float(np.tanh(m["E"].as_array()[0] + m["b"].as_array()).sum()), rel=1e-5)


def test_engine_pauses_the_cycle_collector_and_restores_it(monkeypatch):
    """forward/backward run with gc paused (a full collection would walk the whole graph);
    afterwards the user's setting is back, also when a kernel raised."""
    import gc
    from autobatch.ops import OPS
    seen = []

    def boom(self, xp, xs, attr, data, out):
        seen.append(gc.isenabled())
        raise RuntimeError("boom")
    # on the class: undoing a patch of the instance would leave the bound original behind
    # as an instance attribute, which hides later patches of the class (test_coop's)
    monkeypatch.setattr(type(OPS["tanh"]), "forward_into", boom)
    for user_setting in (True, False):
        (gc.enable if user_setting else gc.disable)()
        try:
            dy.renew_cg()
            with pytest.raises(RuntimeError):
                dy.tanh(dy.inputVector([1.0, 2.0])).value()
            assert gc.isenabled() is user_setting
        finally:
            gc.enable()
    assert seen == [False, False]


def test_renewed_graph_is_freed_without_the_cycle_collector():
    """renew_cg() leaves no reference cycle behind: the old graph (and its hundreds of
    thousands of node records, in real use) goes at once, not at the next full collection."""
    import gc
    import weakref
    gc.disable()
    try:
        m = dy.ParameterCollection()
        W = m.add_parameters((2, 3))
        g = dy.renew_cg("agenda")
        loss = dy.esum([dy.squared_norm(dy.tanh(W * dy.inputVector([1.0, 2.0, k]))) for k in range(3)])
        loss = loss + dy.sum_elems(dy.parameter(W))     # the graph's cached handle of W points back at it
        loss.backward()
        ref = weakref.ref(g)
        del g, loss
        dy.renew_cg()
        assert ref() is None
    finally:
        gc.enable()


def test_backward_of_an_early_loss_skips_the_batches_after_it():
    """backward() from a loss that precedes other computed nodes runs no batch made only
    of later nodes: a lookup there would mark its rows used (and a sparse update would move
    them) with a zero gradient."""
    model = dy.Model()
    W, E = model.add_parameters((3, 3)), model.add_lookup_parameters((6, 3))
    dy.renew_cg()
    l1 = dy.sum_elems(dy.tanh(W * dy.inputVector([1.0, 2.0, 3.0])))
    l2 = dy.sum_elems(dy.tanh(E[2]))
    l2.value()                 # computes l1's nodes too
    l1.backward()
    assert W.grad_as_array().any()
    assert len(E.used_rows()) == 0
