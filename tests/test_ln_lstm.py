"""VanillaLSTMBuilder(ln_lstm=True), DyNet's layer-normalised LSTM: parameters as DyNet 2.1
creates them, values against a NumPy reference and against real DyNet (in a subprocess,
skipped where it is not installed), the same values and gradients under every strategy and
with or without replayed steps, and a loss that training brings down."""
import json

import numpy as np
import pytest

import autobatch as dy
from autobatch import recipes
from builder_kit import sequence_loss, sig, vecs
from check_kit import assert_batching_agrees, check_param_grads, graph_columns, needs_dynet, run_dynet


def ln(v, g, b):
    d = v - v.mean()
    return g * d / (np.sqrt((d * d).mean()) + 1e-8) + b


def ref_ln_lstm(weights, xs, h0=None, c0=None, forget_bias=1.0):
    """weights per layer (Wx, Wh, b, g_h, b_h, g_x, b_x, g_c, b_c); the top h per step and the
    final (cells, hs). forget_bias is added to the forget slice at every step (as DyNet)."""
    L, H = len(weights), weights[0][1].shape[1]
    hs = list(h0) if h0 is not None else [None] * L
    cs = list(c0) if c0 is not None else [None] * L
    outs = []
    for x in xs:
        for l, (Wx, Wh, b, gh, bh, gx, bx, gc, bc) in enumerate(weights):
            a = b + ln(Wx @ x, gx, bx) + (ln(Wh @ hs[l], gh, bh) if hs[l] is not None else 0)
            i, f = sig(a[:H]), sig(a[H:2 * H] + forget_bias)
            o, g = sig(a[2 * H:3 * H]), np.tanh(a[3 * H:])
            cs[l] = i * g + (f * cs[l] if cs[l] is not None else 0)
            hs[l] = o * np.tanh(ln(cs[l], gc, bc))
            x = hs[l]
        outs.append(x)
    return outs, cs, hs


def all_weights(b, rng, scale=0.7):
    """Random values for every parameter of b (layer-norm gains and biases too), per layer."""
    ps = b.param_collection().parameters_list()
    ws = [rng.normal(0, scale, p.shape()) for p in ps]
    for p, w in zip(ps, ws):
        p.set_value(w)
    return [ws[9 * l:9 * l + 9] for l in range(b.layers)]


def test_parameters_as_dynet():
    """DyNet 2.1 (checked with equal arguments): get_parameters [W_x, W_h, b] per layer, and
    per layer six more after b: g_h, b_h, g_x, b_x (4H) and g_c, b_c (H), gains 1, biases 0."""
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(2, 3, 4, m, ln_lstm=True, forget_bias=0.5)
    assert [[p.shape() for p in P] for P in b.get_parameters()] == [[(16, 3), (16, 4), (16,)], [(16, 4), (16, 4), (16,)]]
    dy.renew_cg()
    b.initial_state()
    assert [len(P) for P in b.get_parameter_expressions()] == [3, 3]
    ps = m.parameters_list()
    lay = lambda d: [(16, d), (16, 4), (16,), (16,), (16,), (16,), (16,), (4,), (4,)]  # noqa: E731
    assert [p.shape() for p in ps] == lay(3) + lay(4)
    assert ps == b.param_collection().parameters_list()
    for l in range(2):
        np.testing.assert_array_equal(ps[9 * l + 2].as_array(), np.zeros(16))     # the step adds forget_bias
        for k, want in zip(range(3, 9), (1, 0, 1, 0, 1, 0)):
            np.testing.assert_array_equal(ps[9 * l + k].as_array(), np.full(ps[9 * l + k].shape(), float(want)))
    assert b.spec == (2, 3, 4, True, 0.5)
    assert dy.VanillaLSTMBuilder(1, 3, 4, m).spec == (1, 3, 4, False, 1.0)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("given", [False, True])
