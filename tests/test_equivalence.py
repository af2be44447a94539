"""Batching must not change the maths: the same random program gives the same loss and
the same gradient for every parameter under the strategies none, depth and agenda.
Programs come from tests/programs.py (chains, trees, DAGs with reuse, mixed sizes)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy

from programs import all_params, build, chains, dags, make_params, programs, run, trees

STRATS = ("none", "depth", "agenda")
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _assert_same(prog, P, rtol, atol):
    ref_v, ref_g, ref_s = run(prog, P, "none")
    assert np.isfinite(ref_v)
    for s in STRATS[1:]:
        v, grads, stats = run(prog, P, s)
        np.testing.assert_allclose(v, ref_v, rtol=rtol, atol=atol, err_msg=f"loss under {s}")
        for k, (g, r) in enumerate(zip(grads, ref_g)):
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol,
                                       err_msg=f"grad of parameter {k} under {s}")
        # every strategy computes exactly the same nodes, in no more batches than none --
        # save for concatenations that none got as free views because its node-by-node
        # allocation happened to put their pieces side by side (a DAG's concatenate of a
        # lookup and the tanh built right after it)
        assert stats["forward_nodes"] == ref_s["forward_nodes"]
        lost_views = max(0, ref_s.get("view_nodes", 0) - stats.get("view_nodes", 0))
        assert stats["forward_batches"] <= ref_s["forward_batches"] + lost_views
    return ref_s


@pytest.fixture(scope="module")
def P64():
    dy.set_dtype("float64")
    try:
        return make_params(7)
    finally:
        dy.set_dtype("float32")


@pytest.fixture(scope="module")
def P32():
    return make_params(11)


@SETTINGS
@given(prog=programs)
def test_random_programs_float64(P64, prog):
    dy.set_dtype("float64")
    _assert_same(prog, P64, rtol=1e-9, atol=1e-12)


def test_concatenation_none_got_as_a_view(P64):
    """Found by Hypothesis: node by node, the lookup and the tanh land side by side and their
    concatenation costs nothing; batched strategies order them otherwise and copy."""
    dy.set_dtype("float64")
    z = (0.0,) * 4
    prog = [("dag", [("tanh", (0, 0, 0, 0), z), ("concat", (1, 278, 0, 0), z), ("input", (0, 0, 0, 0), z)], 0)]
    s = _assert_same(prog, P64, rtol=1e-9, atol=1e-12)
    assert s["view_nodes"] == 1


@SETTINGS
@given(prog=programs)
def test_random_programs_float32(P32, prog):
    _assert_same(prog, P32, rtol=1e-4, atol=1e-5)


# Many instances of one kind: big batches, long gathers, and (for trees) many repeated lookups.
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(prog=st.one_of(st.lists(chains(), min_size=5, max_size=20),
                      st.lists(trees(), min_size=5, max_size=20),
                      st.lists(dags(), min_size=5, max_size=12)))
def test_many_instances_float64(P64, prog):
    dy.set_dtype("float64")
    s = _assert_same(prog, P64, rtol=1e-9, atol=1e-12)
    assert s["forward_nodes"] > 0


def _fd_check(prog, P, n_entries=4, eps=1e-6):
    """Central differences on a few parameter entries against the engine's gradient,
    so that a bug shared by all three strategies cannot hide."""
    _, grads, _ = run(prog, P, "agenda")
    rng = np.random.default_rng(0)
    params = all_params(P)
    for k in rng.choice(len(params), size=n_entries, replace=False):
        p = params[k]
        val = np.array(p.as_array(), copy=True)
        j = tuple(int(rng.integers(0, d)) for d in val.shape)

        def f(delta):
            w = val.copy()
            w[j] += delta
            p.set_value(w)
            dy.renew_cg()
            return build(prog, P).value()
        num = (f(eps) - f(-eps)) / (2 * eps)
        p.set_value(val)
        assert abs(num - grads[k][j]) <= 1e-5 * max(1.0, abs(num)), (k, j, num, grads[k][j])


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(prog=programs)
def test_random_programs_match_finite_differences(P64, prog):
    dy.set_dtype("float64")
    _fd_check(prog, P64)


def test_flat_elementwise_path_is_exercised(f64):
    """tanh over vectors of sizes 1..4 is one batch (signature ignores shape) and still
    gives per-node results equal to NumPy's."""
    P = make_params(3)
    dy.renew_cg(autobatching="agenda")
    xs = [dy.lookup(P["E"][n], 2) for n in (1, 2, 3, 4)]
    ys = [dy.tanh(x) for x in xs]
    loss = dy.esum([dy.sum_elems(y) for y in ys])
    loss.backward()
    for n, y in zip((1, 2, 3, 4), ys):
        np.testing.assert_allclose(y.npvalue(), np.tanh(P["E"][n].as_array()[2]), rtol=1e-12)
        g = P["E"][n].grad_as_array()
        np.testing.assert_allclose(g[2], 1 - np.tanh(P["E"][n].as_array()[2]) ** 2, rtol=1e-12)
    sizes = dy.stats()["signatures"]
    assert any(name.startswith("tanh") and 4 in b for name, b in sizes.items()), sizes


def test_repeated_lookup_indices_accumulate(f64):
    """Lookups of the same row in one batch add their gradients (no lost updates)."""
    P = make_params(5)
    E = P["E"][3]
    for s in STRATS:
        E.zero_grad()
        dy.renew_cg(autobatching=s)
        loss = dy.esum([dy.sum_elems(dy.lookup(E, i)) for i in (1, 1, 1, 4, 1)])
        loss.backward()
        want = np.zeros(E.as_array().shape)
        want[1] = 4
        want[4] = 1
        np.testing.assert_array_equal(E.grad_as_array(), want)
