"""The vertex front end used as a demanding user does (a side-by-side sweep of programs):
kinds, output accessors, calls never evaluated, nesting, RNN builders inside F, and the
errors of each misuse."""
import numpy as np
import pytest

import autobatch as dy


def _sum_f(scale_leaf=1.0):
    @dy.vertex_function(max_children=2, scatter_dims=[(1,)])
    def F(v):
        h = v.pull("x") * (10.0 * v.n_children + 1.0) + v.gather(0) + v.gather(1)
        if v.kind > 0:
            h = h * 100.0
        v.scatter(h)
        v.push("h", h)
    return F


def test_kinds_must_be_non_negative():
    """A negative kind once ran another kind's trace silently (its key collided)."""
    F = _sum_f()
    dy.renew_cg()
    g = dy.InputGraph([[], [0], [0, 1]])
    with pytest.raises(dy.GraphError, match="kind= takes ints >= 0"):
        F([g], x=[[1.0, 1.0, 1.0]], kind=[[0, 0, -1]])
    out = F([g], x=[[1.0, 1.0, 1.0]], kind=[[0, 0, 1]])["h"]
    np.testing.assert_array_equal(out.npvalue().reshape(-1), [1.0, 12.0, 2100.0 + 1300.0])


def test_output_accessors_check_their_indices():
    @dy.vertex_function(max_children=0)
    def F(v):
        v.push("y", v.pull("x") * 1.0)
    dy.renew_cg()
    o = F([dy.InputGraph([[]] * 2), dy.InputGraph([[]] * 3)], x=[[0.0, 1.0], [10.0, 11.0, 12.0]])
    assert o.vertex("y", 1, 2).value() == 12.0 and o.graph("y", 0).npvalue().reshape(-1).tolist() == [0.0, 1.0]
    for bad in (lambda: o.vertex("y", 0, 2), lambda: o.vertex("y", 1, -1), lambda: o.graph("y", 2)):
        with pytest.raises(IndexError, match="out of range"):
            bad()


def test_a_call_never_evaluated_leaves_the_function_usable():
    @dy.vertex_function(max_children=1)
    def F(v):
        h = v.pull("x") + (v.gather(0) if not v.is_leaf else 0.0)
        v.scatter(h)
        v.push("y", h)
    g, X = dy.InputGraph.chain(3), [[1.0, 2.0, 3.0]]
    dy.renew_cg()
    F([g], x=X)                        # built, never run (a skipped batch)
    for _ in range(2):
        dy.renew_cg()
        assert F([g], x=X)["y"].npvalue().reshape(-1).tolist() == [1.0, 3.0, 6.0]


def test_a_vertex_function_inside_another_is_refused_by_name():
    @dy.vertex_function(max_children=0)
    def inner(v):
        v.push("y", v.pull("x") * 2.0)

    @dy.vertex_function(max_children=0)
    def outer(v):
        v.push("y", inner([dy.InputGraph([[]])], x=[[1.0]])["y"])
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match="inner is called inside vertex function outer"):
        outer([dy.InputGraph([[]])], x=[[1.0]])


@pytest.mark.parametrize("how", ["add_input", "transduce"])
@pytest.mark.parametrize("make", [dy.VanillaLSTMBuilder, dy.GRUBuilder, dy.CoupledLSTMBuilder])
def test_rnn_builders_inside_a_vertex_function(make, how, f64):
    """A chain whose step is the builder's cell: the lazy graph's values and gradients.
    (transduce inside F raised AttributeError: the tracer keeps no template memo.)"""
    m = dy.ParameterCollection()
    rnn = make(1, 4, 3, m)
    cells = 2 if make is not dy.GRUBuilder else 1

    @dy.vertex_function(max_children=1)
    def F(v):
        s = rnn.initial_state() if v.is_leaf else rnn.initial_state([v.gather(0)] * cells)
        x = v.pull("x")
        h = s.add_input(x).output() if how == "add_input" else s.transduce([x])[-1]
        v.scatter(h)
        v.push("h", h)
    X = np.random.default_rng(5).normal(size=(4, 4))

    def grads(build):
        for p in m.parameters_list():
            p.zero_grad()
        dy.renew_cg()
        loss = build()
        value = loss.value()
        loss.backward()
        return value, [p.grad_as_array() for p in m.parameters_list()]

    def by_hand():
        hs, prev = [], None
        for x in X:
            s = rnn.initial_state() if prev is None else rnn.initial_state([prev] * cells)
            prev = s.add_input(dy.inputVector(x)).output()
            hs.append(prev)
        return dy.esum([dy.sum_elems(dy.cmult(h, h)) for h in hs])

    def vertex():
        out = F([dy.InputGraph.chain(4)], x=[X])["h"]
        return dy.sum_elems(dy.cmult(out, out))

    (v1, g1), (v2, g2) = grads(by_hand), grads(vertex)
    assert v2 == pytest.approx(v1, rel=1e-12)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-14)


