"""Errors are raised early and clearly: the message names the op, the shapes and the
user's line (this file and the line number); parameters stay unchanged; the graph (or a
renewed one) keeps working afterwards."""
import warnings

import numpy as np
import pytest

import autobatch as dy
from autobatch import runtime
from autobatch.errors import AutobatchError, GraphError, NonFiniteError, StaleExpressionError
from autobatch.ops import OPS

# log/sqrt of negatives are the point of some tests here
pytestmark = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning",
                                        "ignore:divide by zero:RuntimeWarning")


@pytest.fixture
def m():
    dy.reset_random_seed(5)
    model = dy.Model()
    return {"W": model.add_parameters((3, 4)), "b": model.add_parameters(3),
            "E": model.add_lookup_parameters((5, 3)), "model": model}


def _snapshot(m):
    ps = [m["W"], m["b"], m["E"]]
    return [(p.as_array(), p.grad_as_array()) for p in ps]


def _unchanged(m, snap):
    for (v, g), p in zip(snap, [m["W"], m["b"], m["E"]]):
        np.testing.assert_array_equal(p.as_array(), v)
        np.testing.assert_array_equal(p.grad_as_array(), g)


def _works(m):
    """A correct program on the current graph: value and backward succeed."""
    x = dy.inputVector([1.0, 2.0, 3.0, 4.0])
    loss = dy.sum_elems(dy.tanh(m["W"] * x + m["b"] + m["E"][2]))
    v = loss.value()
    assert np.isfinite(v)
    loss.backward()
    assert m["b"].grad_as_array().any()
    for p in (m["W"], m["b"], m["E"]):
        p.zero_grad()
    return v