def test_matches_numpy_reference(layers, given, f64):
    rng = np.random.default_rng(40 + layers)
    b = dy.VanillaLSTMBuilder(layers, 3, 5, dy.ParameterCollection(), ln_lstm=True)
    ws = all_weights(b, rng)
    xs = vecs(rng, 4, 3)
    c0, h0 = (vecs(rng, layers, 5), vecs(rng, layers, 5)) if given else (None, None)
    dy.renew_cg()
    s = b.initial_state([dy.inputVector(v) for v in c0 + h0]) if given else b.initial_state()
    outs = s.transduce([dy.inputVector(x) for x in xs])
    ref, cs, hs = ref_ln_lstm(ws, xs, h0, c0)
    assert len(outs) == len(ref)
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(o.npvalue(), r, rtol=1e-10, atol=1e-12)
    last = s.add_inputs([dy.inputVector(x) for x in xs])[-1]
    for e, r in zip(last.s(), cs + hs):       # DyNet's layout; the cells are not normalised
        np.testing.assert_allclose(e.npvalue(), r, rtol=1e-10, atol=1e-12)


def test_differs_from_the_plain_lstm(f64):
    """With the same W_x, W_h, b, the normalisation changes the outputs (the test above
    would pass for a builder that ignored ln_lstm only if the reference did too)."""
    rng = np.random.default_rng(43)
    m = dy.ParameterCollection()
    a, b = dy.VanillaLSTMBuilder(1, 3, 4, m), dy.VanillaLSTMBuilder(1, 3, 4, m, ln_lstm=True)
    for p, q in zip(a.get_parameters()[0], b.get_parameters()[0]):
        q.set_value(p.as_array())
    xs = [dy.inputVector(x) for x in vecs(rng, 3, 3)]
    outs = [s.transduce(xs)[-1].npvalue() for s in (a.initial_state(), b.initial_state())]
    assert np.abs(outs[0] - outs[1]).max() > 1e-3


def test_gradient_matches_finite_differences(f64):
    rng = np.random.default_rng(44)
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(2, 3, 4, m, ln_lstm=True)
    all_weights(b, rng)
    xs = vecs(rng, 3, 3)
    r = rng.normal(size=4)

    def loss():
        dy.renew_cg()
        return dy.dot_product(b.initial_state().transduce([dy.inputVector(x) for x in xs])[-1], dy.inputVector(r))
    check_param_grads(loss, m.parameters_list(), rng, 3)


def _ln(m):
    return dy.VanillaLSTMBuilder(2, 3, 4, m, ln_lstm=True)


def test_strategies_agree(f64):
    """none, depth and agenda: the same loss and gradients; agenda batches the steps."""
    lengths = [3, 5, 2, 5, 4]
    v0, g0, _ = sequence_loss(_ln, "none", lengths, seed=45)
    v1, g1, _ = sequence_loss(_ln, "depth", lengths, seed=45)
    assert v1 == pytest.approx(v0, rel=1e-12)
    for a, c in zip(g0, g1):
        np.testing.assert_allclose(c, a, rtol=1e-9, atol=1e-12)
    assert_batching_agrees(lambda strategy: sequence_loss(_ln, strategy, lengths, seed=45))


def _program(replay, stepwise, drop):
    """Sequences through one ln builder in one graph (a given initial state, update=False,
    dropout masks), built with or without replayed steps; returns (graph, loss, params)."""
    with pytest.MonkeyPatch.context() as mp:
        if not replay:
            mp.setattr(recipes, "_compile", lambda *a: None)
        dy.reset_random_seed(3)
        dy.set_dropout(drop)
        pc = dy.ParameterCollection()
        b = dy.VanillaLSTMBuilder(2, 3, 4, pc, ln_lstm=True)
        b.set_dropout(0.3, 0.2)
        E = pc.add_lookup_parameters((7, 4))
        g = dy.renew_cg("agenda")
        losses = []
        for k, n in enumerate([4, 0, 5, 3]):
            s = b.initial_state([dy.tanh(E[(k + j) % 7]) for j in range(4)] if k == 2 else None, update=k != 3)
            xs = [dy.inputVector([0.1 * t, -0.2 * k, 0.3]) for t in range(n)]
            outs = [t.output() for t in s.add_inputs(xs)] if stepwise else s.transduce(xs)
            if outs:
                losses.append(dy.sum_elems(dy.esum(outs)))
        return g, dy.esum(losses), pc


