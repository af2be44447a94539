"""The vertex-function front end: equivalence with the lazy graph (values and gradients),
InputGraph validation, error messages, trace reuse, and the engine's optimisations."""
import numpy as np
import pytest

import autobatch as dy
from autobatch.ops.fused import FUSED
from autobatch.vertex import engine, fuse, lazygrad

from conftest import to_np


def _params(pc):
    return list(pc.parameters_list()) + list(pc.lookup_parameters_list())


def _run(pc, build, strategy="agenda"):
    """(loss value, [grad per parameter]) of build() in a fresh graph."""
    for p in _params(pc):
        p.zero_grad()
    dy.renew_cg(autobatching=strategy)
    loss = build()
    v = loss.scalar_value()
    loss.backward()
    return v, [to_np(p.grad).copy() for p in _params(pc)]


def _close(a, b, tol=1e-9):
    va, ga = a
    vb, gb = b
    np.testing.assert_allclose(va, vb, rtol=tol, atol=tol)
    for x, y in zip(ga, gb):
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def _sum_pushed(lazy_out, name):
    return dy.esum([dy.sum_elems(x) for x in lazy_out[name] if x is not None])


# ---------------------------------------------------------------- models
class TreeLSTM:
    """The bench's DyNet-style Tree-LSTM (separate leaf and internal cells), as the bench
    declares it: lazy model bench/tasks/treelstm.py, vertex function bench/vertex_tasks.py."""

    def __init__(self, H=4, V=7, L=3):
        from bench.tasks.treelstm import Model
        from bench.vertex_tasks import TreeLSTM as VertexTreeLSTM
        self.pc = dy.ParameterCollection()
        meta = {"n_words": V, "n_labels": L}
        model = Model(dy, self.pc, meta, H)
        self.Wout, self.bout = model.W_out, model.b_out
        self.cell = VertexTreeLSTM(dy, model, meta).cell


def _random_tree(rng, n_leaves):
    """Child lists of a random binary tree, vertices in a shuffled (non-topological) order."""
    nodes = [[] for _ in range(n_leaves)]
    pool = list(range(n_leaves))
    while len(pool) > 1:
        a, b = rng.choice(len(pool), 2, replace=False)
        nodes.append([pool[a], pool[b]])
        pool = [p for k, p in enumerate(pool) if k not in (a, b)] + [len(nodes) - 1]
    perm = rng.permutation(len(nodes))
    inv = np.argsort(perm)
    return [[int(inv[c]) for c in nodes[perm[v]]] for v in range(len(nodes))]


def _tree_batch(rng, k=4):
    gs = [dy.InputGraph(_random_tree(rng, int(rng.integers(1, 7)))) for _ in range(k)]
    words = [rng.integers(0, 7, g.n) for g in gs]
    labels = [rng.integers(0, 3, g.n) for g in gs]
    return gs, words, labels


# ---------------------------------------------------------------- equivalence
@pytest.mark.parametrize("strategy", ["none", "agenda"])
def test_treelstm_matches_lazy(f64, strategy, backend):
    m = TreeLSTM()
    gs, words, labels = _tree_batch(np.random.default_rng(0))
    lazy = _run(m.pc, lambda: _sum_pushed(m.cell.unbatched(gs, word=words, label=labels), "loss"), strategy)
    vert = _run(m.pc, lambda: dy.sum_elems(m.cell(gs, word=words, label=labels)["loss"]), strategy)
    _close(lazy, vert)
    assert m.cell.n_traced == 2                      # leaf and internal


def test_pushed_values_per_vertex(f64):
    m = TreeLSTM()
    gs, words, labels = _tree_batch(np.random.default_rng(1))
    dy.renew_cg()
    ref = m.cell.unbatched(gs, word=words, label=labels)["h"]
    out = m.cell(gs, word=words, label=labels)
    got = out["h"].npvalue()
    assert got.shape == (sum(g.n for g in gs), 4)
    np.testing.assert_allclose(got, np.stack([r.npvalue() for r in ref]), rtol=1e-12)
    np.testing.assert_allclose(out.vertex("h", 1, 0).npvalue(), got[gs[0].n])
    assert out.graph("h", 1).dim()[0] == (gs[1].n, 4)


