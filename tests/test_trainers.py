"""Trainers: each update equals a NumPy reference step (several steps, so optimizer
state matters), DyNet's global-norm clipping, sparse vs dense lookup updates,
skipped parameters, and the small API (status, restart, update_epoch)."""
import numpy as np
import pytest

import autobatch as dy
from autobatch.errors import NonFiniteError
from conftest import to_np
from trainer_kit import check_updates_follow_reference, loss_on, ref_adam, small_model


# --- NumPy references: (x, g, state, step t starting at 1) -> (x, state) ---------------
def ref_sgd(lr):
    return lambda x, g, st, t: (x - lr * g, st)


def ref_momentum(lr, mom):
    def step(x, g, st, t):
        v = mom * st.get("v", 0) - lr * g
        return x + v, {"v": v}
    return step


def ref_adagrad(lr, eps):
    def step(x, g, st, t):
        G = st.get("G", 0) + g * g
        return x - lr * g / np.sqrt(G + eps), {"G": G}
    return step


TRAINERS = {
    "sgd": (lambda m: dy.SimpleSGDTrainer(m, learning_rate=0.2), ref_sgd(0.2)),
    "momentum": (lambda m: dy.MomentumSGDTrainer(m, learning_rate=0.05, mom=0.8), ref_momentum(0.05, 0.8)),
    "adagrad": (lambda m: dy.AdagradTrainer(m, learning_rate=0.3, eps=1e-8), ref_adagrad(0.3, 1e-8)),
    "adam": (lambda m: dy.AdamTrainer(m, alpha=0.01, beta_1=0.8, beta_2=0.9, eps=1e-6), ref_adam(0.01, 0.8, 0.9, 1e-6)),
}


@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("name", list(TRAINERS))
def test_update_matches_numpy_reference(name, clip, backend, f64):
    """Each rule against a textbook version, with and without clipping."""
    check_updates_follow_reference(*TRAINERS[name], clip, [[1, 3], [2, 3, 3], [0]])


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_in_place_update_in_pieces_matches_reference(name, f64):
    """The in-place rules run over pieces of big parameters (to stay in cache): pieces of 5
    elements split the 3x4 W and 6x4 E, and the result is still the reference step."""
    make, ref = TRAINERS[name]

    def in_pieces(m):
        tr = make(m)
        tr.INPLACE_PIECE = 5
        return tr
    check_updates_follow_reference(in_pieces, ref, True, [[1, 3], [2, 3, 3], [0]])


@pytest.mark.parametrize("name", list(TRAINERS))
def test_sparse_updates_touch_only_used_rows(name, f64):
    make, ref = TRAINERS[name]
    m, W, b, E = small_model()
    tr = make(m)
    tr.set_clip_threshold(-1)
    e = E.as_array()
    st = {}
    # step 1 uses rows 1, 3; step 2 uses row 4 only: rows 1 and 3 must not move in step 2
    # (they would under a dense momentum/Adam update), rows 0, 2, 5 never move; step 3 uses
    # every row (the trainer then takes the dense in-place rule), step 4 one row again
    for t, rows in enumerate([[1, 3, 1], [4], [0, 1, 2, 3, 4, 5, 2], [2]], start=1):
        loss_on(W, b, E, rows)
        g = E.grad_as_array()
        assert sorted(set(int(r) for r in E.used_rows())) == sorted(set(rows))
        tr.update()
        for r in sorted(set(rows)):
            # sparse: the per-row state of a row advances only when it is used, with the
            # global update count t (DyNet)
            e[r], st[r] = ref(e[r], g[r], st.get(r, {}), t)
        np.testing.assert_allclose(E.as_array(), e, rtol=1e-10, atol=1e-12)
    assert not E.grad_as_array().any() and E.rows_used == []


@pytest.mark.parametrize("name", ["momentum", "adam"])
def test_dense_lookup_updates_move_all_rows_with_state(name, f64):
    """Dense updates: rows used in step 1 keep moving in step 2 through momentum/moments."""
    make, _ = TRAINERS[name]
    m, W, b, E = small_model()
    tr = make(m)
    tr.set_sparse_updates(False)
    tr.set_clip_threshold(-1)
    loss_on(W, b, E, [1])
    tr.update()
    before = E.as_array()
    loss_on(W, b, E, [4])
    tr.update()
    after = E.as_array()
    assert not np.allclose(after[1], before[1])        # moved with zero gradient
    np.testing.assert_array_equal(after[0], before[0])  # never-used rows have zero state


