"""DyNet's other builders (autobatch/builders_more.py): values equal hand-written NumPy
references for given weights, parameter layout and names as DyNet 2.1's, dropout per
sequence, batching across sequences, and BiRNNBuilder / StandardSoftmaxBuilder."""
import itertools
import json
import os

import numpy as np
import pytest

import autobatch as dy
from autobatch.builders_more import (BiRNNBuilder, CompactVanillaLSTMBuilder, CoupledLSTMBuilder,
                                     FastLSTMBuilder, StandardSoftmaxBuilder)
from autobatch.errors import GraphError
from builder_kit import last_output, random_weights, ref_rnn, sequence_loss, sig, vecs
from check_kit import assert_batching_agrees, check_param_grads, needs_dynet, run_dynet, value_grads_stats


def ref_coupled(weights, xs, s0=None, peep=True, mx=None, mh=None, mc=None):
    """weights: per layer the 11 arrays in DyNet's order; s0: [c_1..c_L, h_1..h_L].
    mx/mh/mc: per layer masks (or None). Returns top h per step and the final state."""
    L = len(weights)
    cs, hs = (list(s0[:L]), list(s0[L:])) if s0 is not None else ([None] * L, [None] * L)
    outs = []
    for x in xs:
        for l, (x2i, h2i, c2i, bi, x2o, h2o, c2o, bo, x2c, h2c, bc) in enumerate(weights):
            if mx is not None and mx[l] is not None:
                x = x * mx[l]
            if hs[l] is None:
                i = sig(bi + x2i @ x)
                c = i * np.tanh(bc + x2c @ x)
                ao = bo + x2o @ x
            else:
                h = hs[l] * mh[l] if mh is not None and mh[l] is not None else hs[l]
                cd = cs[l] * mc[l] if mc is not None and mc[l] is not None else cs[l]
                i = sig(bi + x2i @ x + h2i @ h + (c2i @ cd if peep else 0))
                c = (1 - i) * cs[l] + i * np.tanh(bc + x2c @ x + h2c @ h)
                ao = bo + x2o @ x + h2o @ h
            if peep:
                ao = ao + c2o @ (c * mc[l] if mc is not None and mc[l] is not None else c)
            hs[l], cs[l] = sig(ao) * np.tanh(c), c
            x = hs[l]
        outs.append(x)
    return outs, cs + hs


@pytest.mark.parametrize("cls,peep", [(CoupledLSTMBuilder, True), (FastLSTMBuilder, False)])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("given", [False, True])
def test_coupled_and_fast_match_numpy_reference(cls, peep, layers, given, f64):
    rng = np.random.default_rng(layers + 2 * given)
    m = dy.ParameterCollection()
    b = cls(layers, 3, 4, m)
    ws = random_weights(b, rng)
    xs = vecs(rng, 4, 3)
    s0 = vecs(rng, 2 * layers, 4) if given else None
    dy.renew_cg()
    st = b.initial_state([dy.inputVector(v) for v in s0]) if given else b.initial_state()
    outs = st.transduce([dy.inputVector(x) for x in xs])
    ref, state = ref_coupled(ws, xs, s0, peep=peep)
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(o.npvalue(), r, rtol=1e-10, atol=1e-12)
    last = st.add_inputs([dy.inputVector(x) for x in xs])[-1]
    assert len(last.s()) == 2 * layers and len(last.h()) == layers
    for e, r in zip(last.s(), state):       # DyNet's layout: cells, then h's
        np.testing.assert_allclose(e.npvalue(), r, rtol=1e-10, atol=1e-12)


def _names(m):
    return [(p.name(), p.shape()) for p in m.parameters_list()]


def test_parameter_layout_and_names_as_dynet():
    """Shapes, order and names as DyNet 2.1 prints them for (2 layers, in 3, hidden 4)."""
    m = dy.ParameterCollection()
    CoupledLSTMBuilder(2, 3, 4, m)
    lay = lambda d: [(4, d), (4, 4), (4, 4), (4,), (4, d), (4, 4), (4, 4), (4,), (4, d), (4, 4), (4,)]  # noqa: E731
    assert [s for _, s in _names(m)] == lay(3) + lay(4)
    assert [n for n, _ in _names(m)] == [f"/lstm-builder/_{k}" for k in range(22)]
    m = dy.ParameterCollection()
    FastLSTMBuilder(2, 3, 4, m)
    lay = lambda d: [(4, d), (4, 4), (4, 1), (4,), (4, d), (4, 4), (4, 1), (4,), (4, d), (4, 4), (4,)]  # noqa: E731
    assert [s for _, s in _names(m)] == lay(3) + lay(4)
    assert _names(m)[0][0] == "/fast-lstm-builder/_0"
    m = dy.ParameterCollection()
    b = CompactVanillaLSTMBuilder(2, 3, 4, m)
    assert _names(m) == [(f"/compact-vanilla-lstm-builder/_{k}", s) for k, s in
                         enumerate([(16, 3), (16, 4), (16,), (16, 4), (16, 4), (16,)])]
    assert b.whoami() == "CompactVanillaLSTMBuilder"
    for p in m.parameters_list() + []:
        if len(p.shape()) == 1:          # biases start at 0, as DyNet's (the step adds the forget bias)
            np.testing.assert_array_equal(p.as_array(), np.zeros(16))