def test_an_index_that_is_a_float_pull_is_named():
    @dy.vertex_function(max_children=0)
    def F(v):
        v.push("loss", dy.pickneglogsoftmax(v.pull("s"), v.pull("y")))
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match="pickneglogsoftmax: the index is an Expression"):
        F([dy.InputGraph([[]])], s=[np.ones((1, 3))], y=[np.array([1.5])])


def test_scatter_shapes_from_an_earlier_call_say_how_to_forget_them():
    @dy.vertex_function(max_children=1)
    def F(v):
        x = v.pull("x")
        v.scatter(x if v.is_leaf else x + v.gather(0))
        v.push("y", x)
    dy.renew_cg()
    F([dy.InputGraph.chain(2)], x=[np.ones((2, 3))])
    with pytest.raises(dy.GraphError, match=r"F.clear\(\)"):
        F([dy.InputGraph.chain(2)], x=[np.ones((2, 5))])
    F.clear()
    F([dy.InputGraph.chain(2)], x=[np.ones((2, 5))])


def _mlp_f():
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 4))

    @dy.vertex_function(max_children=1)
    def F(v):
        h = dy.tanh(W * v.pull("x"))
        if not v.is_leaf:
            h = h + v.gather(0)
        v.scatter(h)
        v.push("y", h)
    return F, W


def _expected(W, X, sizes):
    """h of each vertex of chains of the given sizes, X one row per vertex."""
    out, k = [], 0
    for n in sizes:
        h = 0.0
        for _ in range(n):
            h = np.tanh(W @ X[k]) + h
            out.append(h)
            k += 1
    return np.array(out)


def test_one_value_per_vertex_also_when_every_graph_has_one_vertex():
    """A list of N per-vertex vectors was read as one entry per graph whenever there were N
    graphs (one vertex each), and refused: 'graph 0 has 1 vertices but 4 values'."""
    F, W = _mlp_f()
    X = np.random.RandomState(0).rand(3, 4).astype(np.float32)
    dy.renew_cg()
    got = F([dy.InputGraph.chain(1)] * 3, x=list(X))["y"].npvalue()
    np.testing.assert_allclose(got, _expected(W.as_array(), X, [1, 1, 1]), rtol=1e-5)
    # a (1, 4) entry per graph is still that graph's one row
    dy.renew_cg()
    got = F([dy.InputGraph.chain(1)] * 3, x=[X[k:k + 1] for k in range(3)])["y"].npvalue()
    np.testing.assert_allclose(got, _expected(W.as_array(), X, [1, 1, 1]), rtol=1e-5)


