"""Inputs that used to give wrong values with no error: arrays the graph kept without copying
(an input is read lazily, at the forward), None taken for NaN, one expression iterated where a
list was expected, NumPy arrays on the left of an operator; and nodes that failed only at the
forward, failing every later forward of their graph with them."""
import numpy as np
import pytest

import autobatch as dy


@pytest.mark.parametrize("make", [
    lambda buf: dy.inputTensor(buf),
    lambda buf: dy.inputVector(buf),
    lambda buf: dy.inputTensorTranspose(buf),
    lambda buf: dy.inputMatrix(buf, (3, 1)),
    lambda buf: dy.inputTensor(buf[:, None], batched=True),
], ids=["inputTensor", "inputVector", "inputTensorTranspose", "inputMatrix", "batched"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_input_keeps_the_values_it_was_built_with(make, dtype):
    dy.renew_cg()
    buf = np.zeros(3, dtype)
    xs = []
    for k in range(3):
        buf[:] = k                      # one buffer, refilled for every input (DyNet copies)
        xs.append(make(buf))
    for k, x in enumerate(xs):
        np.testing.assert_array_equal(np.asarray(x.npvalue()).reshape(-1), [k, k, k])


def test_a_parameter_does_not_share_the_array_it_was_made_from():
    pc = dy.ParameterCollection()
    a = np.ones((2, 2), np.float32)
    p = pc.parameters_from_numpy(a)
    E = pc.lookup_parameters_from_numpy(a)
    q = pc.add_parameters((2, 2), init=dy.NumpyInitializer(a))
    a[:] = 5
    for x in (p, E, q):
        np.testing.assert_array_equal(x.as_array(), np.ones((2, 2)))


@pytest.mark.parametrize("call", [
    lambda b, E: b.set_value([None, None, None]),
    lambda b, E: E.init_row(0, [None, None]),
    lambda b, E: E.init_from_array(np.array([[None, None]] * 4)),
    lambda b, E: b.set_value(["a", "b", "c"]),
    lambda b, E: b.set_value([[1.0], [2.0, 3.0]]),
], ids=["set_value None", "init_row None", "init_from_array None", "set_value str", "ragged"])
def test_parameter_values_must_be_numbers(call):
    pc = dy.ParameterCollection()
    b = pc.add_parameters(3, init=dy.ConstInitializer(1.0))
    E = pc.add_lookup_parameters((4, 2), init=dy.ConstInitializer(2.0))
    with pytest.raises(ValueError, match=r"(set_value|init_row|init_from_array): .*test_silent_inputs.py"):
        call(b, E)
    np.testing.assert_array_equal(b.as_array(), np.ones(3))
    np.testing.assert_array_equal(E.as_array(), np.full((4, 2), 2.0))


def test_a_numpy_initializer_of_none_is_refused():
    with pytest.raises(ValueError, match="NumpyInitializer: expected numbers, got None"):
        dy.NumpyInitializer(np.array([None, 1.0]))


@pytest.mark.parametrize("name", ["emax", "logsumexp", "affine_transform", "esum", "average"])
def test_one_expression_is_not_a_list_of_them(name):
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0, 3.0])
    with pytest.raises(dy.GraphError, match=f"{name}: expects a list of expressions, got Expression"):
        getattr(dy, name)(x)
    assert dy.tanh(x).value() == pytest.approx(np.tanh([1.0, 2.0, 3.0]).tolist(), rel=1e-6)