def test_vanilla_forget_bias_and_ln_lstm_arguments():
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 3, 2, m, forget_bias=0.5)
    np.testing.assert_array_equal(b.get_parameters()[0][2].as_array(), np.zeros(8))
    assert b.forget_bias == 0.5
    b.set_dropouts(0.2, 0.3)
    assert (b.dropout, b.dropout_h) == (0.2, 0.3)
    b.set_dropout_masks()
    assert b.spec == (1, 3, 2, False, 0.5)          # DyNet's spec: (layers, in, hidden, ln_lstm, forget_bias)
    b2 = dy.VanillaLSTMBuilder.from_spec((1, 3, 2, True, 0.5), m)
    assert b2.ln_lstm and b2.forget_bias == 0.5 and len(b2.param_collection().parameters_list()) == 9


def test_coupled_biases_start_at_zero():
    m = dy.ParameterCollection()
    b = CoupledLSTMBuilder(1, 3, 4, m)
    for k in (3, 7, 10):
        np.testing.assert_array_equal(b.get_parameters()[0][k].as_array(), np.zeros(4))


@pytest.mark.parametrize("given", [False, True])
def test_compact_equals_vanilla_with_equal_parameters(given, f64):
    rng = np.random.default_rng(11)
    m = dy.ParameterCollection()
    v = dy.VanillaLSTMBuilder(2, 3, 4, m)
    c = CompactVanillaLSTMBuilder(2, 3, 4, m)
    for lv, lc in zip(v.get_parameters(), c.get_parameters()):
        for pv, pc in zip(lv, lc):
            w = rng.normal(size=pv.shape())
            pv.set_value(w)
            pc.set_value(w)
    xs = vecs(rng, 4, 3)
    s0 = vecs(rng, 4, 4)
    dy.renew_cg()
    outs = []
    for b in (v, c):
        st = b.initial_state([dy.inputVector(x) for x in s0]) if given else b.initial_state()
        outs.append([o.npvalue() for o in st.transduce([dy.inputVector(x) for x in xs])])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_sparse_lstm_is_vanilla_with_masked_weights(f64):
    """SparseLSTMBuilder: [W_x, W_h, b, M_x, M_h] per layer (masks of ones); set_sparsity(s)
    masks the fraction s of all layers' W entries of smallest magnitude; its steps equal a
    vanilla LSTM's with W⊙M; an update changes neither the masks nor the masked weights."""
    rng = np.random.default_rng(13)
    m = dy.ParameterCollection()
    sp = dy.SparseLSTMBuilder(2, 3, 4, m)
    assert [[tuple(p.shape()) for p in L] for L in sp.get_parameters()][0] == [(16, 3), (16, 4), (16,), (16, 3), (16, 4)]
    assert all((L[k].as_array() == 1).all() for L in sp.get_parameters() for k in (3, 4))
    # created in DyNet's order, W_x, W_h, M_x, M_h, b (its names, and files both ways)
    assert [tuple(p.shape()) for p in m.parameters_list()][:5] == [(16, 3), (16, 4), (16, 3), (16, 4), (16,)]
    assert [p.name() for p in sp.get_parameters()[0]] == ["/vanilla-lstm-builder/_" + k for k in "01423"]
    for L in sp.get_parameters():
        for p in L[:3]:
            p.set_value(rng.normal(size=p.shape()))
    sp.set_sparsity(0.3)
    ws = np.concatenate([np.abs(L[k].as_array()).ravel() for L in sp.get_parameters() for k in (0, 1)])
    ms = np.concatenate([L[k].as_array().ravel() for L in sp.get_parameters() for k in (3, 4)])
    assert (ms == 0).sum() == round(0.3 * ws.size) and ws[ms == 0].max() <= ws[ms == 1].min()
    van = dy.VanillaLSTMBuilder(2, 3, 4, dy.ParameterCollection())
    for Ls, Lv in zip(sp.get_parameters(), van.get_parameters()):
        Lv[0].set_value(Ls[0].as_array() * Ls[3].as_array())
        Lv[1].set_value(Ls[1].as_array() * Ls[4].as_array())
        Lv[2].set_value(Ls[2].as_array())
    xs = vecs(rng, 4, 3)
    dy.renew_cg()
    outs = [[o.npvalue() for o in b.initial_state().transduce([dy.inputVector(x) for x in xs])] for b in (sp, van)]
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    before = [[p.as_array().copy() for p in L] for L in sp.get_parameters()]
    tr = dy.SimpleSGDTrainer(m, 0.5)
    dy.renew_cg()
    dy.sum_elems(dy.esum(sp.initial_state().transduce([dy.inputVector(x) for x in xs]))).backward()
    tr.update()
    for L, B in zip(sp.get_parameters(), before):
        for k in (0, 1):
            mask = B[k + 3] == 0
            np.testing.assert_array_equal(L[k + 3].as_array(), B[k + 3])            # masks stay
            np.testing.assert_array_equal(L[k].as_array()[mask], B[k][mask])        # masked weights too
            assert not np.array_equal(L[k].as_array()[~mask], B[k][~mask])          # the others learn
    sp.set_sparsity(0.5)                       # raised: what 0.3 masked stays masked
    ms2 = np.concatenate([L[k].as_array().ravel() for L in sp.get_parameters() for k in (3, 4)])
    assert (ms2 == 0).sum() == round(0.5 * ws.size) and (ms2[ms == 0] == 0).all()
    with pytest.raises(ValueError, match="set_sparsity"):
        sp.set_sparsity(1.5)


