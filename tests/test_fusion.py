"""An activation fuses into the product that feeds it (ops/fused.py) only when nothing else can
reach the product: a temporary, the graph's newest node, not yet computed. Every case where
the product stays reachable keeps two nodes, and fused graphs give what unfused ones give."""
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch import fastpath


@pytest.fixture
def m():
    dy.reset_random_seed(5)
    pc = dy.ParameterCollection()
    return dict(pc=pc, W=pc.add_parameters((4, 3)), b=pc.add_parameters(4), V=pc.add_parameters((4, 4)),
                E=pc.add_lookup_parameters((6, 3)))


def _op_names(e):
    g = e.cg
    return [g.ops[i].name for i in range(len(g.sigs)) if g.ops[i] is not None]


def test_a_temporary_product_fuses(m):
    dy.renew_cg()
    h = dy.logistic(dy.affine_transform([m["b"], m["W"], dy.lookup(m["E"], 1)]))
    assert _op_names(h) == ["lookup", "affine>logistic"]
    x = dy.lookup(m["E"], 1).npvalue()
    ref = 1 / (1 + np.exp(-(m["W"].npvalue() @ x + m["b"].npvalue())))
    np.testing.assert_allclose(h.npvalue(), ref, rtol=1e-5)


def test_a_named_product_stays_its_own_node(m):
    dy.renew_cg()
    a = dy.affine_transform([m["b"], m["W"], dy.lookup(m["E"], 1)])
    h = dy.tanh(a)
    assert _op_names(h) == ["lookup", "affine", "tanh"]
    # a reads the product, not the activation
    np.testing.assert_allclose(np.tanh(a.npvalue()), h.npvalue(), rtol=1e-5)


def test_a_product_in_a_container_or_with_consumers_stays(m):
    dy.renew_cg()
    x = dy.lookup(m["E"], 2)
    kept = [dy.affine_transform([m["b"], m["W"], x])]
    t1 = dy.tanh(kept[0])                       # the list holds it
    older = [dy.affine_transform([m["b"], m["W"], x])]
    z = dy.cmult(older[0], older[0])            # a consumer reads the product
    t2 = dy.tanh(older.pop())                   # a temporary now, but not the newest node
    assert _op_names(t2).count("affine") == 2 and "tanh" in _op_names(t2)
    pre = kept[0].npvalue()
    np.testing.assert_allclose(z.npvalue(), pre * pre, rtol=1e-5)
    np.testing.assert_allclose(t1.npvalue(), np.tanh(pre), rtol=1e-5)
    np.testing.assert_allclose(t2.npvalue(), np.tanh(pre), rtol=1e-5)


def test_an_activation_temporary_joins_its_cmult(m):
    dy.renew_cg()
    o, c = dy.lookup(m["E"], 0), dy.lookup(m["E"], 1)
    h1 = dy.cmult(o, dy.tanh(c))
    h0 = dy.cmult(dy.logistic(c), o)
    assert _op_names(h0)[-2:] == ["cmult<tanh@1", "cmult<logistic@0"]
    ov, cv = o.npvalue(), c.npvalue()
    np.testing.assert_allclose(h1.npvalue(), ov * np.tanh(cv), rtol=1e-5)
    np.testing.assert_allclose(h0.npvalue(), ov / (1 + np.exp(-cv)), rtol=1e-5)


def test_an_activation_that_stays_reachable_or_is_not_newest_stays(m):
    dy.renew_cg()
    o, c = dy.lookup(m["E"], 0), dy.lookup(m["E"], 1)
    t = dy.tanh(c)
    h = dy.cmult(o, t)                                  # named
    k = dy.cmult(dy.tanh(c), dy.logistic(o))            # the tanh is not the newest node
    done = [dy.tanh(c)]
    done[0].forward()
    q = dy.cmult(o, done.pop())                         # computed already
    names = _op_names(q)
    assert names.count("cmult") == 2 and names.count("tanh") == 3 and "cmult<logistic@1" in names
    ov, cv = o.npvalue(), c.npvalue()
    for e in (h, q):
        np.testing.assert_allclose(e.npvalue(), ov * np.tanh(cv), rtol=1e-5)
    np.testing.assert_allclose(k.npvalue(), np.tanh(cv) / (1 + np.exp(-ov)), rtol=1e-5)
    np.testing.assert_allclose(t.npvalue(), np.tanh(cv), rtol=1e-5)


