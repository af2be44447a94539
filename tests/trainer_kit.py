"""What the trainer tests share: a small model with dense parameters and a lookup table, a
loss over some of its rows, DyNet's Adam as a NumPy step, and the check of a trainer's
updates against a NumPy reference step. A reference step is
(x, g, state, step t starting at 1) -> (x, state)."""
import numpy as np

import autobatch as dy


def ref_adam(lr, b1, b2, eps):
    """Adam as DyNet 2.1 writes it: the bias corrections folded into the rate, and eps
    added to sqrt(v) itself (textbook Adam adds it to sqrt(v_hat), which differs for
    large eps)."""
    def step(x, g, st, t):
        m = b1 * st.get("m", 0) + (1 - b1) * g
        v = b2 * st.get("v", 0) + (1 - b2) * g * g
        return x - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + eps), {"m": m, "v": v}
    return step


def small_model():
    m = dy.ParameterCollection()
    W = m.add_parameters((3, 4))
    b = m.add_parameters(3)
    E = m.add_lookup_parameters((6, 4))
    return m, W, b, E


def loss_on(W, b, E, rows, scale=1.0):
    """A loss using dense W, b and the given rows of E, through backward."""
    dy.renew_cg()
    terms = [dy.squared_norm(dy.tanh(W * E[r] + b) - dy.inputVector([0.3, -0.2, 0.5])) for r in rows]
    (dy.esum(terms) * scale).backward()


def check_updates_follow_reference(make, ref, clip, steps):
    """Dense updates of make(model), one per entry of steps (the rows of E its loss uses), equal
    ref applied to each parameter; with clipping, ref gets the gradients scaled by
    threshold/‖g‖ (the rules see that scale separately from the gradient)."""
    m, W, b, E = small_model()
    tr = make(m)
    tr.set_clip_threshold(0.05 if clip else -1)
    tr.set_sparse_updates(False)     # dense: every row follows the rule, as the reference
    xs = {p: p.as_array() for p in (W, b, E)}
    st = {p: {} for p in (W, b, E)}
    for t, rows in enumerate(steps, start=1):
        loss_on(W, b, E, rows)
        gs = {p: p.grad_as_array() for p in (W, b, E)}
        if clip:
            norm = np.sqrt(sum((g ** 2).sum() for g in gs.values()))
            assert norm > 0.05
            gs = {p: g * (0.05 / norm) for p, g in gs.items()}
        tr.update()
        for p in (W, b, E):
            xs[p], st[p] = ref(xs[p], gs[p], st[p], t)
            np.testing.assert_allclose(p.as_array(), xs[p], rtol=1e-10, atol=1e-12)
            assert not p.grad_as_array().any()       # update() zeroes the gradients
    assert tr.updates == len(steps)
