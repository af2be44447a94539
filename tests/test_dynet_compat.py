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
