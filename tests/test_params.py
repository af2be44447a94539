"""Parameter / LookupParameter / ParameterCollection API: shapes, values, gradients,
initialisers, and save/populate (a failed populate changes nothing)."""
import numpy as np
import pytest

import autobatch as dy
from conftest import to_np


def test_shape_value_and_copies(backend):
    m = dy.ParameterCollection()
    p = m.add_parameters((2, 3), init=np.arange(6.0).reshape(2, 3), name="W")
    assert p.shape() == (2, 3) and p.dim() == ((2, 3), 1) and p.name() == "/W"
    a = p.as_array()
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3))
    a[0, 0] = 99                      # a copy: the parameter is unchanged
    assert p.as_array()[0, 0] == 0
    assert m.add_parameters(4).shape() == (4,)


def test_set_value_and_errors():
    p = dy.ParameterCollection().add_parameters((2, 2))
    p.set_value([[1, 2], [3, 4]])
    np.testing.assert_array_equal(p.as_array(), [[1, 2], [3, 4]])
    before = p.as_array()
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        p.set_value(np.zeros((4,)))
    with pytest.raises(ValueError):
        p.set_value(np.zeros((2, 3)))
    np.testing.assert_array_equal(p.as_array(), before)


def test_bad_shapes_rejected():
    m = dy.ParameterCollection()
    for bad in [-2, (3, -1), ()]:        # a 0 is allowed, as in DyNet (test_errors.py)
        with pytest.raises(ValueError):
            m.add_parameters(bad)
    assert m.add_lookup_parameters(5).shape() == (5, 1)     # DyNet's table of scalars


def test_initializers(f64):
    m = dy.ParameterCollection()
    np.testing.assert_array_equal(m.add_parameters(3, init=0.5).as_array(), [0.5] * 3)
    np.testing.assert_array_equal(m.add_parameters(3, init=dy.ConstInitializer(2)).as_array(), [2] * 3)
    u = m.add_parameters((50, 50), init=dy.UniformInitializer(0.1)).as_array()
    assert np.abs(u).max() <= 0.1 and u.std() > 0.03
    g = m.add_parameters((20, 30)).as_array()          # Glorot: bound sqrt(6 / (20 + 30))
    assert np.abs(g).max() <= np.sqrt(6 / 50) + 1e-12
    assert m.add_parameters(2).as_array().dtype == np.float64
    p = m.parameters_from_numpy(np.eye(2))
    np.testing.assert_array_equal(p.as_array(), np.eye(2))
    assert m.parameter_count() == 3 + 3 + 2500 + 600 + 2 + 4


def test_initializers_by_name(f64):
    """DyNet's add_parameters / add_lookup_parameters take initializers by name: 'uniform'
    in ±scale, 'normal' with mean and std, 'identity', 'glorot', 'he' (variance 1 / (2·the
    last dimension), as DyNet's); any other name is refused by name."""
    dy.reset_random_seed(4)
    m = dy.ParameterCollection()
    np.testing.assert_array_equal(m.add_parameters((3, 3), init="identity").as_array(), np.eye(3))
    np.testing.assert_array_equal(m.add_lookup_parameters((3, 3), init="identity").as_array(), np.eye(3))
    u = m.add_parameters((100, 100), init="uniform", scale=2.0).as_array()
    assert np.abs(u).max() <= 2.0 and np.abs(u).max() > 1.9 and abs(u.std() - 2 / np.sqrt(3)) < 0.05
    for add in (m.add_parameters, m.add_lookup_parameters):
        n = add((200, 100), init="normal", mean=-1.0, std=2.5).as_array()
        assert abs(n.mean() + 1.0) < 0.05 and abs(n.std() - 2.5) < 0.05
        h = add((200, 100), init="he").as_array()
        assert abs(h.mean()) < 0.01 and abs(h.var() - 1 / 200) < 5e-4
        g = add((20, 30), init="glorot").as_array()
        assert np.abs(g).max() <= np.sqrt(6 / 50) + 1e-12 and g.std() > 0.1
    before = m.parameter_count()
    for add in (m.add_parameters, m.add_lookup_parameters):
        with pytest.raises(ValueError, match="'xavier' is not one of DyNet's initializer names"):
            add((3, 3), init="xavier")
    assert m.parameter_count() == before


def test_grad_zero_grad_and_scale(f64):
    m = dy.ParameterCollection()
    p = m.add_parameters(3, init=np.array([1.0, 2.0, 3.0]))
    assert not p.grad_as_array().any()
    dy.renew_cg()
    dy.dot_product(dy.parameter(p), dy.inputVector([1.0, 2.0, 3.0])).backward()
    np.testing.assert_array_equal(p.grad_as_array(), [1, 2, 3])
    assert p.touched
    p.scale_gradient(2.0)
    np.testing.assert_array_equal(p.grad_as_array(), [2, 4, 6])
    p.zero_grad()
    assert not p.grad_as_array().any() and not p.touched
    p.scale(2.0)
    np.testing.assert_array_equal(p.as_array(), [2, 4, 6])
    p.clip_inplace(3, 5)
    np.testing.assert_array_equal(p.as_array(), [3, 4, 5])
    p.zero()
    assert not p.as_array().any()
    p.set_updated(False)
    assert not p.is_updated()


