"""Property test: for random input graphs (trees, chains, DAG-free forests in any vertex order)
and random vertex functions, the vertex engine gives the values and gradients of running F
vertex by vertex in the lazy graph (VertexFunction.unbatched)."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch.vertex import engine

H = 3
UNARY = [dy.tanh, dy.logistic, dy.square, lambda x: x * 0.5 - 1]
BINARY = [dy.cmult, lambda a, b: a + b, lambda a, b: a - b]


@st.composite
def forests(draw):
    """A few graphs, each a random forest given as a parent array (random order of vertices)."""
    max_children = draw(st.integers(1, 3))
    graphs = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 9))
        order = draw(st.permutations(range(n)))
        parents = [-1] * n
        kids = [0] * n
        for k in range(1, n):               # order[k]'s parent comes earlier in `order`
            cands = [order[j] for j in range(k) if kids[order[j]] < max_children]
            if cands and draw(st.booleans() if k > 1 else st.just(True)):
                p = draw(st.sampled_from(cands))
                parents[order[k]] = p
                kids[p] += 1
        graphs.append(parents)
    return max_children, graphs


programs = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=8)


def make_fn(pc, max_children, prog, branch, two_slots):
    A = [pc.add_parameters((H, H)) for _ in range(3)]
    C = pc.add_parameters((H, 2 * H))
    b = pc.add_parameters(H)
    E = pc.add_lookup_parameters((5, H))

    @dy.vertex_function(max_children=max_children, scatter_dims=None if branch else [(H,)] * (1 + two_slots))
    def f(v):
        x = dy.tanh(v.pull("x") + E[v.pull("w")])
        if branch and v.is_leaf:
            syms = [x]
        else:
            syms = [x]
            for k in range(max_children):
                got = v.gather(k)
                syms += list(got) if isinstance(got, tuple) else [got]
        for code, i, j in prog:
            a, c = syms[i % len(syms)], syms[j % len(syms)]
            if code == 0:
                syms.append(UNARY[i % len(UNARY)](a))
            elif code == 1:
                syms.append(BINARY[j % len(BINARY)](a, c))
            elif code == 2:
                syms.append(A[i % 3] * a)
            elif code == 3:
                syms.append(dy.affine_transform([b, A[j % 3], a, A[(j + 1) % 3], c]))
            elif code == 4:
                syms.append(dy.tanh(C * dy.concatenate([a, c])))
            elif code == 5:
                syms.append(dy.esum([a, c, x]))
            else:                           # a's gradient may be that of nothing at all
                syms.append(dy.nobackprop(A[j % 3] * a))
        h = dy.tanh(syms[-1])
        v.scatter(*([h, syms[len(syms) // 2]] if two_slots else [h]))
        v.push("y", dy.sum_elems(dy.cmult(h, syms[-2 % len(syms)])))
        v.push("h", h)

    return f


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(forests(), programs, st.booleans(), st.booleans(), st.integers(0, 2**31), st.booleans())
def test_vertex_equals_lazy(f64, poisoned, forest, prog, branch, two_slots, seed, track):
    max_children, parents = forest
    graphs = [dy.InputGraph.from_parents(p) for p in parents]
    rng = np.random.default_rng(seed)
    pc = dy.ParameterCollection()
    f = make_fn(pc, max_children, prog, branch, two_slots)
    x = [rng.normal(size=(g.n, H)) for g in graphs]
    w = [rng.integers(0, 5, g.n) for g in graphs]
    weights = rng.normal(size=(sum(g.n for g in graphs), H))
    params = list(pc.parameters_list()) + list(pc.lookup_parameters_list())

    def run(build):
        for p in params:
            p.zero_grad()
        dy.renew_cg()
        loss = build()
        v = loss.scalar_value()
        loss.backward()
        return v, [p.grad_as_array().copy() for p in params]

    def lazy():
        out = f.unbatched(graphs, x=x, w=w)
        return dy.esum([dy.esum([y, dy.dot_product(h, dy.inputVector(weights[k]))])
                        for k, (y, h) in enumerate(zip(out["y"], out["h"]))])

    def vertex():
        out = f(graphs, x=x, w=w)
        return dy.sum_elems(out["y"]) + dy.sum_elems(dy.cmult(out["h"], dy.inputTensor(weights)))

    engine.TRACK = track                    # False: the zeroed arena and plain adds
    try:
        (va, ga), (vb, gb) = run(lazy), run(vertex)
    finally:
        engine.TRACK = True
    np.testing.assert_allclose(vb, va, rtol=1e-10, atol=1e-10)
    for p, a, b in zip(params, ga, gb):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-10, err_msg=repr(p))