@pytest.mark.parametrize("cls", [CoupledLSTMBuilder, FastLSTMBuilder, CompactVanillaLSTMBuilder,
                                 dy.SparseLSTMBuilder])
def test_transduce_equals_add_input(cls):
    rng = np.random.default_rng(12)
    b = cls(2, 3, 4, dy.ParameterCollection())
    xs = vecs(rng, 5, 3)
    dy.renew_cg()
    t = b.initial_state().transduce([dy.inputVector(x) for x in xs])
    s, steps = b.initial_state(), []
    for x in xs:
        s = s.add_input(dy.inputVector(x))
        steps.append(s.output())
    for a, c in zip(t, steps):
        np.testing.assert_array_equal(a.npvalue(), c.npvalue())


def test_coupled_dropout_masks_fixed_per_sequence(f64):
    """Variational dropout on x, h_prev and the cell: every step of a sequence matches the
    reference for one fixed triple of masks (searched over all 0/2 patterns, H = 2)."""
    rng = np.random.default_rng(13)
    b = CoupledLSTMBuilder(1, 2, 2, dy.ParameterCollection())
    ws = random_weights(b, rng)
    b.set_dropout(0.5)
    assert (b.dropout, b.dropout_h, b.dropout_c) == (0.5, 0.5, 0.5)
    pats = [np.array(p) for p in itertools.product([0.0, 2.0], repeat=2)]
    xs = vecs(rng, 3, 2)
    found = []
    dy.renew_cg()
    for _ in range(5):
        got = [o.npvalue() for o in b.initial_state().transduce([dy.inputVector(x) for x in xs])]
        hits = [(a, h, c) for a, h, c in itertools.product(range(4), repeat=3)
                if all(np.allclose(g, r, rtol=1e-9, atol=1e-12) for g, r in
                       zip(got, ref_coupled(ws, xs, mx=[pats[a]], mh=[pats[h]], mc=[pats[c]])[0]))]
        assert hits, "no single set of masks explains every step"
        found.append(hits[0])
    assert len(set(found)) > 1            # each sequence draws its own masks


def test_coupled_dropout_switches(f64):
    rng = np.random.default_rng(14)
    b = CoupledLSTMBuilder(2, 6, 8, dy.ParameterCollection())
    xs = vecs(rng, 3, 6)

    def run():
        return last_output(b, xs).npvalue()
    base = run()
    b.set_dropout(0.0, 0.0, 0.5)          # the cell mask alone changes the output
    assert not np.allclose(run(), base)
    dy.set_dropout(False)
    np.testing.assert_array_equal(run(), base)
    dy.set_dropout(True)
    b.disable_dropout()
    np.testing.assert_array_equal(run(), base)
    with pytest.raises(ValueError, match="rate"):
        b.set_dropout(0.1, 1.0)


def test_fast_lstm_ignores_dropout_and_peepholes(f64):
    """As DyNet 2.1: set_dropout is accepted and does nothing, the (H, 1) peepholes get no gradient."""
    rng = np.random.default_rng(15)
    m = dy.ParameterCollection()
    b = FastLSTMBuilder(1, 3, 4, m)
    random_weights(b, rng)
    xs = vecs(rng, 3, 3)

    def run():
        return dy.sum_elems(last_output(b, xs))
    base = run().npvalue()
    b.set_dropout(0.5)
    np.testing.assert_array_equal(run().npvalue(), base)
    run().backward()
    P = b.get_parameters()[0]
    assert not P[2].grad_as_array().any() and not P[6].grad_as_array().any()
    assert P[0].grad_as_array().any()


