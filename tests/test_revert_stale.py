"""Expressions built after cg_checkpoint() are invalid after cg_revert() (DyNet's rule). Their
node ids used to be given to the next nodes built, so such an expression silently stood for
another node (its value, its gradient), or, before any new node, failed with a bare
IndexError. Dropped ids are now never reused and every use of one is refused by name."""
import io

import numpy as np
import pytest

import autobatch as dy


def _reverted():
    dy.renew_cg()
    a = dy.inputVector([1.0, 2.0, 3.0])
    dy.cg_checkpoint()
    w = a * 10.0
    dy.cg_revert()
    return a, w


USES = {
    "value": lambda a, w: w.value(),
    "npvalue": lambda a, w: w.npvalue(),
    "backward": lambda a, w: dy.sum_elems(w).backward(),
    "dim": lambda a, w: w.dim(),
    "gradient": lambda a, w: w.gradient(),
    "tanh": lambda a, w: dy.tanh(w),
    "+": lambda a, w: w + a,
    "+ number": lambda a, w: w + 1.0,
    "cmult": lambda a, w: dy.cmult(a, w),
    "esum": lambda a, w: dy.esum([a, w]),
    "concatenate": lambda a, w: dy.concatenate([a, w]),
    "pick": lambda a, w: dy.pick(w, 1),
    "[]": lambda a, w: w[0],
    "affine_transform": lambda a, w: dy.affine_transform([a, dy.inputTensor(np.eye(3)), w]),
    "dot_product": lambda a, w: dy.dot_product(a, w),
}


@pytest.mark.parametrize("new_nodes", [False, True], ids=["before new nodes", "after new nodes"])
@pytest.mark.parametrize("use", sorted(USES))
def test_a_dropped_expression_is_refused(use, new_nodes):
    a, w = _reverted()
    if new_nodes:
        z = dy.inputVector([7.0, 7.0, 7.0]) * 2.0      # built where w's node was
    with pytest.raises(dy.StaleExpressionError, match=r"cg_revert\(\) dropped it .*test_revert_stale.py"):
        USES[use](a, w)
    # the graph goes on: the nodes before the checkpoint and after the revert compute
    assert dy.tanh(a).value() == pytest.approx(np.tanh([1.0, 2.0, 3.0]).tolist(), rel=1e-6)
    if new_nodes:
        assert z.value() == [14.0, 14.0, 14.0]


def test_a_dropped_rnn_state_is_refused():
    pc = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 2, 3, pc)
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    s = b.initial_state().add_input(x)
    dy.cg_checkpoint()
    s2 = s.add_input(x)
    dy.cg_revert()
    dy.tanh(x)
    with pytest.raises(dy.StaleExpressionError, match="cg_revert"):
        s2.output().value()
    with pytest.raises(dy.StaleExpressionError, match="cg_revert"):
        s2.add_input(x)
    with pytest.raises(dy.StaleExpressionError, match="cg_revert"):
        b.initial_state().transduce([x, s2.output()])
    np.testing.assert_allclose(s.add_input(x).output().npvalue(), b.initial_state().transduce([x, x])[1].npvalue())


def test_nested_reverts_count_and_list_only_the_nodes_kept():
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    y = dy.tanh(x)
    g = dy.cg()
    dy.cg_checkpoint()
    dy.exp(y)
    dy.cg_checkpoint()
    dy.log(dy.exp(y))
    dy.cg_revert()
    assert g.node_count() == 3
    dy.cg_revert()
    assert g.node_count() == 2
    z = dy.logistic(y)
    assert g.node_count() == 3
    out = io.StringIO()
    dy.dump_cg(file=out)
    text = out.getvalue()
    assert text.count("\n") == 3 and "exp" not in text and "log " not in text
    out = io.StringIO()
    g.print_graphviz(file=out)
    assert "exp" not in out.getvalue() and "logistic" in out.getvalue()
    np.testing.assert_allclose(z.npvalue(), 1 / (1 + np.exp(-np.tanh([1.0, 2.0]))), rtol=1e-6)


@pytest.mark.parametrize("strategy", ["agenda", "depth", "none"])
def test_beam_candidates_after_many_reverts_score_as_built_alone(strategy):
    """Checkpoint, score a candidate, revert: the dropped nodes stay behind as ids the next
    candidates skip; each candidate's score and the gradient of the kept part are those of
    a graph built without the others."""
    dy.reset_random_seed(2)
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 3))
    E = pc.add_lookup_parameters((5, 3))

    def score(k):
        return dy.sum_elems(dy.tanh(W * dy.lookup(E, k)))

    dy.renew_cg(autobatching=strategy)
    h = dy.tanh(W * dy.lookup(E, 0))
    got = []
    for k in range(5):
        dy.cg_checkpoint()
        got.append(dy.dot_product(h, dy.tanh(W * dy.lookup(E, k))).value() + score(k).value())
        dy.cg_revert()
    loss = dy.sum_elems(h)
    loss.backward()
    grad = W.grad_as_array().copy()
    want = []
    for k in range(5):
        dy.renew_cg(autobatching=strategy)
        h0 = dy.tanh(W * dy.lookup(E, 0))
        want.append(dy.dot_product(h0, dy.tanh(W * dy.lookup(E, k))).value() + score(k).value())
    W.zero_grad()
    dy.renew_cg(autobatching=strategy)
    dy.sum_elems(dy.tanh(W * dy.lookup(E, 0))).backward()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(grad, W.grad_as_array(), rtol=1e-6)
