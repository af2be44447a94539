"""The vertex tracer fuses act(product) as the lazy API does (ops/fused.py): the trace holds the
fused op where nothing else reads the product, not where it is read twice or pushed, and values
and gradients equal those of the unfused trace and of the lazy graph, on every phase (pre:
no gather; front: per frontier, deferred parameter gradients; post: only pushed)."""
import numpy as np
import pytest

import autobatch as dy

from test_vertex import _close, _run, _sum_pushed


def _model():
    pc = dy.ParameterCollection()
    W, U, b = pc.add_parameters((3, 3)), pc.add_parameters((3, 3)), pc.add_parameters(3)
    E = pc.add_lookup_parameters((5, 3))

    @dy.vertex_function(max_children=2, scatter_dims=[3])
    def f(v):
        x = E[v.pull("w")]
        a = dy.affine_transform([b, W, x])                   # read twice: stays a product
        pre = dy.logistic(dy.affine_transform([b, U, x]))    # pre phase: fused
        h = dy.tanh(a) + dy.rectify(U * v.gather(0))         # front phase, matmul_shared>rectify
        s = dy.cmult(h, pre) + a + dy.logistic(dy.affine_transform([b, W, v.gather(1)]))
        v.scatter(dy.tanh(dy.affine_transform([b, U, s])))   # front: the scattered state
        p = dy.affine_transform([b, W, s])
        v.push("p", p)                                       # pushed: tanh(p) must not fuse
        v.push("loss", dy.sum_elems(dy.tanh(p)) + dy.sum_elems(dy.exp(dy.affine_transform([b, U, s]))))
    return pc, f


def _ops(f):
    return sorted({t.src[s][1].name for t in f.traces.values() for s in range(len(t.src))
                   if t.src[s][0] == "op" and t.live[s]})


def _graphs(rng):
    gs = [dy.InputGraph([[], [], [0, 1], [2]]), dy.InputGraph.chain(3), dy.InputGraph([[]])]
    return gs, [rng.integers(0, 5, g.n) for g in gs]


@pytest.mark.parametrize("strategy", ["none", "agenda"])
def test_the_trace_fuses_what_nothing_else_reads(f64, strategy):
    runs = []
    for fuse in (True, False):
        dy.set_fusion(fuse)
        try:
            dy.reset_random_seed(2)
            pc, f = _model()
            gs, ws = _graphs(np.random.default_rng(3))
            got = _run(pc, lambda: dy.sum_elems(f(gs, w=ws)["loss"]) + dy.sum_elems(f(gs, w=ws)["p"]), strategy)
            names = _ops(f)
        finally:
            dy.set_fusion(True)
        runs.append((got, names))
        if fuse:
            assert {"affine>logistic", "matmul_shared>rectify", "affine>tanh", "affine>exp"} <= set(names)
            # the product read twice (a) and the pushed one (p) stay products
            assert "affine" in names and "tanh" in names
        else:
            assert not any(">" in n for n in names)
    (fused, _), (plain, _) = runs
    _close(fused, plain)
    dy.reset_random_seed(2)
    pc, f = _model()
    gs, ws = _graphs(np.random.default_rng(3))
    lazy = _run(pc, lambda: _sum_pushed(f.unbatched(gs, w=ws), "loss")
                + dy.esum([dy.sum_elems(x) for x in f.unbatched(gs, w=ws)["p"]]), strategy)
    _close(fused, lazy)


@pytest.mark.parametrize("strategy", ["none", "agenda"])
def test_the_trace_takes_a_bias_into_its_product(f64, strategy):
    """tanh(W * x + b) (and b + W * x) in F is the trace's affine>tanh, as the lazy API's +
    makes it: the sum was an add over the product, and the activation did not fuse. A product
    read twice, or added to a computed vector, stays a product and a sum."""
    def model(form):
        dy.reset_random_seed(4)
        pc = dy.ParameterCollection()
        W, U, b = pc.add_parameters((3, 6)), pc.add_parameters((3, 3)), pc.add_parameters(3)
        E = pc.add_lookup_parameters((5, 3))

        @dy.vertex_function(max_children=2, scatter_dims=[3])
        def f(v):
            x = dy.concatenate([v.gather(0), v.gather(1)])
            if form == "operators":
                h = dy.tanh(W * x + b) + dy.logistic(b + U * E[v.pull("w")])
            else:
                h = dy.tanh(dy.affine_transform([b, W, x])) + dy.logistic(dy.affine_transform([b, U, E[v.pull("w")]]))
            kept = U * h
            v.scatter(h)
            v.push("loss", dy.sum_elems(kept + b) + dy.sum_elems(kept) + dy.sum_elems(U * h + h))
        return pc, f
    runs = {}
    gs, ws = _graphs(np.random.default_rng(5))
    for form in ("operators", "affine_transform"):
        pc, f = model(form)
        runs[form] = _run(pc, lambda: dy.sum_elems(f(gs, w=ws)["loss"]), strategy)
        names = _ops(f)
        assert {"affine>tanh", "affine>logistic", "matmul_shared", "add"} <= set(names), (form, names)
        assert "affine" not in names
    _close(runs["operators"], runs["affine_transform"])
