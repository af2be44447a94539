"""DyNet's whole-graph functions: Expression.gradient, value(recalculate=True), forward/values
over several expressions, cg_checkpoint/cg_revert, the text dumps and sparse_inputTensor."""
import io

import numpy as np
import pytest

import autobatch as dy

STRATS = ("none", "depth", "agenda")


@pytest.fixture
def net(f64):
    rng = np.random.default_rng(3)
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 2), init=rng.normal(size=(3, 2)))
    b = pc.add_parameters(3, init=rng.normal(size=3))
    V = pc.add_parameters((1, 3), init=rng.normal(size=(1, 3)))
    return pc, W, b, V


def _zero(*pcs):
    for pc in pcs:
        for p in pc.parameters_list():
            p.zero_grad()


def _np_net(W, b, V, x):
    h = np.tanh(W.as_array() @ x + b.as_array())
    return h, float((V.as_array() @ h)[0])


@pytest.mark.parametrize("strategy", STRATS)
def test_gradient_of_nodes_and_inputs(net, strategy):
    pc, W, b, V = net
    xs = [np.array([0.3, -1.2]), np.array([1.5, 0.4])]
    for full in (False, True):
        dy.renew_cg(strategy)
        ex = [dy.inputVector(x) for x in xs]
        hs = [dy.tanh(W * e + b) for e in ex]
        loss = dy.esum([V * h for h in hs])
        loss.backward(full=full)
        Wv, Vv = W.as_array(), V.as_array()[0]
        for x, e, h in zip(xs, ex, hs):
            hv, _ = _np_net(W, b, V, x)
            np.testing.assert_allclose(h.gradient(), Vv, rtol=1e-12)          # dloss/dh = V
            if full:                                                           # dloss/dx = Wᵀ(V ⊙ (1-h²))
                np.testing.assert_allclose(e.gradient(), Wv.T @ (Vv * (1 - hv * hv)), rtol=1e-12)
        np.testing.assert_allclose(loss.gradient(), [1.0])
        _zero(pc)


def test_gradient_errors_and_lifetime(net):
    pc, W, b, V = net
    dy.renew_cg()
    h = dy.tanh(W * dy.inputVector([1.0, 2.0]) + b)
    with pytest.raises(dy.GraphError, match="call backward"):
        h.gradient()
    with pytest.raises(RuntimeError, match="call backward"):     # what DyNet raises, and its tests catch
        h.gradient()
    dy.sum_elems(h).backward()
    g1 = h.gradient()
    later = dy.exp(h)                         # built and computed after the backward
    later.value()
    with pytest.raises(dy.GraphError, match="not computed when the last backward"):
        later.gradient()
    np.testing.assert_allclose(h.gradient(), g1)   # the first gradients are still there
    dy.sum_elems(later).backward()
    np.testing.assert_allclose(h.gradient(), np.exp(h.npvalue()), rtol=1e-6)   # the new loss's


def test_recalculate_redraws_random_numbers_the_same_way_under_every_strategy():
    draws = {}
    for s in STRATS:
        dy.reset_random_seed(7)
        dy.renew_cg(s)
        x = dy.dropout(dy.inputVector(np.ones(64)), 0.5)
        first = x.npvalue()
        same = x.npvalue()
        again = x.npvalue(recalculate=True)
        assert np.array_equal(first, same)
        assert not np.array_equal(first, again)
        assert x.value(recalculate=True) != again.tolist()
        draws[s] = (first, again)
    for s in STRATS[1:]:
        for a, b in zip(draws[s], draws["none"]):
            np.testing.assert_array_equal(a, b)


def test_vector_times_one_element_expression_scales_as_in_dynet():
    dy.renew_cg()
    v, s = dy.inputVector([1.0, -2.0, 3.0]), dy.scalarInput(2.5)
    np.testing.assert_allclose((v * s).npvalue(), [2.5, -5.0, 7.5])
    assert (v * s).dim() == ((3,), 1)
    with pytest.raises(dy.GraphError, match=r"matmul: cannot multiply \(1,\) by \(3,\)"):
        s * v                                  # DyNet rejects it too: (1,1)·(3,1)
    assert (v * s).npvalue().shape == (3,)    # the graph is still usable