def test_compact_weight_noise(f64):
    rng = np.random.default_rng(16)
    b = CompactVanillaLSTMBuilder(1, 3, 4, dy.ParameterCollection())
    random_weights(b, rng)
    xs = vecs(rng, 3, 3)

    def run():
        return last_output(b, xs).npvalue()
    base = run()
    b.set_weightnoise(0.3)
    noisy = run()
    assert not np.allclose(noisy, base)
    assert not np.allclose(run(), noisy)  # fresh noise per graph
    dy.set_dropout(False)                 # evaluation: no noise
    np.testing.assert_array_equal(run(), base)
    dy.set_dropout(True)
    b.set_weightnoise(0.0)
    np.testing.assert_array_equal(run(), base)
    with pytest.raises(ValueError):
        b.set_weightnoise(-1)


@pytest.mark.parametrize("cls", [CoupledLSTMBuilder, FastLSTMBuilder, CompactVanillaLSTMBuilder])
def test_batches_across_sequences(cls, f64):
    assert_batching_agrees(lambda strategy: sequence_loss(lambda m: cls(2, 3, 4, m), strategy,
                                                          [3, 5, 2, 5, 4], seed=17))


def test_coupled_gradient_matches_finite_differences(f64):
    rng = np.random.default_rng(18)
    m = dy.ParameterCollection()
    b = CoupledLSTMBuilder(2, 3, 2, m)
    random_weights(b, rng)
    xs = vecs(rng, 3, 3)
    check_param_grads(lambda: dy.sum_elems(last_output(b, xs)), m.parameters_list(), rng, 2)


def test_from_spec_makes_the_same_structure():
    for cls in (dy.VanillaLSTMBuilder, dy.GRUBuilder, CoupledLSTMBuilder, FastLSTMBuilder, CompactVanillaLSTMBuilder):
        m = dy.ParameterCollection()
        b = cls(2, 3, 4, m)
        b2 = cls.from_spec(b.spec, m)
        assert type(b2) is cls
        assert [p.shape() for l in b2.get_parameters() for p in l] == [p.shape() for l in b.get_parameters() for p in l]


# --- BiRNNBuilder ----------------------------------------------------------------------
def test_birnn_matches_numpy_reference(f64):
    rng = np.random.default_rng(20)
    m = dy.ParameterCollection()
    bi = BiRNNBuilder(2, 3, 4, m, dy.SimpleRNNBuilder)
    ws = [[random_weights(f, rng), random_weights(b, rng)] for f, b in bi.builder_layers]
    xs = vecs(rng, 4, 3)
    es = xs
    for wf, wb in ws:
        fs, bs = ref_rnn(wf, es), ref_rnn(wb, es[::-1])[::-1]
        es = [np.concatenate([f, b]) for f, b in zip(fs, bs)]
    dy.renew_cg()
    outs = bi.transduce([dy.inputVector(x) for x in xs])
    assert [o.dim() for o in outs] == [((4,), 1)] * 4
    for o, r in zip(outs, es):
        np.testing.assert_allclose(o.npvalue(), r, rtol=1e-10, atol=1e-12)
    pairs = bi.add_inputs([dy.inputVector(x) for x in xs])
    for (f, b), r in zip(pairs, es):
        np.testing.assert_allclose(np.concatenate([f.output().npvalue(), b.output().npvalue()]), r, rtol=1e-10)
    assert pairs[0][1].prev().prev().prev() is not None and pairs[-1][1].prev().output() is None


def test_birnn_layout_names_and_errors():
    m = dy.ParameterCollection()
    bi = BiRNNBuilder(2, 3, 4, m, dy.LSTMBuilder)
    names = _names(m)
    assert names[:3] == [("/birnn/vanilla-lstm-builder/_0", (8, 3)), ("/birnn/vanilla-lstm-builder/_1", (8, 2)),
                         ("/birnn/vanilla-lstm-builder/_2", (8,))]
    assert names[3][0] == "/birnn/vanilla-lstm-builder_1/_0"
    assert names[6] == ("/birnn/vanilla-lstm-builder_2/_0", (8, 4))
    assert len(names) == 12 and bi.param_collection().name() == "/birnn/"
    assert bi.whoami() == "BiRNNBuilder" and bi.spec == (2, 3, 4, dy.LSTMBuilder, None)   # DyNet's spec
    bi.set_dropout(0.3)
    assert all(b.dropout == 0.3 for pair in bi.builder_layers for b in pair)
    bi.disable_dropout()
    assert all(b.dropout == 0.0 for pair in bi.builder_layers for b in pair)
    with pytest.raises(ValueError, match="even"):
        BiRNNBuilder(1, 3, 5, m, dy.LSTMBuilder)
    with pytest.raises(ValueError, match="num_layers"):
        BiRNNBuilder(0, 3, 4, m, dy.LSTMBuilder)
    own = BiRNNBuilder(None, None, None, None, None, builder_layers=bi.builder_layers[:1])
    dy.renew_cg()
    assert own.transduce([dy.inputVector([1, 2, 3])])[0].dim() == ((4,), 1)
    with pytest.raises(GraphError, match="builder_layers"):
        own.param_collection()


