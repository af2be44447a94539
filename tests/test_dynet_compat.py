"""DyNet behaviours that typical programs rely on beyond the names: iterating over an
expression, indexing a Parameter, a lookup table's whole-table expression, softmax over rows.
The expected values are DyNet 2.1's, each worked out here with NumPy."""
import numpy as np
import pytest

import autobatch as dy
from check_kit import check_param_grads


def test_iterating_over_an_expression_stops_at_its_end():
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0, 3.0])
    assert [e.value() for e in x] == [1.0, 2.0, 3.0]
    assert [w.value() for w in dy.softmax(x)] == pytest.approx(list(np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum()))
    assert x[-1].value() == 3.0 and x[-3].value() == 1.0


@pytest.mark.parametrize("k", [3, -4, 10])
def test_an_index_past_the_end_is_an_index_error_naming_pick(k):
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0, 3.0])
    n = len(dy.cg().sigs)
    with pytest.raises(IndexError) as info:
        x[k]
    assert isinstance(info.value, dy.GraphError)     # and still autobatch's input error
    assert "pick" in str(info.value) and "(3,)" in str(info.value) and __file__ in str(info.value)
    assert len(dy.cg().sigs) == n                     # nothing was added
    assert x[2].value() == 3.0


def test_parameters_index_like_their_expression():
    m = dy.ParameterCollection()
    v = m.add_parameters((3,), init=dy.NumpyInitializer(np.array([1.0, 2.0, 3.0])))
    M = m.add_parameters((2, 3), init=dy.NumpyInitializer(np.arange(6.0).reshape(2, 3)))
    dy.renew_cg()
    assert v[1].value() == 2.0 and v[-1].value() == 3.0
    assert v[0:2].value() == [1.0, 2.0]
    assert M[1].value() == [3.0, 4.0, 5.0]
    (v[1] + dy.sum_elems(M[1])).backward()
    np.testing.assert_array_equal(v.grad_as_array(), [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(M.grad_as_array(), [[0, 0, 0], [1, 1, 1]])
    with pytest.raises(IndexError):
        v[3]


def test_a_lookup_tables_whole_expression_has_a_row_per_column():
    m = dy.ParameterCollection()
    table = np.arange(12.0).reshape(4, 3)
    E = m.add_lookup_parameters((4, 3), init=dy.NumpyInitializer(table))
    dy.renew_cg()
    for e in (dy.parameter(E), E.expr(), dy.const_parameter(E)):
        assert e.dim() == ((3, 4), 1)
        np.testing.assert_array_equal(e.npvalue(), table.T)
    picked = dy.parameter(E) * dy.inputVector([0.0, 1.0, 0.0, 0.0])     # row 1 as a column
    assert picked.value() == [3.0, 4.0, 5.0]
    (dy.sum_elems(picked) + dy.sum_elems(dy.const_parameter(E) * dy.inputVector([1.0, 1.0, 1.0, 1.0]))).backward()
    want = np.zeros((4, 3))
    want[1] = 1.0                                     # the constant expression adds nothing
    np.testing.assert_array_equal(E.grad_as_array(), want)


def test_a_lookup_table_in_an_expression_is_its_whole_expression(f64):
    """DyNet 2.1 reads a table passed to an op as its (d, V) expression too."""
    m = dy.ParameterCollection()
    table = np.arange(12.0).reshape(4, 3)
    E = m.add_lookup_parameters((4, 3), init=dy.NumpyInitializer(table))
    dy.renew_cg()
    onehot = dy.inputVector([0.0, 1.0, 0.0, 0.0])
    assert (E * onehot).value() == [3.0, 4.0, 5.0]
    assert dy.affine_transform([dy.inputVector([1.0, 1.0, 1.0]), E, onehot]).value() == [4.0, 5.0, 6.0]
    np.testing.assert_array_equal((E + E).npvalue(), 2 * table.T)
    np.testing.assert_array_equal(dy.transpose(E).npvalue(), table)
    dy.sum_elems(dy.tanh(E) * dy.inputVector([1.0, 0.0, 2.0, 0.0])).backward()
    want = np.zeros((4, 3))
    want[[0, 2]] = (1 - np.tanh(table[[0, 2]]) ** 2) * np.array([[1.0], [2.0]])
    np.testing.assert_allclose(E.grad_as_array(), want)


def test_softmax_over_the_rows_of_a_matrix(f64):
    m = dy.ParameterCollection()
    X = m.add_parameters((2, 3), init=dy.NumpyInitializer(np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 5.0]])))
    dy.renew_cg()
    x = X.as_array()
    want = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(dy.softmax(dy.parameter(X), 1).npvalue(), want, rtol=1e-12)
    np.testing.assert_allclose(dy.softmax(dy.parameter(X), 0).npvalue(),
                               np.exp(x) / np.exp(x).sum(axis=0, keepdims=True), rtol=1e-12)
    w = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]])

    def loss():
        dy.renew_cg()
        return dy.sum_elems(dy.cmult(dy.softmax(dy.parameter(X), 1), dy.inputTensor(w)))

    check_param_grads(loss, [X])