@pytest.mark.parametrize("strategy", STRATS)
def test_forward_values_npvalues_batch_all_expressions(strategy):
    dy.renew_cg(strategy)
    xs = [np.array([0.1 * k, -0.2 * k]) for k in range(4)]
    ys = [dy.tanh(dy.inputVector(x)) for x in xs]
    dy.forward(ys)
    if strategy != "none":
        tanh_batches = [s for name, ss in dy.stats()["signatures"].items() if name.startswith("tanh")
                        for s in ss]
        assert tanh_batches == [4]
    for y, v, nv, x in zip(ys, dy.values(ys), dy.npvalues(ys), xs):
        np.testing.assert_allclose(v, np.tanh(x), rtol=1e-6)
        np.testing.assert_allclose(nv, np.tanh(x), rtol=1e-6)
    dy.forward([])


@pytest.mark.parametrize("strategy", STRATS)
def test_checkpoint_revert_tries_candidates_like_fresh_graphs(net, strategy):
    """Beam search: a shared prefix, then candidates built, scored and dropped in turn;
    each candidate's value and gradients equal those of a fresh graph with only it."""
    pc, W, b, V = net
    pc2 = dy.ParameterCollection()
    U = pc2.add_parameters((3, 3), init=np.eye(3) * 0.5)    # first used inside a candidate
    x = np.array([0.7, -0.1])

    def candidate(h, k):
        z = dy.tanh(U * h) if k % 2 else dy.cmult(h, h)
        return V * (z + dy.constant(3, 0.1 * k))

    want = []
    for k in range(3):
        dy.renew_cg(strategy)
        loss = candidate(dy.tanh(W * dy.inputVector(x) + b), k)
        want.append(loss.scalar_value())
        loss.backward()
        want.append([p.grad_as_array().copy() for p in (W, b, V, U)])
        _zero(pc, pc2)

    dy.renew_cg(strategy)
    h = dy.tanh(W * dy.inputVector(x) + b)
    h.value()
    n0 = dy.cg().node_count()
    for k in range(3):
        dy.cg_checkpoint()
        loss = candidate(h, k)
        assert loss.scalar_value() == pytest.approx(want[2 * k], rel=1e-12)
        loss.backward()
        for p, g in zip((W, b, V, U), want[2 * k + 1]):
            np.testing.assert_allclose(p.grad_as_array(), g, rtol=1e-12, atol=1e-15)
        _zero(pc, pc2)
        dy.cg_revert()
        assert dy.cg().node_count() == n0
    dy.cg_revert()                                # no checkpoint left: nothing happens
    assert dy.cg().node_count() == n0
    np.testing.assert_allclose(h.npvalue(), np.tanh(W.as_array() @ x + b.as_array()), rtol=1e-12)


def test_nested_checkpoints_and_version():
    dy.renew_cg()
    v = dy.cg_version()
    x = dy.inputVector([1.0, 2.0])
    dy.cg_checkpoint()
    y = dy.exp(x)
    dy.cg_checkpoint()
    dy.tanh(y).value()
    dy.cg_revert()
    assert dy.cg().node_count() == 2
    np.testing.assert_allclose(y.npvalue(), np.exp([1.0, 2.0]), rtol=1e-6)
    dy.cg_revert()
    assert dy.cg().node_count() == 1
    assert dy.square(x).value() == pytest.approx([1.0, 4.0])
    dy.renew_cg()
    assert dy.cg_version() != v


def test_text_dumps_name_every_node_and_edge():
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    dy.exp(dy.tanh(x))
    out = io.StringIO()
    dy.print_text_graphviz(file=out)
    text = out.getvalue()
    assert text.startswith("digraph G {") and text.rstrip().endswith("}")
    assert 'N1 [label="v1 = tanh(v0) (2,)"]' in text and "N0 -> N1;" in text and "N1 -> N2;" in text
    out = io.StringIO()
    dy.dump_cg(file=out)
    assert [line.split("  [")[0] for line in out.getvalue().splitlines()] == [
        "v0 = input() (2,)", "v1 = tanh(v0) (2,)", "v2 = exp(v1) (2,)"]


