"""DyNet's low-level LSTM functions (autobatch/api_lstm.py): values equal hand-written NumPy
(gate order i, f, o, g, the forget gate's +1, masks on the inputs), gradients equal central
differences, instances batch, bad input names the function; and, where DyNet is installed,
the same values and gradients as DyNet's for equal parameter values."""
import json

import numpy as np
import pytest

import autobatch as dy
from autobatch import api_lstm
from autobatch.api_lstm import (vanilla_lstm_c, vanilla_lstm_gates, vanilla_lstm_gates_concat,
                                vanilla_lstm_gates_dropout, vanilla_lstm_gates_dropout_concat,
                                vanilla_lstm_h)
from autobatch.errors import GraphError
from builder_kit import sig
from check_kit import assert_batching_agrees, check_param_grads, needs_dynet, run_dynet, value_grads_stats

I, H = 3, 2


def ref_gates(Wx, Wh, b, x, h):
    a = Wx @ x + Wh @ h + b
    return np.concatenate([sig(a[:H]), sig(a[H:2 * H] + 1), sig(a[2 * H:3 * H]), np.tanh(a[3 * H:])])


def data(seed=0):
    rng = np.random.default_rng(seed)
    return dict(Wx=rng.normal(size=(4 * H, I)), Wh=rng.normal(size=(4 * H, H)), b=rng.normal(size=4 * H),
                x=rng.normal(size=I), h=rng.normal(size=H), c=rng.normal(size=H),
                mx=rng.normal(size=I), mh=rng.normal(size=H))


def params(v):
    m = dy.ParameterCollection()
    P = {k: m.add_parameters(v[k].shape) for k in ("Wx", "Wh", "b")}
    for k, p in P.items():
        p.set_value(v[k])
    return m, P


def test_names_as_dynet():
    assert sorted(api_lstm.__all__) == sorted(
        "vanilla_lstm_gates vanilla_lstm_gates_concat vanilla_lstm_gates_dropout "
        "vanilla_lstm_gates_dropout_concat vanilla_lstm_c vanilla_lstm_h".split())


def test_gates_values_and_order(f64):
    v = data(1)
    _, P = params(v)
    dy.renew_cg()
    x, h = dy.inputVector(v["x"]), dy.inputVector(v["h"])
    g = vanilla_lstm_gates(x, h, P["Wx"], P["Wh"], P["b"])
    assert g.dim() == ((4 * H,), 1)
    np.testing.assert_allclose(g.npvalue(), ref_gates(v["Wx"], v["Wh"], v["b"], v["x"], v["h"]), rtol=1e-12)
    # parameter expressions work as well as Parameters
    g2 = vanilla_lstm_gates(x, h, dy.parameter(P["Wx"]), dy.parameter(P["Wh"]), dy.parameter(P["b"]))
    np.testing.assert_array_equal(g2.npvalue(), g.npvalue())


def test_concat_and_dropout_variants(f64):
    v = data(2)
    _, P = params(v)
    dy.renew_cg()
    x1, x2 = dy.inputVector(v["x"][:1]), dy.inputVector(v["x"][1:])
    h, mx, mh = dy.inputVector(v["h"]), dy.inputVector(v["mx"]), dy.inputVector(v["mh"])
    W = (P["Wx"], P["Wh"], P["b"])
    want = ref_gates(v["Wx"], v["Wh"], v["b"], v["x"], v["h"])
    np.testing.assert_allclose(vanilla_lstm_gates_concat([x1, x2], h, *W).npvalue(), want, rtol=1e-12)
    np.testing.assert_allclose(vanilla_lstm_gates_concat([dy.inputVector(v["x"])], h, *W).npvalue(), want, rtol=1e-12)
    # the masks multiply x and h before the products (I != H here: the other reading has no meaning)
    want_d = ref_gates(v["Wx"], v["Wh"], v["b"], v["x"] * v["mx"], v["h"] * v["mh"])
    np.testing.assert_allclose(vanilla_lstm_gates_dropout(dy.inputVector(v["x"]), h, *W, mx, mh).npvalue(),
                               want_d, rtol=1e-12)
    np.testing.assert_allclose(vanilla_lstm_gates_dropout_concat([x1, x2], h, *W, mx, mh).npvalue(), want_d, rtol=1e-12)


