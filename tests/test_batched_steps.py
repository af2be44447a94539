"""A hand-batched RNN step (DyNet's minibatch: s.add_input(dy.lookup_batch(E, ids))) appends
every element's nodes in one generated loop (builders._batched_steps, recipes.many_of) once
the step's template is known: the graph must be node for node the one the per-element path
builds, and values and gradients those of each element stepped alone."""
import numpy as np
import pytest

import autobatch as dy
from autobatch import builders, recipes
from check_kit import graph_columns

COLUMNS = ("ops", "args", "attrs", "shapes", "sigs", "depths", "needs", "uses", "sig_op")
BUILDERS = [("VanillaLSTMBuilder", 1), ("VanillaLSTMBuilder", 2), ("GRUBuilder", 1), ("SimpleRNNBuilder", 2),
            ("CoupledLSTMBuilder", 1)]


def _model(kind, layers):
    dy.reset_random_seed(4)
    pc = dy.ParameterCollection()
    return pc, getattr(dy, kind)(layers, 3, 4, pc), pc.add_lookup_parameters((9, 3))


def _program(m, strategy, unbatched_start=False):
    pc, b, E = m
    dy.renew_cg(autobatching=strategy)
    s = b.initial_state()
    if unbatched_start:                 # an unbatched state every element shares, then batches
        s = s.add_input(E[8])
    outs = []
    for t in range(4):
        s = s.add_input(dy.lookup_batch(E, [(t + k) % 9 for k in range(5)]))
        outs.append(s.output())
    return dy.sum_batches(dy.esum([dy.sum_elems(o) for o in outs]))


def _run(m, strategy, bulk, **kw):
    pc = m[0]
    for p in pc.parameters_list() + pc.lookup_parameters_list():
        p.zero_grad()
    calls = []
    orig = recipes.many_of

    def counting(*a):
        calls.append(1)
        return orig(*a)

    saved = builders._Builder._batched_steps
    recipes.many_of = counting
    if not bulk:
        builders._Builder._batched_steps = lambda *a: None
    try:
        loss = _program(m, strategy, **kw)
        cols = graph_columns(dy.cg(), COLUMNS)
        v = loss.value()
        loss.backward()
    finally:
        recipes.many_of = orig
        builders._Builder._batched_steps = saved
    return cols, v, [p.grad_as_array().copy() for p in pc.parameters_list() + pc.lookup_parameters_list()], calls


@pytest.mark.parametrize("kind,layers", BUILDERS)
@pytest.mark.parametrize("unbatched_start", [False, True])
def test_the_loop_builds_the_graph_of_the_per_element_path(kind, layers, unbatched_start):
    m = _model(kind, layers)
    cols, v, gs, calls = _run(m, "agenda", True, unbatched_start=unbatched_start)
    cols0, v0, gs0, calls0 = _run(m, "agenda", False, unbatched_start=unbatched_start)
    assert calls and not calls0          # (the loop ran, and only where asked)
    assert cols == cols0
    np.testing.assert_allclose(v, v0, rtol=1e-6)
    for g, g0 in zip(gs, gs0):
        np.testing.assert_allclose(g, g0, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("strategy", ["agenda", "depth", "none"])
def test_each_element_is_the_element_stepped_alone(strategy):
    m = _model("VanillaLSTMBuilder", 2)
    pc, b, E = m
    _, v, gs, calls = _run(m, strategy, True)
    assert calls
    for p in pc.parameters_list() + pc.lookup_parameters_list():
        p.zero_grad()
    dy.renew_cg(autobatching=strategy)
    losses = []
    for k in range(5):
        s = b.initial_state()
        for t in range(4):
            s = s.add_input(E[(t + k) % 9])
            losses.append(dy.sum_elems(s.output()))
    loss = dy.esum(losses)
    np.testing.assert_allclose(v, loss.value(), rtol=1e-5)
    loss.backward()
    for g, p in zip(gs, pc.parameters_list() + pc.lookup_parameters_list()):
        np.testing.assert_allclose(g, p.grad_as_array(), rtol=1e-4, atol=1e-6)


def test_elements_of_other_shapes_or_graphs_take_the_per_element_path():
    pc, b, E = _model("VanillaLSTMBuilder", 1)
    dy.renew_cg()
    s = b.initial_state().add_input(dy.lookup_batch(E, [1, 2]))
    s = s.add_input(dy.lookup_batch(E, [3, 4]))          # the template is known from here
    bad = dy.concatenate_to_batch([E[5], dy.inputVector([1.0, 2.0, 3.0, 4.0])[:3]])
    with pytest.raises(dy.GraphError):
        s.add_input(dy.concatenate_to_batch([E[5], dy.inputVector([1.0, 2.0])]))   # (2,): refused by name
    s2 = s.add_input(bad)               # shapes alike, built differently: still right
    np.testing.assert_allclose(dy.pick_batch_elem(s2.output(), 1).npvalue(),
                               b.initial_state().add_input(E[2]).add_input(E[4]).add_input(
                                   dy.inputVector([1.0, 2.0, 3.0])).output().npvalue(), rtol=1e-5)