def test_softmax_refuses_a_dimension_it_does_not_have():
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match="softmax"):
        dy.softmax(dy.inputVector([1.0, 2.0]), 1)     # DyNet: reduction dimension must be < 1


def test_log_softmax_restricted_to_some_elements(f64):
    m = dy.ParameterCollection()
    X = m.add_parameters((4,), init=dy.NumpyInitializer(np.array([1.0, 2.0, 3.0, 0.5])))
    dy.renew_cg()
    e = dy.log_softmax(dy.parameter(X), [2, 0, 2])
    x = X.as_array()
    want = np.full(4, -np.inf)
    want[[0, 2]] = x[[0, 2]] - np.log(np.exp(x[[0, 2]]).sum())
    np.testing.assert_allclose(e.npvalue(), want)             # DyNet: [-2.1269, -inf, -0.1269, -inf]

    def loss():
        dy.renew_cg()
        e = dy.log_softmax(dy.parameter(X), [0, 2])
        return dy.pick(e, 2) * 2.0 + dy.pick(e, 0)

    check_param_grads(loss, [X])
    dy.renew_cg()
    for bad in ([], [4]):
        with pytest.raises(dy.GraphError, match="log_softmax"):
            dy.log_softmax(dy.parameter(X), bad)
    with pytest.raises(dy.GraphError, match="log_softmax"):
        dy.log_softmax(dy.inputTensor(np.ones((2, 2))), [0])    # DyNet: vectors only


def test_dot_product_of_rows_columns_and_matrices(f64):
    m = dy.ParameterCollection()
    A = m.add_parameters((2, 2), init=dy.NumpyInitializer(np.array([[1.0, 2.0], [3.0, 4.0]])))
    dy.renew_cg()
    row = dy.inputTensor(np.array([[1.0, 2.0, 3.0]]))
    col = dy.inputTensor(np.array([[1.0], [2.0]]))
    assert dy.dot_product(row, row).value() == 14.0 and dy.dot_product(col, col).value() == 5.0
    assert dy.dot_product(dy.parameter(A), dy.parameter(A)).dim() == ((1,), 1)
    assert dy.dot_product(dy.parameter(A), dy.parameter(A)).value() == 30.0
    dy.dot_product(dy.parameter(A), dy.inputTensor(np.array([[1.0, 0.0], [0.5, 2.0]]))).backward()
    np.testing.assert_array_equal(A.grad_as_array(), [[1.0, 0.0], [0.5, 2.0]])
    with pytest.raises(dy.GraphError, match="dot_product"):
        dy.dot_product(col, dy.inputVector([1.0, 2.0]))         # DyNet refuses (2, 1) with (2,)


