"""Replayed RNN steps (recipes.py) append exactly the nodes the expression functions would:
every column of the graph, the signatures and the values and gradients match a build with
replay switched off, for every builder, depth, initial state, dropout and parameter mode."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch import recipes, runtime
from autobatch.errors import GraphError, StaleExpressionError
from check_kit import graph_columns

COLUMNS = ("ops", "args", "attrs", "datas", "shapes", "sizes", "sigs", "depths", "needs", "uses", "sig_op")
BUILDERS = (dy.VanillaLSTMBuilder, dy.SimpleRNNBuilder, dy.GRUBuilder,
            lambda *a: dy.VanillaLSTMBuilder(*a, ln_lstm=True),     # DyNet's layer-normalised LSTM
            dy.SparseLSTMBuilder)                                   # its weights masked in each graph


def _program(kind, layers, lens, start, update, drop, stepwise=False):
    """A few sequences through one builder in one graph; returns (graph, loss, params).
    stepwise: add_input per step instead of transduce (which steps without state objects)."""
    dy.reset_random_seed(3)         # the same weights, and the same dropout seeds per graph
    pc = dy.ParameterCollection()
    b = BUILDERS[kind](layers, 3, 4, pc)
    E = pc.add_lookup_parameters((7, 3))
    S = pc.add_lookup_parameters((7, 4))    # given initial states
    if drop:
        b.set_dropout(0.3)
    g = dy.renew_cg("agenda")
    losses = []
    for k, n in enumerate(lens):
        vecs = None
        if start[k]:
            per = 2 * layers if kind in (0, 3, 4) else layers
            vecs = [dy.tanh(dy.lookup(S, (k + j) % 7)) for j in range(per)]
        s = b.initial_state(vecs, update=bool(update[k]))
        # constant inputs and update=False parameters make nodes that need no gradient
        xs = [dy.inputVector([0.1 * t, -0.2, 0.3]) if update[k] is None else dy.lookup(E, (k * 3 + t) % 7)
              for t in range(n)]
        outs = [t.output() for t in s.add_inputs(xs)] if stepwise else s.transduce(xs)
        if outs:
            losses.append(dy.sum_elems(dy.esum(outs)))
    loss = dy.esum(losses) if losses else None
    return g, loss, pc


def _build(replay, *spec, stepwise=False):
    with pytest.MonkeyPatch.context() as m:
        if not replay:
            m.setattr(recipes, "_compile", lambda *a: None)
        was = runtime.state().dropout
        dy.set_dropout(spec[-1])
        try:
            return _program(*spec, stepwise=stepwise)
        finally:
            dy.set_dropout(was)


@settings(max_examples=40, deadline=None)
@given(kind=st.integers(0, 4), layers=st.integers(1, 2),
       lens=st.lists(st.integers(0, 5), min_size=1, max_size=4), data=st.data(), drop=st.booleans())
def test_replay_builds_the_same_graph(kind, layers, lens, data, drop):
    start = data.draw(st.lists(st.booleans(), min_size=len(lens), max_size=len(lens)))
    update = data.draw(st.lists(st.sampled_from([True, False, None]), min_size=len(lens), max_size=len(lens)))
    spec = (kind, layers, lens, start, update, drop)
    g1, l1, pc1 = _build(True, *spec)
    cols1 = graph_columns(g1, COLUMNS)
    g2, l2, pc2 = _build(False, *spec)
    _assert_same_columns(g2, cols1)
    if max(lens) > 2:      # steps 2 and 3 of a sequence have the same form: step 3 replays
        assert any(callable(t) for t in g1._recipes.values())
    assert not any(callable(t) for t in g2._recipes.values())
    # transduce's loop (templates looked up once per form) against add_input step by step
    g3, l3, pc3 = _build(True, *spec, stepwise=True)
    _assert_same_columns(g3, cols1)


def _assert_same_columns(g, cols):
    mine = graph_columns(g, COLUMNS)      # (a parameter node's uses are not kept)
    for c in COLUMNS:
        a, b = mine[c], cols[c]
        assert len(a) == len(b), c
        for u, v in zip(a, b):       # datas hold arrays (input vectors)
            assert type(u) is type(v) and (np.array_equal(u, v) if isinstance(u, np.ndarray) else u == v), c


@pytest.mark.parametrize("kind", range(len(BUILDERS)))
def test_transduce_steps_without_state_objects_only_when_plain(kind):
    """The fast loop runs for plain sequences; dropout and inputs it cannot check up front
    (a wrong shape) take add_input's path, which reports the bad step."""
    pc = dy.ParameterCollection()
    b = BUILDERS[kind](2, 3, 4, pc)
    dy.renew_cg()
    xs = [dy.inputVector([0.1, 0.2, 0.3]) for _ in range(4)]
    s = b.initial_state()
    assert len(b._transduce(s, xs)) == 4
    assert b._transduce(s, xs + [dy.inputVector([1.0, 2.0])]) is None
    with pytest.raises(GraphError, match=r"input must have shape \(3,\)"):
        s.transduce(xs + [dy.inputVector([1.0, 2.0])])
    b.set_dropout(0.5)
    dy.set_dropout(True)
    try:
        assert b._transduce(b.initial_state(), xs) is None
    finally:
        dy.set_dropout(False)


def test_replayed_values_and_gradients():
    spec = (0, 2, [5, 3, 4], [False, True, False], [True, True, False], False)
    out = []
    for replay in (True, False):
        g, loss, pc = _build(replay, *spec)
        v = loss.value()
        loss.backward()
        out.append((v, [p.grad_as_array().copy() for p in pc.parameters_list()]))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-6)
    for a, b in zip(out[0][1], out[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_state_from_a_renewed_graph_is_reported():
    pc = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 3, 4, pc)
    dy.renew_cg()
    s = b.initial_state()
    for _ in range(3):
        s = s.add_input(dy.inputVector([0.1, 0.2, 0.3]))
    dy.renew_cg()
    with pytest.raises(StaleExpressionError):
        s.add_input(dy.inputVector([0.1, 0.2, 0.3]))


def test_unreplayable_patterns_fall_back():
    """A step whose nodes carry per-node data (dropout seeds) is built the normal way each time."""
    dy.renew_cg()
    g = dy.cg()
    x = dy.inputVector([1.0, 2.0])
    outs = [recipes.step(g, "drop", (x.i,), lambda: (dy.dropout(x, 0.5),)) for _ in range(3)]
    assert recipes._NO in g._recipes.values()
    assert len({o.i for (o,) in outs}) == 3 and all(g.datas[o.i] is not None for (o,) in outs)