def test_lookup_parameter_api(backend, f64):
    m = dy.ParameterCollection()
    E = m.add_lookup_parameters((4, 2))
    table = np.arange(8.0).reshape(4, 2)
    E.init_from_array(table)
    np.testing.assert_array_equal(E.as_array(), table)
    assert len(E) == 4 and E.shape() == (4, 2)
    dy.renew_cg()
    np.testing.assert_array_equal(E[2].npvalue(), [4, 5])
    np.testing.assert_array_equal(dy.lookup(E, 3).npvalue(), [6, 7])
    with pytest.raises(dy.GraphError, match="out of range"):
        E[4]
    with pytest.raises(ValueError):
        E.init_from_array(np.zeros((5, 2)))           # more rows than the table
    with pytest.raises(ValueError):
        E.init_from_array(np.zeros((3, 3)))
    E.init_from_array(np.zeros((3, 2)))               # fewer: the first rows, as DyNet
    np.testing.assert_array_equal(E.as_array(), np.r_[np.zeros((3, 2)), table[3:]])
    E.init_from_array(table)
    E.init_row(1, [9, 9])
    np.testing.assert_array_equal(E.row_as_array(1), [9, 9])
    np.testing.assert_array_equal(E.rows_as_array([0, 1]), [[0, 1], [9, 9]])
    with pytest.raises(ValueError):
        E.init_row(1, [1, 2, 3])
    with pytest.raises(IndexError):
        E.row_as_array(7)
    # gradient rows: E[1] twice and E[3] once
    dy.renew_cg()
    dy.sum_elems(dy.esum([E[1], E[3], E[1]])).backward()
    np.testing.assert_array_equal(E.row_grad_as_array(1), [2, 2])
    np.testing.assert_array_equal(to_np(E.used_rows()), [1, 3])
    assert not E.all_updated
    E.zero_grad()
    assert E.rows_used == [] and not E.grad_as_array().any()


def test_lookup_clear_grad_is_sparse_but_complete(f64):
    m = dy.ParameterCollection()
    E = m.add_lookup_parameters((5, 2))
    dy.renew_cg()
    dy.sum_elems(E[0] + E[4]).backward()
    E._clear_grad()
    assert not E.grad_as_array().any() and E.rows_used == [] and not E.touched


def _model(shapes=((2, 3), (4,)), lshape=(5, 2), seed=0):
    dy.reset_random_seed(seed)
    m = dy.ParameterCollection()
    ps = [m.add_parameters(s) for s in shapes]
    sub = m.add_subcollection("sub")
    ps.append(sub.add_parameters((3,)))
    ps.append(m.add_lookup_parameters(lshape))
    return m, ps


def test_save_populate_round_trip(tmp_path):
    m, ps = _model(seed=1)
    path = str(tmp_path / "model.npz")
    m.save(path)
    m2, ps2 = _model(seed=2)
    assert not np.array_equal(ps[0].as_array(), ps2[0].as_array())
    m2.populate(path)
    for a, b in zip(ps, ps2):
        np.testing.assert_array_equal(a.as_array(), b.as_array())


@pytest.mark.parametrize("other", [
    dict(shapes=((2, 3), (5,))),              # a shape differs (second parameter)
    dict(shapes=((2, 3),)),                    # fewer parameters
    dict(lshape=(6, 2)),                       # lookup table shape differs
])
def test_populate_mismatch_leaves_parameters_unchanged(tmp_path, other):
    m, _ = _model(seed=1)
    path = str(tmp_path / "model.npz")
    m.save(path)
    m2, ps2 = _model(seed=2, **other)
    before = [p.as_array() for p in ps2]
    with pytest.raises(ValueError, match="populate"):
        m2.populate(path)
    for p, b in zip(ps2, before):
        np.testing.assert_array_equal(p.as_array(), b)


def test_populate_missing_file(tmp_path):
    m, _ = _model()
    with pytest.raises(FileNotFoundError):
        m.populate(str(tmp_path / "nope.npz"))


def test_parameter_arithmetic_builds_expressions(f64):
    m = dy.ParameterCollection()
    W = m.add_parameters((2, 2), init=np.eye(2) * 2)
    b = m.add_parameters(2, init=np.ones(2))
    dy.renew_cg()
    y = W * dy.inputVector([1.0, 3.0]) + b
    np.testing.assert_array_equal(y.npvalue(), [3, 7])
    np.testing.assert_array_equal((-b).npvalue(), [-1, -1])