def test_transduce_of_one_expression_reads_its_rows_as_dynet_does():
    """(DyNet 2.2 iterates an Expression given to transduce, as add_inputs does here.)"""
    pc = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(1, 3, 2, pc)
    dy.renew_cg()
    X = dy.inputTensor(np.arange(6.0).reshape(2, 3))
    got = [h.npvalue() for h in b.initial_state().transduce(X)]
    want = [s.output().npvalue() for s in b.initial_state().add_inputs([X[0], X[1]])]
    assert len(got) == 2
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("left", [np.ones(3), np.ones((3, 3)), np.ones(1)], ids=["vector", "matrix", "one"])
@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_a_numpy_array_on_the_left_of_an_operator_is_refused(left, op):
    dy.renew_cg()
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 3))
    for right in (dy.inputVector([1.0, 2.0, 3.0]), W):
        with pytest.raises(TypeError, match=r"operator .: expected an Expression or Parameter, got ndarray"):
            eval(f"left {op} right")


def test_numpy_functions_of_one_expression_still_work():
    dy.renew_cg()
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2,), init=dy.NumpyInitializer(np.array([1.0, -1.0])))
    x = dy.inputVector([1.0, 2.0])
    for y, want in ((np.add(x, 1.0), [2, 3]), (np.sum(x), [1, 2]), (np.negative(x), [-1, -2]),
                    (np.multiply(2.0, x), [2, 4]), (np.add(W, 1.0), [2, 0]), (np.sum([x, x]), [2, 4])):
        assert isinstance(y, dy.Expression)
        np.testing.assert_allclose(y.npvalue(), want)


def test_numpy_scalars_on_either_side_still_work():
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    for y, want in ((np.float32(2) * x, [2, 4]), (x * np.float64(2), [2, 4]), (np.int64(3) - x, [2, 1]),
                    (np.float64(2) / x, [2, 1]), (np.longdouble(2) * x, [2, 4]), (np.longdouble(2) + x, [3, 4]),
                    (np.array(2, dtype=np.longdouble) * x, [2, 4]), (np.add(np.longdouble(1), x), [2, 3]),
                    (np.uint8(3) - x, [2, 1]), (np.array(2.0) * x, [2, 4])):
        np.testing.assert_allclose(y.value(), want)


@pytest.mark.parametrize("call", [
    lambda: dy.sum_batches(None), lambda: dy.mean_batches(None), lambda: dy.pick_batch_elem("abc", 0),
    lambda: dy.pick_batch_elems(-1, [0]), lambda: dy.std_batches(3), lambda: dy.concatenate_to_batch([1]),
], ids=["sum_batches", "mean_batches", "pick_batch_elem", "pick_batch_elems", "std_batches",
        "concatenate_to_batch"])
def test_batch_functions_refuse_what_is_not_an_expression(call):
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match=r"^\w+: expected an expression, got a \w+ \[at .*test_silent_inputs"):
        call()


def test_an_empty_minibatch_is_refused_when_built():
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match="one_hot: a minibatch of no elements"):
        dy.one_hot(3, [])


def test_logsumexp_of_infinities():
    dy.renew_cg()
    ninf, inf = -np.inf, np.inf
    x, y = dy.inputVector([ninf, ninf, inf]), dy.inputVector([ninf, 1.0, 2.0])
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(dy.logsumexp([x, y]).value(), np.logaddexp([ninf, ninf, inf], [ninf, 1.0, 2.0]))
        m = dy.inputTensor(np.array([[ninf, 0.0, inf], [ninf, 0.0, 1.0]]))
        np.testing.assert_allclose(dy.logsumexp_dim(m, 0).value(), [ninf, np.log(2.0), inf])


@pytest.mark.parametrize("make", [
    lambda x: dy.concatenate([x, x], d=70),
    lambda x: dy.reshape(x, (2,) + (1,) * 40),
    lambda x: dy.zeros((200000, 200000)),
], ids=["concatenate", "reshape", "zeros"])
def test_a_node_the_forward_cannot_compute_is_refused_when_built(make):
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    with pytest.raises(dy.GraphError, match=r"an output of shape .*at most 32 and .*test_silent_inputs"):
        make(x)
    # the graph still computes (a node failing at the forward would fail every later one)
    np.testing.assert_allclose(dy.tanh(x).value(), np.tanh([1.0, 2.0]), rtol=1e-6)