def test_cell_and_output(f64):
    v = data(3)
    rng = np.random.default_rng(3)
    gv = rng.uniform(0.1, 0.9, 4 * H)
    dy.renew_cg()
    g, c = dy.inputVector(gv), dy.inputVector(v["c"])
    ct = vanilla_lstm_c(c, g)
    assert ct.dim() == ((H,), 1)
    want_c = gv[:H] * gv[3 * H:] + gv[H:2 * H] * v["c"]
    np.testing.assert_allclose(ct.npvalue(), want_c, rtol=1e-12)
    ht = vanilla_lstm_h(ct, g)
    np.testing.assert_allclose(ht.npvalue(), gv[2 * H:3 * H] * np.tanh(want_c), rtol=1e-12)


def _chain_loss(P, v, xs, weightnoise=0.0):
    """Two steps of gates -> c -> h from (h, c) = (v.h, v.c), reduced with fixed weights."""
    h, c = dy.inputVector(v["h"]), dy.inputVector(v["c"])
    for k, x in enumerate(xs):
        if k % 2:
            g = vanilla_lstm_gates_dropout_concat([dy.pickrange(x, 0, 1), dy.pickrange(x, 1, I)], h, P["Wx"], P["Wh"],
                                                  P["b"], dy.inputVector(v["mx"]), dy.inputVector(v["mh"]), weightnoise)
        else:
            g = vanilla_lstm_gates(x, h, P["Wx"], P["Wh"], P["b"], weightnoise)
        c = vanilla_lstm_c(c, g)
        h = vanilla_lstm_h(c, g)
    return dy.dot_product(h, dy.inputVector([0.7, -1.3])) + dy.dot_product(c, dy.inputVector([0.2, 0.5]))


def test_gradients_match_central_differences(f64):
    v = data(4)
    m, P = params(v)
    xp = m.add_parameters((I,))
    xp.set_value(v["x"])

    def loss():
        dy.renew_cg()
        return _chain_loss(P, v, [dy.parameter(xp), dy.tanh(dy.parameter(xp))])
    check_param_grads(loss, list(P.values()) + [xp], rtol=1e-6, atol=1e-9)


def test_masks_get_no_gradient_as_in_dynet(f64):
    v = data(5)
    m, P = params(v)
    pm = m.add_parameters((I,))
    pm.set_value(v["mx"])
    dy.renew_cg()
    g = vanilla_lstm_gates_dropout(dy.inputVector(v["x"]), dy.inputVector(v["h"]), P["Wx"], P["Wh"], P["b"],
                                   dy.parameter(pm), dy.inputVector(v["mh"]))
    dy.sum_elems(g).backward()
    assert not pm.grad_as_array().any() and P["Wx"].grad_as_array().any()


def test_weightnoise_changes_values_per_call(f64):
    v = data(6)
    _, P = params(v)
    dy.renew_cg()
    x, h = dy.inputVector(v["x"]), dy.inputVector(v["h"])
    clean = vanilla_lstm_gates(x, h, P["Wx"], P["Wh"], P["b"]).npvalue()
    a = vanilla_lstm_gates(x, h, P["Wx"], P["Wh"], P["b"], 0.5).npvalue()
    b = vanilla_lstm_gates(x, h, P["Wx"], P["Wh"], P["b"], 0.5).npvalue()
    assert not np.allclose(a, clean) and not np.allclose(a, b)
    np.testing.assert_array_equal(vanilla_lstm_gates(x, h, P["Wx"], P["Wh"], P["b"], 0).npvalue(), clean)


def _batched(strategy):
    v = data(7)
    m, P = params(v)
    rng = np.random.default_rng(8)
    dy.renew_cg(autobatching=strategy)
    losses = [_chain_loss(P, v, [dy.inputVector(rng.normal(size=I)) for _ in range(3)]) for _ in range(4)]
    return value_grads_stats(dy.esum(losses), P.values())


def test_instances_batch(f64):
    assert_batching_agrees(_batched, rtol=1e-10, atol=1e-13)