def _expect(exc, fn, *parts, src=None):
    """fn (a one-line lambda) raises exc; the message names the line of src (default fn,
    the user's innermost frame) and every part."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    where = f"{__file__}:{(src or fn).__code__.co_firstlineno}"
    assert where in msg, f"{where!r} not in {msg!r}"
    for p in parts:
        assert p in msg, f"{p!r} not in {msg!r}"
    return msg


def _vec(n):
    return dy.inputVector(list(np.arange(1.0, n + 1)))


# --- shape mismatches ------------------------------------------------------------------------
SHAPE_CASES = {
    "W*x": (lambda m: m["W"] * _vec(3), ["matmul", "(3, 4)", "(3,)"]),
    "expr*expr": (lambda m: dy.tanh(_vec(2)) * _vec(3), ["matmul", "(2,)", "(3,)"]),
    "esum": (lambda m: dy.esum([_vec(2), _vec(2), _vec(3)]), ["(2,)", "(3,)"]),
    "plus": (lambda m: _vec(2) + _vec(3), ["add", "(2,)", "(3,)"]),
    "cmult": (lambda m: dy.cmult(_vec(4), _vec(3)), ["cmult", "(4,)", "(3,)"]),
    "concatenate": (lambda m: dy.concatenate([_vec(2), dy.inputMatrix(list(range(4)), (2, 2))]),
                    ["concatenate", "(2,)", "(2, 2)"]),
    "affine": (lambda m: dy.affine_transform([m["b"], m["W"], _vec(2)]), ["affine", "(3, 4)", "(2,)"]),
    "dot_product": (lambda m: dy.dot_product(_vec(2), _vec(3)), ["dot_product", "(2,)", "(3,)"]),
    "pickrange": (lambda m: dy.pickrange(_vec(2), 1, 5), ["pickrange", "(2,)"]),
}


@pytest.mark.parametrize("case", list(SHAPE_CASES))
def test_shape_mismatch(m, case):
    build, parts = SHAPE_CASES[case]
    dy.renew_cg()
    snap = _snapshot(m)
    _expect(GraphError, lambda: build(m), *parts, src=build)
    _unchanged(m, snap)
    _works(m)          # the same graph is still usable
    dy.renew_cg()
    _works(m)


def test_shape_error_names_user_line_not_library_line(m):
    dy.renew_cg()
    msg = _expect(GraphError, lambda: m["W"] * _vec(3))
    assert "/autobatch/" not in msg.split(" at ")[-1]


def test_errors_are_value_errors_and_autobatch_errors(m):
    with pytest.raises(ValueError):
        _vec(2) + _vec(3)
    with pytest.raises(AutobatchError):
        _vec(2) + _vec(3)


# --- indices out of range -------------------------------------------------------------------
INDEX_CASES = {
    "lookup": (lambda m: dy.lookup(m["E"], 5), ["lookup", "5", "(5, 3)"]),
    "lookup_negative": (lambda m: dy.lookup(m["E"], -1), ["lookup", "-1", "(5, 3)"]),
    "lookup_getitem": (lambda m: m["E"][7], ["lookup", "7", "(5, 3)"]),
    "pick": (lambda m: dy.pick(_vec(2), 2), ["pick", "2", "(2,)"]),
    "pick_getitem": (lambda m: _vec(3)[3], ["pick", "3", "(3,)"]),
    "pickneglogsoftmax": (lambda m: dy.pickneglogsoftmax(_vec(2), 3), ["pickneglogsoftmax", "3", "(2,)"]),
    "pickneglogsoftmax_neg": (lambda m: dy.pickneglogsoftmax(_vec(2), -1), ["pickneglogsoftmax", "-1", "(2,)"]),
}


@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_index_out_of_range(m, case):
    build, parts = INDEX_CASES[case]
    dy.renew_cg()
    snap = _snapshot(m)
    _expect(GraphError, lambda: build(m), *parts, src=build)
    _unchanged(m, snap)
    _works(m)


def test_lookup_with_non_integer_index(m):
    dy.renew_cg()
    _expect(GraphError, lambda: dy.lookup(m["E"], 1.5), "lookup", "1.5")


# --- stale expressions -----------------------------------------------------------------------
def test_stale_expression_in_op(m):
    dy.renew_cg()
    x = _vec(3)
    dy.renew_cg()
    _expect(StaleExpressionError, lambda: dy.tanh(x), "tanh", "renewed")
    # named as the user called them (the operator, esum), not by the node they make (add)
    _expect(StaleExpressionError, lambda: x + _vec(3), "operator +", "renewed")
    _expect(StaleExpressionError, lambda: dy.esum([_vec(3), x]), "esum", "renewed")
    _works(m)


def test_stale_expression_value(m):
    dy.renew_cg()
    x = dy.tanh(_vec(3))
    x.value()
    dy.renew_cg()
    _expect(StaleExpressionError, lambda: x.value(), "renewed", "tanh", "(3,)")
    _expect(StaleExpressionError, lambda: x.npvalue(), "renewed")
    _expect(StaleExpressionError, lambda: x.backward(), "renewed")
    _expect(StaleExpressionError, lambda: x.forward(), "renewed")
    _works(m)


def test_stale_expression_error_is_runtime_error():
    x = _vec(1)
    dy.renew_cg()
    with pytest.raises(RuntimeError):
        x.value()


# --- non-finite losses ---------------------------------------------------------------------
def test_nan_loss_in_backward(m):
    dy.renew_cg()
    snap = _snapshot(m)
    bad = dy.log(dy.inputVector([1.0, -2.0]))       # log of a negative: NaN
    loss = dy.sum_elems(bad + dy.pickrange(m["b"], 0, 2))
    msg = _expect(NonFiniteError, lambda: loss.backward(), "log", "(2,)", "non-finite")
    assert f"node {bad.i}" in msg                    # the first non-finite node, not the loss
    _unchanged(m, snap)
    assert not m["b"].touched
    _works(m)                                        # the same graph still works
    dy.renew_cg()
    _works(m)


def test_inf_loss_names_first_non_finite_op(m):
    dy.renew_cg()
    h = dy.tanh(m["W"] * _vec(4))
    bad = dy.sqrt(h - 5.0)                           # sqrt of negatives: NaN
    loss = dy.sum_elems(dy.exp(bad) * 2.0)
    _expect(NonFiniteError, lambda: loss.backward(), "sqrt", "(3,)", f"node {bad.i}")
    with pytest.raises(FloatingPointError):
        loss.backward()


def test_nan_among_a_batch_names_the_right_node(m):
    """Only one node of a batch of logs is non-finite: the message names that node."""
    dy.renew_cg(autobatching="agenda")
    logs = [dy.log(dy.inputVector([v, 1.0])) for v in (1.0, 2.0, -3.0, 4.0)]
    loss = dy.esum([dy.sum_elems(x) for x in logs])
    _expect(NonFiniteError, lambda: loss.backward(), f"node {logs[2].i} (log")


def test_debug_mode_records_creation_lines(m):
    """set_debug(True): the non-finite message also names the line that built the op."""
    dy.set_debug(True)
    try:
        dy.renew_cg()
        make = lambda: dy.log(dy.inputVector([1.0, -2.0]))  # noqa: E731
        bad = make()
        loss = dy.sum_elems(bad)
        msg = _expect(NonFiniteError, lambda: loss.backward(), "log")
        assert f"created at {__file__}:{make.__code__.co_firstlineno}" in msg, msg
    finally:
        dy.set_debug(False)
    dy.renew_cg()
    bad = dy.log(dy.inputVector([-1.0]))
    with pytest.raises(NonFiniteError) as e:
        dy.sum_elems(bad).backward()
    assert "created at" not in str(e.value)          # off again: nothing recorded
    assert "set_debug(True)" in str(e.value)         # ... and the message says how to get it


def test_debug_from_environment(monkeypatch):
    monkeypatch.setenv("AUTOBATCH_DEBUG", "1")
    assert runtime._State().debug is True
    monkeypatch.setenv("AUTOBATCH_DEBUG", "0")
    assert runtime._State().debug is False
    monkeypatch.delenv("AUTOBATCH_DEBUG")
    assert runtime._State().debug is False


def test_backward_on_non_scalar(m):
    dy.renew_cg()
    x = dy.tanh(_vec(3))
    _expect(GraphError, lambda: x.backward(), "scalar", "(3,)")
    _works(m)


# --- errors inside forward -------------------------------------------------------------------
def test_error_inside_forward_leaves_graph_usable(m, monkeypatch):
    """A kernel that fails mid-forward: the error names the op; the batches already
    run are rolled back, and the same graph computes correctly afterwards."""
    dy.renew_cg(autobatching="agenda")
    calls = []

    def broken(xp, xs, attr, data, out):
        calls.append(1)
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(OPS["logistic"], "forward_into", broken)
    x = m["W"] * _vec(4)
    y = dy.logistic(dy.tanh(x))
    loss = dy.sum_elems(y)
    snap = _snapshot(m)
    with pytest.raises(RuntimeError, match="kernel exploded") as e:
        loss.value()
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "logistic" in notes
    _unchanged(m, snap)
    g = dy.cg()
    st = dy.stats()
    assert st["forward_nodes"] == 0 and st["forward_batches"] == 0
    assert sum(sum(v) for v in st["signatures"].values()) == 0
    monkeypatch.undo()
    # the same graph, the same expressions: now they compute
    assert dy.cg() is g
    want = 1 / (1 + np.exp(-np.tanh(m["W"].as_array() @ np.arange(1.0, 5.0))))
    np.testing.assert_allclose(y.npvalue(), want, rtol=1e-5)
    loss.backward()
    assert m["b"].grad_as_array().sum() == 0 and m["W"].grad_as_array().any()
    st = dy.stats()
    assert sum(sum(v) for v in st["signatures"].values()) == st["forward_nodes"]
    assert calls


def test_renew_cg_recovers_after_every_kind_of_error(m):
    dy.renew_cg()
    for bad in (lambda: m["W"] * _vec(3), lambda: dy.lookup(m["E"], 9),
                lambda: dy.sum_elems(dy.log(_vec(1) * -1.0)).backward()):
        with pytest.raises(AutobatchError):
            bad()
        dy.renew_cg()
        _works(m)


# Found by a sweep of misuse: each was accepted (or half-registered) at build and then failed
# at every later forward of its graph, or turned None into NaN, or took an Expression's rows
# for a list. Each is refused at the call, by name, and the same graph still trains.
_POISON = {
    "negative reshape": (lambda M, x: dy.reshape(M, (-2, -3)), ("reshape", "(-2, -3)")),
    "negative zeros": (lambda M, x: dy.zeros((-2, 3)), ("constant", "(-2, 3)")),
    "negative constant": (lambda M, x: dy.constant((-2,), 1.0), ("constant", "(-2,)")),
    "empty vector": (lambda M, x: dy.inputVector([]), ("input", "(0,)")),
    "empty tensor": (lambda M, x: dy.inputTensor(np.zeros((0, 3))), ("input", "(0, 3)")),
    "parameter of an expression": (lambda M, x: dy.parameter(x), ("parameter", "Expression")),
    "const_parameter of a string": (lambda M, x: dy.const_parameter("W"), ("parameter", "str")),
    "None input": (lambda M, x: dy.inputVector([None, 1.0]), ("inputVector", "None")),
    "None scalar": (lambda M, x: dy.scalarInput(None), ("scalarInput", "None")),
    "string tensor": (lambda M, x: dy.inputTensor("abc"), ("inputTensor", "expected numbers")),
    "ragged tensor": (lambda M, x: dy.inputTensor([[1, 2], [3]]), ("inputTensor", "ragged")),
    "matrix of too few values": (lambda M, x: dy.inputMatrix([1, 2, 3], (2, 2)), ("inputMatrix", "(2, 2)")),
    "set to None": (lambda M, x: x.set([None] * 4), ("set", "numbers")),
    "concatenate of one matrix": (lambda M, x: dy.concatenate(M), ("concatenate", "list")),
    "esum of one matrix": (lambda M, x: dy.esum(M), ("esum", "list")),
    "concatenate_cols of a vector": (lambda M, x: dy.concatenate_cols(x), ("concatenate_cols", "list")),
    "concatenate_cols of nothing": (lambda M, x: dy.concatenate_cols([]), ("concatenate_cols", "empty")),
    "esum of nothing": (lambda M, x: dy.esum([]), ("esum", "empty")),
    "zeros of None": (lambda M, x: dy.zeros(None), ("zeros", "expected dimensions", "None")),
    "reshape to a string": (lambda M, x: dy.reshape(M, "ab"), ("reshape", "expected dimensions", "'ab'")),
    "fractional dimension": (lambda M, x: dy.ones((2.5,)), ("ones", "(2.5,)")),
    "constant of a string": (lambda M, x: dy.constant((2,), "a"), ("constant", "'a'")),
    "dropout rate None": (lambda M, x: dy.dropout(x, None), ("dropout", "None")),
}


@pytest.mark.parametrize("case", sorted(_POISON))
def test_bad_inputs_are_refused_at_the_call_and_the_graph_still_works(m, case):
    make, parts = _POISON[case]
    dy.renew_cg()
    M, x = dy.inputTensor(np.ones((2, 3))), dy.vecInput(4)
    snap = _snapshot(m)
    _expect(GraphError, lambda: make(M, x), *parts, src=make)
    _unchanged(m, snap)
    _works(m)


@pytest.mark.parametrize("strategy", ["none", "depth", "agenda"])
def test_non_finite_values_the_loss_does_not_use_leave_its_gradients_finite(m, strategy):
    """An unused node with NaN or -inf (a pruned candidate's log-probability) shares batches with
    the loss's nodes; its rows' zero gradient times its non-finite values made the loss's
    parameter gradients NaN. They equal those of the same graph without the unused nodes."""
    W, b, E = m["W"], m["b"], m["E"]
    grads = []
    for with_unused in (True, False):
        dy.renew_cg(strategy)
        if with_unused:
            W * dy.inputVector([float("nan"), 1.0, 2.0, 3.0]) + b                  # never used
            dy.log(dy.softmax(W * dy.inputVector([400.0, -400.0, 0.0, 1.0]) + b))   # -inf entries
            dy.cmult(E[4], dy.inputVector([float("inf")] * 3))                     # a row only it reads
        xs = [dy.inputVector([1.0, 2.0, 3.0, 4.0]), dy.inputVector([0.5, -1.0, 0.0, 2.0])]
        loss = dy.esum([dy.pickneglogsoftmax(W * x + b + E[1], 0) for x in xs])
        loss.backward()
        grads.append([p.grad_as_array().copy() for p in (W, b, E)])
        if with_unused and strategy == "agenda":
            assert max(dy.stats()["signatures"][[k for k in dy.stats()["signatures"] if k.startswith("affine")][0]]) > 1
        for p in (W, b, E):
            p.zero_grad()
    for a, b_ in zip(*grads):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b_, rtol=1e-6)


_SETUP = {
    "negative shape": (lambda pc, W: pc.add_parameters((-1, 3)), ValueError, "(-1, 3)"),
    "set_value of another shape": (lambda pc, W: W.set_value(np.zeros((2, 2))), ValueError, "set_value"),
    "builder dimension": (lambda pc, W: dy.LSTMBuilder(1, -4, 3, pc), ValueError, "input_dim"),
    "builder dropout": (lambda pc, W: dy.LSTMBuilder(1, 4, 3, pc).set_dropout(3.0), ValueError, "set_dropout"),
    "trainer of a string": (lambda pc, W: dy.SimpleSGDTrainer("model"), TypeError, "SimpleSGDTrainer"),
    "weight decay": (lambda pc, W: pc.set_weight_decay_lambda(-1.0), ValueError, "weight decay"),
    "strategy": (lambda pc, W: dy.renew_cg(autobatching="bogus"), ValueError, "'bogus'"),
}


@pytest.mark.parametrize("case", sorted(_SETUP))
def test_setup_errors_name_the_users_line(case):
    make, exc, part = _SETUP[case]
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 4))
    _expect(exc, lambda: make(pc, W), part, src=make)


def test_init_of_another_shape_takes_the_arrays_shape_warning_at_the_users_line():
    """As DyNet (its treelstm example asks for more rows than its GloVe matrix has)."""
    pc = dy.ParameterCollection()
    with pytest.warns(UserWarning, match=r"add_parameters.*\(2, 2\).*\(3, 4\)") as rec:
        p = pc.add_parameters((3, 4), init=np.zeros((2, 2)))
    assert p.shape() == (2, 2) and rec[0].filename == __file__
    # an explicit NumpyInitializer or a list of another shape stays an error (DyNet copies the
    # wrong number of values into the requested shape; it refuses lists)
    with pytest.raises(ValueError, match="initializer array"):
        pc.add_parameters((2, 2), init=dy.NumpyInitializer(np.zeros(3)))
    with pytest.raises(ValueError, match="initializer array"):
        pc.add_parameters((2, 2), init=[1.0, 2.0, 3.0])
    # a table of n scalars, as DyNet's add_lookup_parameters(n) makes, from an array of n
    s = pc.add_lookup_parameters(5, init=np.arange(5.0))
    assert s.shape() == (5, 1) and s.as_array()[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # the shape asked for: no warning
        assert pc.add_lookup_parameters(5, init=np.ones((5, 1))).shape() == (5, 1)
    with pytest.warns(UserWarning, match=r"\(4, 3\).*\(5, 3\)") as rec:
        t = pc.add_lookup_parameters((5, 3), init=np.arange(12.0).reshape(4, 3))
    assert t.shape() == (4, 3) and rec[0].filename == __file__
    np.testing.assert_array_equal(t.as_array()[3], [9.0, 10.0, 11.0])


def test_parameters_of_a_zero_dimension_exist_and_train_alongside(tmp_path):
    """DyNet makes them (BIST's parsers create a second hidden layer of its default size 0 and
    never use it); they hold nothing, count nothing and pass through updates and saving."""
    pc = dy.ParameterCollection()
    W, b = pc.add_parameters((0, 20)), pc.add_parameters(0)
    v = pc.add_parameters(3, init=np.array([1.0, 2.0, 3.0]))
    assert W.shape() == (0, 20) and b.shape() == (0,) and pc.parameter_count() == 3
    tr = dy.AdamTrainer(pc)
    dy.renew_cg()
    dy.squared_norm(v + dy.inputVector([1.0, 1.0, 1.0])).backward()
    tr.update()
    assert v.as_array()[0] < 1.0
    pc.save(str(tmp_path / "m"))
    pc2 = dy.ParameterCollection()
    W2, b2, v2 = pc2.add_parameters((0, 20)), pc2.add_parameters(0), pc2.add_parameters(3)
    pc2.populate(str(tmp_path / "m"))
    assert W2.shape() == (0, 20)
    np.testing.assert_array_equal(v2.as_array(), v.as_array())
    with pytest.raises(ValueError, match="non-negative"):
        pc.add_parameters((2, -1))


@pytest.mark.parametrize("call, names", [
    (lambda v2, v3, W, b: dy.esum([v2, v3]), ("esum: add:", "(2,), (3,)")),
    (lambda v2, v3, W, b: dy.bmax(v2, v3), ("bmax: emax:",)),
    (lambda v2, v3, W, b: dy.affine_transform([b, v3, W]), ("affine_transform: matmul:", "(3, 4)")),
    (lambda v2, v3, W, b: dy.affine_transform([b, W, 3.0]), ("affine_transform: expected an Expression",)),
    (lambda v2, v3, W, b: dy.esum([v2, 1]), ("esum: expected an Expression",)),
    (lambda v2, v3, W, b: dy.pick([1, 2, 3], 0), ("pick: expected an Expression",)),
    (lambda v2, v3, W, b: W * [1.0, 2.0, 3.0, 4.0], ("operator *: expected an Expression",)),
    (lambda v2, v3, W, b: W * v3, ("operator *: matmul_shared: cannot multiply (3, 4) by (3,)",)),
])
def test_errors_name_the_function_called_not_only_the_op_it_builds(call, names):
    """esum builds an add, bmax an emax, affine_transform a matmul: the error said only those."""
    pc = dy.ParameterCollection()
    W, b = pc.add_parameters((3, 4)), pc.add_parameters(3)
    dy.renew_cg()
    _expect(GraphError if "expected" not in names[0] else TypeError,
            lambda: call(dy.inputVector([1.0, 2]), dy.inputVector([1.0, 2, 3]), W, b), *names, src=call)


def test_a_singular_inverse_is_nan_and_leaves_its_batch_and_graph_working(m):
    """np.linalg.inv raised for the whole batch, at every later forward of the graph."""
    dy.renew_cg("agenda")
    bad = dy.inverse(dy.inputTensor(np.ones((2, 2))))
    fine = dy.inverse(dy.inputTensor(np.array([[2.0, 0.0], [0.0, 4.0]])))      # batched with bad
    dy.forward([bad, fine])
    assert np.isnan(bad.npvalue()).all()
    np.testing.assert_allclose(fine.npvalue(), [[0.5, 0.0], [0.0, 0.25]])
    _works(m)
    with pytest.raises(NonFiniteError, match="inverse"):
        dy.sum_elems(bad).backward()


def test_numbers_held_as_objects_pass_and_none_does_not():
    """np.array([...], dtype=object) of numbers (pandas gives them) is read as before; None
    (which NumPy turns into NaN) is refused."""
    dy.renew_cg()
    assert dy.inputVector(np.array([1.0, 2, 3.5], dtype=object)).npvalue().tolist() == [1.0, 2.0, 3.5]
    v = dy.vecInput(2)
    v.set(np.array([1, 2], dtype=object))
    assert v.npvalue().tolist() == [1.0, 2.0]
    with pytest.raises(GraphError, match="None"):
        dy.inputTensor(np.array([None, 1.0], dtype=object))
    with pytest.raises(GraphError, match="numbers"):
        v.set(np.array([None, 1.0], dtype=object))


def test_non_finite_values_in_an_unused_node_of_a_mixed_size_batch(m):
    """An elementwise batch of mixed sizes (one flat block) holds the unused node's 0/0: the
    careful backward runs it node by node too."""
    q = m["b"]                                             # (3,)
    grads = []
    for with_unused in (True, False):
        dy.renew_cg("agenda")
        x = dy.inputVector([2.0, 4.0, 5.0])
        used = dy.cdiv(q, x)
        if with_unused:
            dy.cdiv(q, dy.zeros(3))                           # 0/0 and ±inf, never used
            dy.cdiv(dy.inputVector([1.0, 2.0, 3.0, 4.0]), dy.zeros(4))   # another size in the batch
        dy.sum_elems(used).backward()
        grads.append(q.grad_as_array().copy())
        q.zero_grad()
    np.testing.assert_allclose(grads[0], [0.5, 0.25, 0.2], rtol=1e-6)
    np.testing.assert_allclose(grads[0], grads[1])


def test_a_constant_parameter_node_has_no_gradient_of_its_own(m):
    W = m["W"]
    dy.renew_cg()
    c = dy.const_parameter(W)
    dy.sum_elems(c * dy.inputVector([1.0, 2.0, 3.0, 4.0]) + W * dy.inputVector([1.0, 1.0, 1.0, 1.0])).backward()
    _expect(GraphError, lambda: c.gradient(), "update=False")
    assert dy.parameter(W).gradient().tolist() == [[1.0] * 4] * 3


def test_large_finite_gradients_do_not_set_off_the_careful_backward(monkeypatch):
    """The finiteness check sums each parameter's gradients; in float32, gradients of 2e38 sum
    to inf although every value is finite, and the backward ran a second, careful sweep."""
    from autobatch.executor import Executor
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 4), init=np.full((3, 4), 0.1))
    dy.renew_cg()
    loss = dy.pick(W * dy.inputVector([2e38, 2e38, 1.0, 0.0]), 0)
    reached = []
    monkeypatch.setattr(Executor, "_reach", lambda self, i: reached.append(i) or bytearray(len(self.g.args)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # nor does the test's overflow warn
        loss.backward()
    assert not reached
    g = W.grad_as_array()
    assert np.isfinite(g).all() and g[0].tolist() == [np.float32(2e38)] * 2 + [1.0, 0.0]
    assert g[1:].tolist() == [[0.0] * 4] * 2


@pytest.mark.parametrize("op", ["esum", "average", "logsumexp", "emax", "concatenate"])
@pytest.mark.parametrize("arity", [6, 7])
def test_non_finite_values_in_an_unused_wide_node(op, arity):
    """Nodes of many inputs (the per-instance esum of losses) gather them all in one block; the
    careful backward ran such a batch whole, and an unused node's inf (logsumexp: 0·NaN) made the
    gradient of an input it shares with the loss NaN. arity 7: nodes of 6 and 7 inputs, one batch
    for sums and averages. The unused product's NaN sets off the careful backward in every case."""
    pc = dy.ParameterCollection()
    W = pc.add_parameters((3, 4), init=np.linspace(-0.5, 0.5, 12).reshape(3, 4))
    f = getattr(dy, op)
    grads = []
    for with_unused in (True, False):
        dy.renew_cg("agenda")
        x = W * dy.inputVector([1.0, 2.0, 3.0, 4.0])
        y = W * dy.inputVector([0.5, -1.0, 1.0, 2.0])
        used = f([x, y] * 3)
        if with_unused:
            W * dy.inputVector([float("nan"), 1.0, 2.0, 3.0])
            with np.errstate(invalid="ignore", over="ignore"):
                bad = dy.inputVector([float("inf"), float("nan"), 1.0])
                f([x, bad] + [y, x] * 2 + [y] * (arity - 6))
                dy.sum_elems(used).forward()
            batch = [b for b in dy.cg().exe.batches if used.i in b.ids][0]
            assert len(batch.ids) == (2 if arity == 6 or op in ("esum", "average") else 1)
        dy.sum_elems(used).backward()
        grads.append(W.grad_as_array().copy())
        W.zero_grad()
    assert np.isfinite(grads[0]).all()
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)