def test_a_copied_handle_is_the_handle(m):
    import copy
    dy.renew_cg()
    a = dy.affine_transform([m["b"], m["W"], dy.lookup(m["E"], 1)])
    t = dy.tanh(copy.copy(a))
    assert copy.deepcopy(a) is a and _op_names(t)[-2:] == ["affine", "tanh"]


def test_a_computed_product_or_a_parameter_stays(m):
    dy.renew_cg()
    x = dy.lookup(m["E"], 3)
    pool = [dy.affine_transform([m["b"], m["W"], x])]
    pool[0].forward()                           # its value is in the arena already
    t = dy.tanh(pool.pop())
    assert _op_names(t)[-2:] == ["affine", "tanh"]
    p = dy.tanh(dy.parameter(m["b"]))           # a parameter's node is the parameter's for good
    assert _op_names(p)[-1] == "tanh"
    np.testing.assert_allclose(p.npvalue(), np.tanh(m["b"].npvalue()), rtol=1e-5)


def test_set_fusion_off_keeps_every_node(m):
    dy.set_fusion(False)
    try:
        dy.renew_cg()
        h = dy.logistic(dy.affine_transform([m["b"], m["W"], dy.lookup(m["E"], 1)]))
        assert _op_names(h) == ["lookup", "affine", "logistic"]
    finally:
        dy.set_fusion(True)


def test_the_probe_counts_a_temporary_below_a_variable():
    # outside the asserts: pytest's rewriting keeps a reference to every value in one
    temp = fastpath._probe(object())
    held = object()
    named = fastpath._probe(held)
    assert temp == fastpath._TEMP < named


def test_a_bias_added_to_a_temporary_product_is_one_affine_node(m):
    """W * x + b (b + W * x; Parameters or their expressions) is the node affine_transform([b,
    W, x]) makes, and an activation over it fuses: DyNet's own benchmark programs write their
    gates as logistic(b + W * x), which was three nodes and three batches."""
    W, b, E = m["W"], m["b"], m["E"]
    forms = {"W * x + b": lambda x: W * x + b, "b + W * x": lambda x: b + W * x,
             "expressions": lambda x: dy.parameter(b) + dy.parameter(W) * x,
             "expressions, bias last": lambda x: dy.parameter(W) * x + dy.parameter(b)}
    for name, form in forms.items():
        for act in (None, "logistic"):
            dy.renew_cg()
            x = dy.lookup(E, 2)
            h = form(x) if act is None else getattr(dy, act)(form(x))   # b's first use: its node follows
            assert _op_names(h) == ["lookup", "affine" if act is None else "affine>" + act], name
            pre = W.npvalue() @ x.npvalue() + b.npvalue()
            np.testing.assert_allclose(h.npvalue(), pre if act is None else 1 / (1 + np.exp(-pre)), rtol=1e-5)


def test_a_sum_whose_product_stays_reachable_or_whose_addend_is_computed_stays_a_sum(m):
    W, b, E = m["W"], m["b"], m["E"]
    dy.renew_cg()
    x = dy.lookup(E, 1)
    want = W.npvalue() @ x.npvalue()
    named = W * x
    s1 = named + b                                  # the product keeps its own value
    c = dy.tanh(dy.parameter(b))
    s2 = c + W * x                                  # a computed addend: a sum node
    kept = W * x
    s3 = dy.parameter(b).__add__(kept)              # a direct call: kept counts as a temporary there
    done = [W * x]
    done[0].forward()
    s4 = done.pop() + b                             # computed already
    wide = pc_b2 = m["pc"].add_parameters((4, 1))
    s5 = W * x + pc_b2                              # another shape: DyNet's broadcasting sum
    names = _op_names(s5)
    assert names.count("affine") == 0 and names.count("matmul_shared") == 5 and names.count("add") == 5
    for e in (named, kept):
        np.testing.assert_allclose(e.npvalue(), want, rtol=1e-5)
    bv = b.npvalue()
    for e, v in ((s1, want + bv), (s2, np.tanh(bv) + want), (s3, want + bv), (s4, want + bv),
                 (s5, want[:, None] + wide.npvalue())):
        np.testing.assert_allclose(e.npvalue(), v, rtol=1e-5)