def test_outputs_build_their_nodes_when_read(f64):
    m = TreeLSTM()
    gs, words, labels = _tree_batch(np.random.default_rng(1))
    dy.renew_cg()
    out = m.cell(gs, word=words, label=labels)
    n0 = len(dy.cg().ops)
    loss = out["loss"]
    assert len(dy.cg().ops) == n0 + 2        # pickrange + reshape of "loss" only
    assert out["loss"] is loss and len(dy.cg().ops) == n0 + 2
    h = out["h"].npvalue()                    # read after the call ran: the same values
    np.testing.assert_allclose(h[:, 0], [v.npvalue()[0] for v in m.cell.unbatched(gs, word=words, label=labels)["h"]],
                               rtol=1e-12)
    assert "h" in out and sorted(out.keys()) == ["h", "loss"]
    with pytest.raises(KeyError, match="pushed: \\['h', 'loss'\\]"):
        out["c"]
    out = m.cell(gs, word=words, label=labels)
    dy.renew_cg()
    with pytest.raises(dy.StaleExpressionError, match="renewed"):
        out["h"]                              # not built before the graph was renewed


def test_trace_reused_and_renewed_on_shape_change(f64):
    m = TreeLSTM()
    rng = np.random.default_rng(2)
    for _ in range(3):
        gs, words, labels = _tree_batch(rng)
        dy.renew_cg()
        dy.sum_elems(m.cell(gs, word=words, label=labels)["loss"]).value()
    assert m.cell.n_traced == 2
    m.Wout.data = np.zeros((5, 4))                 # a parameter changed shape: trace again
    m.Wout.grad = np.zeros((5, 4))
    m.bout.data = np.zeros(5)
    m.bout.grad = np.zeros(5)
    dy.renew_cg()
    dy.sum_elems(m.cell(gs, word=words, label=labels)["loss"]).value()
    assert m.cell.n_traced == 4


def test_missing_children_gather_zeros_and_lazy_mix(f64):
    """One trace for every arity (F never looks at it): children beyond a vertex's arity
    gather zeros. Pulls come from lazy-graph Expressions, pushes go on in the lazy graph."""
    pc = dy.ParameterCollection()
    A, B, b, Wx = pc.add_parameters((3, 3)), pc.add_parameters((3, 3)), pc.add_parameters(3), pc.add_parameters((3, 2))
    R = pc.add_parameters((2, 3))

    @dy.vertex_function(max_children=3, scatter_dims=[3])
    def f(v):
        x = v.pull("x")
        h = dy.tanh(A * v.gather(0) + B * dy.esum([v.gather(1), v.gather(2)]) + b + x)
        v.scatter(h)
        v.push("h", dy.cmult(h, h))

    rng = np.random.default_rng(3)
    gs = [dy.InputGraph.from_parents([3, 3, 3, -1]), dy.InputGraph([[], [0], [1, 0]]), dy.InputGraph.chain(4)]
    feats = [rng.normal(size=(g.n, 2)) for g in gs]

    def build(fn):
        xs = [[Wx * dy.inputVector(r) for r in fx] for fx in feats]   # lazy Expressions, one per vertex
        hs = fn(gs, x=xs)
        return hs

    lazy = _run(pc, lambda: dy.esum([dy.sum_elems(R * h) for h in build(f.unbatched)["h"]]))
    vert = _run(pc, lambda: dy.sum_elems(R * dy.transpose(build(f)["h"])))
    _close(lazy, vert)
    assert f.n_traced == 1


def test_kind_branching_and_float_pulls(f64):
    pc = dy.ParameterCollection()
    W, U = pc.add_parameters((2, 2)), pc.add_parameters((2, 2))

    @dy.vertex_function(max_children=1)
    def f(v):
        x = v.pull("x")
        h = W * x if v.is_leaf else U * v.gather(0) + x
        v.scatter(h)
        if v.kind == 1:
            v.push("y", dy.sum_elems(dy.square(h)))

    gs = [dy.InputGraph.chain(3), dy.InputGraph.chain(1)]
    x = np.arange(8.0).reshape(4, 2) / 7
    kind = [0, 0, 1, 1]
    lazy = _run(pc, lambda: _sum_pushed(f.unbatched(gs, kind=kind, x=x), "y"))
    vert = _run(pc, lambda: dy.sum_elems(f(gs, kind=kind, x=x)["y"]))
    _close(lazy, vert)