def test_reflected_operators_name_the_operator():
    """c + x, c - x, c * x with c no number: the error names the operator, as x + c does."""
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    for f, op in ((lambda: True + x, r"\+"), (lambda: None - x, "-"), (lambda: [1] * x, r"\*"),
                  (lambda: x + True, r"\+")):
        with pytest.raises(TypeError, match=f"operator {op}: expected an Expression"):
            f()


# --- found by a fuzz of bad inputs (a helper, 369 checks) ----------------------------------------
def test_a_finite_loss_with_a_nan_gradient_never_reaches_the_parameters(m):
    """The norm of a zero vector has gradient NaN at a loss of 0: update() refuses, naming
    the parameter and the user's line, with clipping off as well as on."""
    for clip in (-1.0, 5.0):
        t = dy.SimpleSGDTrainer(m["model"])
        t.set_clip_threshold(clip)
        dy.renew_cg()
        loss = dy.l2_norm(m["b"] - dy.inputVector(m["b"].as_array()))
        assert loss.value() == 0.0
        loss.backward()
        before = m["b"].as_array()
        _expect(NonFiniteError, lambda: t.update(), "gradient norm is nan", "non-finite gradient in")
        np.testing.assert_array_equal(m["b"].as_array(), before)
        for p in (m["W"], m["b"], m["E"]):
            p.zero_grad()
        _works(m)


