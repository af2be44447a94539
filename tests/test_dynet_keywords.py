"""DyNet 2.1's parameter names and argument orders, which DyNet programs call by keyword.

Each case was run beside DyNet 2.1 (its Cython signatures and trial calls); the expected values
here are worked out by hand, never read from DyNet (tests do not import it)."""
import io
import warnings

import numpy as np
import pytest

import autobatch as dy
from autobatch.runtime import Strategy


@pytest.fixture
def m():
    dy.renew_cg()
    return dy.ParameterCollection()


def test_expression_functions_take_dynets_keyword_names(m):
    x = dy.inputVector([1.0, 2.0, 3.0])
    assert dy.pick(e=x, index=1).value() == 2.0
    assert dy.pick_batch(e=x, indices=[0, 2]).npvalue().reshape(-1).tolist() == [1.0, 3.0]
    assert dy.hinge(x, v=0, m=1.0).value() == pytest.approx((1 - 1 + 2) + (1 - 1 + 3))
    assert dy.select_rows(x, rs=[2, 0]).npvalue().tolist() == [3.0, 1.0]
    M = dy.inputTensor(np.arange(12.0).reshape(3, 4) / 10)
    assert dy.select_cols(M, cs=[3]).npvalue().reshape(-1).tolist() == pytest.approx([0.3, 0.7, 1.1])
    assert dy.scalarInput(s=2.5).value() == 2.5
    assert dy.one_hot(3, 1, "").npvalue().tolist() == [0, 1, 0]
    assert dy.one_hot(d=3, idx=2, device="CPU").npvalue().tolist() == [0, 0, 1]
    np.testing.assert_allclose(dy.colwise_add(M, y=dy.inputVector([1.0, 2.0, 3.0])).npvalue(),
                               np.arange(12.0).reshape(3, 4) / 10 + [[1], [2], [3]], rtol=1e-6)
    np.testing.assert_allclose(dy.kmh_ngram(M, v=2).npvalue(), [[0.1, 0.3, 0.5], [0.9, 1.1, 1.3], [1.7, 1.9, 2.1]],
                               rtol=1e-6)
    np.testing.assert_allclose(dy.filter1d_narrow(M, y=dy.inputTensor(np.ones((3, 2)))).npvalue(),
                               [[2.7, 3.3, 3.9]], rtol=1e-6)
    W = m.add_parameters((2, 3), init=1.0)
    b = m.add_parameters(2, init=0.5)
    assert dy.affine_transform(exprs=[b, W, x]).npvalue().tolist() == [6.5, 6.5]


def test_forward_values_npvalues_take_recalculate(m):
    dy.reset_random_seed(3)
    x = dy.dropout(dy.inputVector(np.ones(200)), 0.5)
    first = dy.npvalues([x])[0]
    assert np.array_equal(dy.npvalues(exps=[x])[0], first)              # kept
    again = dy.npvalues([x], True)[0]                                   # recomputed: new draws
    assert not np.array_equal(again, first)
    dy.forward(exps=[x], recalculate=True)
    assert dy.values([dy.sum_elems(x)], recalculate=False)[0] == pytest.approx(float(x.npvalue().sum()))


def test_renew_cg_takes_dynets_argument_order():
    # DyNet: renew_cg(immediate_compute=False, check_validity=False, autobatching=None); its
    # first positional argument is a debugging flag, never a strategy
    for args in ((False,), (True,), (False, False), (1,)):
        g = dy.renew_cg(*args)
        assert g.strategy is dy.default_strategy(), args
    assert dy.renew_cg(False, False, "depth").strategy is Strategy.DEPTH
    assert dy.renew_cg(autobatching=0).strategy is Strategy.NONE
    assert dy.renew_cg("depth").strategy is Strategy.DEPTH            # a strategy first: ours
    assert dy.renew_cg(Strategy.NONE).strategy is Strategy.NONE
    with pytest.raises(TypeError, match="renew_cg"):
        dy.renew_cg("depth", autobatching="agenda")


def test_cg_methods_of_dynet():
    g = dy.renew_cg()
    g2 = dy.cg().renew(immediate_compute=False, check_validity=False, autobatching="depth")
    assert g2 is dy.cg() and g2 is not g and g2.strategy is Strategy.DEPTH
    y = dy.sum_elems(dy.inputVector([1.0, 2.0]))
    y.value()
    out = io.StringIO()
    g2.print_graphviz(compact=True, file=out)
    assert "digraph" in out.getvalue() and "sum_elems" in out.getvalue()


def test_a_graph_handle_kept_across_renewals_reaches_the_current_graph():
    # DyNet's dy.cg() is one object renewed in place: programs keep it; its methods then act
    # on the graph in use (the renewed graph's expressions stay stale)
    g = dy.cg()
    versions = set()
    for k in range(3):
        g.renew()
        x = dy.inputVector([1.0, 2.0 + k])
        versions.add(g.version())
        assert g.version() == dy.cg().version() == dy.cg_version()
        out = io.StringIO()
        g.dump(out)
        assert "input" in out.getvalue() and out.getvalue().count("\n") == 1
        n0 = dy.cg().node_count()
        g.checkpoint()
        dy.tanh(x) * 3.0
        g.revert()
        assert dy.cg().node_count() == n0
        out = io.StringIO()
        g.print_graphviz(file=out)
        assert "N0" in out.getvalue()
    assert len(versions) == 3
    with pytest.raises(dy.StaleExpressionError):
        dy.renew_cg()
        x.value()


