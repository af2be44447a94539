"""RMSProp, AdaDelta, AMSGrad and cyclical SGD against NumPy references of DyNet 2.1's
update rules (checked against DyNet itself), Adam's ε placement, update_subset,
update(scale) and whoami."""
import math

import numpy as np
import pytest

import autobatch as dy
from autobatch.trainers import (AdadeltaTrainer, AdamTrainer, AmsgradTrainer, CyclicalSGDTrainer,
                                RMSPropTrainer, SimpleSGDTrainer)
from trainer_kit import check_updates_follow_reference, loss_on, ref_adam, small_model


def ref_rmsprop(lr, eps, rho):
    def step(x, g, st, t):
        G = rho * st.get("G", 0) + (1 - rho) * g * g
        return x - lr * g / np.sqrt(G + eps), {"G": G}
    return step


def ref_adadelta(eps, rho):
    def step(x, g, st, t):
        G = rho * st.get("G", 0) + (1 - rho) * g * g
        d = -g * np.sqrt(st.get("D", 0) + eps) / np.sqrt(G + eps)
        D = rho * st.get("D", 0) + (1 - rho) * d * d
        return x + d, {"G": G, "D": D}
    return step


def ref_amsgrad(lr, b1, b2, eps):
    def step(x, g, st, t):
        m = b1 * st.get("m", 0) + (1 - b1) * g
        v = b2 * st.get("v", 0) + (1 - b2) * g * g
        vh = np.maximum(st.get("vh", 0), v)
        return x - lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(vh) + eps), {"m": m, "v": v, "vh": vh}
    return step


# a large ε makes where it is added visible
TRAINERS = {
    "rmsprop": (lambda m: RMSPropTrainer(m, learning_rate=0.05, eps=0.01, rho=0.7), ref_rmsprop(0.05, 0.01, 0.7)),
    "adadelta": (lambda m: AdadeltaTrainer(m, eps=0.01, rho=0.6), ref_adadelta(0.01, 0.6)),
    "amsgrad": (lambda m: AmsgradTrainer(m, alpha=0.05, beta_1=0.6, beta_2=0.7, eps=0.3),
                ref_amsgrad(0.05, 0.6, 0.7, 0.3)),
    "adam": (lambda m: AdamTrainer(m, alpha=0.05, beta_1=0.6, beta_2=0.7, eps=0.3), ref_adam(0.05, 0.6, 0.7, 0.3)),
}


@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("name", list(TRAINERS))
def test_update_matches_numpy_reference(name, clip, backend, f64):
    check_updates_follow_reference(*TRAINERS[name], clip, [[1, 3], [2, 3, 3], [0], [4, 1]])


@pytest.mark.parametrize("name", ["rmsprop", "adadelta", "amsgrad"])
def test_sparse_updates_touch_only_used_rows(name, f64):
    make, _ = TRAINERS[name]
    m, W, b, E = small_model()
    tr = make(m)
    before = E.as_array()
    loss_on(W, b, E, [1, 4])
    tr.update()
    after = E.as_array()
    changed = np.flatnonzero(np.abs(after - before).sum(axis=1) > 0)
    assert changed.tolist() == [1, 4]


# the rates DyNet 2.1 reported after each of 10 updates of CyclicalSGDTrainer(m, 0.1, 1.0, 3, γ)
DYNET_RATES = {1.0: [0.1, 0.4, 0.7, 1.0, 0.7, 0.4, 0.1, 0.4, 0.7, 1.0],
               0.9: [0.1, 0.37, 0.586, 0.7561, 0.49366, 0.277147, 0.1, 0.243489, 0.358280, 0.448678]}


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_cyclical_schedule_as_dynet(gamma):
    m, W, b, E = small_model()
    tr = CyclicalSGDTrainer(m, 0.1, 1.0, 3, gamma)
    assert tr.learning_rate == 0.1
    rates = []
    for k in range(10):
        loss_on(W, b, E, [0])
        tr.update()
        rates.append(tr.learning_rate)
    expect = []
    for k in range(10):           # the formula of DyNet's documentation, for update k = 0, 1, ...
        cycle = math.floor(1 + k / 6)
        u = abs(k / 3 - 2 * cycle + 1)
        expect.append(0.1 + 0.9 * max(0.0, 1 - u) * gamma ** k)
    np.testing.assert_allclose(rates, expect, rtol=1e-12)
    np.testing.assert_allclose(rates, DYNET_RATES[gamma], rtol=2e-6)
    with pytest.raises(ValueError):
        CyclicalSGDTrainer(m, step_size=0)