def test_the_operator_probes_tell_a_temporary_and_the_operator():
    from autobatch import operators

    class P:
        def __add__(self, o):
            return sys.getrefcount(o), operators.BY_OPERATOR(sys._getframe(1))
    held = P()
    temp, by_op = P() + P()
    named, _ = P() + held
    direct_count, direct = P().__add__(held)
    assert operators.TEMP_OP == temp < named and by_op and not direct
    assert direct_count == operators.TEMP_OP        # what the operator test is there for


def _tree_loss(m, tree, act, j, operators=False):
    """A tiny recursive model: every node's state is act(affine(...)) of a temporary, and
    what it passes up an LSTM-like output c·tanh(c) (j = 1) or logistic(c)·c (j = 0).
    operators: the affine transforms written as b + W * x (the leaf) and b + V * left +
    V * right, whose first sum only is one node."""
    W, V, b, E = m["W"], m["V"], m["b"], m["E"]
    if isinstance(tree, int):
        x = dy.lookup(E, tree)
        c = getattr(dy, act)(b + W * x if operators else dy.affine_transform([b, W, x]))
    else:
        left, right = _tree_loss(m, tree[0], act, j, operators), _tree_loss(m, tree[1], act, j, operators)
        c = getattr(dy, act)(b + V * left + V * right if operators else
                             dy.affine_transform([b, V, left, V, right]))
    return dy.cmult(c, dy.tanh(c)) if j else dy.cmult(dy.logistic(c), c)


def _trees(draw_int, n):
    def grow(depth):
        if depth == 0 or draw_int(0, 2) == 0:
            return draw_int(0, 5)
        return (grow(depth - 1), grow(depth - 1))
    return [grow(3) for _ in range(n)]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), act=st.sampled_from(["tanh", "logistic", "rectify", "exp"]),
       strategy=st.sampled_from(["none", "depth", "agenda"]), j=st.integers(0, 1), operators=st.booleans())
def test_fused_and_unfused_graphs_agree(data, act, strategy, j, operators):
    """Random trees of act(affine(...)) and cmult(x, act(y)) temporaries: the values and
    parameter gradients of a fused graph equal those of the same program with fusion off."""
    dy.reset_random_seed(7)
    pc = dy.ParameterCollection()
    m = dict(W=pc.add_parameters((4, 3)), V=pc.add_parameters((4, 4), init=dy.NormalInitializer(0, 0.3)),
             b=pc.add_parameters(4), E=pc.add_lookup_parameters((6, 3)))
    trees = _trees(lambda lo, hi: data.draw(st.integers(lo, hi)), data.draw(st.integers(1, 4)))
    out = []
    for fuse in (True, False):
        dy.set_fusion(fuse)
        try:
            for p in pc.parameters_list() + pc.lookup_parameters_list():
                p.zero_grad()
            dy.renew_cg(strategy)
            loss = dy.sum_elems(dy.esum([_tree_loss(m, t, act, j, operators) for t in trees]))
            names = [op.name for op in dy.cg().ops if op is not None]
            assert any(">" in n for n in names) == fuse and any("<" in n for n in names) == fuse
            v = loss.scalar_value()
            loss.backward()
            out.append((v, [p.grad_as_array() for p in pc.parameters_list() + pc.lookup_parameters_list()]))
        finally:
            dy.set_fusion(True)
    (v1, g1), (v2, g2) = out
    np.testing.assert_allclose(v1, v2, rtol=1e-5, atol=1e-6)   # float32: products batch differently
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_checkpoint_inside_the_other_operand_keeps_the_sum_apart(m):
    """W * x + f() where f() takes a checkpoint and returns a bias first used there: the product
    node (before the checkpoint) would read the bias's node (after it), which the revert drops
    and a later node reuses."""
    W, b, E = m["W"], m["b"], m["E"]

    def bias_after_checkpoint():
        dy.cg_checkpoint()
        return b
    dy.renew_cg()
    x = dy.lookup(E, 1)
    y = W * x + bias_after_checkpoint()
    assert _op_names(y)[-2:] == ["matmul_shared", "add"]
    dy.cg_revert()
    z = dy.inputTensor(np.arange(5.0))
    assert dy.sum_elems(z).value() == 10.0


