"""An LSTM's input projections (b + W_x·x for every step of every sequence) run as one batch
laid out step by step (executor._by_reader): each step's batch then reads its projections as
a view of that block, not a gather, and adds its gradients into it in place. Sequences of
unequal lengths, both directions, dropout masks, several layers and a graph grown after a
forward must give the values and gradients of the unbatched strategy."""
import numpy as np
import pytest

import autobatch as dy

LENGTHS = (3, 5, 1, 4, 5, 2)


def _model(layers=1):
    dy.reset_random_seed(5)
    pc = dy.ParameterCollection()
    return pc, dy.VanillaLSTMBuilder(layers, 3, 4, pc), dy.VanillaLSTMBuilder(layers, 3, 4, pc), \
        pc.add_lookup_parameters((9, 3))


def _loss(m, strategy, dropout=0.0, grow=False):
    pc, fwd, bwd, E = m
    dy.renew_cg(autobatching=strategy)
    for b in (fwd, bwd):
        b.set_dropouts(dropout, dropout) if dropout else b.disable_dropout()
    losses = []
    for s, n in enumerate(LENGTHS):
        xs = [dy.lookup(E, (s + 2 * t) % 9) for t in range(n)]
        fs = fwd.initial_state().transduce(xs)
        bs = bwd.initial_state().transduce(xs[::-1])[::-1]
        losses += [dy.dot_product(f, b) for f, b in zip(fs, bs)]
    loss = dy.esum(losses)
    if grow:    # a forward, then more sequences: the next forward runs only the new nodes
        loss.value()
        s = fwd.initial_state()
        for t in range(4):
            s = s.add_input(dy.lookup(E, t))
        loss = loss + dy.sum_elems(s.output())
    return loss


def _grads(m, strategy, **kw):
    pc = m[0]
    for p in pc.parameters_list() + pc.lookup_parameters_list():
        p.zero_grad()
    dy.reset_random_seed(11)                # the same dropout masks under every strategy
    loss = _loss(m, strategy, **kw)
    v = loss.value()
    loss.backward()
    return v, [p.grad_as_array().copy() for p in pc.parameters_list() + pc.lookup_parameters_list()]


@pytest.mark.parametrize("strategy", ["agenda", "depth"])
@pytest.mark.parametrize("kw", [{}, {"dropout": 0.3}, {"grow": True}], ids=["plain", "dropout", "grow"])
@pytest.mark.parametrize("layers", [1, 2])
def test_values_and_gradients_match_the_unbatched_run(strategy, kw, layers):
    m = _model(layers)
    v, gs = _grads(m, strategy, **kw)
    v0, gs0 = _grads(m, "none", **kw)
    np.testing.assert_allclose(v, v0, rtol=1e-5)
    for g, g0 in zip(gs, gs0):
        np.testing.assert_allclose(g, g0, rtol=1e-4, atol=1e-6)


def _step_inputs(strategy):
    """For every batch of recurrent steps (matmul_add: the projection plus W_h·h), how its
    projections were read."""
    loss = _loss(_model(), strategy)
    loss.value()
    return [b.ins[0][0] for b in dy.cg().exe.batches if getattr(b, "op", None) is not None
            and b.op.name == "matmul_add"]


@pytest.mark.parametrize("strategy", ["agenda", "depth"])
def test_each_step_reads_its_projections_as_one_block(strategy):
    kinds = _step_inputs(strategy)
    assert len(kinds) >= 2 * (max(LENGTHS) - 1)
    assert set(kinds) == {"view"}


def test_the_projection_batch_is_in_step_order():
    loss = _loss(_model(), "agenda")
    loss.value()
    g = dy.cg()
    laid = [b for b in g.exe.batches if getattr(b, "op", None) is not None and b.op.name == "affine"
            and len(b.ids) == sum(LENGTHS)]
    assert len(laid) == 2                   # one per direction
    for b in laid:
        readers = [g.depths[i + 1] for i in b.ids]
        assert readers == sorted(readers)
        assert list(b.ids) != sorted(b.ids)     # (it was reordered: the test means something)