def test_lookup_used_densely_updates_all_rows_under_sparse(f64):
    """A table used as a whole matrix gets a dense gradient: sparse updates must apply it all."""
    m = dy.ParameterCollection()
    E = m.add_lookup_parameters((4, 3))
    tr = dy.SimpleSGDTrainer(m, 0.5)
    tr.set_clip_threshold(-1)
    e = E.as_array()
    dy.renew_cg()
    # the whole-table expression is DyNet's (3, 4): a row per column
    loss = dy.sum_elems(dy.parameter(E) * dy.inputVector([1.0, 2.0, 3.0, 4.0])) + dy.sum_elems(E[1])
    loss.backward()
    g = E.grad_as_array()
    assert E.all_updated and np.count_nonzero(np.abs(g).sum(axis=1)) == 4
    tr.update()
    np.testing.assert_allclose(E.as_array(), e - 0.5 * g)
    assert not E.grad_as_array().any() and not E.all_updated


def test_clipping_rescales_to_threshold(f64):
    m, W, b, E = small_model()
    tr = dy.SimpleSGDTrainer(m, learning_rate=1.0)
    assert tr.get_clip_threshold() == 5.0                 # DyNet's default
    tr.set_clip_threshold(0.5)
    x = {p: p.as_array() for p in (W, b, E)}
    loss_on(W, b, E, [0, 2], scale=100.0)
    g = {p: p.grad_as_array() for p in (W, b, E)}
    norm = np.sqrt(sum((v ** 2).sum() for v in g.values()))
    assert norm > 0.5
    tr.update()
    for p in (W, b, E):
        np.testing.assert_allclose(p.as_array(), x[p] - g[p] * 0.5 / norm, rtol=1e-10)
    assert tr.clips == 1
    assert "clips=1 updates=1" in tr.status()
    assert "clips=0 updates=0" in tr.status()             # status() resets its counters


def test_clipping_off_and_below_threshold(f64):
    m, W, b, E = small_model()
    tr = dy.SimpleSGDTrainer(m, learning_rate=0.1)
    tr.set_clip_threshold(-1)
    x = W.as_array()
    loss_on(W, b, E, [0, 2], scale=100.0)
    g = W.grad_as_array()
    tr.update()
    np.testing.assert_allclose(W.as_array(), x - 0.1 * g, rtol=1e-10)
    assert tr.clips == 0
    tr.set_clip_threshold(1e9)
    x = W.as_array()
    loss_on(W, b, E, [1])
    g = W.grad_as_array()
    tr.update()
    np.testing.assert_allclose(W.as_array(), x - 0.1 * g, rtol=1e-10)
    assert tr.clips == 0


def test_non_finite_gradient_with_clipping_raises():
    m, W, b, E = small_model()
    tr = dy.SimpleSGDTrainer(m)
    W.grad[0, 0] = np.nan
    W.touched = True
    x = W.as_array()
    with pytest.raises(NonFiniteError):
        tr.update()
    np.testing.assert_array_equal(W.as_array(), x)


def test_not_updated_parameters_are_skipped():
    m, W, b, E = small_model()
    tr = dy.SimpleSGDTrainer(m)
    W.set_updated(False)
    E.set_updated(False)
    w, e, bb = W.as_array(), E.as_array(), b.as_array()
    loss_on(W, b, E, [1, 2])
    gw, ge = W.grad_as_array(), E.grad_as_array()
    assert gw.any() and ge.any()
    tr.update()
    np.testing.assert_array_equal(W.as_array(), w)
    np.testing.assert_array_equal(E.as_array(), e)
    assert not np.array_equal(b.as_array(), bb)
    # as DyNet's: a frozen parameter's gradients add up, and apply once it is unfrozen
    np.testing.assert_array_equal(W.grad_as_array(), gw)
    np.testing.assert_array_equal(E.grad_as_array(), ge)
    lr, tr.learning_rate = tr.learning_rate, 0.0        # b stays put from here on
    loss_on(W, b, E, [1, 3])
    gw2, ge2 = W.grad_as_array() - gw, E.grad_as_array() - ge
    tr.update()
    loss_on(W, b, E, [1, 3])
    tr.update()
    np.testing.assert_allclose(W.grad_as_array(), gw + 2 * gw2, rtol=1e-5)
    np.testing.assert_allclose(E.grad_as_array(), ge + 2 * ge2, rtol=1e-5, atol=1e-7)
    assert len(E.rows_used) == 1            # its record of rows stays one array
    W.set_updated(True)
    E.set_updated(True)
    tr.learning_rate = lr
    tr.set_clip_threshold(-1)
    tr.update()
    np.testing.assert_allclose(W.as_array(), w - lr * (gw + 2 * gw2), rtol=1e-5)
    np.testing.assert_allclose(E.as_array(), e - lr * (ge + 2 * ge2), rtol=1e-5, atol=1e-7)
    assert not W.grad_as_array().any() and not E.grad_as_array().any()