def test_bad_input_names_the_function():
    v = data(9)
    _, P = params(v)
    dy.renew_cg()
    x, h = dy.inputVector(v["x"]), dy.inputVector(v["h"])
    with pytest.raises(GraphError, match=r"vanilla_lstm_gates: Wx must have shape \(8, 2\).*got \(8, 3\)"):
        vanilla_lstm_gates(h, h, P["Wx"], P["Wh"], P["b"])
    with pytest.raises(GraphError, match=r"vanilla_lstm_gates_dropout: dropout_mask_x must have shape \(3,\)"):
        vanilla_lstm_gates_dropout(x, h, P["Wx"], P["Wh"], P["b"], h, h)
    with pytest.raises(GraphError, match="vanilla_lstm_gates_concat: x_t must be a non-empty list"):
        vanilla_lstm_gates_concat(x, h, P["Wx"], P["Wh"], P["b"])
    with pytest.raises(GraphError, match="weightnoise_std"):
        vanilla_lstm_gates(x, h, P["Wx"], P["Wh"], P["b"], -1)
    with pytest.raises(GraphError, match=r"vanilla_lstm_c: gates_t must have shape \(4H,\), got \(3,\)"):
        vanilla_lstm_c(h, x)
    with pytest.raises(GraphError, match=r"vanilla_lstm_h: c_t must have shape \(2,\), got \(3,\)"):
        vanilla_lstm_h(x, dy.inputVector(np.zeros(8)))
    with pytest.raises(GraphError, match="vanilla_lstm_gates: h_tm1 must be an Expression or Parameter"):
        vanilla_lstm_gates(x, [1.0, 2.0], P["Wx"], P["Wh"], P["b"])
    # the graph stays usable
    np.testing.assert_allclose(vanilla_lstm_h(dy.inputVector(v["c"]), dy.inputVector(np.ones(8))).npvalue(),
                               np.tanh(v["c"]), rtol=1e-6)


# --- against real DyNet (skipped where it is not installed) ---------------------------
_DYNET_SCRIPT = r"""
import json, sys, numpy as np
import dynet as dy
v = {k: np.array(a) for k, a in json.loads(sys.stdin.read()).items()}
m = dy.ParameterCollection()
P = {k: m.add_parameters(v[k].shape) for k in v}
for k in P: P[k].set_value(v[k])
dy.renew_cg()
E = {k: dy.parameter(P[k]) for k in P}
h, c = E["h"], E["c"]
for k, x in enumerate([E["x"], dy.tanh(E["x"])]):
    if k % 2:
        g = dy.vanilla_lstm_gates_dropout_concat([dy.pickrange(x, 0, 1), dy.pickrange(x, 1, 3)], h, E["Wx"], E["Wh"],
                                                 E["b"], E["mx"], E["mh"])
    else:
        g = dy.vanilla_lstm_gates(x, h, E["Wx"], E["Wh"], E["b"])
    c = dy.vanilla_lstm_c(c, g)
    h = dy.vanilla_lstm_h(c, g)
loss = dy.dot_product(h, dy.inputVector([0.7, -1.3])) + dy.dot_product(c, dy.inputVector([0.2, 0.5]))
out = {"loss": float(loss.scalar_value())}
loss.backward()
out.update({k: P[k].grad_as_array().tolist() for k in P})
print("RESULT" + json.dumps(out))
"""


@needs_dynet
def test_same_values_and_gradients_as_dynet(f64):
    v = data(10)
    want = run_dynet(_DYNET_SCRIPT, json.dumps({k: a.tolist() for k, a in v.items()}))
    m = dy.ParameterCollection()
    P = {k: m.add_parameters(v[k].shape) for k in v}
    for k in P:
        P[k].set_value(v[k])
    dy.renew_cg()
    loss = _chain_loss({k: P[k] for k in ("Wx", "Wh", "b")}, v, [dy.parameter(P["x"]), dy.tanh(dy.parameter(P["x"]))])
    assert loss.scalar_value() == pytest.approx(want["loss"], rel=1e-5)
    loss.backward()
    for k in ("Wx", "Wh", "b", "x"):       # DyNet computes in float32
        np.testing.assert_allclose(P[k].grad_as_array(), np.array(want[k]), rtol=1e-4, atol=1e-6)
    assert not np.any(want["mx"]) and not np.any(want["mh"])