def test_ids_given_as_whole_floats(f64):
    """Labels read with np.loadtxt are floats: DyNet takes 2.0 as 2 (a fraction is refused here)."""
    y = np.loadtxt(["2 1"])
    m = dy.ParameterCollection()
    E = m.add_lookup_parameters((4, 2), init=dy.NumpyInitializer(np.arange(8.0).reshape(4, 2)))
    dy.renew_cg()
    v = dy.inputVector([0.1, 0.5, -0.2])
    z = np.array([0.1, 0.5, -0.2])
    assert dy.pickneglogsoftmax(v, y[0]).value() == pytest.approx(np.log(np.exp(z).sum()) - z[2])
    assert dy.pick(v, 1.0).value() == 0.5 and dy.hinge(v, y[0]).value() == pytest.approx(3.0)
    assert E[y[1]].value() == [2.0, 3.0] and dy.lookup(E, np.float32(3.0)).value() == [6.0, 7.0]
    for bad in (lambda: dy.pick(v, 1.5), lambda: dy.pickneglogsoftmax(v, 0.5), lambda: E[1.5]):
        with pytest.raises(dy.GraphError):
            bad()


def test_kmax_pooling_keeps_the_earliest_of_equal_values():
    m = dy.ParameterCollection()
    X = m.add_parameters((1, 4), init=dy.NumpyInitializer(np.array([[-1.0, 3.0, -2.0, -5.0]])))
    dy.renew_cg()
    e = dy.kmax_pooling(dy.rectify(dy.parameter(X)), 2)     # three zeros tie: DyNet keeps the first
    np.testing.assert_array_equal(e.npvalue(), [[0.0, 3.0]])
    dy.sum_elems(dy.cmult(e, dy.inputTensor(np.array([[1.0, 10.0]])))).backward()
    np.testing.assert_array_equal(X.grad_as_array(), [[0.0, 10.0, 0.0, 0.0]])    # rectify'(-1) = 0


def test_transpose_with_dims_as_dynet():
    dy.renew_cg()
    a = np.arange(24.0).reshape(2, 3, 4)
    t = dy.inputTensor(a)
    for dims in ([2, 0, 1], [1, 0, 2], [0, 2, 1], [0, 1, 2]):
        e = dy.transpose(t, dims)
        np.testing.assert_array_equal(e.npvalue(), a.transpose(dims))
    assert dy.transpose(dy.inputVector([1.0, 2.0]), [0, 1]).dim() == ((2, 1), 1)
    with pytest.raises(dy.GraphError, match="transpose"):
        dy.transpose(t, [0, 0, 1])


def test_binary_log_loss_of_a_saturated_probability_is_clamped(f64):
    m = dy.ParameterCollection()
    w = m.add_parameters(1, init=40.0)
    dy.renew_cg()
    loss = dy.binary_log_loss(dy.logistic(w * 1.0), dy.scalarInput(0.0))    # 1 - σ(40) is 0
    assert loss.value() == pytest.approx(-np.log(np.finfo(np.float64).tiny))
    loss.backward()                                     # finite, and nothing through the clamp
    assert w.grad_as_array()[0] == 0.0


def test_lstm_state_given_by_its_cells_alone():
    """DyNet takes one vector per layer as the cells: h starts at 0 (initial_state), or stays
    (set_s). Its numbers for this model (2 layers, every weight 0.3): [0.23137, 0.27464], 0.6759."""
    m = dy.ParameterCollection()
    b = dy.LSTMBuilder(2, 2, 2, m)
    for P in b.get_parameters():
        for p in P:
            p.set_value(np.full(p.shape(), 0.3))
    dy.renew_cg()
    c = [dy.inputVector([0.5, -0.5]), dy.inputVector([0.1, 0.2])]
    x = dy.inputVector([1.0, 2.0])
    s = b.initial_state(c).add_input(x)
    full = b.initial_state(c + [dy.zeros(2), dy.zeros(2)]).add_input(x)
    np.testing.assert_allclose(s.output().npvalue(), full.output().npvalue(), rtol=1e-6)
    np.testing.assert_allclose(s.output().npvalue(), [0.23137, 0.27464], atol=1e-5)
    c2 = [dy.inputVector([1.0, 1.0]), dy.inputVector([2.0, 2.0])]
    x2 = dy.inputVector([1.0, 0.0])
    kept = s.set_s(c2).add_input(x2).output().npvalue()
    np.testing.assert_allclose(kept, s.set_s(c2 + list(s.h())).add_input(x2).output().npvalue(), rtol=1e-6)
    np.testing.assert_allclose(kept, [0.6759, 0.6759], atol=1e-4)