# --- StandardSoftmaxBuilder -------------------------------------------------------------
def test_softmax_builder_values(f64):
    rng = np.random.default_rng(21)
    m = dy.ParameterCollection()
    sm = StandardSoftmaxBuilder(3, 5, m)
    assert _names(m) == [("/standard-softmax-builder/_0", (5, 3)), ("/standard-softmax-builder/_1", (5,))]
    np.testing.assert_array_equal(m.parameters_list()[1].as_array(), np.zeros(5))
    W, b = rng.normal(size=(5, 3)), rng.normal(size=5)
    m.parameters_list()[0].set_value(W)
    m.parameters_list()[1].set_value(b)
    x = rng.normal(size=3)
    z = W @ x + b
    logp = z - np.log(np.exp(z).sum())
    dy.renew_cg()
    e = dy.inputVector(x)
    np.testing.assert_allclose(sm.full_logits(e).npvalue(), z, rtol=1e-12)
    np.testing.assert_allclose(sm.full_log_distribution(e).npvalue(), logp, rtol=1e-12)
    for c in range(5):
        nl = sm.neg_log_softmax(e, c)
        assert nl.dim() == ((1,), 1)
        assert nl.scalar_value() == pytest.approx(-logp[c], rel=1e-12)
    assert sm.param_collection().name() == "/standard-softmax-builder/"
    nb = StandardSoftmaxBuilder(3, 5, dy.ParameterCollection(), bias=False)
    nb.W.set_value(W)
    dy.renew_cg()
    np.testing.assert_allclose(nb.full_logits(dy.inputVector(x)).npvalue(), W @ x, rtol=1e-12)
    assert len(nb.param_collection().parameters_list()) == 1


def test_softmax_builder_gradient_and_errors(f64):
    m = dy.ParameterCollection()
    sm = StandardSoftmaxBuilder(3, 4, m)
    dy.renew_cg()
    sm.neg_log_softmax(dy.inputVector([1.0, 2.0, 3.0]), 2).backward()
    W = m.parameters_list()[0]
    p = np.exp(W.as_array() @ [1, 2, 3])
    p /= p.sum()
    np.testing.assert_allclose(W.grad_as_array(), np.outer(p - np.eye(4)[2], [1, 2, 3]), rtol=1e-10)
    with pytest.raises(GraphError, match="class 4 out of range"):
        sm.neg_log_softmax(dy.inputVector([1.0, 2.0, 3.0]), 4)
    with pytest.raises(GraphError, match=r"shape \(3,\)"):
        sm.full_logits(dy.inputVector([1.0, 2.0]))
    x3 = dy.inputVector([1.0, 2.0, 3.0])              # one instance: the batch of its one class
    assert sm.neg_log_softmax_batch(x3, [1]).value() == sm.neg_log_softmax(x3, 1).value()
    with pytest.raises(ValueError):
        StandardSoftmaxBuilder(0, 4, m)


def test_softmax_builder_sample_follows_the_distribution():
    m = dy.ParameterCollection()
    sm = StandardSoftmaxBuilder(2, 3, m)
    sm.W.set_value(np.zeros((3, 2)))
    p = np.array([0.2, 0.5, 0.3])
    sm.b.set_value(np.log(p))
    dy.renew_cg()
    x = dy.inputVector([0.5, -1.0])
    draws = np.array([sm.sample(x) for _ in range(3000)])
    freq = np.bincount(draws, minlength=3) / len(draws)
    assert np.abs(freq - p).max() < 0.04     # about 4.5 standard deviations
    sm.b.set_value(np.array([-50.0, 50.0, -50.0]))
    dy.renew_cg()
    assert {sm.sample(dy.inputVector([0.5, -1.0])) for _ in range(20)} == {1}


# --- SoftmaxBuilder / ClassFactoredSoftmaxBuilder ---------------------------------------
from autobatch.builders_more import ClassFactoredSoftmaxBuilder, SoftmaxBuilder, StackedRNNState  # noqa: E402

# classes A (x, y), B (z: one word), 10 (u, w, v), q (s); separators, indentation and extra fields vary
CLUSTERS = "A\tx\nA\ty\nB\tz\n 10 u extra\n\n10 w\n10\tv\nq s\n"
DENSE = {"x": 3, "y": 0, "z": 5, "u": 1, "w": 2, "v": 4, "s": 6}
GAPS = {"x": 3, "y": 0, "z": 6, "u": 1, "w": 7, "v": 4, "q": 5, "r": 2, "s": 8}   # ids 2, 5 in no class


@pytest.fixture
def cluster_file(tmp_path):
    p = tmp_path / "clusters.txt"
    p.write_text(CLUSTERS)
    return str(p)


def logsm(z):
    return z - np.log(np.exp(z - z.max()).sum()) - z.max()