def test_graph_methods_inside_a_vertex_function_say_so(m):
    W = m.add_parameters((2, 2))
    for call in (lambda: dy.cg().renew(), lambda: dy.cg().dump(), lambda: dy.cg().print_graphviz(),
                 lambda: dy.dump_cg(), lambda: dy.print_graphviz()):
        @dy.vertex_function(max_children=1)
        def f(v):
            call()
            v.push("h", W * v.pull("x"))
        with pytest.raises(dy.GraphError, match="inside vertex function f"):
            f([dy.InputGraph([[]])], x=[[np.ones(2)]])


def test_print_graphviz_takes_a_file_first_as_before(m):
    dy.sum_elems(dy.inputVector([1.0]))
    out = io.StringIO()
    dy.print_graphviz(out)
    assert out.getvalue().startswith("digraph")


def test_dump_cg_writes_a_file_and_values(m, tmp_path):
    W = m.add_parameters((1, 2), init=1.0)
    x = dy.inputVector([3.0, -4.0])
    y = dy.sum_elems(W * x)
    y.value()
    y.backward()
    path = tmp_path / "g.txt"
    dy.dump_cg(str(path))
    text = path.read_text()
    assert "sum_elems" in text and "value=[-1.]" in text and "grad=[ 3. -4.]" in text
    out = io.StringIO()
    dy.dump_cg(show_values=False, show_gradients=False, file=out)
    assert "sum_elems" in out.getvalue() and "value=" not in out.getvalue()
    out = io.StringIO()
    dy.dump_cg(nan_check_only=True, file=out)
    assert out.getvalue() == ""           # nothing non-finite
    z = dy.log(dy.inputVector([0.0]))
    with np.errstate(divide="ignore"):
        z.value()
    out = io.StringIO()
    dy.dump_cg(filename=out, nan_check_only=True)
    assert out.getvalue().count("\n") == 1 and "log" in out.getvalue()


def test_print_graphviz_takes_dynets_keywords(m):
    dy.sum_elems(dy.inputVector([1.0]))
    out = io.StringIO()
    dy.print_graphviz(compact=True, show_dims=False, expr_names=None, file=out)
    assert out.getvalue().startswith("digraph")


def test_scale_serves_init_uniform_only_as_in_dynet(m):
    with pytest.warns(UserWarning, match="scale=3.0 is used with init='uniform' only"):
        w = m.add_parameters((30, 30), scale=3.0).as_array()
    assert np.abs(w).max() <= np.sqrt(6 / 60) + 1e-6          # Glorot's, not 3x it
    with pytest.warns(UserWarning):
        assert m.add_parameters((2,), init=0.5, scale=3.0).as_array().tolist() == [0.5, 0.5]
    with pytest.warns(UserWarning):
        assert (m.add_lookup_parameters((2, 2), init=dy.ConstInitializer(0.5), scale=2.0).as_array() == 0.5).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        u = m.add_parameters((100, 100), init="uniform", scale=2.0).as_array()
        m.add_parameters((2, 2), scale=1.0)
    assert 1.9 < np.abs(u).max() <= 2.0


def test_parameter_and_trainer_methods_take_dynets_keyword_names(m, tmp_path):
    E = m.add_lookup_parameters((4, 2), init=dy.NumpyInitializer(np.arange(8.0).reshape(4, 2)))
    assert E.row_as_array(row=2).tolist() == [4.0, 5.0]
    assert E.row_grad_as_array(row=1).tolist() == [0.0, 0.0]
    assert np.asarray(E.batch(i=[3, 0]).npvalue()).reshape(2, 2).T.tolist() == [[6.0, 7.0], [0.0, 1.0]]
    t = dy.SimpleSGDTrainer(m)
    t.set_learning_rate(value=0.3)
    assert t.learning_rate == pytest.approx(0.3)
    W = m.add_parameters((2, 2), init=2.0, name="W")
    path = str(tmp_path / "w")
    m.save(path)
    m2 = dy.ParameterCollection()
    assert m2.load_param(fname=path, key="/W").as_array().tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert m2.load_lookup_param(fname=path, key="/_0").as_array().shape == (4, 2)
    dy.save(path + "2", [W])
    (w,) = dy.load(path + "2", params=dy.ParameterCollection())
    assert w.as_array().tolist() == W.as_array().tolist()
    (w,) = dy.load_generator(path + "2", params=dy.ParameterCollection())
    assert w.as_array().tolist() == W.as_array().tolist()
    (w,) = dy.load(path + "2", model=dy.ParameterCollection())      # the name we had first
    with pytest.raises(TypeError, match="params and model"):
        dy.load(path + "2", dy.ParameterCollection(), model=dy.ParameterCollection())


@pytest.mark.parametrize("name", ["LSTMBuilder", "VanillaLSTMBuilder", "CompactVanillaLSTMBuilder",
                                  "CoupledLSTMBuilder", "SimpleRNNBuilder", "GRUBuilder", "FastLSTMBuilder",
                                  "SparseLSTMBuilder"])
def test_builders_set_dropout_takes_f(m, name):
    b = getattr(dy, name)(1, 2, 3, m)
    b.set_dropout(f=0.25)
    assert b.dropout == 0.25


def test_simple_rnn_set_dropouts_names_h(m):
    b = dy.SimpleRNNBuilder(1, 2, 3, m)
    b.set_dropouts(d=0.1, d_h=0.2)
    assert (b.dropout, b.dropout_h) == (0.1, 0.2)
    with pytest.raises(TypeError):
        b.set_dropouts(d=0.1, d_r=0.2)       # the LSTMs' name; DyNet's SimpleRNN refuses it too