def test_parameter_expr_is_constant_unless_asked(f64):
    m = dy.ParameterCollection()
    W = m.add_parameters(2, init=1.0)
    dy.renew_cg()
    dy.sum_elems(W.expr()).backward()                   # DyNet 2.1: update=False by default
    assert not W.grad_as_array().any()
    dy.renew_cg()
    dy.sum_elems(W.expr(True)).backward()
    np.testing.assert_array_equal(W.grad_as_array(), [1.0, 1.0])


def test_bmax_sends_ties_to_its_second_argument(f64):
    m = dy.ParameterCollection()
    a = m.add_parameters(2, init=dy.NumpyInitializer(np.array([1.0, 2.0])))
    c = m.add_parameters(2, init=dy.NumpyInitializer(np.array([1.0, 0.0])))
    dy.renew_cg()
    dy.sum_elems(dy.bmax(a, c)).backward()
    np.testing.assert_array_equal(a.grad_as_array(), [0.0, 1.0])
    np.testing.assert_array_equal(c.grad_as_array(), [1.0, 0.0])


def test_values_of_one_element_matrices_and_step_slices():
    dy.renew_cg()
    one = dy.inputTensor(np.ones((1, 1)))
    assert isinstance(one.value(), np.ndarray) and one.value().shape == (1, 1)     # DyNet: array([[1.]])
    assert dy.inputVector([2.0]).value() == 2.0 and dy.scalarInput(3.0).value() == 3.0
    v = dy.inputVector([1.0, 2.0, 3.0, 4.0])
    assert v[::2].value() == [1.0, 3.0] and v[1::2].value() == [2.0, 4.0] and v[::-1].value() == [4.0, 3.0, 2.0, 1.0]
    assert dy.reshape(v, (2, 2), batch_size=1).npvalue().tolist() == [[1.0, 3.0], [2.0, 4.0]]
    with pytest.raises(dy.GraphError, match=r"cannot become 2 of shape \(2, 2\)"):
        dy.reshape(v, (2, 2), batch_size=2)


def test_slices_of_several_dimensions():
    """x[a:b, c:d, ::e] as DyNet's: one slice per leading dimension, every dimension kept;
    steps below 1 and more slices than dimensions are refused; gradients reach the slice."""
    data = np.arange(60.0).reshape(3, 4, 5)
    m = dy.ParameterCollection()
    P = m.add_parameters((3, 4, 5), init=data)
    dy.renew_cg()
    x = dy.parameter(P)
    for k in ((slice(None, 2), slice(1, 3)), (slice(None), slice(None), slice(None, None, 2)), (slice(1, 3),)):
        assert x[k].dim()[0] == data[k].shape
        np.testing.assert_array_equal(x[k].npvalue(), data[k])
    for k in ((slice(None), slice(None, None, -1)), (slice(None), slice(None), slice(None), slice(1, 2))):
        with pytest.raises(IndexError, match="slice"):
            x[k]
    # DyNet's own test suite: the slice after the dimensions picks a minibatch's elements
    b = dy.inputTensor(data, batched=True)            # 5 elements of (3, 4)
    assert b[:1, :2, 1:4].dim() == ((1, 2), 3)
    np.testing.assert_array_equal(b[:1, :2, 1:4].npvalue(), data[:1, :2, 1:4])
    assert b[1:, ::2].dim() == ((2, 2), 5)
    v = dy.inputVector([1.0, 2.0, 3.0, 4.0])          # a batch of one: a second slice must keep it
    assert v[1:3, :].dim() == ((2,), 1) and v[1:3, 0:1].npvalue().tolist() == [2.0, 3.0]
    np.testing.assert_array_equal(x[:, :, :, :].npvalue(), data)
    dy.sum_elems(x[:2, 1:3]).backward()
    want = np.zeros((3, 4, 5))
    want[:2, 1:3] = 1.0
    np.testing.assert_array_equal(P.grad_as_array(), want)