def cfsm_ref(ws, wd, x, bias=True):
    """NumPy reference: ws the parameter arrays in DyNet's order. Returns class logits, the
    logits of classes A and 10, -log p(w) per clustered id and DyNet's full_logits."""
    it = iter(ws)
    r2c = next(it)
    cb = next(it) if bias else 0
    sub = {}
    for c in (0, 2):                     # A and 10 have more than one word
        W = next(it)
        sub[c] = W @ x + (next(it) if bias else 0)
    cl = r2c @ x + cb
    cld = logsm(cl)
    words = {0: ["x", "y"], 1: ["z"], 2: ["u", "w", "v"], 3: ["s"]}
    nls, full = {}, np.full(max(wd[w] for ws_ in words.values() for w in ws_) + 1, -10000.0)
    for c, names in words.items():
        for r, name in enumerate(names):
            i = wd[name]
            if c in sub:
                nls[i] = -cld[c] - logsm(sub[c])[r]
                full[i] = cld[c] + np.exp(logsm(sub[c]))[r]
            else:
                nls[i] = -cld[c]
                full[i] = cld[c]
    return cl, sub, nls, full


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("wd", [DENSE, GAPS], ids=["dense", "gaps"])
def test_class_factored_values(cluster_file, wd, bias, f64):
    rng = np.random.default_rng(30)
    m = dy.ParameterCollection()
    sm = ClassFactoredSoftmaxBuilder(3, cluster_file, wd, m, bias)
    assert isinstance(sm, SoftmaxBuilder) and sm.param_collection().name() == "/class-factored-softmax-builder/"
    shapes = [(4, 3), (4,), (2, 3), (2,), (3, 3), (3,)] if bias else [(4, 3), (2, 3), (3, 3)]
    assert _names(m) == [(f"/class-factored-softmax-builder/_{k}", s) for k, s in enumerate(shapes)]
    for p in m.parameters_list():
        if len(p.shape()) == 1:
            np.testing.assert_array_equal(p.as_array(), 0)
    ws = [rng.normal(size=p.shape()) for p in m.parameters_list()]
    for p, w in zip(m.parameters_list(), ws):
        p.set_value(w)
    x = rng.normal(size=3)
    cl, sub, nls, full = cfsm_ref(ws, wd, x, bias)
    dy.renew_cg()
    e = dy.inputVector(x)
    np.testing.assert_allclose(sm.class_logits(e).npvalue(), cl, rtol=1e-12)
    np.testing.assert_allclose(sm.class_log_distribution(e).npvalue(), logsm(cl), rtol=1e-12)
    for c in (0, 2):
        np.testing.assert_allclose(sm.subclass_logits(e, c).npvalue(), sub[c], rtol=1e-12)
        np.testing.assert_allclose(sm.subclass_log_distribution(e, c).npvalue(), logsm(sub[c]), rtol=1e-12)
    for i, want in nls.items():
        got = sm.neg_log_softmax(e, i)
        assert got.dim() == ((1,), 1)
        assert got.scalar_value() == pytest.approx(want, rel=1e-12)
    assert sm.full_logits(e).dim() == ((len(full),), 1)
    np.testing.assert_allclose(sm.full_logits(e).npvalue(), full, rtol=1e-12)
    np.testing.assert_allclose(sm.full_log_distribution(e).npvalue(), logsm(full), rtol=1e-12)


def test_class_factored_gradient_matches_central_differences(cluster_file, f64):
    rng = np.random.default_rng(31)
    m = dy.ParameterCollection()
    sm = ClassFactoredSoftmaxBuilder(3, cluster_file, GAPS, m)
    for p in m.parameters_list():
        p.set_value(rng.normal(size=p.shape()))
    xp = m.add_parameters((3,))
    r = rng.normal(size=9)
    r[[2, 5]] = 0          # the -10000 entries would drown the differences in rounding

    def loss():
        dy.renew_cg()
        x = dy.tanh(dy.parameter(xp))
        return dy.esum([sm.neg_log_softmax(x, i) for i in (0, 1, 4, 6, 8)]
                       + [dy.dot_product(sm.full_log_distribution(x), dy.inputVector(r))])
    check_param_grads(loss, m.parameters_list(), rng, 3)


def test_class_factored_batches_across_instances(cluster_file, f64):
    def run(strategy):
        m = dy.ParameterCollection()
        sm = ClassFactoredSoftmaxBuilder(3, cluster_file, DENSE, m)
        rng = np.random.default_rng(32)
        for p in m.parameters_list():
            p.set_value(rng.normal(size=p.shape()))
        dy.renew_cg(autobatching=strategy)
        loss = dy.esum([sm.neg_log_softmax(dy.inputVector(rng.normal(size=3)), int(w))
                        for w in rng.integers(0, 7, 12)])
        return value_grads_stats(loss, m.parameters_list())
    assert_batching_agrees(run, rtol=1e-10, atol=1e-13)