def test_learning_rate_attribute_restart_and_update_epoch(f64):
    m, W, b, E = small_model()
    tr = dy.MomentumSGDTrainer(m)
    assert tr.learning_rate == 0.01
    tr.learning_rate = 0.5
    tr.set_clip_threshold(-1)
    loss_on(W, b, E, [0])
    x, g = W.as_array(), W.grad_as_array()
    tr.update()
    np.testing.assert_allclose(W.as_array(), x - 0.5 * g)
    with pytest.warns(DeprecationWarning):
        tr.update_epoch(1.0)
    assert tr.learning_rate == 0.5       # DyNet 2: update_epoch changes nothing
    tr.restart(0.25)                     # forgets momentum, sets the rate
    assert tr.learning_rate == 0.25
    loss_on(W, b, E, [0])
    x, g = W.as_array(), W.grad_as_array()
    tr.update()
    np.testing.assert_allclose(W.as_array(), x - 0.25 * g)


def test_defaults_as_dynet():
    m = dy.ParameterCollection()
    assert dy.SimpleSGDTrainer(m).learning_rate == 0.1
    assert dy.MomentumSGDTrainer(m).momentum == 0.9
    assert dy.AdagradTrainer(m).epsilon == 1e-20
    a = dy.AdamTrainer(m)
    assert (a.learning_rate, a.beta_1, a.beta_2, a.epsilon) == (0.001, 0.9, 0.999, 1e-8)
    with pytest.raises(TypeError):
        dy.SimpleSGDTrainer([])


def test_training_an_lstm_reduces_loss():
    """End to end: builder + lookup + Adam (sparse) on a tiny task lowers the loss."""
    m = dy.ParameterCollection()
    E = m.add_lookup_parameters((5, 4))
    lstm = dy.LSTMBuilder(1, 4, 8, m)
    V = m.add_parameters((2, 8))
    tr = dy.AdamTrainer(m, alpha=0.05)
    data = [([0, 1, 2], 0), ([3, 4], 1), ([1, 1, 0, 2], 0), ([4, 3, 3], 1)]

    def epoch():
        dy.renew_cg()
        loss = dy.esum([dy.pickneglogsoftmax(V * lstm.initial_state().transduce([E[t] for t in xs])[-1], y)
                        for xs, y in data])
        v = loss.scalar_value()
        loss.backward()
        tr.update()
        return v
    first = epoch()
    for _ in range(30):
        last = epoch()
    assert last < first / 4


def test_state_arrays_follow_backend(backend):
    m, W, b, E = small_model()
    tr = dy.AdamTrainer(m)
    loss_on(W, b, E, [2])
    tr.update()
    for arrs in tr._aux.values():
        for a in arrs:
            assert type(a) is type(W.data)
    assert to_np(W.data).shape == (3, 4)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_update_zeroes_gradients_in_its_own_pass(name, f64, monkeypatch):
    """update() zeroes the gradients it applies as it goes (each piece while in cache): no
    separate clearing pass over the parameters, one set of used rows per table, and the
    sparse, clipped step is still the reference one."""
    from autobatch.params import LookupParameter, Parameter
    make, ref = TRAINERS[name]
    m, W, b, E = small_model()
    tr = make(m)
    tr.set_clip_threshold(0.05)
    calls = {"zero_grad": 0, "used_rows": 0}

    def counted(what, f):
        def g(self, *a):
            calls[what] += 1
            return f(self, *a)
        return g
    monkeypatch.setattr(Parameter, "zero_grad", counted("zero_grad", Parameter.zero_grad))
    monkeypatch.setattr(LookupParameter, "used_rows", counted("used_rows", LookupParameter.used_rows))
    x = {p: p.as_array() for p in (W, b, E)}
    loss_on(W, b, E, [1, 3, 1])
    g = {p: p.grad_as_array() for p in (W, b, E)}
    norm = np.sqrt(sum((v ** 2).sum() for v in g.values()))
    assert norm > 0.05
    tr.update()
    assert calls == {"zero_grad": 0, "used_rows": 1}
    for p in (W, b, E):
        assert not p.grad_as_array().any() and not p.touched
        want = x[p].copy()
        rows = [1, 3] if p is E else slice(None)
        want[rows] = ref(x[p][rows], g[p][rows] * (0.05 / norm), {}, 1)[0]
        np.testing.assert_allclose(p.as_array(), want, rtol=1e-10, atol=1e-12)
    assert E.rows_used == [] and not E.all_updated