def test_a_failing_kernel_in_backward_names_its_batch_and_line(m, monkeypatch):
    dy.renew_cg()
    loss = dy.sum_elems(dy.logistic(m["W"] * _vec(4)))
    loss.value()

    def broken(*args):
        raise RuntimeError("kernel exploded")
    fused = dy.cg().ops[loss.i - 1]              # logistic joined W·x: matmul_shared>logistic
    # on the class: undoing a patch of the instance would leave the bound original behind
    # as an instance attribute, hiding later patches of the class (test_incremental's)
    monkeypatch.setattr(type(fused), "backward", broken)
    snap = _snapshot(m)
    with pytest.raises(RuntimeError, match="kernel exploded") as e:
        loss.backward()
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "backward of a batch of 1 matmul_shared>logistic" in notes and f"{__file__}:" in notes
    _unchanged(m, snap)
    monkeypatch.undo()
    loss.backward()
    assert m["W"].grad_as_array().any()


def test_a_failing_kernel_in_forward_names_the_line_that_asked_for_values(m, monkeypatch):
    dy.renew_cg()
    monkeypatch.setattr(type(OPS["tanh"]), "forward_into", lambda *a: 1 / 0)     # (the class: above)
    y = dy.tanh(dy.sum_elems(_vec(3)))
    with pytest.raises(ZeroDivisionError) as e:
        y.value()
    assert f"{__file__}:" in "\n".join(getattr(e.value, "__notes__", []))