def test_class_factored_sample_follows_the_distribution(cluster_file):
    m = dy.ParameterCollection()
    sm = ClassFactoredSoftmaxBuilder(2, cluster_file, DENSE, m)
    for p in m.parameters_list():
        p.set_value(np.zeros(p.shape()))
    pc = np.array([0.1, 0.3, 0.4, 0.2])       # classes A, B, 10, q
    m.parameters_list()[1].set_value(np.log(pc))
    m.parameters_list()[5].set_value(np.log([0.5, 0.25, 0.25]))    # u, w, v
    want = np.zeros(7)
    for i, p in {3: 0.05, 0: 0.05, 5: 0.3, 1: 0.2, 2: 0.1, 4: 0.1, 6: 0.2}.items():
        want[i] = p
    dy.renew_cg()
    x = dy.inputVector([0.5, -1.0])
    draws = np.array([sm.sample(x) for _ in range(4000)])
    freq = np.bincount(draws, minlength=7) / len(draws)
    assert np.abs(freq - want).max() < 0.035     # about 4.5 standard deviations


def test_class_factored_errors(cluster_file, tmp_path):
    m = dy.ParameterCollection()
    sm = ClassFactoredSoftmaxBuilder(3, cluster_file, GAPS, m)
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0, 3.0])
    with pytest.raises(GraphError, match="word id 2 is in no class"):
        sm.neg_log_softmax(x, 2)
    with pytest.raises(GraphError, match="word id 9 is in no class"):
        sm.neg_log_softmax(x, 9)
    with pytest.raises(GraphError, match=r"class 1 \('B'\) has a single word"):
        sm.subclass_logits(x, 1)
    with pytest.raises(GraphError, match="class 4 out of range"):
        sm.subclass_log_distribution(x, 4)
    with pytest.raises(GraphError, match=r"ClassFactoredSoftmaxBuilder: input must have shape \(3,\)"):
        sm.class_logits(dy.inputVector([1.0]))
    assert sm.neg_log_softmax_batch(x, [1]).value() == sm.neg_log_softmax(x, 1).value()
    assert sm.neg_log_softmax(x, 0).dim() == ((1,), 1)        # the graph stays usable
    with pytest.raises(ValueError, match="unique ids 0..n-1"):
        ClassFactoredSoftmaxBuilder(3, cluster_file, dict(DENSE, s=9), m)
    with pytest.raises(ValueError, match="'v' is not in word_dict"):
        ClassFactoredSoftmaxBuilder(3, cluster_file, {k: i for i, k in enumerate("xyzuws")}, m)
    bad = tmp_path / "bad.txt"
    bad.write_text("A a\nB\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected 'class word'"):
        ClassFactoredSoftmaxBuilder(3, str(bad), {"a": 0, "B": 1}, m)
    bad.write_text("A a\nB a\n")
    with pytest.raises(ValueError, match="listed twice"):
        ClassFactoredSoftmaxBuilder(3, str(bad), {"a": 0}, m)
    with pytest.raises(FileNotFoundError):
        ClassFactoredSoftmaxBuilder(3, str(tmp_path / "none.txt"), {"a": 0}, m)
    with pytest.raises(ValueError, match="rep_dim"):
        ClassFactoredSoftmaxBuilder(0, cluster_file, DENSE, m)


def test_class_factored_save_load(cluster_file, tmp_path, f64):
    m = dy.ParameterCollection()
    sm = ClassFactoredSoftmaxBuilder(3, cluster_file, GAPS, m, bias=False)
    rng = np.random.default_rng(33)
    for p in m.parameters_list():
        p.set_value(rng.normal(size=p.shape()))
    os.remove(cluster_file)               # the spec holds the classes, not the file
    dy.save(str(tmp_path / "cf"), [sm])
    m2 = dy.ParameterCollection()
    (sm2,) = dy.load(str(tmp_path / "cf"), m2)
    assert type(sm2) is ClassFactoredSoftmaxBuilder and _names(m2) == _names(m)
    dy.renew_cg()
    x = dy.inputVector([0.2, 0.1, -0.4])
    np.testing.assert_array_equal(sm2.full_logits(x).npvalue(), sm.full_logits(x).npvalue())


def test_standard_softmax_is_a_softmax_builder():
    sm = StandardSoftmaxBuilder(3, 4, dy.ParameterCollection())
    assert isinstance(sm, SoftmaxBuilder)
    base = SoftmaxBuilder()
    with pytest.raises(NotImplementedError):
        base.full_logits(None)