def test_repeated_bias_sums_take_the_inline_path(m, monkeypatch):
    """A (product signature, bias) pair absorbed once in a graph is absorbed again by the +
    operator's inline path, without ComputationGraph.absorb_sum; sums of temporaries whose op
    has no form with a bias (c = i·u + f·c') never call it."""
    from autobatch.graph import ComputationGraph
    calls = []
    orig = ComputationGraph.absorb_sum
    monkeypatch.setattr(ComputationGraph, "absorb_sum", lambda self, *a: (calls.append(1), orig(self, *a))[1])
    W, b, E = m["W"], m["b"], m["E"]
    dy.renew_cg()
    pW, pb = dy.parameter(W), dy.parameter(b)
    hs = []
    for k in range(10):
        x = dy.lookup(E, k % 6)
        hs += [dy.logistic(pb + pW * x), dy.tanh(pW * x + pb), W * x + b, b + W * x]
        dy.cmult(x, x) + dy.cmult(x, x)
    g = dy.cg()
    assert [g.ops[h.i].name for h in hs[:4]] == ["affine>logistic", "affine>tanh", "affine", "affine"]
    assert len({g.sigs[h.i] for h in hs}) == 3          # the four forms: one affine signature, fused twice
    assert len(calls) <= 4, len(calls)
    xs = np.stack([dy.lookup(E, k % 6).npvalue() for k in range(10)])
    pre = xs @ W.npvalue().T + b.npvalue()
    got = np.stack([h.npvalue() for h in hs]).reshape(10, 4, -1)
    for j, f in enumerate((lambda v: 1 / (1 + np.exp(-v)), np.tanh, lambda v: v, lambda v: v)):
        np.testing.assert_allclose(got[:, j], f(pre), rtol=1e-5)


def test_a_cached_bias_sum_still_refuses_what_absorb_sum_refuses(m):
    """The refusals of test_a_sum_whose_product_stays_reachable... once the graph's cache
    holds the pair, where the inline path decides: a named product, an explicit __add__, a
    computed product, a product that is not the newest node, a checkpoint after the product."""
    W, b, E = m["W"], m["b"], m["E"]

    def bias_after_checkpoint():
        dy.cg_checkpoint()
        return pb
    dy.renew_cg()
    pW, pb = dy.parameter(W), dy.parameter(b)
    x = dy.lookup(E, 1)
    warm = [pb + pW * x, pW * x + pb]           # the pair is in the graph's cache now
    named = pW * x
    s1 = pb + named
    kept = pW * x
    s2 = pb.__add__(kept)
    done = [pW * x]
    done[0].forward()
    s3 = pb + done.pop()
    s4 = pW * x + (dy.tanh(x), pb)[1]           # a node made between the product and the +
    s5 = pW * x + bias_after_checkpoint()
    g = dy.cg()
    assert [g.ops[e.i].name for e in warm] == ["affine", "affine"]
    assert [g.ops[e.i].name for e in (s1, s2, s3, s4, s5)] == ["add"] * 5
    want = W.npvalue() @ x.npvalue()
    for e in (named, kept):
        np.testing.assert_allclose(e.npvalue(), want, rtol=1e-5)
    for e in warm + [s1, s2, s3, s4, s5]:
        np.testing.assert_allclose(e.npvalue(), want + b.npvalue(), rtol=1e-5)
    dy.cg_revert()


def test_a_revert_forgets_the_bias_sums_of_the_nodes_it_drops(m):
    """A parameter first used after a checkpoint gets a node id the revert hands out again:
    the cached (signature, bias node) pair of its W * x + b must go with it, or the next
    parameter with that id gets the old signature and stops batching with its equals."""
    W, E = m["W"], m["E"]
    pc = m["pc"]
    b2, b3 = pc.add_parameters(4), pc.add_parameters(4)
    dy.renew_cg()
    x = dy.lookup(E, 1)
    W * x + m["b"]
    dy.cg_checkpoint()
    W * x + b2, W * x + b2                      # b2's node, after the checkpoint; the pair cached
    dy.cg_revert()
    s1, s2 = W * x + b3, W * x + b3             # b3's node reuses b2's id
    a = dy.affine_transform([b3, W, x])
    g = dy.cg()
    assert g.sigs[s1.i] == g.sigs[s2.i] == g.sigs[a.i]
    np.testing.assert_allclose(s2.npvalue(), a.npvalue(), rtol=1e-6)