@pytest.mark.parametrize("drop", [False, True])
def test_replayed_steps_build_the_same_graph(drop):
    """Replayed steps (recipes.py) append exactly the nodes the expression functions make,
    through transduce's loop and through add_input, and give the same values and gradients."""
    cols = ("ops", "args", "shapes", "sizes", "sigs", "depths", "needs", "uses", "attrs")
    runs = []
    for replay, stepwise in ((True, False), (False, False), (True, True)):
        g, loss, pc = _program(replay, stepwise, drop)
        replayed = any(callable(t) for t in g._recipes.values())
        got = graph_columns(g, cols)
        v = loss.value()
        loss.backward()
        runs.append((replayed, got, v, [p.grad_as_array().copy() for p in pc.parameters_list() + pc.lookup_parameters_list()]))
    assert [r[0] for r in runs] == [True, False, True]
    for _, got, v, grads in runs[1:]:
        for c in cols:
            assert got[c] == runs[0][1][c], c
        assert v == runs[0][2]
        for a, w in zip(grads, runs[0][3]):
            np.testing.assert_array_equal(a, w)


def test_dropout_masks_fixed_along_a_sequence(f64):
    """Variational dropout as the plain LSTM's: with W_h = 0 both steps of a sequence are
    explained by one and the same input mask."""
    import itertools
    rng = np.random.default_rng(46)
    b = dy.VanillaLSTMBuilder(1, 4, 3, dy.ParameterCollection(), ln_lstm=True)
    ws = all_weights(b, rng)
    ws[0][1][...] = 0
    b.get_parameters()[0][1].set_value(ws[0][1])
    b.set_dropout(0.5, 0.0)
    for x in vecs(rng, 4, 4):
        dy.renew_cg()
        got = [o.npvalue() for o in b.initial_state().transduce([dy.inputVector(x)] * 2)]
        hits = [bits for bits in itertools.product([0.0, 2.0], repeat=4)
                if all(np.allclose(g, r, rtol=1e-9, atol=1e-12)
                       for g, r in zip(got, ref_ln_lstm(ws, [x * np.array(bits)] * 2)[0]))]
        assert hits, "no single mask explains both steps"


def test_training_lowers_the_loss():
    """Adam on a toy task (the class is the first token's parity): the loss falls by half."""
    rng = np.random.default_rng(47)
    dy.reset_random_seed(5)
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 4, 8, m, ln_lstm=True)
    E = m.add_lookup_parameters((6, 4))
    V = m.add_parameters((2, 8))
    data = [[int(t) for t in rng.integers(0, 6, int(rng.integers(2, 6)))] for _ in range(12)]
    tr = dy.AdamTrainer(m, 0.05)

    def epoch():
        dy.renew_cg()
        loss = dy.esum([dy.pickneglogsoftmax(V * b.initial_state().transduce([E[t] for t in toks])[-1], toks[0] % 2)
                        for toks in data])
        v = loss.scalar_value()
        loss.backward()
        tr.update()
        return v
    first = epoch()
    for _ in range(40):
        last = epoch()
    assert last < 0.5 * first
    assert any(np.abs(p.as_array() - w).max() > 0 for p, w in
               zip(b.param_collection().parameters_list()[3:9], [1, 0, 1, 0, 1, 0]))


def test_save_and_load_keep_the_normalisation(tmp_path, f64):
    rng = np.random.default_rng(48)
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(2, 3, 4, m, ln_lstm=True, forget_bias=0.25)
    all_weights(b, rng)
    xs = vecs(rng, 3, 3)
    dy.save(str(tmp_path / "ln"), [b])
    (b2,) = dy.load(str(tmp_path / "ln"), dy.ParameterCollection())
    assert b2.ln_lstm and b2.spec == b.spec
    dy.renew_cg()
    outs = [c.initial_state().transduce([dy.inputVector(x) for x in xs])[-1].npvalue() for c in (b, b2)]
    np.testing.assert_array_equal(outs[0], outs[1])