# --- StackedRNNState --------------------------------------------------------------------
def test_stacked_rnn_state_chains_its_states(f64):
    rng = np.random.default_rng(34)
    m = dy.ParameterCollection()
    b1, b2 = dy.SimpleRNNBuilder(1, 3, 4, m), dy.SimpleRNNBuilder(1, 4, 2, m)
    w1, w2 = random_weights(b1, rng), random_weights(b2, rng)
    xs = vecs(rng, 3, 3)
    want = ref_rnn(w2, ref_rnn(w1, xs))
    dy.renew_cg()
    s0 = StackedRNNState([b1.initial_state(), b2.initial_state()])
    assert s0.output() is None and s0.prev() is None
    states = s0.add_inputs([dy.inputVector(x) for x in xs])
    assert len(states) == 3 and all(isinstance(s, StackedRNNState) for s in states)
    for s, r in zip(states, want):
        np.testing.assert_allclose(s.output().npvalue(), r, rtol=1e-12)
    assert states[2].prev() is states[1] and states[0].prev() is s0
    h = states[-1].h()
    assert [len(t) for t in h] == [1, 1] and h[1][0] is states[-1].output()
    assert [t[0].dim() for t in states[-1].s()] == [((4,), 1), ((2,), 1)]
    one = s0.add_input(dy.inputVector(xs[0]))
    np.testing.assert_allclose(one.output().npvalue(), want[0], rtol=1e-12)
    with pytest.raises(ValueError, match="non-empty list"):
        StackedRNNState([])
    with pytest.raises(TypeError, match="prev"):
        StackedRNNState([b1.initial_state()], prev=b1.initial_state())


# --- ClassFactoredSoftmaxBuilder against real DyNet (skipped where it is not installed) -----
_DYNET_CFSM = r"""
import json, sys, numpy as np
import dynet as dy
a = json.loads(sys.stdin.read())
m = dy.ParameterCollection()
sm = dy.ClassFactoredSoftmaxBuilder(3, a["file"], a["wd"], m, a["bias"])
ps = m.parameters_list()
for p, w in zip(ps, a["ws"]): p.set_value(np.array(w))
xp = m.add_parameters((3,)); xp.set_value(np.array(a["x"]))
dy.renew_cg()
x = dy.tanh(dy.parameter(xp))
res = {"names": [p.name() for p in ps], "cld": sm.class_log_distribution(x), "s2": sm.subclass_log_distribution(x, 2),
       "fl": sm.full_logits(x), "fld": sm.full_log_distribution(x)}
nls = [sm.neg_log_softmax(x, i) for i in a["ids"]]
loss = dy.esum(nls + [dy.dot_product(res["fl"], dy.inputVector(a["r"])), dy.sum_elems(res["s2"])])
out = {k: (e if k == "names" else e.npvalue().tolist()) for k, e in res.items()}
out["nls"] = [e.scalar_value() for e in nls]
loss.backward()
out["grads"] = [p.grad_as_array().tolist() for p in ps + [xp]]
print("RESULT" + json.dumps(out))
"""


@needs_dynet
@pytest.mark.parametrize("bias", [True, False])
def test_class_factored_as_dynet(tmp_path, bias, f64):
    cluster_file = str(tmp_path / "clusters.txt")
    with open(cluster_file, "w") as f:
        f.write(CLUSTERS.replace("\n\n", "\n"))    # DyNet rejects blank lines
    rng = np.random.default_rng(35)
    m = dy.ParameterCollection()
    sm = ClassFactoredSoftmaxBuilder(3, cluster_file, GAPS, m, bias)
    ws = [rng.normal(size=p.shape()) for p in m.parameters_list()]
    for p, w in zip(m.parameters_list(), ws):
        p.set_value(w)
    xv, r, ids = rng.normal(size=3), rng.normal(size=9), [0, 1, 3, 4, 6, 7, 8]
    inp = json.dumps({"file": cluster_file, "wd": GAPS, "bias": bias, "ws": [w.tolist() for w in ws],
                      "x": xv.tolist(), "r": r.tolist(), "ids": ids})
    want = run_dynet(_DYNET_CFSM, inp)
    assert want["names"] == [n for n, _ in _names(m)]
    xp = m.add_parameters((3,))
    xp.set_value(xv)
    dy.renew_cg()
    x = dy.tanh(dy.parameter(xp))
    got = {"cld": sm.class_log_distribution(x), "s2": sm.subclass_log_distribution(x, 2),
           "fl": sm.full_logits(x), "fld": sm.full_log_distribution(x)}
    nls = [sm.neg_log_softmax(x, i) for i in ids]
    for k, e in got.items():             # DyNet computes in float32
        np.testing.assert_allclose(e.npvalue(), want[k], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose([e.scalar_value() for e in nls], want["nls"], rtol=1e-5)
    dy.esum(nls + [dy.dot_product(got["fl"], dy.inputVector(r)), dy.sum_elems(got["s2"])]).backward()
    for p, g in zip(m.parameters_list() + [xp], want["grads"]):
        np.testing.assert_allclose(p.grad_as_array(), g, rtol=1e-4, atol=1e-5)