def test_bad_inputs_found_by_the_fuzz(m):
    dy.renew_cg()
    x = _vec(3)
    _expect(GraphError, lambda: x[1.5], "x[k]", "1.5")
    _expect(GraphError, lambda: dy.inputVector([[1.0, 2.0], [3.0, 4.0]]), "inputVector", "(2, 2)")
    _expect(GraphError, lambda: dy.inputVector(3.0), "inputVector", "shape ()")
    _expect(GraphError, lambda: dy.inputTensor(np.zeros((3, 0)), batched=True), "inputTensor", "no elements")
    _expect(GraphError, lambda: dy.inputTensor([], batched=True), "inputTensor", "no elements")
    assert x[2.0].value() == 3.0                          # a whole float, as pick's
    _works(m)


def test_input_graph_errors_name_the_users_line():
    _expect(GraphError, lambda: dy.InputGraph([[1], [0]]), "InputGraph", "cycle")
    _expect(GraphError, lambda: dy.InputGraph([[], [5]]), "InputGraph", "out of range")
    _expect(GraphError, lambda: dy.InputGraph([]), "InputGraph", "at least one vertex")
    _expect(GraphError, lambda: dy.vertex_function(max_children=-1)(lambda v: None), "max_children")


def test_a_stale_expression_is_named_where_it_is_given(m):
    lstm = dy.LSTMBuilder(1, 3, 2, m["model"])
    dy.renew_cg()
    old = dy.inputVector([1.0, 2.0])
    dy.renew_cg()
    _expect(StaleExpressionError, lambda: lstm.initial_state([old, old]), "initial_state", "renewed")
    _expect(TypeError, lambda: lstm.initial_state().add_input(None), "add_input", "NoneType")

    @dy.vertex_function(max_children=1)
    def f(v):
        v.push("y", dy.sum_elems(v.pull("x")))
    old = dy.inputTensor(np.ones((1, 3)))
    dy.renew_cg()
    _expect(StaleExpressionError, lambda: f([dy.InputGraph([[]])], x=[old]), "renewed")
    _works(m)