def test_a_flat_list_of_per_vertex_expressions():
    """One Expression per vertex, all graphs in turn, was refused as 'expected numbers or
    Expressions, got object'; gradients reach each Expression."""
    F, W = _mlp_f()
    X = np.random.RandomState(1).rand(5, 4).astype(np.float32)
    graphs = [dy.InputGraph.chain(2), dy.InputGraph.chain(3)]
    dy.renew_cg()
    xs = [dy.inputTensor(r) for r in X]
    out = F(graphs, x=xs)["y"]
    np.testing.assert_allclose(out.npvalue(), _expected(W.as_array(), X, [2, 3]), rtol=1e-5)
    dy.sum_elems(out).backward(full=True)
    grads = [x.gradient().copy() for x in xs]
    # per graph as lists gives the same values and input gradients
    dy.renew_cg()
    xs2 = [dy.inputTensor(r) for r in X]
    out2 = F(graphs, x=[xs2[:2], xs2[2:]])["y"]
    dy.sum_elems(out2).backward(full=True)
    np.testing.assert_allclose(out2.npvalue(), _expected(W.as_array(), X, [2, 3]), rtol=1e-5)
    for a, b in zip(grads, xs2):
        assert np.abs(a).sum() > 0
        np.testing.assert_allclose(a, b.gradient(), rtol=1e-5)


@pytest.mark.parametrize("src, msg", [
    (lambda X, e: [X[0]] * 4 + [X[0][:3]], "values of different shapes"),
    (lambda X, e: list(X[:4]), "4 values for 5 vertices"),
    (lambda X, e: [X[:2], X[:2]], "graph 1 has 3 vertices but 2 values"),
    (lambda X, e: e[:4], "4 entries for 2 graphs of 5 vertices"),
    (lambda X, e: e[:4] + [dy.inputTensor(X[0][:3])], r"must all have shape \(4,\); entry 4 is \(3,\)"),
    (lambda X, e: [e[:2], e[2:4]], "graph 1 has 3 vertices but 2 Expressions"),
])
def test_pull_inputs_of_the_wrong_size_are_named(src, msg):
    F, _ = _mlp_f()
    X = np.zeros((5, 4), dtype=np.float32)
    graphs = [dy.InputGraph.chain(2), dy.InputGraph.chain(3)]
    dy.renew_cg()
    e = [dy.inputTensor(r) for r in X]
    with pytest.raises(dy.GraphError, match=msg):
        F(graphs, x=src(X, e))
    assert F(graphs, x=X)["y"].npvalue().shape == (5, 3)      # the function is still usable


def test_an_input_that_f_never_reads_is_warned_of_once():
    F, _ = _mlp_f()
    X = np.zeros((3, 4), dtype=np.float32)
    dy.renew_cg()
    with pytest.warns(dy.UnreadInputWarning, match=r"'lable'.*it reads: x"):
        F([dy.InputGraph.chain(3)], x=X, lable=[0, 1, 2])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F([dy.InputGraph.chain(3)], x=X, lable=[0, 1, 2])     # once per name
        F([dy.InputGraph.chain(3)], x=X)


def test_ids_are_checked_only_where_f_reads_them():
    """Internal vertices padded with -1 for a word only leaves read were refused."""
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((5, 3), init=np.arange(15.0).reshape(5, 3))

    @dy.vertex_function(max_children=2)
    def F(v):
        h = E[v.pull("w")] if v.is_leaf else v.gather(0) + v.gather(1)
        v.scatter(h)
        v.push("h", h)
    g = [dy.InputGraph([[], [], [0, 1]])]
    dy.renew_cg()
    np.testing.assert_array_equal(F(g, w=[[1, 2, -1]])["h"].npvalue(), [[3, 4, 5], [6, 7, 8], [9, 11, 13]])
    with pytest.raises(dy.GraphError, match="w=7 out of range"):
        F(g, w=[[1, 7, -1]])


def test_a_failed_call_leaves_no_scatter_shapes_behind():
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 6))

    @dy.vertex_function(max_children=2)
    def F(v):
        x = v.pull("x")
        h = x if v.is_leaf else dy.tanh(W * dy.concatenate([v.gather(0), v.gather(1)]))
        v.scatter(h)
        v.push("h", h)
    g = [dy.InputGraph([[], [], [0, 1]])]
    dy.renew_cg()
    with pytest.raises(dy.GraphError):
        F(g, x=np.ones((3, 4)))                        # wrong width: the internal trace fails
    dy.renew_cg()
    assert F(g, x=np.ones((3, 3)))["h"].npvalue().shape == (3, 3)