def test_kmh_ngram_and_input_tensor_transpose():
    """DyNet 2.1's values: kmh_ngram sums n consecutive columns; inputTensorTranspose reads a
    flat array in column-major order into dim (and batch_size elements)."""
    data = np.arange(12.0).reshape(3, 4)
    m = dy.ParameterCollection()
    P = m.add_parameters((3, 4), init=data)
    dy.renew_cg()
    x = dy.parameter(P)
    for n, want in ((1, data), (2, [[1, 3, 5], [9, 11, 13], [17, 19, 21]]), (3, [[3, 6], [15, 18], [27, 30]])):
        np.testing.assert_array_equal(dy.kmh_ngram(x, n).npvalue(), want)
    dy.sum_elems(dy.cmult(dy.kmh_ngram(x, 2), dy.inputTensor(np.arange(9.0).reshape(3, 3)))).backward()
    np.testing.assert_array_equal(P.grad_as_array(), [[0, 1, 3, 2], [3, 7, 9, 5], [6, 13, 15, 8]])
    for bad in ((x, 5), (x, 0), (dy.inputVector([1.0, 2.0]), 1)):
        with pytest.raises(dy.GraphError, match="kmh_ngram"):
            dy.kmh_ngram(*bad)
    a = np.arange(6.0)
    assert dy.inputTensorTranspose(a).npvalue().tolist() == a.tolist()
    assert dy.inputTensorTranspose(a, dim=(2, 3)).npvalue().tolist() == [[0, 2, 4], [1, 3, 5]]
    b = dy.inputTensorTranspose(a, dim=(3,), batch_size=2)
    assert b.dim() == ((3,), 2) and b.npvalue().tolist() == [[0, 3], [1, 4], [2, 5]]
    with pytest.raises(dy.GraphError, match="inputTensorTranspose"):
        dy.inputTensorTranspose(a, dim=(4,))


@pytest.mark.parametrize("x, u, p, gx, gu", [
    # DyNet 2.1's values and gradients of sum(constrained_softmax(x, u) ⊙ [1, 2, ...])
    ([1.0, 2.0, 3.0, 0.5], [0.1, 0.1, 1.0, 1.0], [0.1, 0.1, 0.739313, 0.060687],
     [0.0, 0.0, -0.056083, 0.056083], [-2.075858, -1.075858, 0.0, 0.0]),
    ([1.0, 2.0, 3.0, 0.5], [1.0, 1.0, 0.2, 1.0], [0.184979, 0.502825, 0.2, 0.112196],
     [-0.194092, -0.024772, 0.0, 0.218864], None),
    ([0.0, 0.0, 0.0], [0.2, 0.5, 1.0], [0.2, 0.4, 0.4], [0.0, -0.2, 0.2], None)])
def test_constrained_softmax_as_dynet(x, u, p, gx, gu):
    m = dy.ParameterCollection()
    X, U = m.add_parameters(len(x), init=np.array(x)), m.add_parameters(len(u), init=np.array(u))
    dy.renew_cg()
    c = dy.constrained_softmax(dy.parameter(X), dy.parameter(U))
    np.testing.assert_allclose(c.npvalue(), p, atol=2e-6)
    dy.sum_elems(dy.cmult(c, dy.inputVector([float(k) for k in range(1, len(x) + 1)]))).backward()
    np.testing.assert_allclose(X.grad_as_array(), gx, atol=2e-6)
    if gu is not None:
        np.testing.assert_allclose(U.grad_as_array(), gu, atol=2e-6)
    with pytest.raises(dy.GraphError, match="constrained_softmax"):
        dy.constrained_softmax(dy.parameter(X), dy.inputVector([1.0] * (len(x) + 1)))