def test_sparse_input_tensor():
    dy.renew_cg()
    e = dy.sparse_inputTensor(([0, 1], [2, 0]), [5.0, 6.0], (2, 3), defval=1.0)
    np.testing.assert_array_equal(e.npvalue(), [[1, 1, 5], [6, 1, 1]])
    np.testing.assert_array_equal(dy.sparse_inputTensor(([0, 3],), [5, 6], (4,)).npvalue(), [5, 0, 0, 6])
    with pytest.raises(dy.GraphError, match="out of range"):
        dy.sparse_inputTensor(([0, 4],), [5, 6], (4,))
    with pytest.raises(dy.GraphError, match="one index sequence per dimension"):
        dy.sparse_inputTensor(([0, 1],), [5, 6], (2, 2))
    b = dy.sparse_inputTensor(([0, 1], [1, 0]), [5, 6], (2, 2), batched=True)     # the last axis: the batch
    assert b.dim() == ((2,), 2) and b.npvalue().tolist() == [[0, 5], [6, 0]]


@pytest.mark.parametrize("strategy", STRATS)
def test_gradient_of_a_view_node_is_right_or_refused(strategy):
    """A concatenation that lay in place has no gradient slot of its own (its slot is its
    inputs' memory, which also collects their other consumers' gradients)."""
    dy.renew_cg(strategy)
    a, b = dy.inputVector([1.0, 2.0]), dy.inputVector([3.0, 4.0])
    a2, b2 = a * 1, b * 1
    c = dy.concatenate([a2, b2])
    loss = dy.sum_elems(dy.cmult(a2, a2)) + dy.sum_elems(c)
    loss.backward(full=True)
    np.testing.assert_allclose(a2.gradient(), [3.0, 5.0])         # 2·a2 + 1
    try:
        got = c.gradient()
    except dy.GraphError as e:
        assert "view of its input's memory" in str(e)
    else:
        np.testing.assert_allclose(got, [1.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("strategy", STRATS)
def test_revert_keeps_the_values_built_before_the_checkpoint(strategy):
    """Candidates scored after a checkpoint on a prefix that was not computed yet: the
    prefix is computed once, not again for every candidate."""
    dy.renew_cg(strategy)
    h = dy.inputVector([0.1, 0.2])
    for _ in range(20):
        h = dy.tanh(h)
    n_prefix = dy.cg().node_count()
    counts = []
    for k in range(4):
        dy.cg_checkpoint()
        dy.exp(h + dy.constant(2, float(k))).value()
        counts.append(dy.stats()["forward_nodes"])
        dy.cg_revert()
    assert counts[0] >= n_prefix
    assert [b - a for a, b in zip(counts, counts[1:])] == [3, 3, 3]   # constant, add, exp


def test_revert_drops_the_attrs_and_datas_of_dropped_nodes():
    """attrs and datas keep entries only for the nodes that have one: the dropped nodes' go
    (their ids are not reused: the nodes built after the revert get new ones)."""
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    dy.cg_checkpoint()
    c = dy.concatenate([x, x])                    # attr 0
    p = dy.pickneglogsoftmax(c, 3)                # data 3
    dy.cg_revert()
    g = dy.cg()
    y = dy.tanh(x)
    z = dy.tanh(y)
    assert y.i > p.i
    assert g.attrs[c.i] is None and g.datas[p.i] is None
    assert g.attrs[y.i] is None and g.datas[z.i] is None
    assert g.ops[y.i].name == "tanh" and g.sizes[z.i] == 2
    assert g.ops[g.pid(dy.ParameterCollection().add_parameters(3))] is None   # a parameter: no op
    assert np.allclose(z.npvalue(), np.tanh(np.tanh([1.0, 2.0])))