def test_shared_children_dag(f64):
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 2))

    @dy.vertex_function(max_children=2)
    def f(v):
        h = dy.tanh(v.pull("x")) if v.is_leaf else dy.tanh(W * dy.cmult(v.gather(0), v.gather(1)))
        v.scatter(h)
        v.push("y", dy.sum_elems(h))

    g = dy.InputGraph([[], [0, 0], [1, 0], [2, 1]])    # vertex 0 has three parents
    x = np.array([[0.3, -0.2], [0, 0], [0, 0], [0, 0]])
    _close(_run(pc, lambda: _sum_pushed(f.unbatched([g], x=x), "y")),
           _run(pc, lambda: dy.sum_elems(f([g], x=x)["y"])))


def test_shared_children_within_one_frontier(f64):
    """Parents that run together and read the same child in the same slot: backward adds
    their gradients into that child's row as repeated rows of one scatter."""
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 2))
    E = pc.add_lookup_parameters((3, 2))

    @dy.vertex_function(max_children=2)
    def f(v):
        h = dy.tanh(v.pull("x") + dy.lookup(E, 1)) if v.is_leaf else \
            dy.tanh(W * dy.cmult(v.gather(0), v.gather(1)) + dy.lookup(E, 2))
        v.scatter(h)
        v.push("y", dy.sum_elems(h))

    # vertices 2, 3 and 4 are one frontier, each with children (0, 1) or (1, 0)
    g = dy.InputGraph([[], [], [0, 1], [0, 1], [1, 0], [2, 3], [5, 4]])
    x = np.array([[0.3, -0.2], [0.5, 0.1]] + [[0, 0]] * 5)
    xs = [x, x[:, ::-1]]
    _close(_run(pc, lambda: _sum_pushed(f.unbatched([g, g], x=xs), "y")),
           _run(pc, lambda: dy.sum_elems(f([g, g], x=xs)["y"])))


# ops whose backward the vertex engine splits (input grads per frontier, parameter grads once)
_SPLIT = {   # name -> (input shapes of one node, shared inputs given without the batch axis)
    "matmul_shared": [(5, 3), (3,)],
    "affine": [(5,), (5, 3), (3,), (5, 2), (2,)],
    "matmul_add": [(5,), (5, 3), (3,), (5, 2), (2,)],
}
# an activation fused into one of them (ops/fused.py): the split parts take the product's
# gradient, which Op.grad_prologue makes of the output's
_SPLIT.update({op.name: _SPLIT[op.base.name] for op in FUSED.values() if op.base.name in _SPLIT})


def _product_grad(op, y, gy):
    return gy if op.grad_prologue is None else op.grad_prologue(np, y, gy)


def test_every_split_backward_is_tested():
    from autobatch.ops import OPS, Op
    assert {n for n, op in OPS.items() if type(op).input_grads is not Op.input_grads} == set(_SPLIT)


