"""The agenda scheduler's two implementations (vectorised for big forwards, plain
Python for small ones) must produce the same plan, and agenda must never launch more
batches than depth batching."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch import scheduler
from autobatch.runtime import Strategy

import numpy as np

from programs import build, chains, dags, make_params, programs, run, trees


def _graph(prog):
    P = make_params(0)
    dy.renew_cg("agenda")
    build(prog, P)
    return dy.cg()


def _plans(g):
    n = g.node_count()
    saved = scheduler._SMALL
    try:
        scheduler._SMALL = -1
        big = scheduler.schedule(Strategy.AGENDA, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig, g.uses)
        scheduler._SMALL = 1 << 30
        small = scheduler.schedule(Strategy.AGENDA, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig, g.uses)
    finally:
        scheduler._SMALL = saved
    depth = scheduler.schedule(Strategy.DEPTH, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig)
    return big, small, depth


def _valid(plan, g):
    """Every pending node exactly once, one signature per batch, inputs first."""
    seen = {}
    for k, batch in enumerate(plan):
        assert len({g.sigs[i] for i in batch}) == 1
        for i in batch:
            assert i not in seen
            seen[i] = k
    for i, k in seen.items():
        for a in g.args[i]:
            assert g.sigs[a] < 0 or seen[a] < k
    assert sorted(seen) == [i for i in range(g.node_count()) if g.sigs[i] >= 0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(chains(), trees(), dags()), min_size=1, max_size=6))
def test_small_and_vectorised_agenda_agree_and_beat_depth(prog):
    g = _graph(prog)
    big, small, depth = _plans(g)
    assert big == small
    assert len(big) <= len(depth)
    _valid(big, g)
    _valid(scheduler.schedule(Strategy.DYNET_AGENDA, 0, g.node_count(), g.sigs, g.depths, g.args,
                              g.heavy_of_sig), g)


def test_loss_heads_of_different_depths_share_one_batch():
    """Losses at every step of chains of different lengths: depth batching needs one
    loss batch per step; agenda defers them (as-late-as-possible level) into one."""
    pc = dy.ParameterCollection()
    W, b, V = pc.add_parameters((4, 4)), pc.add_parameters(4), pc.add_parameters((3, 4))
    for strategy in ("depth", "agenda"):
        dy.renew_cg(strategy)
        losses = []
        for length in (3, 5, 8):
            h = dy.inputVector([0.1, 0.2, 0.3, 0.4])
            for t in range(length):
                h = dy.tanh(dy.affine_transform([b, W, h]))
                losses.append(dy.pickneglogsoftmax(V * h, t % 3))
        dy.esum(losses).value()
        sizes = dy.stats()["signatures"]
        loss_batches = [v for k, v in sizes.items() if k.startswith("pickneglogsoftmax")]
        assert len(loss_batches) == 1
        n_batches = len(loss_batches[0])
        if strategy == "depth":
            assert n_batches == 8
        else:
            assert n_batches == 1 and loss_batches[0] == [16]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_dynet_rule_gives_the_same_values_and_gradients(prog):
    P = make_params(0)
    v1, g1, _ = run(prog, P, "agenda")
    v2, g2, _ = run(prog, P, "dynet-agenda")
    assert abs(v1 - v2) <= 1e-4 * max(1.0, abs(v1))
    for a, b in zip(g1, g2):
        assert np.allclose(a, b, rtol=1e-4, atol=1e-5)
