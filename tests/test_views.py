"""Nodes whose output is their inputs' memory (Op.view): a concatenation of blocks that
already lie end to end, a contiguous slice, a vector transpose. They run no kernel and no
backward, so every program must give the same values and gradients with views on and off,
including when several views alias one block inside one batch."""
import numpy as np
import pytest

import autobatch as dy
from autobatch.ops import OPS

STRATS = ("none", "depth", "agenda")
VIEW_OPS = [op for op in OPS.values() if op.has_view]


def test_view_ops_are_declared():
    assert {op.name for op in VIEW_OPS} >= {"concatenate", "pickrange", "transpose", "reshape"}


def _run(program, params, strategy, views):
    saved = {op: op.__dict__.get("has_view") for op in VIEW_OPS}
    try:
        if not views:
            for op in VIEW_OPS:
                op.has_view = False        # instance attribute shadows the class flag
        for p in params:
            p.zero_grad()
        dy.renew_cg(strategy)
        loss = program()
        value = loss.value()
        loss.backward()
        n_views = dy.stats()["view_nodes"]
        return value, [p.grad_as_array().copy() for p in params], n_views
    finally:
        for op, v in saved.items():
            if v is None:
                op.__dict__.pop("has_view", None)
            else:
                op.has_view = v


def _compare(program, params, strategies=STRATS):
    counts = {}
    for s in strategies:
        v0, g0, n0 = _run(program, params, s, views=False)
        v1, g1, n1 = _run(program, params, s, views=True)
        assert n0 == 0
        np.testing.assert_allclose(v1, v0, rtol=1e-12, atol=1e-12, err_msg=s)
        for a, b in zip(g1, g0):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=s)
        counts[s] = n1
    return counts


def _tree_fc(E, W, b, words):
    def rep(lo, hi):
        if hi - lo == 1:
            return dy.lookup(E, words[lo])
        mid = (lo + hi) // 2
        return dy.tanh(dy.affine_transform([b, W, dy.concatenate([rep(lo, mid), rep(mid, hi)])]))
    return rep(0, len(words))


def test_tree_levels_concatenate_without_copies(f64):
    pc = dy.ParameterCollection()
    E, W, b = pc.add_lookup_parameters((20, 4)), pc.add_parameters((4, 8)), pc.add_parameters((4,))
    rng = np.random.default_rng(0)
    trees = [list(rng.integers(0, 20, size=8)) for _ in range(5)]

    def program():
        return dy.esum([dy.sum_elems(_tree_fc(E, W, b, t)) for t in trees])

    counts = _compare(program, [E, W, b])
    # a complete tree level is one batch laid out in child order: every concatenation is a view
    assert counts["depth"] == counts["agenda"] == 5 * 7


@pytest.mark.parametrize("slices", [((0, 0), (0, 1), (1, 0), (1, 1)), ((0, 0), (1, 1), (0, 0))],
                         ids=["overlapping", "repeated"])
def test_overlapping_views_in_one_batch(slices, f64):
    """Slices of one block that overlap (rows [0, 2) and [1, 3) share row 1) or repeat, used in
    the same batch: their gradients must add up, not overwrite each other."""
    pc = dy.ParameterCollection()
    M = pc.add_parameters((3, 4))
    rng = np.random.default_rng(1)
    consts = [rng.normal(size=(2, 4)) for _ in slices]

    def program():
        xs = [dy.cmult(M, dy.inputTensor(np.full((3, 4), 1.0 + k))) for k in range(2)]
        terms = []
        for k, (j, lo) in enumerate(slices):
            v = dy.pickrange(xs[j], lo, lo + 2, 0)
            terms.append(dy.sum_elems(dy.cmult(v, dy.inputTensor(consts[k]))))
            terms.append(dy.sum_elems(dy.tanh(dy.pickrange(xs[j], 0, 2, 1))))   # not a view
        return dy.esum(terms)

    counts = _compare(program, [M])
    assert all(n >= len(slices) for n in counts.values())


def test_concatenation_and_its_piece_in_one_elementwise_batch(f64):
    """A view and the block it aliases, mixed in one flat elementwise batch."""
    pc = dy.ParameterCollection()
    A = pc.add_parameters((5,))
    rng = np.random.default_rng(2)
    c = [rng.normal(size=n) for n in (5, 10, 5)]

    def program():
        u = dy.tanh(A)
        v = dy.logistic(A)
        uv = dy.concatenate([u, v])
        parts = [dy.cmult(u, dy.inputVector(c[0])), dy.cmult(uv, dy.inputVector(c[1])),
                 dy.cmult(v, dy.inputVector(c[2]))]
        return dy.esum([dy.sum_elems(dy.square(p)) for p in parts])

    counts = _compare(program, [A])
    assert all(n == 1 for n in counts.values())



