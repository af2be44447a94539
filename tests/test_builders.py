"""RNN builders: equal to hand-written NumPy references for given weights, transduce
equals add_input, state layout as DyNet's, and sequences of different lengths batch
across instances with the same loss and gradients as unbatched execution."""
import numpy as np
import pytest

import autobatch as dy
from autobatch.errors import GraphError
from builder_kit import last_output, random_weights, ref_rnn, sequence_loss, sig, vecs
from check_kit import assert_batching_agrees, check_param_grads
from conftest import to_np


def ref_lstm(weights, xs, h0=None, c0=None, forget_bias=1.0):
    """weights: per layer (Wx, Wh, b); returns top-layer h per step and final (hs, cs).
    forget_bias is added to the forget gate at every step (DyNet's default: 1)."""
    L = len(weights)
    H = weights[0][1].shape[1]
    hs = list(h0) if h0 is not None else [None] * L
    cs = list(c0) if c0 is not None else [None] * L
    outs = []
    for x in xs:
        for l, (Wx, Wh, b) in enumerate(weights):
            a = b + Wx @ x + (Wh @ hs[l] if hs[l] is not None else 0)
            i, f, o, g = sig(a[:H]), sig(a[H:2 * H] + forget_bias), sig(a[2 * H:3 * H]), np.tanh(a[3 * H:])
            c = i * g + (f * cs[l] if cs[l] is not None else 0)
            hs[l], cs[l] = o * np.tanh(c), c
            x = hs[l]
        outs.append(x)
    return outs, hs, cs


def ref_gru(weights, xs, h0=None):
    L = len(weights)
    hs = list(h0) if h0 is not None else [np.zeros(weights[0][1].shape[0])] * L
    outs = []
    for x in xs:
        for l, (Wxz, Whz, bz, Wxr, Whr, br, Wxh, Whh, bh) in enumerate(weights):
            h = hs[l]
            z = sig(bz + Wxz @ x + Whz @ h)
            r = sig(br + Wxr @ x + Whr @ h)
            hh = np.tanh(bh + Wxh @ x + Whh @ (r * h))
            hs[l] = (1 - z) * h + z * hh
            x = hs[l]
        outs.append(x)
    return outs


BUILDERS = {"lstm": dy.VanillaLSTMBuilder, "rnn": dy.SimpleRNNBuilder, "gru": dy.GRUBuilder}


@pytest.mark.parametrize("kind", ["lstm", "rnn", "gru"])
@pytest.mark.parametrize("layers", [1, 2])
def test_matches_numpy_reference(kind, layers, f64):
    rng = np.random.default_rng(0)
    m = dy.ParameterCollection()
    b = BUILDERS[kind](layers, 3, 5, m)
    ws = random_weights(b, rng)
    xs = vecs(rng, 4, 3)
    dy.renew_cg()
    outs = b.initial_state().transduce([dy.inputVector(x) for x in xs])
    ref = {"lstm": lambda: ref_lstm(ws, xs)[0], "rnn": lambda: ref_rnn(ws, xs), "gru": lambda: ref_gru(ws, xs)}[kind]()
    assert len(outs) == len(ref)
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(o.npvalue(), r, rtol=1e-10, atol=1e-12)


def test_lstm_initial_vectors_match_reference(f64):
    rng = np.random.default_rng(1)
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(2, 3, 4, m)
    ws = random_weights(b, rng)
    c0 = vecs(rng, 2, 4)
    h0 = vecs(rng, 2, 4)
    xs = vecs(rng, 3, 3)
    dy.renew_cg()
    s = b.initial_state([dy.inputVector(v) for v in c0 + h0])
    np.testing.assert_allclose(s.output().npvalue(), h0[1])
    outs = s.transduce([dy.inputVector(x) for x in xs])
    ref, hs, cs = ref_lstm(ws, xs, h0, c0)
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(o.npvalue(), r, rtol=1e-10)
    last = s.add_inputs([dy.inputVector(x) for x in xs])[-1]
    # s() is DyNet's layout: cells of every layer, then h of every layer
    for e, r in zip(last.s(), cs + hs):
        np.testing.assert_allclose(e.npvalue(), r, rtol=1e-10)