@pytest.mark.parametrize("frozen", ["dense", "lookup"])
def test_clipping_norm_counts_frozen_parameters_gradients_as_dynet(frozen):
    """DyNet's clipping norm is the whole model's gradient norm, frozen (set_updated(False))
    parameters' gradients included; they are not updated."""
    pc = dy.ParameterCollection()
    A = pc.add_parameters((2,), init=dy.NumpyInitializer(np.array([3.0, 4.0])))
    B = pc.add_parameters((2,), init=dy.NumpyInitializer(np.array([1.0, 1.0])))
    E = pc.lookup_parameters_from_numpy(np.array([[2.0, 2.0], [0.0, 0.0]]))
    (E if frozen == "lookup" else A).set_updated(False)
    t = dy.SimpleSGDTrainer(pc, learning_rate=1.0)
    t.set_clip_threshold(1.0)
    dy.renew_cg()
    loss = dy.dot_product(A, B) + dy.dot_product(E[0], B)
    loss.backward()
    t.update()
    # dL/dB = A + E[0] = (5, 6), dL/dA = dL/dE[0] = B = (1, 1): norm sqrt(61 + 2 + 2)
    k = 1.0 / np.sqrt(65.0)
    np.testing.assert_allclose(B.as_array(), [1 - 5 * k, 1 - 6 * k], rtol=1e-6)
    if frozen == "lookup":
        np.testing.assert_allclose(A.as_array(), [3 - k, 4 - k], rtol=1e-6)
        np.testing.assert_array_equal(E.as_array(), [[2.0, 2.0], [0.0, 0.0]])
    else:
        np.testing.assert_array_equal(A.as_array(), [3.0, 4.0])
        np.testing.assert_allclose(E.as_array(), [[2 - k, 2 - k], [0.0, 0.0]], rtol=1e-6)


def test_weight_decay_reaches_frozen_parameters_as_dynet():
    """DyNet's weight decay scales the whole collection after each update, frozen
    (set_updated(False)) parameters too."""
    pc = dy.ParameterCollection()
    pc.set_weight_decay_lambda(0.1)
    A = pc.add_parameters((2,), init=dy.NumpyInitializer(np.array([1.0, 2.0])))
    B = pc.add_parameters((2,), init=dy.NumpyInitializer(np.array([3.0, 4.0])))
    A.set_updated(False)
    t = dy.SimpleSGDTrainer(pc, learning_rate=0.1)
    t.clipping_enabled = False
    for _ in range(2):
        dy.renew_cg()
        dy.sum_elems(dy.cmult(A, B)).backward()
        t.update()
    # B <- (B - 0.1 A) * 0.9 and A <- 0.9 A, twice
    np.testing.assert_allclose(A.as_array(), [0.81, 1.62], rtol=1e-6)
    np.testing.assert_allclose(B.as_array(), [2.268, 2.916], rtol=1e-6)


def test_frozen_parameters_return_where_dynet_folds_its_decay_scale():
    """DyNet's decay is a pending scale of the collection that its expressions read; below 0.25
    it is folded into the parameters being updated and reset, so frozen ones return to their
    stored values then. With lambda 0.5 the scale is 0.5, 0.25, then 0.125: a fold."""
    pc = dy.ParameterCollection()
    pc.set_weight_decay_lambda(0.5)
    A = pc.add_parameters((1,), init=1.0)
    B = pc.add_parameters((1,), init=1.0)
    A.set_updated(False)
    t = dy.SimpleSGDTrainer(pc, learning_rate=0.1)
    seen = []
    for _ in range(5):
        dy.renew_cg()
        dy.sum_elems(A * 0.0 + B * 0.0).backward()       # no gradient: decay alone moves them
        t.update()
        seen.append((A.as_array()[0], B.as_array()[0]))
    np.testing.assert_allclose(seen, [(0.5, 0.5), (0.25, 0.25), (1.0, 0.125), (0.5, 0.0625), (0.25, 0.03125)])