def test_non_numbers_where_numbers_go_are_named(m):
    dy.renew_cg()
    x = _vec(3)
    _expect(GraphError, lambda: dy.elu(x, "a"), "elu", "alpha", "'a'")
    _expect(GraphError, lambda: dy.noise(x, "a"), "noise", "stddev")
    _expect(GraphError, lambda: dy.hinge(x, 0, None), "hinge", "m")
    _expect(ValueError, lambda: m["model"].add_parameters("ab"), "add_parameters: a parameter's shape", "'ab'")
    _expect(ValueError, lambda: m["model"].add_parameters((3.5, 2)), "add_parameters: a parameter's shape", "3.5")
    t = dy.SimpleSGDTrainer(m["model"])
    _expect(TypeError, lambda: t.set_learning_rate("a"), "set_learning_rate", "'a'")
    _expect(TypeError, lambda: t.update_subset(None, []), "update_subset", "None")
    _expect(TypeError, lambda: t.update_subset(["a"], []), "update_subset", "'a'")
    assert m["model"].add_parameters((3.0, 2)).shape() == (3, 2)       # a whole float, as before
    _works(m)


def test_what_dynet_takes_for_numbers_still_passes(m):
    """The checks above refuse strings and None, not the numbers DyNet's conversions take."""
    from fractions import Fraction
    dy.renew_cg()
    x = _vec(3)
    assert x[True].value() == 2.0 and x[np.int32(2)].value() == 3.0
    for a in (True, np.float32(1.0), np.array(1.0), np.array([1.0]), Fraction(1, 1), 1):
        assert dy.elu(x, a).value() == [1.0, 2.0, 3.0]
    for d in (3.0, np.float32(3), np.array(3), (np.float32(3), np.array(2)), iter([3, 2])):
        assert m["model"].add_parameters(d).shape()[0] == 3
    t = dy.SimpleSGDTrainer(m["model"])
    for lr in (np.array(0.5), np.array([0.5]), Fraction(1, 2), np.float32(0.5), 1):
        t.set_learning_rate(lr)
        assert t.learning_rate == float(np.asarray(lr).reshape(()))