@pytest.mark.parametrize("name", sorted(_SPLIT))
def test_split_backward_equals_backward(name):
    """input_grads (per frontier) and param_grads (over the stacked rows of two frontiers)
    give what backward gives batch by batch, summed for the shared inputs."""
    from autobatch.ops import OPS, ProductGrad
    op, rng = OPS[name], np.random.default_rng(7)
    shared = op.shared_of(len(_SPLIT[name]))
    parts = [(0, 4), (4, 7)]                  # two frontiers of 4 and 3 rows
    xs = [rng.normal(size=sh) if j in shared else rng.normal(size=(7,) + sh) for j, sh in enumerate(_SPLIT[name])]
    y = op.forward(np, xs, None, None)
    gy = rng.normal(size=y.shape)
    needs = [True] * len(xs)
    want = [np.zeros_like(x) for x in xs]
    got = [np.zeros_like(x) for x in xs]
    for r0, r1 in parts:
        sub = [x if j in shared else x[r0:r1] for j, x in enumerate(xs)]
        for j, g in enumerate(op.backward(np, sub, y[r0:r1], gy[r0:r1], None, None)):
            g = g.dense() if isinstance(g, ProductGrad) else g
            if j in shared:
                want[j] += g
            else:
                want[j][r0:r1] += g
        for j, g in enumerate(op.input_grads(np, sub, _product_grad(op, y[r0:r1], gy[r0:r1]), None, needs)):
            assert (g is None) == (j in shared)
            if g is not None:
                got[j][r0:r1] += g
    for j, g in enumerate(op.param_grads(np, xs, _product_grad(op, y, gy), None, needs)):
        assert (g is None) != (j in shared)
        if g is not None:
            got[j] += g
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# ops that write input gradients in place (Op.grad_into): per-node input shapes, params
_INTO = {
    "tanh": [(3,)], "logistic": [(3,)], "square": [(3,)], "cmult": [(3,), (3,)],
    **_SPLIT,
}


def test_every_grad_into_is_tested():
    from autobatch.ops import OPS, Op
    assert {n for n, op in OPS.items() if type(op).grad_into is not Op.grad_into} <= set(_INTO)
    assert {n for n, op in OPS.items() if type(op).grad_into_inputs is not Op.grad_into_inputs} == set(_INTO)


@pytest.mark.parametrize("name", sorted(_INTO))
def test_grad_into_equals_backward(name):
    """grad_into writes what backward returns, for each input grad_into_inputs names; the
    others are the shared ones (param_grads' part)."""
    from autobatch.ops import OPS
    op, rng = OPS[name], np.random.default_rng(3)
    shapes = _INTO[name]
    shared = op.shared_of(len(shapes))
    into = op.grad_into_inputs(shapes, [j in shared for j in range(len(shapes))])
    assert into == set(range(len(shapes))) - set(shared)
    xs = [rng.normal(size=sh) if j in shared else rng.normal(size=(4,) + sh) for j, sh in enumerate(shapes)]
    y = op.forward(np, xs, None, None)
    gy = rng.normal(size=y.shape)
    want = op.backward(np, xs, y, gy, None, None)
    for j in into:
        out = np.full_like(xs[j], np.nan)
        op.grad_into(np, xs, y, _product_grad(op, y, gy), None, j, out)
        np.testing.assert_allclose(out, want[j], rtol=1e-12)
    # a parameter among the stacked inputs (or a matrix x): backward's path, not grad_into's
    assert op.grad_into_inputs(shapes, [True] * len(shapes)) is None


@pytest.mark.parametrize("opt", ["fuse", "lazygrad", "track"])
def test_optimisations_do_not_change_results(f64, opt):
    m = TreeLSTM()
    gs, words, labels = _tree_batch(np.random.default_rng(4))

    def build():
        return dy.sum_elems(m.cell(gs, word=words, label=labels)["loss"])
    on = _run(m.pc, build)
    mod, flag = {"fuse": (fuse, "ENABLED"), "lazygrad": (lazygrad, "ENABLED"), "track": (engine, "TRACK")}[opt]
    setattr(mod, flag, False)
    try:
        off = _run(m.pc, build)
    finally:
        setattr(mod, flag, True)
    _close(on, off, 1e-12)


def test_float32_close_to_lazy():
    m = TreeLSTM(H=8)
    gs, words, labels = _tree_batch(np.random.default_rng(5), k=6)
    _close(_run(m.pc, lambda: _sum_pushed(m.cell.unbatched(gs, word=words, label=labels), "loss")),
           _run(m.pc, lambda: dy.sum_elems(m.cell(gs, word=words, label=labels)["loss"])), 1e-4)


def test_frontier_batching_stats():
    m = TreeLSTM()
    gs = [dy.InputGraph(_random_tree(np.random.default_rng(k), 5)) for k in range(8)]
    words = [np.zeros(g.n, dtype=int) for g in gs]
    dy.renew_cg()
    dy.sum_elems(m.cell(gs, word=words, label=words)["loss"]).value()
    st = m.cell.last_run.stats
    depth = max(int(g.level.max()) for g in gs) + 1
    assert st["vertices"] == sum(g.n for g in gs)
    assert st["frontiers"] <= 2 * depth               # one per (level, kind), all graphs together