def test_small_conveniences():
    @dy.vertex_function                                # bare: max_children=2
    def F(v):
        h = v.pull("x") * 1.0
        for k in np.arange(v.n_children):              # NumPy ints as child numbers
            h = h + v.gather(k)
        v.scatter(h)
        v.push("y", h)
    dy.renew_cg()
    out = F([dy.InputGraph([[], [], [0, 1]])], x=[[1.0, 2.0, 3.0]])
    assert F.max_children == 2 and out["y"].npvalue().reshape(-1).tolist() == [1.0, 2.0, 6.0]
    assert list(out) == ["y"] and len(out) == 1 and [k for k, _ in out.items()] == ["y"]
    for bad in (0, -2):
        with pytest.raises(dy.GraphError, match="chain: needs n >= 1"):
            dy.InputGraph.chain(bad)
    with pytest.raises(dy.GraphError, match=r"graphs' values of different shapes \(\(4,\), \(5,\)\)"):
        F([dy.InputGraph.chain(3), dy.InputGraph.chain(2)], x=[np.ones((3, 4)), np.ones((2, 5))])
    with pytest.raises(dy.GraphError, match="values of different shapes"):
        F([dy.InputGraph.chain(3), dy.InputGraph.chain(2)], x=[[np.ones(3), np.ones(3), np.ones(2)], np.ones((2, 3))])


def test_a_name_pushed_by_kinds_absent_from_a_call_gives_zero_rows():
    """'loss' is pushed at internal vertices; a minibatch of one-word sentences has none, and
    out['loss'] was a KeyError there: zero rows, as leaves get beside internal vertices."""
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((5, 3))
    Wo = pc.add_parameters((2, 3))

    @dy.vertex_function(max_children=2)
    def F(v):
        if v.is_leaf:
            h = E[v.pull("w")]
        else:
            h = dy.tanh(v.gather(0) + v.gather(1))
            v.push("loss", dy.pickneglogsoftmax(Wo * h, v.pull("y")))
        v.scatter(h)
        v.push("h", h)
    dy.renew_cg()
    out = F([dy.InputGraph([[], [], [0, 1]])], w=[[1, 2, 0]], y=[[0, 0, 1]])
    assert dy.sum_elems(out["loss"]).value() > 0
    dy.renew_cg()
    out = F([dy.InputGraph([[]]), dy.InputGraph([[]])], w=[[1], [2]], y=[[0], [0]])
    assert out["loss"].npvalue().tolist() == [[0.0], [0.0]]
    loss = dy.sum_elems(out["loss"]) + dy.sum_elems(out["h"])
    loss.backward()
    assert not Wo.grad_as_array().any() and E.grad_as_array()[[1, 2]].all()


def test_misuse_inside_f_is_named():
    @dy.vertex_function(max_children=1, scatter_dims=[(2,)])
    def no_scatter(v):
        x = v.pull("x")
        if v.kind == 0:
            v.push("y", x * 1.0)                       # forgot v.scatter: the parent gathered zeros
        else:
            h = x + v.gather(0)
            v.scatter(h)
            v.push("y", h)
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match="vertex 0 of graph 0 is gathered by its parent, but F never calls v.scatter"):
        no_scatter([dy.InputGraph.chain(3)], x=[[[1.0, 1], [2, 2], [3, 3]]], kind=[[0, 1, 1]])
    assert no_scatter([dy.InputGraph.chain(1)], x=[[[1.0, 1]]], kind=[[0]])["y"].npvalue().tolist() == [[1, 1]]

    def graph_call(f):
        @dy.vertex_function(max_children=0)
        def F(v):
            f()
            v.push("y", v.pull("x") * 1.0)
        return F
    for call, name in ((dy.renew_cg, "renew_cg"), (dy.cg_checkpoint, "cg_checkpoint"), (dy.cg_revert, "cg_revert")):
        dy.renew_cg()
        with pytest.raises(dy.GraphError, match=rf"{name}\(\) inside vertex function F"):
            graph_call(call)([dy.InputGraph.chain(1)], x=[[1.0]])

    @dy.vertex_function(max_children=0)
    def ids_as_values(v):
        v.push("y", v.pull("x") * 2.0)
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match=r"v.pull\('x'\) is a per-vertex id"):
        ids_as_values([dy.InputGraph.chain(1)], x=[[3]])
    assert ids_as_values([dy.InputGraph.chain(1)], x=[[3.0]])["y"].value() == 6.0