def test_a_zero_dimensional_array_is_a_number_on_either_side_of_an_operator():
    """NumPy's reductions give 0-d arrays (x.sum(), np.array(2.0)): e * a is a * e, as it is for
    a NumPy scalar; arrays of more elements and booleans are refused, whichever side."""
    dy.renew_cg()
    e = dy.inputVector([1.0, 2.0])
    a = np.array(2.0)
    for got, want in ((e * a, [2.0, 4.0]), (a * e, [2.0, 4.0]), (e + a, [3.0, 4.0]), (e - np.array(1), [0.0, 1.0]),
                      (a - e, [1.0, 0.0]), (e / np.array(2, dtype=np.int32), [0.5, 1.0])):
        assert got.npvalue().tolist() == want
    for bad in (np.array([2.0]), np.array(True)):
        with pytest.raises(TypeError, match=r"operator \*"):
            e * bad


def test_a_huge_finite_gradient_updates_with_clipping_off_as_dynet(m):
    """Its float32 norm overflows to inf; with clipping off DyNet updates, and so do we (with
    clipping on, DyNet refuses: 'Magnitude of gradient is bad')."""
    p = m["model"].add_parameters(4, init=1.0)
    for clip in (0.0, 5.0):
        t = dy.SimpleSGDTrainer(m["model"], 1e-30)
        t.set_clip_threshold(clip)
        dy.renew_cg()
        dy.sum_elems(p * 1e20).backward()
        if clip:
            _expect(NonFiniteError, lambda: t.update(), "gradient norm is inf")
            p.zero_grad()
        else:
            t.update()
            np.testing.assert_allclose(p.as_array(), [1.0 - 1e-10] * 4, rtol=1e-6)