# ---------------------------------------------------------------- InputGraph
def test_input_graph_levels_and_parents():
    g = dy.InputGraph([[1, 2], [], [3], []])
    assert g.level.tolist() == [2, 0, 1, 0]
    assert g.children(0) == [1, 2]
    p = dy.InputGraph.from_parents([-1, 0, 0, 2])
    assert p.children(0) == [1, 2] and p.children(2) == [3]
    assert dy.InputGraph.chain(4).level.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("kids, shared", [([[], [], [0, 1], [], [2, 3]], False), ([[], [0, 0], [1], [0, 2, 1]], True),
                                          ([[]], False), ([[], [], []], False)])
def test_input_graph_fast_path_equals_general_path(kids, shared):
    """Plain ints listed children first take the one-pass path; numpy ints, and the same graph
    with its vertices reversed (children after parents), take the checked general path."""
    fast = dy.InputGraph(kids)
    slow = dy.InputGraph([[np.int64(u) for u in c] for c in kids])
    n = len(kids)
    rev = dy.InputGraph([[n - 1 - u for u in kids[n - 1 - v]] for v in range(n)])
    for g in (fast, slow, rev):
        assert g.shared_children == shared and g.child.shape == (n, max([len(c) for c in kids] + [1]))
    for a in ("child", "level", "arity"):
        np.testing.assert_array_equal(getattr(slow, a), getattr(fast, a))
    np.testing.assert_array_equal(rev.level[::-1], fast.level)
    np.testing.assert_array_equal(rev.arity[::-1], fast.arity)


@pytest.mark.parametrize("kids, msg", [
    ([[1], [0]], "cycle"),
    ([[1], [2], [0]], "cycle"),
    ([[0]], "own child"),
    ([[], [5]], "out of range"),
    ([[], [-1]], "out of range"),
    ([[], [1.5]], "not an integer"),
    ([[], [2 ** 70]], "out of range"),
    ([], "at least one vertex"),
    (5, "one list of child indices"),
    ([1, 2], "one list of child indices"),
])
def test_input_graph_errors(kids, msg):
    with pytest.raises(dy.GraphError, match=msg):
        dy.InputGraph(kids)


def test_input_graph_takes_any_collections():
    """Tuples, ranges, iterators (no length) and a generator of them: the graph of the lists."""
    want = dy.InputGraph([[], [], [0, 1], [2]])
    for kids in ([(), (), (0, 1), (2,)], [range(0), range(0), range(2), range(2, 3)],
                 [iter(c) for c in ([], [], [0, 1], [2])], (c for c in ([], [], [0, 1], [2]))):
        g = dy.InputGraph(kids)
        for a in ("child", "level", "arity"):
            np.testing.assert_array_equal(getattr(g, a), getattr(want, a))


def test_from_parents_errors():
    with pytest.raises(dy.GraphError, match="out of range"):
        dy.InputGraph.from_parents([-1, 7])
    with pytest.raises(dy.GraphError, match="cycle"):
        dy.InputGraph.from_parents([1, 0])


# ---------------------------------------------------------------- errors
def _leafy():
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((5, 2))

    @dy.vertex_function(max_children=1)
    def f(v):
        h = E[v.pull("w")] if v.is_leaf else dy.tanh(v.gather(0))
        v.scatter(h)
        v.push("h", h)
    return f


def test_arity_above_max_children():
    with pytest.raises(dy.GraphError, match="more than max_children=1"):
        _leafy()([dy.InputGraph([[], [], [0, 1]])], w=[0, 0, 0])


def test_missing_and_bad_inputs():
    f = _leafy()
    g = dy.InputGraph.chain(3)
    with pytest.raises(dy.GraphError, match=r"v.pull\('w'\) but the call passed no w"):
        f([g], x=[0, 1, 2])
    with pytest.raises(dy.GraphError, match="2 values for 3 vertices"):
        f([g], w=[0, 1])
    with pytest.raises(dy.GraphError, match="w=9 out of range"):
        f([g], w=[9, 0, 0])
    with pytest.raises(dy.GraphError, match="not a dy.InputGraph"):
        f([[[], [0]]], w=[0, 0])