def test_lists_and_names_follow_dynet_creation_order():
    """Checked against DyNet 2.2: creation order across sub-collections, DyNet's names."""
    pc = dy.ParameterCollection()
    a = pc.add_parameters((3, 4))
    e = pc.add_lookup_parameters((5, 2))
    w, w1 = pc.add_parameters(3, name="W"), pc.add_parameters(3, name="W")
    dy.VanillaLSTMBuilder(1, 5, 6, pc)
    sub = pc.add_subcollection("enc")
    s1 = sub.add_parameters(2)
    anon = pc.add_subcollection()
    b = pc.add_parameters((7,))
    assert [p.name() for p in pc.parameters_list()] == [
        "/_0", "/W", "/W_1", "/vanilla-lstm-builder/_0", "/vanilla-lstm-builder/_1",
        "/vanilla-lstm-builder/_2", "/enc/_0", "/_2"]
    assert [p.name() for p in pc.lookup_parameters_list()] == ["/_1"]
    assert pc.parameters_list()[0] is a and pc.parameters_list()[-1] is b and s1 in pc.parameters_list()
    assert (pc.name(), sub.name(), anon.name()) == ("/", "/enc/", "/_0/")
    assert pc.lookup_parameters_list() == [e] and w1.name() == "/W_1" and w.name() == "/W"


def test_parameters_answer_as_their_expressions_do():
    """DyNet 2 programs read a parameter like an expression: p.vec_value(), p.gradient()."""
    pc = dy.ParameterCollection()
    p = pc.add_parameters((3,), init=np.array([0.5, -1.0, 2.0]))
    E = pc.add_lookup_parameters((4, 2), init=np.arange(8.0).reshape(4, 2))
    dy.renew_cg()
    assert p.vec_value() == [0.5, -1.0, 2.0]
    np.testing.assert_array_equal(p.tensor_value(), [0.5, -1.0, 2.0])
    q = pc.add_parameters((1,), init=np.array([3.0]))
    assert q.scalar_value() == 3.0
    (dy.sum_elems(dy.square(p)) + dy.sum_elems(E[1]) * 2 + dy.sum_elems(E[3])).backward()
    np.testing.assert_allclose(p.gradient(), [1.0, -2.0, 4.0])
    np.testing.assert_array_equal(E.rows_grad_as_array([3, 0, 1]), [[1, 1], [0, 0], [2, 2]])
    assert E.batch([0, 1]).npvalue().tolist() == [[0.0, 2.0], [1.0, 3.0]]     # (d, B), as DyNet


def test_parameter_values_with_recalculate_leave_the_graph_alone():
    """A parameter's value does not depend on the graph: recalculate must not invalidate it
    (that would redraw the graph's random nodes)."""
    pc = dy.ParameterCollection()
    p = pc.add_parameters((1,), init=np.array([2.5]))
    W = pc.add_parameters((2, 3), init=np.arange(6.0).reshape(2, 3))
    E = pc.add_lookup_parameters((3, 2), init=np.arange(6.0).reshape(3, 2))
    dy.renew_cg()
    d = dy.dropout(dy.inputVector(list(range(1, 41))), 0.5)
    r = dy.random_normal((20,))
    before = d.npvalue(), r.npvalue()
    assert p.scalar_value(recalculate=True) == 2.5
    assert W.vec_value(True) == [0, 3, 1, 4, 2, 5]            # column-major, as DyNet
    assert E.vec_value(True) == [0, 1, 2, 3, 4, 5]            # row after row, as DyNet
    np.testing.assert_array_equal(W.tensor_value(True), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(W.npvalue(recalculate=True), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(d.npvalue(), before[0])
    np.testing.assert_array_equal(r.npvalue(), before[1])
    r.npvalue(recalculate=True)       # an expression's recalculate does redraw: the check can fail
    assert not np.array_equal(d.npvalue(), before[0]) and not np.array_equal(r.npvalue(), before[1])
    with pytest.raises(dy.GraphError, match=r"scalar_value\(\) on parameter /_1 of shape \(2, 3\)"):
        W.scalar_value()


def test_used_rows_sorted_and_distinct_over_several_lookups(backend):
    """used_rows() merges the row lists of several lookups: sorted, each row once."""
    m = dy.ParameterCollection()
    E = m.add_lookup_parameters((9, 2))
    E.rows_used = [np.array([7, 2, 7]), np.array([5]), np.array([2, 0, 8, 5])]
    np.testing.assert_array_equal(to_np(E.used_rows()), [0, 2, 5, 7, 8])
    E.rows_used = [np.array([4])]
    np.testing.assert_array_equal(to_np(E.used_rows()), [4])
    E.rows_used = [np.array([], dtype=np.int64), np.array([3, 3])]
    np.testing.assert_array_equal(to_np(E.used_rows()), [3])


def test_init_row_takes_a_flat_row_in_dynets_order(f64):
    """A table of (2, 3) rows takes a flat list of 6 values, column-major, as DyNet's."""
    m = dy.ParameterCollection()
    lp = m.add_lookup_parameters((4, 2, 3))
    lp.init_row(1, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(lp.row_as_array(1), [[0, 2, 4], [1, 3, 5]])
    with pytest.raises(ValueError, match="init_row"):
        lp.init_row(1, [0.0] * 5)