@pytest.mark.parametrize("kind", ["rnn", "gru"])
def test_initial_vectors_match_reference(kind, f64):
    rng = np.random.default_rng(2)
    m = dy.ParameterCollection()
    b = BUILDERS[kind](2, 3, 4, m)
    ws = random_weights(b, rng)
    h0 = vecs(rng, 2, 4)
    xs = vecs(rng, 3, 3)
    dy.renew_cg()
    outs = b.initial_state_from_raw_vectors(h0).transduce([dy.inputVector(x) for x in xs])
    ref = ref_rnn(ws, xs, h0) if kind == "rnn" else ref_gru(ws, xs, h0)
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(o.npvalue(), r, rtol=1e-10)


@pytest.mark.parametrize("kind", ["lstm", "rnn", "gru"])
def test_transduce_equals_repeated_add_input(kind):
    rng = np.random.default_rng(3)
    m = dy.ParameterCollection()
    b = BUILDERS[kind](2, 3, 4, m)
    xs = vecs(rng, 5, 3)
    dy.renew_cg()
    t = b.initial_state().transduce([dy.inputVector(x) for x in xs])
    s = b.initial_state()
    steps = []
    for x in xs:
        s = s.add_input(dy.inputVector(x))
        steps.append(s.output())
    for a, c in zip(t, steps):
        np.testing.assert_array_equal(a.npvalue(), c.npvalue())


def test_state_api_as_dynet():
    m = dy.ParameterCollection()
    b = dy.LSTMBuilder(2, 3, 4, m)
    s0 = b.initial_state()
    assert s0.output() is None and s0.h() == () and s0.s() == () and s0.prev() is None
    s1 = s0.add_input(dy.inputVector([1, 2, 3]))
    assert s1.prev() is s0 and s1.b() is b
    assert len(s1.h()) == 2 and len(s1.s()) == 4
    assert s1.output().dim() == ((4,), 1)
    assert s1.h()[-1].i == s1.output().i
    s2 = s1.set_h([dy.zeros(4), dy.ones(4)])
    np.testing.assert_array_equal(s2.output().npvalue(), np.ones(4))
    assert s2.s()[0].i == s1.s()[0].i      # cells carry over
    r = dy.SimpleRNNBuilder(2, 3, 4, m).initial_state().add_input(dy.inputVector([1, 2, 3]))
    assert len(r.s()) == 2


def test_initial_state_update_false_gives_no_gradient(f64):
    m = dy.ParameterCollection()
    b = dy.GRUBuilder(1, 3, 4, m)
    dy.renew_cg()
    out = b.initial_state(update=False).transduce([dy.inputVector([1, 2, 3])] * 2)[-1]
    dy.sum_elems(out).backward()
    assert not any(p.grad_as_array().any() for p in m.parameters_list())
    dy.renew_cg()
    dy.sum_elems(b.initial_state().transduce([dy.inputVector([1, 2, 3])] * 2)[-1]).backward()
    assert all(p.grad_as_array().any() for p in m.parameters_list())


@pytest.mark.parametrize("kind", ["lstm", "rnn", "gru"])
def test_parameters_in_dynet_layout(kind):
    m = dy.ParameterCollection()
    b = BUILDERS[kind](2, 3, 4, m)
    shapes = [[p.shape() for p in layer] for layer in b.get_parameters()]
    expect = {"lstm": [[(16, 3), (16, 4), (16,)], [(16, 4), (16, 4), (16,)]],
              "rnn": [[(4, 3), (4, 4), (4,)], [(4, 4), (4, 4), (4,)]],
              "gru": [[(4, 3), (4, 4), (4,)] * 3, [(4, 4), (4, 4), (4,)] * 3]}[kind]
    assert shapes == expect
    assert b.param_collection() in m.subcollections()
    assert len(m.parameters_list()) == sum(len(l) for l in expect)
    dy.renew_cg()
    with pytest.raises(ValueError, match="initial_state"):       # DyNet's too: nothing loaded yet
        b.get_parameter_expressions()
    b.initial_state()
    assert len(b.get_parameter_expressions()[1]) == len(expect[1])
    dy.renew_cg()
    with pytest.raises(ValueError, match="initial_state"):       # that graph is gone
        b.get_parameter_expressions()