def test_a_parameter_nodes_gradient_is_this_backwards_part():
    """As DyNet 2.1: the node's gradient is what the graph's last backward gave it, while the
    parameter's grad_as_array() sums every backward since the last update."""
    m = dy.ParameterCollection()
    W = m.add_parameters((2, 2), init=np.eye(2))
    dy.renew_cg()
    We = dy.parameter(W)
    dy.sum_elems(We * dy.inputVector([1.0, 2.0])).backward()
    assert We.gradient().tolist() == [[1.0, 2.0], [1.0, 2.0]]
    dy.renew_cg()
    We = dy.parameter(W)
    x = dy.inputVector([3.0, 4.0])
    with pytest.raises(dy.GraphError, match="call backward"):
        We.gradient()
    dy.sum_elems(We * x).backward()
    assert We.gradient().tolist() == [[3.0, 4.0], [3.0, 4.0]]
    assert W.grad_as_array().tolist() == [[4.0, 6.0], [4.0, 6.0]]
    (dy.sum_elems(We * x) * 2).backward()
    assert We.gradient().tolist() == [[6.0, 8.0], [6.0, 8.0]]
    E = m.add_lookup_parameters((3, 2))
    dy.renew_cg()
    Ee = dy.parameter(E)                          # the whole table, (2, 3) as DyNet's
    dy.sum_elems(E[1] * 3.0).backward()           # a lookup of its own: nothing reaches Ee (DyNet: zeros)
    assert Ee.gradient().tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    dy.renew_cg()
    Ee = dy.parameter(E)
    dy.sum_elems(Ee * dy.inputVector([0.0, 2.0, 0.0])).backward()
    assert Ee.gradient().tolist() == [[0.0, 2.0, 0.0], [0.0, 2.0, 0.0]]


def test_tensor_value_answers_as_numpy():
    dy.renew_cg()
    t = dy.inputVector([1.0, 2.0]).tensor_value()
    assert type(t.as_numpy()) is np.ndarray and t.as_numpy().tolist() == [1.0, 2.0] and t.tolist() == [1.0, 2.0]


def test_parameter_of_several_parameters_gives_one_expression_each():
    """DyNet's ``W, b = dy.parameter(pW, pb)`` (a tuple) and ``dy.const_parameter(pW, pb)`` (a
    list); a second argument True/False is still DyNet 2.0's update flag."""
    pc = dy.ParameterCollection()
    pW = pc.add_parameters((2, 3), init=np.arange(6.0).reshape(2, 3))
    pb = pc.add_parameters(2, init=np.array([1.0, -1.0]))
    dy.renew_cg()
    W, b = dy.parameter(pW, pb)
    assert W.dim() == ((2, 3), 1) and b.dim() == ((2,), 1)
    cW, cb = dy.const_parameter(pW, pb)
    x = dy.inputVector([1.0, 1.0, 1.0])
    loss = dy.sum_elems(W * x + b) + dy.sum_elems(cW * x + cb)
    assert loss.value() == pytest.approx(2 * (3 + 12))
    loss.backward()
    np.testing.assert_allclose(pW.grad_as_array(), np.ones((2, 3)))   # the const copy adds nothing
    np.testing.assert_allclose(pb.grad_as_array(), np.ones(2))
    before = pW.grad_as_array().copy()
    dy.renew_cg()
    frozen = dy.parameter(pW, False)
    dy.sum_elems(frozen * dy.inputVector([1.0, 1.0, 1.0])).backward()
    np.testing.assert_array_equal(pW.grad_as_array(), before)