def test_bad_scalar_arguments_of_ops_name_the_op_and_the_line(m):
    """Arguments that Python's own int() or iteration read (a dimension, a list of rows): their
    errors used to reach the user with neither the function nor the line."""
    dy.renew_cg()
    x, M = _vec(4), dy.inputTensor(np.ones((3, 4)))
    _expect(ValueError, lambda: dy.log_softmax(x, "ab"), "log_softmax:")
    _expect(ValueError, lambda: dy.concatenate([x, x], d="a"), "concatenate:")
    _expect(TypeError, lambda: dy.select_rows(M, None), "select_rows:")
    _expect(TypeError, lambda: dy.pickrange(x, None, 2), "pickrange:")
    _expect(TypeError, lambda: dy.max_dim(M, None), "max_dim:")
    _expect(ValueError, lambda: dy.huber_distance(x, x, "a"), "huber_distance:")
    _expect(dy.GraphError, lambda: dy.pick_batch_elem(x, "a"), "pick_batch_elem:", "'a'")
    _works(m)


def test_bad_numbers_for_trainers_and_parameters_name_the_call(m):
    pc = m["model"]
    _expect(TypeError, lambda: dy.SimpleSGDTrainer(pc, learning_rate="a"), "SimpleSGDTrainer: learning_rate", "'a'")
    _expect(TypeError, lambda: dy.AdamTrainer(pc, beta_1=None), "AdamTrainer: beta_1", "None")
    _expect(TypeError, lambda: dy.MomentumSGDTrainer(pc, mom="x"), "MomentumSGDTrainer: mom")
    _expect(TypeError, lambda: dy.CyclicalSGDTrainer(pc, step_size="x"), "CyclicalSGDTrainer: step_size")
    t = dy.SimpleSGDTrainer(pc)
    _expect(TypeError, lambda: t.set_clip_threshold("a"), "set_clip_threshold: thr")
    _expect(TypeError, lambda: t.update("a"), "update: scale")
    before = _snapshot(m)
    _expect(TypeError, lambda: m["W"].scale("a"), "scale:", "'a'")
    _expect(TypeError, lambda: m["W"].scale_gradient(None), "scale_gradient:")
    _expect(IndexError, lambda: m["E"].init_row(10, [1.0, 2.0, 3.0]), "init_row: row 10")
    _expect(IndexError, lambda: m["E"].row_as_array(-1), "row_as_array: row -1")
    _expect(ValueError, lambda: pc.add_lookup_parameters((-1, 3)), "add_lookup_parameters:")
    after = _snapshot(m)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    _works(m)


def test_file_errors_name_the_call_and_the_line(m, tmp_path):
    missing = str(tmp_path / "nope")
    _expect(FileNotFoundError, lambda: dy.load(missing, m["model"]), "load: no such file", "nope.meta")
    _expect(FileNotFoundError, lambda: m["model"].populate(missing), "populate", "no such file")
    _expect(FileNotFoundError, lambda: m["W"].populate(missing, "/_0"), "no such file")
    _expect(FileNotFoundError, lambda: dy.save(str(tmp_path / "no" / "dir" / "m"), [m["W"]]), "save: cannot write")
    _expect(FileNotFoundError, lambda: m["model"].save(str(tmp_path / "no" / "m")), "save: cannot write")
    _expect(TypeError, lambda: dy.load(None, m["model"]), "load: needs a file name", "None")
    _expect(TypeError, lambda: dy.save(str(tmp_path / "m"), m["W"]), "save: needs a list")
    assert list(tmp_path.iterdir()) == []          # nothing half-written


def test_an_exception_from_the_users_own_code_is_left_as_it_is():
    """The names and lines the op functions add to Python's conversion errors are for errors of
    the library's conversions only: an iterator of the user's that raises keeps its message."""
    shared = ValueError("the user's own message")

    class Broken:
        def __iter__(self):
            raise shared

    dy.renew_cg()
    with pytest.raises(ValueError) as info:
        dy.esum(Broken())
    assert info.value is shared and shared.args == ("the user's own message",)
    with pytest.raises(UnicodeDecodeError) as info:
        dy.esum(iter([b"\xff"]).__next__().decode("utf-8") for _ in range(1))
    assert info.value.args[0] == "utf-8"


def test_forward_of_an_expression_cg_revert_dropped_is_refused():
    dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    dy.cg_checkpoint()
    y = dy.tanh(x)
    dy.cg_revert()
    _expect(dy.StaleExpressionError, lambda: dy.forward([x, y]), "cg_revert() dropped it")
    assert dy.tanh(x).npvalue() == pytest.approx(np.tanh([1.0, 2.0]).tolist())