def test_gather_shapes_unknown():
    @dy.vertex_function(max_children=1)
    def f(v):
        h = dy.tanh(v.gather(0))
        v.scatter(h)
        v.push("h", h)
    with pytest.raises(dy.GraphError, match="scatter_dims"):
        f([dy.InputGraph.chain(2)])


def test_scatter_shape_mismatch_and_no_push():
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 2))

    @dy.vertex_function(max_children=1)
    def f(v):
        h = v.pull("x") if v.is_leaf else W * v.gather(0)
        v.scatter(h)
        v.push("h", h)
    with pytest.raises(dy.GraphError, match="same shapes"):
        f([dy.InputGraph.chain(2)], x=np.ones((2, 2)))

    @dy.vertex_function(max_children=0)
    def g(v):
        v.pull("x")
    with pytest.raises(dy.GraphError, match="pushes nothing"):
        g([dy.InputGraph([[]])], x=np.ones((1, 2)))


def test_lazy_expression_used_directly_inside_f():
    dy.renew_cg()
    outside = dy.inputVector([1.0, 2.0])

    @dy.vertex_function(max_children=0)
    def f(v):
        v.push("y", dy.tanh(outside))
    with pytest.raises(dy.GraphError, match="pull"):
        f([dy.InputGraph([[]])])


def test_symbol_has_no_value_inside_f():
    @dy.vertex_function(max_children=0)
    def f(v):
        v.pull("x").value()
    with pytest.raises(dy.GraphError, match="no value while F is traced"):
        f([dy.InputGraph([[]])], x=np.ones((1, 2)))


def test_shape_errors_name_the_op():
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 5))

    @dy.vertex_function(max_children=0)
    def f(v):
        v.push("y", W * v.pull("x"))
    with pytest.raises(dy.GraphError, match="matmul"):
        f([dy.InputGraph([[]])], x=np.ones((1, 2)))


# ---------------------------------------------------------------- training (examples/treelstm_vertex.py)
def test_treelstm_vertex_example_trains():
    import importlib
    import os
    import sys
    ex = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    sys.path.insert(0, ex)
    try:
        mod = importlib.import_module("treelstm_vertex")
        history, majority = mod.main(["--epochs", "3", "--n-train", "200", "--n-dev", "60", "--hidden", "16"])
    finally:
        sys.path.remove(ex)
    losses = [h[0] for h in history]
    assert losses[-1] < 0.85 * losses[0], losses
    assert all(np.isfinite(losses))


@pytest.mark.parametrize("task", ["treelstm", "treefc", "rnnlm", "bilstm", "bilstm_char"])
def test_bench_vertex_versions_match_their_lazy_models(f64, task):
    """Every bench task's vertex version computes its lazy model's loss and gradients
    (bilstm_char mixes four vertex calls with lazy select_rows/concatenate in between)."""
    from bench import tasks, vertex_tasks
    t = tasks.get(task)
    data, meta = t.data(6, seed=3)
    pc = dy.ParameterCollection()
    model = t.Model(dy, pc, meta, 8)
    assert task in vertex_tasks.NAMES
    assert vertex_tasks.check_vs_lazy(dy, task, model, pc, meta, data) < 1e-9


def test_even_child_rows_become_slices():
    """Children rows that step evenly upwards are read as a strided view; anything else
    (repeats of the zero row, descending, uneven) is gathered."""
    from autobatch.vertex.engine import _progression
    assert _progression(np.array([3])) == slice(3, 4)
    assert _progression(np.array([0, 2, 4, 6])) == slice(0, 7, 2)
    assert _progression(np.array([5, 6, 7])) == slice(5, 8, 1)
    for idx in ([], [4, 4, 4], [6, 4, 2], [0, 2, 5], [0, 2, 4, 7]):
        assert _progression(np.array(idx, dtype=np.int64)) is None