# --- against real DyNet (skipped where it is not installed) ---------------------------
_DYNET_SCRIPT = r"""
import json, sys, numpy as np
import dynet as dy
a = json.loads(sys.stdin.read())
m = dy.ParameterCollection()
b = dy.VanillaLSTMBuilder(a["L"], a["I"], a["H"], m, True, a["fb"])
ps = m.parameters_list()
out = {"layout": [[p.name(), list(p.shape())] for p in ps], "init": [p.as_array().tolist() for p in ps[2:9]],
       "get": [[list(p.shape()) for p in P] for P in b.get_parameters()],
       "bpc": [p.name() for p in b.param_collection().parameters_list()]}
for p, w in zip(ps, a["ws"]):
    p.set_value(np.array(w))
X = [m.add_parameters((a["I"],)) for _ in a["xs"]]
S = [m.add_parameters((a["H"],)) for _ in a["s0"]]
for p, w in zip(X + S, a["xs"] + a["s0"]):
    p.set_value(np.array(w))
dy.renew_cg()
xs = [dy.parameter(p) for p in X]
s1 = b.initial_state()
s2 = b.initial_state([dy.parameter(p) for p in S])
h1 = s1.transduce(xs)
last = s2.add_inputs(xs[::-1])[-1]
h2 = [s.output() for s in s2.add_inputs(xs[::-1])]
loss = dy.esum([dy.dot_product(h, dy.inputVector(r)) for h, r in zip(h1 + h2, a["r"])]
               + [dy.dot_product(last.s()[0], dy.inputVector(a["r"][0]))])
out["h"] = [h.npvalue().tolist() for h in h1 + h2]
out["s"] = [e.npvalue().tolist() for e in last.s()]
out["loss"] = loss.scalar_value()
loss.backward()
out["gx"] = [p.grad_as_array().tolist() for p in X + S]
out["gw"] = [p.grad_as_array().tolist() for p in ps]
print("RESULT" + json.dumps(out))
"""


@needs_dynet
@pytest.mark.parametrize("layers,fb", [(2, 1.0), (1, 0.4)])
def test_same_values_and_gradients_as_dynet(layers, fb, f64):
    """Equal parameters, equal inputs: the same h's, cells, loss and gradients (inputs, initial state, every
    parameter) as DyNet 2.1 up to its float32 rounding."""
    rng = np.random.default_rng(49 + layers)
    I, H, T = 3, 4, 3
    m = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(layers, I, H, m, ln_lstm=True, forget_bias=fb)
    ours = b.param_collection().parameters_list()
    init = [p.as_array().copy() for p in ours[2:9]]
    ws = [rng.normal(0, 0.7, p.shape()) for p in ours]
    xs, s0 = vecs(rng, T, I), vecs(rng, 2 * layers, H)
    r = vecs(rng, 2 * T, H)
    want = run_dynet(_DYNET_SCRIPT, json.dumps({"L": layers, "I": I, "H": H, "fb": fb, "ws": [w.tolist() for w in ws],
                                                "xs": [x.tolist() for x in xs], "s0": [v.tolist() for v in s0],
                                                "r": [v.tolist() for v in r]}))
    # layout: the same shapes in the same order; DyNet names the six /_k in the parent model
    assert [tuple(s) for _, s in want["layout"]] == [p.shape() for p in ours]
    assert want["bpc"] == [n for n, _ in want["layout"] if n.startswith("/vanilla-lstm-builder/")]
    assert [n for n, _ in want["layout"][3:9]] == [f"/_{k}" for k in range(6)]
    assert want["get"] == [[list(p.shape()) for p in P] for P in b.get_parameters()]
    for got, w in zip(init, want["init"]):
        np.testing.assert_array_equal(got, w)
    for p, w in zip(ours, ws):
        p.set_value(w)
    X = [m.add_parameters((I,)) for _ in xs]
    S = [m.add_parameters((H,)) for _ in s0]
    for p, w in zip(X + S, xs + s0):
        p.set_value(w)
    dy.renew_cg()
    ex = [dy.parameter(p) for p in X]
    s1, s2 = b.initial_state(), b.initial_state([dy.parameter(p) for p in S])
    h1 = s1.transduce(ex)
    last = s2.add_inputs(ex[::-1])[-1]
    h2 = [s.output() for s in s2.add_inputs(ex[::-1])]
    loss = dy.esum([dy.dot_product(h, dy.inputVector(v)) for h, v in zip(h1 + h2, r)]
                   + [dy.dot_product(last.s()[0], dy.inputVector(r[0]))])
    for h, w in zip(h1 + h2, want["h"]):                 # DyNet computes in float32
        np.testing.assert_allclose(h.npvalue(), w, rtol=1e-5, atol=1e-6)
    for e, w in zip(last.s(), want["s"]):
        np.testing.assert_allclose(e.npvalue(), w, rtol=1e-5, atol=1e-6)
    assert loss.scalar_value() == pytest.approx(want["loss"], rel=1e-5, abs=1e-6)
    loss.backward()
    for p, g in zip(X + S, want["gx"]):
        np.testing.assert_allclose(p.grad_as_array(), g, rtol=1e-4, atol=1e-5)
    for p, g in zip(ours, want["gw"]):
        np.testing.assert_allclose(p.grad_as_array(), g, rtol=1e-4, atol=1e-5)