def test_repeated_plain_blocks_in_a_gather_while_views_exist(f64):
    """A graph with views, and a batch that gathers one plain (non-view) block twice: the
    scatter's check that no two blocks overlap must see the repeat although none of the
    gathered nodes is a view (and must not take the slow path's answer for granted)."""
    pc = dy.ParameterCollection()
    A, B = pc.add_parameters((4,)), pc.add_parameters((4,))

    def program():
        hs = [dy.tanh(A * (k + 1.0)) for k in range(3)]
        gs = [dy.logistic(B * (k + 1.0)) for k in range(3)]
        cat = dy.concatenate(hs[:2])                          # a view: hs[0], hs[1] lie in order
        # input 1 of the cmult batch: hs[2], hs[0], hs[2] -- out of order and repeated
        prods = [dy.cmult(gs[k], hs[j]) for k, j in enumerate((2, 0, 2))]
        return dy.esum([dy.sum_elems(dy.square(p)) for p in prods] + [dy.sum_elems(cat)])

    counts = _compare(program, [A, B])
    assert counts["agenda"] >= 1

def test_transpose_and_reshape_views(f64):
    pc = dy.ParameterCollection()
    W, V = pc.add_parameters((3, 4)), pc.add_parameters((4,))

    def program():
        terms = []
        for k in range(3):
            h = dy.tanh(V * (k + 1.0))
            row = dy.transpose(h)                          # (1, 4): same memory
            col = dy.reshape(h, (4, 1))                    # (4, 1): same memory
            terms.append(dy.sum_elems(dy.cmult(row, row)) + dy.sum_elems(W * col))
        return dy.esum(terms)

    counts = _compare(program, [W, V])
    assert all(n >= 6 for n in counts.values())


def test_view_of_a_parameter_is_computed():
    """A parameter lives outside the arena: slicing it runs the kernel."""
    pc = dy.ParameterCollection()
    P = pc.add_parameters((6,))
    dy.renew_cg()
    y = dy.pickrange(P, 1, 4)
    np.testing.assert_allclose(y.npvalue(), P.as_array()[1:4], rtol=1e-6)
    assert dy.stats()["view_nodes"] == 0


@pytest.mark.parametrize("strategy", STRATS)
def test_error_after_views_rolls_them_back(strategy, monkeypatch):
    """A kernel failing after some views were made: the views are undone with the batches
    (stats and offsets), and the graph computes correctly once the kernel works again."""
    pc = dy.ParameterCollection()
    A = pc.add_parameters((4,))
    dy.renew_cg(strategy)
    h = dy.tanh(A)
    s = dy.pickrange(dy.concatenate([h, h * 2.0]), 2, 6)
    y = dy.logistic(s)

    def broken(xp, xs, attr, data, out):
        raise RuntimeError("kernel exploded")

    with monkeypatch.context() as mp:
        mp.setattr(OPS["logistic"], "forward_into", broken)
        with pytest.raises(RuntimeError, match="kernel exploded"):
            y.value()
        st = dy.stats()
        assert st["forward_nodes"] == 0 and st["view_nodes"] == 0
    a = A.as_array()
    want = 1 / (1 + np.exp(-np.concatenate([np.tanh(a), 2 * np.tanh(a)])[2:6]))
    np.testing.assert_allclose(y.npvalue(), want, rtol=1e-5)
    assert dy.stats()["view_nodes"] == 2          # the concatenation and the slice


def test_overlapping_slices_of_one_block_in_one_batch_get_both_gradients():
    """Two pickranges of one long block that meet in one element, run as one batch: the
    gradient scatter adds both into that element (element indices: offsets share no divisor
    with the size)."""
    m = dy.ParameterCollection()
    p = m.add_parameters(2001)
    got = []
    for strategy in ("none", "agenda"):
        p.zero_grad()
        dy.renew_cg(autobatching=strategy)
        x = dy.tanh(dy.parameter(p))
        a, b = dy.pickrange(x, 1, 1001), dy.pickrange(x, 1000, 2000)
        loss = dy.sum_elems(dy.tanh(a)) + dy.sum_elems(dy.tanh(b))
        v = loss.value()
        loss.backward()
        got.append((v, p.grad_as_array().copy()))
    assert got[0][0] == pytest.approx(got[1][0], rel=1e-6)
    np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-6, atol=1e-7)
