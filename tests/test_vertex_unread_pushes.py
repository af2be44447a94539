"""The vertex engine's backward without a zeroed gradient arena (b5f6a6d) and without a
gradient pass for pushes nobody read (54c57cf), where its inputs come from the lazy graph:
the gradients of pulled Expressions must be those of the lazy graph (VertexFunction.unbatched)
whichever pushes are read (a pull read by unread pushes alone gets a zero gradient), with arenas that come back full of NaN (a fresh one is often
zeroed by the OS, which would hide a block read before anything wrote it)."""
import itertools

import numpy as np
import pytest

import autobatch as dy
from autobatch.vertex import engine

H = 3


def _model(x_in_leaf_push):
    pc = dy.ParameterCollection()
    W0, W1, U = pc.add_parameters((H, H)), pc.add_parameters((H, H)), pc.add_parameters((H, H))
    W, b = pc.add_parameters((H, 2 * H)), pc.add_parameters(H)

    @dy.vertex_function(max_children=2)
    def f(v):
        x = v.pull("x")
        if v.is_leaf:
            h = dy.tanh(x)
        else:
            hl, hr = v.gather(0), v.gather(1)
            h = dy.tanh(dy.affine_transform([b, W, dy.concatenate([hl, hr])])) + dy.cmult(x, hl)
        v.scatter(h)
        v.push("a", dy.sum_elems(dy.cmult(h, h)))
        # "b" alone reads x at leaves: with "b" unread, x's gradient there comes from h only
        v.push("b", dy.sum_elems(U * h) + dy.sum_elems(dy.cmult(v.pull("z"), h))
               + (dy.sum_elems(x) if x_in_leaf_push and v.is_leaf else 0))
    return pc, f


@pytest.mark.parametrize("reads, per_vertex, track, x_in_leaf_push",
                         list(itertools.product((("a",), ("b",), ("a", "b")), (True, False), (True, False),
                                                (True, False))))
def test_pulled_expressions_get_the_lazy_gradient(f64, poisoned, reads, per_vertex, track, x_in_leaf_push):
    pc, f = _model(x_in_leaf_push)
    W0, W1 = pc.parameters_list()[:2]
    params = list(pc.parameters_list())
    rng = np.random.default_rng(5)
    gs = [dy.InputGraph([[], [], [0, 1]]), dy.InputGraph([[], [], [], [0, 1], [3, 2]]), dy.InputGraph([[]])]
    N = sum(g.n for g in gs)
    X = rng.normal(size=(N, H))

    def run(vertex):
        for p in params:
            p.zero_grad()
        dy.renew_cg()
        # W0's gradient comes back through x, W1's through z (read by push "b" alone)
        xin, zin, o = [], [], 0
        for g in gs:
            for W, into in ((W0, xin), (W1, zin)):
                es = [dy.tanh(W * dy.inputVector(X[k])) for k in range(o, o + g.n)]
                into.append(es if per_vertex else dy.transpose(dy.concatenate_cols(es)))
            o += g.n
        if vertex:
            out = f(gs, x=xin, z=zin)
            loss = dy.esum([dy.sum_elems(out[r]) for r in reads])
        else:
            out = f.unbatched(gs, x=xin, z=zin)
            loss = dy.esum([e for r in reads for e in out[r]])
        v = loss.value()
        loss.backward()
        return v, [p.grad_as_array().copy() for p in params]

    engine.TRACK = track
    try:
        (va, ga), (vb, gb) = run(False), run(True)
    finally:
        engine.TRACK = True
    np.testing.assert_allclose(vb, va, rtol=1e-10)
    for p, a, b in zip(params, ga, gb):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12, err_msg=repr(p))
    assert np.any(ga[0]) and np.any(ga[1]) == ("b" in reads)   # through x; through z when "b" is read


@pytest.mark.parametrize("grow", (False, True))
def test_a_push_first_read_after_the_forward(f64, poisoned, grow):
    """The forward writes only the pushes read so far (the rest are zeros); one read after
    it is written then, into the node's value where it is now (grow: the lazy graph's buffer
    was reallocated by a later forward)."""
    pc, f = _model(False)
    gs = [dy.InputGraph([[], [], [0, 1]]), dy.InputGraph([[], [], [], [0, 1], [3, 2]])]
    rng = np.random.default_rng(7)
    N = sum(g.n for g in gs)
    X, Z = rng.normal(size=(N, H)), rng.normal(size=(N, H))

    def inputs():
        return dict(x=[dy.inputTensor(X[:3]), dy.inputTensor(X[3:])], z=[dy.inputTensor(Z[:3]), dy.inputTensor(Z[3:])])

    dy.renew_cg()
    want = np.array([e.value() for e in f.unbatched(gs, **inputs())["b"]])
    dy.renew_cg()
    out = f(gs, **inputs())
    out["a"].value()
    if grow:
        dy.tanh(dy.inputTensor(np.zeros(1 << 18))).value()
    np.testing.assert_allclose(out["b"].npvalue().reshape(-1), want, rtol=1e-12)