def test_a_parameter_or_a_minibatch_as_an_input():
    """A Parameter's rows, or a DyNet minibatch's elements, one per vertex (both were read as
    one value: '1 values for 3 vertices')."""
    pc = dy.ParameterCollection()
    P = pc.add_parameters((3, 2), init=np.arange(6.0).reshape(3, 2) / 10)
    E = pc.add_lookup_parameters((5, 2), init=np.arange(10.0).reshape(5, 2) / 10)

    @dy.vertex_function(max_children=0)
    def F(v):
        v.push("y", dy.tanh(v.pull("x")))
    g = [dy.InputGraph([[]] * 3)]
    dy.renew_cg()
    y = F(g, x=P)["y"]
    np.testing.assert_allclose(y.npvalue(), np.tanh(np.arange(6.0).reshape(3, 2) / 10), rtol=1e-6)
    dy.sum_elems(y).backward()
    np.testing.assert_allclose(P.grad_as_array(), 1 - np.tanh(np.arange(6.0).reshape(3, 2) / 10) ** 2, rtol=1e-5)
    dy.renew_cg()
    y = F(g, x=dy.lookup_batch(E, [1, 2, 4]))["y"]
    np.testing.assert_allclose(y.npvalue(), np.tanh(np.arange(10.0).reshape(5, 2)[[1, 2, 4]] / 10), rtol=1e-6)


def test_a_call_that_fails_in_one_kind_leaves_the_others_to_trace_again():
    pc = dy.ParameterCollection()
    Ws = [pc.add_parameters((3, 3)), pc.add_parameters((3, 3))]       # kinds 0 and 1 only
    E = pc.add_lookup_parameters((5, 3))

    @dy.vertex_function(max_children=2)
    def F(v):
        h = dy.tanh(E[v.pull("w")]) if v.is_leaf else dy.tanh(Ws[v.kind] * (v.gather(0) + v.gather(1)))
        v.scatter(h)
        v.push("h", h)
    g = dy.InputGraph([[], [], [0, 1]])
    dy.renew_cg()
    with pytest.raises(IndexError):
        F([g], w=[[1, 2, 0]], kind=[[0, 0, 7]])                          # Ws[7] while tracing
    dy.renew_cg()
    assert F([g], w=[[1, 2, 0]], kind=[[0, 0, 1]])["h"].npvalue().shape == (3, 3)


def test_a_function_that_never_gathers_needs_no_scatter():
    """Per-vertex values over a tree: no parent gathers, so no vertex need scatter."""
    @dy.vertex_function(max_children=2)
    def F(v):
        v.push("y", dy.tanh(v.pull("x")))
    dy.renew_cg()
    out = F([dy.InputGraph([[], [], [0, 1]])], x=[[0.2, 0.4, 0.6]])["y"]
    np.testing.assert_allclose(out.npvalue().reshape(-1), np.tanh([0.2, 0.4, 0.6]), rtol=1e-6)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_non_finite_value_inside_f_is_named_by_op_and_vertex():
    @dy.vertex_function(max_children=1, scatter_dims=[(2,)])
    def F(v):
        h = dy.log(v.pull("x") + v.gather(0))           # log(-2) at vertex 2
        v.scatter(h)
        v.push("h", h)
    dy.renew_cg()
    out = F([dy.InputGraph.chain(2), dy.InputGraph.chain(3)], x=[[[3.0, 3], [1, 1]], [[3.0, 3], [1, 1], [-5, 1]]])
    with pytest.raises(dy.NonFiniteError, match="in vertex function F: op log at vertex 2 of graph 1"):
        dy.sum_elems(out["h"]).backward()