def test_cyclical_applies_the_current_rate(f64):
    m, W, b, E = small_model()
    tr = CyclicalSGDTrainer(m, 0.1, 1.0, 3)
    tr.set_clip_threshold(-1)
    for k in range(4):
        lr = tr.learning_rate
        loss_on(W, b, E, [2])
        x, g = W.as_array(), W.grad_as_array()
        tr.update()
        np.testing.assert_allclose(W.as_array(), x - lr * g, rtol=1e-12)


def test_defaults_as_dynet():
    m = dy.ParameterCollection()
    r = RMSPropTrainer(m)
    assert (r.learning_rate, r.epsilon, r.rho) == (0.001, 1e-8, 0.9)
    a = AdadeltaTrainer(m)
    assert (a.learning_rate, a.epsilon, a.rho) == (1.0, 1e-6, 0.95)
    s = AmsgradTrainer(m)
    assert (s.learning_rate, s.beta_1, s.beta_2, s.epsilon) == (0.001, 0.9, 0.999, 1e-8)
    c = CyclicalSGDTrainer(m)
    assert (c.learning_rate, c.learning_rate_max, c.step_size, c.gamma) == (0.01, 0.1, 2000, 1.0)
    assert [t.whoami() for t in (r, a, s, c)] == ["RMSPropTrainer", "AdadeltaTrainer", "AmsgradTrainer",
                                                   "CyclicalSGDTrainer"]


def test_restart_forgets_state(f64):
    m, W, b, E = small_model()
    tr = AmsgradTrainer(m, alpha=0.05)
    tr.set_clip_threshold(-1)
    loss_on(W, b, E, [0])
    tr.update()
    tr.restart(0.01)
    assert tr.learning_rate == 0.01 and tr._aux == {}
    loss_on(W, b, E, [0])
    x, g = b.as_array(), b.grad_as_array()
    tr.update()                 # fresh moments, t = 2 (the update count keeps running, as DyNet)
    m1, v1 = 0.1 * g, 0.001 * g * g
    expect = x - 0.01 * math.sqrt(1 - 0.999 ** 2) / (1 - 0.9 ** 2) * m1 / (np.sqrt(v1) + 1e-8)
    np.testing.assert_allclose(b.as_array(), expect, rtol=1e-9)


def test_update_subset(f64):
    m, W, b, E = small_model()
    tr = SimpleSGDTrainer(m, 0.5)
    tr.set_clip_threshold(-1)
    loss_on(W, b, E, [2])
    xw, xb, xe = W.as_array(), b.as_array(), E.as_array()
    gb = b.grad_as_array()
    tr.update_subset([1], [])                        # b only
    np.testing.assert_allclose(b.as_array(), xb - 0.5 * gb)
    np.testing.assert_array_equal(W.as_array(), xw)
    np.testing.assert_array_equal(E.as_array(), xe)
    assert not b.grad_as_array().any() and W.grad_as_array().any()   # others keep theirs
    gw, ge = W.grad_as_array(), E.grad_as_array()
    tr.update_subset([0], [0])
    np.testing.assert_allclose(W.as_array(), xw - 0.5 * gw)
    np.testing.assert_allclose(E.as_array(), xe - 0.5 * ge)
    with pytest.raises(IndexError, match="parameter index 5"):
        tr.update_subset([5], [])


def test_update_with_scale_as_dynet1(f64):
    m, W, b, E = small_model()
    tr = SimpleSGDTrainer(m, 0.5)
    tr.set_clip_threshold(-1)
    loss_on(W, b, E, [2])
    x, g = W.as_array(), W.grad_as_array()
    tr.update(0.25)
    np.testing.assert_allclose(W.as_array(), x - 0.5 * 0.25 * g)
    # clipping sees the scaled gradient: its norm 1/4 of the full one
    tr.set_clip_threshold(1e9)
    loss_on(W, b, E, [2])
    norm = math.sqrt(sum((p.grad_as_array() ** 2).sum() for p in (W, b, E)))
    tr.set_clip_threshold(0.5 * norm)
    x, g = W.as_array(), W.grad_as_array()
    tr.update(0.25)             # 0.25·norm is under the threshold: no clipping
    np.testing.assert_allclose(W.as_array(), x - 0.5 * 0.25 * g)
    assert tr.clips == 0
    loss_on(W, b, E, [2])
    x, g = W.as_array(), W.grad_as_array()
    norm = math.sqrt(sum((p.grad_as_array() ** 2).sum() for p in (W, b, E)))
    tr.set_clip_threshold(0.1 * norm)
    tr.update(0.25)             # clipped to the threshold
    np.testing.assert_allclose(W.as_array(), x - 0.5 * g * (0.1 * norm / norm))
    assert tr.clips == 1