def test_a_minibatched_expression_is_an_expression():
    """DyNet programs tell expressions from arrays with isinstance (examples/reinforcement-
    learning's MLP: ``obs if isinstance(obs, dy.Expression) else dy.inputTensor(obs, ...)``)."""
    dy.renew_cg()
    x = dy.inputTensor(np.arange(12.0).reshape(3, 4), batched=True)
    h = dy.tanh(dy.concatenate([x, x]))
    assert isinstance(x, dy.Expression) and isinstance(h, dy.Expression)
    assert h.dim() == ((6,), 4)
    np.testing.assert_allclose(h.npvalue()[:3], np.tanh(np.arange(12.0).reshape(3, 4)), rtol=1e-6)
    with pytest.raises(dy.GraphError, match="set"):
        x.set([1.0, 2.0, 3.0])
    assert dy.sum_batches(dy.sum_elems(h)).value() == pytest.approx(2 * np.tanh(np.arange(12.0)).sum(), rel=1e-6)


def test_a_lookup_table_as_an_operand_is_its_whole_table_expression():
    """DyNet reads a LookupParameters passed where an expression goes as (row_dim, n_rows):
    indices, dims and errors follow that shape, as the value already did."""
    pc = dy.ParameterCollection()
    E = pc.lookup_parameters_from_numpy(np.arange(10.0).reshape(2, 5))     # 2 rows of 5
    dy.renew_cg()
    assert dy.pick(E, 3).npvalue().tolist() == [3.0, 8.0]
    assert dy.pick_batch(E, [4, 3]).npvalue().tolist() == [[4.0, 3.0], [9.0, 8.0]]
    assert dy.hinge_dim(E, [0, 1], 0).npvalue().tolist() == [14.0, 9.0]
    e = dy.pick_batch_elem(E, 0)
    assert e.dim() == ((5, 2), 1) and e.npvalue().shape == (5, 2)
    with pytest.raises(dy.GraphError, match=r"index 2 out of range .*\(5, 2\)"):
        dy.pick(E, 2, 1)


def test_bad_operands_get_errors_that_name_them():
    """Inputs that used to reach the engine's internals (a raw IndexError or AttributeError)."""
    dy.renew_cg()
    v = dy.inputVector([1.0, 2.0])
    with pytest.raises(dy.GraphError, match=r"contract3d_1d: needs a rank-3 tensor.*\(2,\), \(2,\)"):
        dy.contract3d_1d(v, v)
    with pytest.raises(dy.GraphError, match="concatenate_to_batch: expected an expression, got a str"):
        dy.concatenate_to_batch(["a"])
    for f in (dy.pick, dy.pickneglogsoftmax):
        with pytest.raises(dy.GraphError, match=r"index \[1, 2\] is a sequence, not an int"):
            f(dy.inputVector([1.0, 2.0, 3.0]), [1, 2])
    assert v.npvalue().tolist() == [1.0, 2.0]          # the graph is still usable


def test_set_up_calls_dynet_accepts():
    """sum_dim's n (ignored, as DyNet's), an input vector from a generator, slices past the
    end refused (DyNet: 'require 0 < to <= dim_size') rather than clipped."""
    dy.renew_cg()
    x = dy.inputTensor(np.arange(6.0).reshape(2, 3))
    assert dy.sum_dim(x, [0], False, 0).npvalue().tolist() == [3.0, 5.0, 7.0]
    assert dy.sum_dim(x, [1], b=False, n=2).npvalue().tolist() == [3.0, 12.0]
    v = dy.inputVector(float(k) for k in range(3))
    assert v.npvalue().tolist() == [0.0, 1.0, 2.0]
    assert dy.inputVector({"a": 1.0, "b": 2.0}.values()).npvalue().tolist() == [1.0, 2.0]
    assert dy.pick(v, np.array(2)).value() == 2.0          # a 0-d array is its number
    assert v[1:3].npvalue().tolist() == [1.0, 2.0] and v[-2:].npvalue().tolist() == [1.0, 2.0]
    with pytest.raises(IndexError, match="past the end"):
        v[1:10]
    with pytest.raises(IndexError, match="past the end"):
        x[0:1, 0:4]