@pytest.mark.parametrize("fb", [1.0, 0.5, 0.0])
def test_lstm_forget_bias_is_a_constant_of_each_step_as_dynet(fb):
    """b starts at 0 and keeps DyNet's values; the step adds forget_bias to the forget gate."""
    b = dy.VanillaLSTMBuilder(1, 3, 4, dy.ParameterCollection(), forget_bias=fb)
    Wx, Wh, bias = b.get_parameters()[0]
    np.testing.assert_array_equal(bias.as_array(), np.zeros(16))
    for p in (Wx, Wh):
        p.set_value(np.zeros(p.shape()))
    dy.renew_cg()
    c0 = np.array([1.0, -2.0, 0.5, 4.0])
    s = b.initial_state([dy.inputVector(c0), dy.zeros(4)]).add_input(dy.inputVector([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(s.s()[0].npvalue(), sig(fb) * c0, rtol=1e-6)    # c = σ(0 + fb)·c0 + σ(0)·tanh(0)


def test_bad_input_raises():
    m = dy.ParameterCollection()
    b = dy.LSTMBuilder(2, 3, 4, m)
    with pytest.raises(GraphError, match=r"input must have shape \(3,\)"):
        b.initial_state().add_input(dy.inputVector([1, 2]))
    with pytest.raises(GraphError, match="needs 4 vectors"):
        b.initial_state([dy.zeros(4)] * 3)      # 2 (the cells alone) or 4
    with pytest.raises(GraphError, match="shape"):
        b.initial_state([dy.zeros(3)] * 4)
    with pytest.raises(ValueError):
        dy.GRUBuilder(0, 3, 4, m)
    with pytest.raises(ValueError):
        b.set_dropout(1.0)


@pytest.mark.parametrize("name", ["LSTMBuilder", "VanillaLSTMBuilder", "CoupledLSTMBuilder", "GRUBuilder",
                                  "SimpleRNNBuilder", "FastLSTMBuilder", "CompactVanillaLSTMBuilder", "BiRNNBuilder"])
def test_sizes_are_read_as_dynet_reads_them(name):
    """DyNet's benchmark bilstm-tagger-withchar.py builds LSTMBuilder(1, 64, WEMBED_SIZE/2, m), a
    float in Python 3: DyNet truncates sizes to ints; autobatch refused anything but an int."""
    m = dy.ParameterCollection()
    make = getattr(dy, name)
    out = 6 if name == "BiRNNBuilder" else 3
    for sizes in [(1, 4.0, 6 / 2 * (out // 3)), (np.int64(1), np.int32(4), np.float32(out + 0.7))]:
        b = make(sizes[0], sizes[1], sizes[2], m, dy.LSTMBuilder) if name == "BiRNNBuilder" else make(*sizes, m)
        dy.renew_cg()
        x = dy.inputVector([1.0, 2.0, 3.0, 4.0])
        got = b.transduce([x])[0] if name == "BiRNNBuilder" else b.initial_state().add_input(x).output()
        assert got.dim() == ((out,), 1)
    for bad in (0, 0.5, True, "3", None, float("nan")):
        args = (1, 4, bad, m, dy.LSTMBuilder) if name == "BiRNNBuilder" else (1, 4, bad, m)
        with pytest.raises(ValueError, match="hidden_dim must be a positive int"):
            make(*args)
    b = make(1, 4.0, 6.0, m, dy.LSTMBuilder) if name == "BiRNNBuilder" else make(1, 4.0, np.float32(3.0), m)
    spec = b.spec if name != "BiRNNBuilder" else b.spec[:3]
    assert [type(v) for v in spec[:3]] == [int] * 3 and spec[:3] == (1, 4, 6 if name == "BiRNNBuilder" else 3)
    sm = dy.StandardSoftmaxBuilder(4.0, np.int64(5), m)
    dy.renew_cg()
    assert sm.full_log_distribution(dy.inputVector([1.0, 2.0, 3.0, 4.0])).dim() == ((5,), 1)
    with pytest.raises(ValueError, match="num_labels must be a positive int"):
        dy.StandardSoftmaxBuilder(4, True, m)


@pytest.mark.parametrize("kind", ["lstm", "rnn", "gru"])
def test_dropout_on_off(kind):
    m = dy.ParameterCollection()
    b = BUILDERS[kind](2, 6, 8, m)
    xs = [np.linspace(-1, 1, 6) * k for k in range(1, 4)]

    def run():
        return last_output(b, xs).npvalue()
    base = run()
    b.set_dropout(0.5)
    assert not np.allclose(run(), base)
    dy.set_dropout(False)           # the global switch (evaluation) turns it off
    np.testing.assert_array_equal(run(), base)
    dy.set_dropout(True)
    b.disable_dropout()
    np.testing.assert_array_equal(run(), base)


def test_lstm_dropout_masks_fixed_along_sequence(f64):
    """Variational dropout (DyNet's VanillaLSTM): one input mask per sequence. With W_h = 0
    both steps of a sequence must match the reference for one and the same mask out of
    the 2^4 possible ones; fresh masks per step would fail for some of 6 sequences."""
    import itertools
    rng = np.random.default_rng(4)
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 4, 3, m)
    Wx, Wh, bias = random_weights(b, rng)[0]
    Wh[...] = 0
    b.get_parameters()[0][1].set_value(Wh)
    b.set_dropout(0.5, 0.0)
    xs = vecs(rng, 6, 4)
    dy.renew_cg()
    runs = [b.initial_state().transduce([dy.inputVector(x), dy.inputVector(x)]) for x in xs]
    masks_found = []
    for x, outs in zip(xs, runs):
        got = [o.npvalue() for o in outs]
        hits = []
        for bits in itertools.product([0.0, 2.0], repeat=4):
            ref, _, _ = ref_lstm([(Wx, Wh, bias)], [x * np.array(bits)] * 2)
            if all(np.allclose(g, r, rtol=1e-9, atol=1e-12) for g, r in zip(got, ref)):
                hits.append(bits)
        assert hits, "no single mask explains both steps"
        masks_found.append(hits[0])
    assert len(set(masks_found)) > 1      # but each sequence draws its own mask


@pytest.mark.parametrize("kind", ["lstm", "rnn", "gru"])
def test_batches_across_sequences(kind, f64):
    # the longest sequence bounds the steps: far fewer batches than nodes run unbatched
    assert_batching_agrees(lambda strategy: sequence_loss(lambda m: BUILDERS[kind](2, 3, 4, m), strategy,
                                                          [3, 5, 2, 5, 4], seed=5))


def test_lstm_gradient_matches_finite_differences(f64):
    rng = np.random.default_rng(6)
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(2, 3, 4, m)
    random_weights(b, rng)
    xs = vecs(rng, 3, 3)
    check_param_grads(lambda: dy.sum_elems(last_output(b, xs)), m.parameters_list(), rng, 3)


def test_builder_on_backend(backend):
    """Runs on each array backend (CuPy skips without a GPU); values agree with NumPy math."""
    rng = np.random.default_rng(8)
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 3, 4, m)
    ws = random_weights(b, rng)
    xs = vecs(rng, 3, 3)
    out = last_output(b, xs)
    np.testing.assert_allclose(to_np(out.npvalue()), ref_lstm(ws, xs)[0][-1], rtol=1e-4, atol=1e-5)


# --- SimpleRNNBuilder's dropout: variational, as DyNet 2.1's ---------------------------
def _probe_rnn(layers=1, H=16):
    """A SimpleRNNBuilder whose masks can be read off its outputs: W_x = I, W_h = 0, b = 0
    (h = tanh(W_x·(x⊙m)), so m = artanh(h)/x)."""
    b = dy.SimpleRNNBuilder(layers, H, H, dy.ParameterCollection())
    for Wx, Wh, bias in b.get_parameters():
        Wx.set_value(np.eye(H))
        Wh.set_value(np.zeros((H, H)))
        bias.set_value(np.zeros(H))
    return b


def _mask(h, x):
    m = np.arctanh(h) / x
    assert np.allclose(m[np.abs(m) > 1e-9], 2.0, rtol=1e-9), m     # 0 or 1/(1 - 0.5)
    return tuple(np.round(m).astype(int))


def test_rnn_input_masks_fixed_along_a_sequence(f64):
    """DyNet's SimpleRNNBuilder draws its masks once, not per step (checked with DyNet 2.1:
    the same mask at every step); here once per initial_state(), so sequences differ."""
    b = _probe_rnn()
    b.set_dropout(0.5, 0.0)
    x = np.full(16, 0.1)
    dy.renew_cg()
    seqs = [b.initial_state().transduce([dy.inputVector(x)] * 3) for _ in range(4)]
    masks = [[_mask(o.npvalue(), x) for o in outs] for outs in seqs]
    for ms in masks:
        assert ms[0] == ms[1] == ms[2] and 0 < sum(ms[0]) < 32
    assert len({ms[0] for ms in masks}) > 1


def test_rnn_masks_per_layer(f64):
    """Layer 2 has its own mask on its input (layer 1's h), as in DyNet."""
    b = _probe_rnn(layers=2)
    b.set_dropouts(0.5, 0.0)
    x = np.full(16, 0.1)
    dy.renew_cg()
    s = b.initial_state().add_input(dy.inputVector(x))
    h1, h2 = (e.npvalue() for e in s.h())
    m1 = np.array(_mask(h1, x))
    kept = m1 > 0
    m2 = np.arctanh(h2[kept]) / h1[kept]
    assert np.allclose(m2[np.abs(m2) > 1e-9], 2.0) and (m2 < 1e-9).any()
    np.testing.assert_array_equal(h2[~kept], 0)


def test_rnn_recurrent_mask(f64):
    """set_dropouts(d, d_h): d_h masks h_prev (a given initial h too) with one mask per
    sequence: W_x = 0, W_h = I, b = 0.1 give h_t = tanh(0.1 + m⊙h_{t-1})."""
    H = 16
    b = dy.SimpleRNNBuilder(1, H, H, dy.ParameterCollection())
    Wx, Wh, bias = b.get_parameters()[0]
    Wx.set_value(np.zeros((H, H)))
    Wh.set_value(np.eye(H))
    bias.set_value(np.full(H, 0.1))
    b.set_dropouts(0.0, 0.5)
    assert (b.dropout, b.dropout_h) == (0.0, 0.5)
    dy.renew_cg()
    h0 = np.full(H, 0.5)
    outs = [o.npvalue() for o in b.initial_state_from_raw_vectors([h0]).transduce([dy.zeros(H)] * 3)]
    prev, masks = h0, []
    for h in outs:
        m = (np.arctanh(h) - 0.1) / prev
        assert np.allclose(m[np.abs(m) > 1e-9], 2.0)
        masks.append(tuple(np.round(m).astype(int)))
        prev = h
    assert masks[0] == masks[1] == masks[2] and 0 < sum(masks[0]) < 2 * H
    b.set_dropout(0.3)            # DyNet's set_dropout(d) sets both rates
    assert (b.dropout, b.dropout_h) == (0.3, 0.3)


def test_rnn_set_dropout_masks_redraws_mid_sequence(f64):
    """As DyNet's: the steps after set_dropout_masks() use new masks, fixed from then on."""
    b = _probe_rnn()
    b.set_dropouts(0.5, 0.0)
    x = np.full(16, 0.1)
    dy.renew_cg()
    s1 = b.initial_state().add_input(dy.inputVector(x))
    b.set_dropout_masks()
    s3 = s1.add_inputs([dy.inputVector(x)] * 2)
    ms = [_mask(s.output().npvalue(), x) for s in [s1] + s3]
    assert ms[1] == ms[2] and ms[0] != ms[1]
    b.set_dropout_masks(4)        # batch_size is accepted: every sequence has its own masks
    with pytest.raises(ValueError, match="batch_size"):
        b.set_dropout_masks(0)
    dy.renew_cg()                 # the last sequence's graph is gone: nothing to redraw
    b.set_dropout_masks()


def test_rnn_dropout_off_in_evaluation(f64):
    b = _probe_rnn()
    b.set_dropouts(0.5, 0.5)
    x = np.full(16, 0.1)
    assert _mask(last_output(b, [x]).npvalue(), x) != (1,) * 16
    dy.set_dropout(False)         # the global switch (evaluation) turns it off
    np.testing.assert_allclose(last_output(b, [x]).npvalue(), np.tanh(x))
    dy.set_dropout(True)
    b.disable_dropout()
    np.testing.assert_allclose(last_output(b, [x]).npvalue(), np.tanh(x))


def test_lstm_set_dropout_masks_redraws_mid_sequence(f64):
    """VanillaLSTMBuilder shares SimpleRNNBuilder's set_dropout_masks (checked with DyNet 2.1:
    the steps after the call use new masks). With i ≈ 1, f ≈ 0 and W_x·x = x in the g rows
    the cell is tanh(x⊙m)."""
    H = 16
    b = dy.VanillaLSTMBuilder(1, H, H, dy.ParameterCollection())
    Wx, Wh, bias = b.get_parameters()[0]
    Wx.set_value(np.vstack([np.zeros((3 * H, H)), np.eye(H)]))
    Wh.set_value(np.zeros((4 * H, H)))
    bias.set_value(np.r_[np.full(H, 30.0), np.full(H, -30.0), np.zeros(2 * H)])
    b.set_dropouts(0.5, 0.0)
    x = np.full(H, 0.1)
    dy.renew_cg()
    s1 = b.initial_state().add_input(dy.inputVector(x))
    b.set_dropout_masks()
    s3 = s1.add_inputs([dy.inputVector(x)] * 2)
    ms = [_mask(s.s()[0].npvalue(), x) for s in [s1] + s3]
    assert ms[1] == ms[2] and ms[0] != ms[1]


@pytest.mark.parametrize("cls", [dy.VanillaLSTMBuilder, dy.SimpleRNNBuilder, dy.GRUBuilder])
def test_a_parameter_serves_as_input_and_state_as_in_dynet(cls):
    """DyNet takes a Parameters object wherever an expression goes, a builder's add_input,
    transduce and initial_state too (a stack-LSTM parser's learned empty-stack guard)."""
    m = dy.ParameterCollection()
    b = cls(1, 3, 2, m)
    p = m.add_parameters((3,), init=dy.NumpyInitializer(np.array([0.1, -0.2, 0.3])))
    h0 = m.add_parameters((2,), init=0.5)
    dy.renew_cg()
    want = b.initial_state().add_input(dy.parameter(p)).output().npvalue()
    np.testing.assert_array_equal(b.initial_state().add_input(p).output().npvalue(), want)
    np.testing.assert_array_equal(b.initial_state().transduce([p])[-1].npvalue(), want)
    n = 2 if cls is dy.VanillaLSTMBuilder else 1          # an LSTM's state: its cells, then h
    got = b.initial_state([h0] * n).add_input(p).output().npvalue()
    np.testing.assert_array_equal(got, b.initial_state([dy.parameter(h0)] * n).add_input(p).output().npvalue())
    dy.sum_elems(b.initial_state().add_input(p).output()).backward()
    assert np.abs(p.grad_as_array()).sum() > 0


def test_state_s_after_a_revert_names_the_cell_of_its_step(f64):
    """s() keeps one slice node per LSTM cell node; a cg_revert that dropped both lets the same
    step, built again, reuse the cell's id while the old slice's id went to another node."""
    pc = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 3, 4, pc)
    E = pc.add_lookup_parameters((6, 3))
    dy.renew_cg()
    x = dy.lookup(E, 1)
    s0 = b.initial_state()
    dy.cg_checkpoint()
    s0.add_input(x).s()
    dy.cg_revert()
    s1 = s0.add_input(x)
    dy.tanh(dy.lookup(E, 2) * 3.0)         # takes the dropped slice's id
    c, h = s1.s()
    assert c.dim() == ((4,), 1)
    np.testing.assert_allclose(c.npvalue(), dy.pickrange(s1._cs[0], 4, 8).npvalue())
    np.testing.assert_allclose(h.npvalue(), s1.output().npvalue())


def test_state_s_inside_a_vertex_function(f64):
    m = dy.ParameterCollection()
    rnn = dy.VanillaLSTMBuilder(1, 4, 3, m)

    @dy.vertex_function(max_children=0)
    def F(v):
        v.push("c", rnn.initial_state().add_input(v.pull("x")).s()[0])
    X = np.random.default_rng(5).normal(size=(3, 4))
    dy.renew_cg()
    got = F([dy.InputGraph([[], [], []])], x=[X])["c"].npvalue()
    dy.renew_cg()
    want = [rnn.initial_state().add_input(dy.inputVector(x)).s()[0].npvalue() for x in X]
    np.testing.assert_allclose(np.asarray(got).reshape(3, 3), np.array(want), rtol=1e-12)


def test_masks_drawn_after_a_checkpoint_are_drawn_again_after_its_revert():
    """A sequence begun before cg_checkpoint() draws its masks at its first input, after it:
    cg_revert() drops them with that input's nodes, and the next input draws new ones instead
    of reading the dropped ids (which later nodes take)."""
    import itertools
    dy.set_dropout(True)
    try:
        pc = dy.ParameterCollection()
        b = dy.SimpleRNNBuilder(1, 3, 3, pc)
        b.set_dropout(0.5)
        Wx, _, bias = [p.as_array() for p in b.get_parameters()[0]]
        x = np.array([1.0, 2.0, 3.0])
        dy.renew_cg()
        s0 = b.initial_state()
        dy.cg_checkpoint()
        s0.add_input(dy.inputVector(x)).output().npvalue()
        dy.cg_revert()
        for _ in range(10):
            dy.inputVector([100.0, 100.0, 100.0])           # nodes that take the dropped ids
        out = s0.add_input(dy.inputVector(x)).output().npvalue()
        # x times a mask of 0s and 2s (rate 0.5), the first step's h_prev being zero
        cands = [np.tanh(Wx @ (x * np.array(m)) + bias) for m in itertools.product((0.0, 2.0), repeat=3)]
        assert any(np.allclose(out, c, rtol=1e-5, atol=1e-6) for c in cands)
    finally:
        dy.set_dropout(False)