@pytest.mark.parametrize("extra", [False, True])
def test_children_side_by_side_are_read_in_place(f64, extra):
    """Complete trees in level order (Tree-FC): the concat of the two gathered children is
    a view of the scatter state, forward and backward; same values and gradients as the
    lazy graph and as the plain path, also when a gathered value has a second consumer
    (extra) and when a random tree in the batch breaks the side-by-side order (as trees of
    different sizes do: a kind's rows must be side by side over all its frontiers)."""
    from bench.vertex_tasks import _complete
    from autobatch.vertex import engine
    H = 3
    pc = dy.ParameterCollection()
    W, b, E = pc.add_parameters((H, 2 * H)), pc.add_parameters(H), pc.add_lookup_parameters((5, H))
    U = pc.add_parameters((H, H))

    @dy.vertex_function(max_children=2)
    def f(v):
        if v.is_leaf:
            h = E[v.pull("w")]
        else:
            hl, hr = v.gather(0), v.gather(1)
            h = dy.tanh(dy.affine_transform([b, W, dy.concatenate([hl, hr])]))
            if extra:
                h = h + U * dy.cmult(hl, hr)
        v.scatter(h)
        v.push("y", dy.sum_elems(dy.cmult(h, h)))

    rng = np.random.default_rng(7)
    for trees in ([_complete(4)[0]] * 3,
                  [_complete(4)[0], _random_tree(rng, 5)]):
        gs = [dy.InputGraph(k) for k in trees]
        w = [rng.integers(0, 5, g.n) for g in gs]

        def vertex():
            return dy.sum_elems(f(gs, w=w)["y"])

        def lazy():
            return dy.esum(f.unbatched(gs, w=w)["y"])
        got = _run(pc, vertex)
        side = any(K.sbs for K in f.last_run.kinds)
        want = _run(pc, lazy)
        engine.TRACK = False
        try:
            plain = _run(pc, vertex)
        finally:
            engine.TRACK = True
        _close(got, want)
        _close(got, plain)
        assert side == (len(trees) == 3)


def test_gradients_written_in_place(f64):
    """Op.grad_into: each op's input gradient written into a block nothing wrote yet and
    added to one that holds a value, in the pre phase (leaves) and per frontier, for a
    matmul_add's stacked c too; same values and gradients as the lazy graph and the plain
    path (TRACK off runs the ops' own backward)."""
    H = 3
    pc = dy.ParameterCollection()
    U, W, E = pc.add_parameters((H, H)), pc.add_parameters((H, H)), pc.add_lookup_parameters((5, H))

    @dy.vertex_function(max_children=2)
    def f(v):
        if v.is_leaf:
            x = E[v.pull("w")]
            c = U * x
            a = dy.affine_transform([c, W, x])     # c only here: its gradient is assigned
            q, p = dy.tanh(a), dy.logistic(a)      # backward: logistic assigns, tanh adds
            h = dy.cmult(p, q)
        else:
            g = dy.cmult(v.gather(0), v.gather(1) + 1)
            c = U * g
            a = dy.affine_transform([c, W, g])
            p, q = dy.logistic(a), dy.tanh(a)      # tanh assigns, logistic adds
            h = dy.cmult(p, q) + dy.square(c)      # square assigns c's gradient, matmul_add adds
        v.scatter(h)
        v.push("y", dy.sum_elems(dy.cmult(h, h)))

    rng = np.random.default_rng(11)
    gs = [dy.InputGraph(_random_tree(rng, n)) for n in (1, 4, 6)]
    w = [rng.integers(0, 5, g.n) for g in gs]
    got = _run(pc, lambda: dy.sum_elems(f(gs, w=w)["y"]))
    names = {f.last_run.traces[k].src[s][1].name for k, K in enumerate(f.last_run.kinds)
             for s, i in K.t.instr.items() if i[-1] is not None}
    assert {"tanh", "logistic", "cmult", "square", "matmul_add", "matmul_shared"} <= names
    want = _run(pc, lambda: dy.esum(f.unbatched(gs, w=w)["y"]))
    engine.TRACK = False
    try:
        plain = _run(pc, lambda: dy.sum_elems(f(gs, w=w)["y"]))
    finally:
        engine.TRACK = True
    _close(got, want)
    _close(got, plain)