def test_pick_and_lookup_default_to_index_0():
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((3, 2), init=np.arange(6.0).reshape(3, 2))
    dy.renew_cg()
    assert dy.lookup(E).npvalue().tolist() == [0.0, 1.0]
    assert dy.pick(dy.inputVector([5.0, 6.0])).value() == 5.0


def test_a_column_passes_for_a_vector_in_distances_hinge_and_constrained_softmax():
    """DyNet's (n, 1) is its (n,): the results equal the vector forms'."""
    dy.renew_cg()
    v = dy.inputVector([1.0, 2.0, 3.0])
    c = dy.inputTensor(np.array([[0.0], [1.0], [5.0]]))
    assert dy.l1_distance(v, c).value() == pytest.approx(1 + 1 + 2)
    assert dy.huber_distance(v, c).value() == pytest.approx(
        dy.huber_distance(v, dy.inputVector([0.0, 1.0, 5.0])).value())
    assert dy.hinge(c, 0).value() == pytest.approx(dy.hinge(dy.inputVector([0.0, 1.0, 5.0]), 0).value())
    u = dy.inputTensor(np.array([[0.5], [0.9], [0.3]]))
    col = dy.constrained_softmax(c, u)
    vec = dy.constrained_softmax(dy.inputVector([0.0, 1.0, 5.0]), dy.inputVector([0.5, 0.9, 0.3]))
    assert col.dim() == ((3, 1), 1)
    np.testing.assert_allclose(col.npvalue()[:, 0], vec.npvalue(), rtol=1e-6)


def test_reductions_over_nothing_are_the_input_as_dynets():
    """cumsum along a dimension past the last (of size 1) and sum_dim / mean_dim over no
    dimension with b=True on an expression of one batch element give x, as in DyNet."""
    dy.renew_cg()
    v = dy.inputVector([1.0, 2.0, 3.0])
    for e in (dy.cumsum(v, d=1), dy.sum_dim(v, [], b=True), dy.mean_dim(v, [], b=True)):
        assert e.dim() == ((3,), 1) and e.npvalue().tolist() == [1.0, 2.0, 3.0]
    assert dy.cumsum(v, 0).npvalue().tolist() == [1.0, 3.0, 6.0]


def test_hinge_dim_takes_whole_floats_and_0d_arrays_as_indices():
    dy.renew_cg()
    m = dy.inputTensor(np.arange(6.0).reshape(2, 3))
    want = dy.hinge_dim(m, [1, 0, 1], 0).npvalue().tolist()
    assert dy.hinge_dim(m, [np.array(1), 0.0, np.int64(1)], 0).npvalue().tolist() == want
    with pytest.raises(dy.GraphError, match="expected numbers, got str"):
        dy.inputVector("ab")


@pytest.mark.parametrize("form", ["Parameter", "parameter()", "lookup row"])
def test_a_vector_parameter_times_a_row_is_their_outer_product(form):
    """DyNet: b * transpose(v) for a vector parameter b is the (3, 3) outer product; the
    product of a shared matrix (matmul_shared) refused it."""
    pc = dy.ParameterCollection()
    b = pc.add_parameters((3,), init=dy.NumpyInitializer(np.array([1.0, 2.0, 3.0])))
    E = pc.add_lookup_parameters((2, 3), init=dy.NumpyInitializer(np.array([[1.0, 2.0, 3.0]] * 2)))
    dy.renew_cg()
    row = dy.transpose(dy.inputVector([1.0, 0.5, 2.0]))
    left = {"Parameter": b, "parameter()": dy.parameter(b), "lookup row": E[1]}[form]
    y = left * row
    np.testing.assert_allclose(y.npvalue(), np.outer([1.0, 2.0, 3.0], [1.0, 0.5, 2.0]))
    dy.sum_elems(y).backward()
    got = E.grad_as_array()[1] if form == "lookup row" else b.grad_as_array()
    np.testing.assert_allclose(got, [3.5, 3.5, 3.5])
