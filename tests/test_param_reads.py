"""Reading a parameter the way DyNet programs do: value(), npvalue(), forward(), backward(),
and the array itself (``.data``). The last test compares with real DyNet in a subprocess
(skipped where DyNet is not installed)."""
import textwrap

import numpy as np
import pytest

import autobatch as dy
from autobatch.errors import GraphError
from check_kit import needs_dynet, run_dynet
from conftest import to_np

W_VAL = np.arange(6.0).reshape(2, 3) - 2
E_VAL = np.arange(8.0).reshape(4, 2) / 4
E3_VAL = np.arange(24.0).reshape(4, 2, 3)


def _model():
    m = dy.ParameterCollection()
    return (m, m.add_parameters((2, 3), init=W_VAL), m.add_parameters(3, init=np.array([1.0, -1, 2])),
            m.add_parameters(1, init=np.array([0.5])), m.add_lookup_parameters((4, 2), init=E_VAL),
            m.add_lookup_parameters((4, 2, 3), init=E3_VAL))


def test_value_reads_as_the_parameters_expression(backend):
    _, W, b, s, E, E3 = _model()
    v = W.value()
    assert isinstance(v, np.ndarray) and v.shape == (2, 3)
    np.testing.assert_array_equal(v, W_VAL)
    assert b.value() == [1.0, -1.0, 2.0]
    assert s.value() == 0.5 and type(s.value()) is float
    # a lookup table reads with its rows last, as DyNet's (as_array keeps them first)
    np.testing.assert_array_equal(E.value(), E_VAL.T)
    np.testing.assert_array_equal(E.npvalue(), E_VAL.T)
    np.testing.assert_array_equal(E.as_array(), E_VAL)
    np.testing.assert_array_equal(E3.npvalue(), np.moveaxis(E3_VAL, 0, -1))
    np.testing.assert_array_equal(W.npvalue(), W_VAL)
    assert W.value() is not W.value()                 # host copies: changing one changes nothing
    v[0, 0] = 99
    np.testing.assert_array_equal(to_np(W.data), W_VAL)


def test_scalar_value_of_a_lookup_table_is_an_error_as_in_dynet():
    m = dy.ParameterCollection()
    E = m.add_lookup_parameters((1, 1), init=np.array([[2.0]]))
    with pytest.raises(GraphError, match=r"scalar_value\(\) is not applicable to lookup parameter.*E\[i\]"):
        E.scalar_value()
    dy.renew_cg()
    assert E[0].scalar_value() == 2.0
    assert m.add_parameters(1, init=np.array([3.0])).scalar_value() == 3.0


def test_data_is_the_live_array(backend):
    _, W, _, _, E, _ = _model()
    W.data[1, 2] = 7.0                                # trainers and users write in place here
    assert W.value()[1, 2] == 7.0
    assert tuple(E.data.shape) == (4, 2) and E.data.dtype == np.float32


def test_forward_and_backward_on_a_parameter():
    _, W, _, s, _, _ = _model()
    assert W.forward() is None
    dy.renew_cg()
    s.backward()                                      # one element: it gets gradient 1
    np.testing.assert_array_equal(s.grad_as_array(), [1.0])
    dy.renew_cg()
    with pytest.raises(GraphError, match="scalar"):
        W.backward()
    np.testing.assert_array_equal(W.grad_as_array(), np.zeros((2, 3)))
    dy.renew_cg()                                     # the graph is still usable
    assert dy.sum_elems(W * dy.inputVector([1.0, 1, 1])).value() == pytest.approx(W_VAL.sum())


@needs_dynet
def test_reads_equal_real_dynet():
    script = textwrap.dedent("""
        import json, numpy as np
        import dynet as dy
        m = dy.ParameterCollection()
        W = m.add_parameters((2, 3)); b = m.add_parameters(3); s = m.add_parameters(1)
        E = m.add_lookup_parameters((4, 2)); E3 = m.add_lookup_parameters((4, 2, 3))
        W.set_value(np.arange(6.0).reshape(2, 3) - 2); b.set_value(np.array([1.0, -1, 2]))
        s.set_value(np.array([0.5]))
        E.init_from_array(np.arange(8.0).reshape(4, 2) / 4)
        E3v = np.arange(24.0).reshape(4, 2, 3)
        for i in range(4):                 # init_from_array takes matrices only
            E3.init_row(i, E3v[i].flatten(order="F").tolist())
        assert np.array_equal(E3.as_array(), E3v)
        def enc(v):
            return {"type": type(v).__name__, "v": np.asarray(v).tolist(), "shape": list(np.shape(v))}
        out = {k: enc(p.value()) for k, p in dict(W=W, b=b, s=s, E=E).items()}
        out.update({k + "_np": enc(p.npvalue()) for k, p in dict(W=W, E=E, E3=E3).items()})
        out["fwd"] = repr(W.forward())
        dy.renew_cg(); s.backward(); out["s_grad"] = s.grad_as_array().tolist()
        print("RESULT" + json.dumps(out))
    """)
    want = run_dynet(script, "")
    _, W, b, s, E, E3 = _model()
    for k, p in dict(W=W, b=b, s=s, E=E).items():
        v = p.value()
        assert type(v).__name__ == want[k]["type"], k
        np.testing.assert_allclose(np.asarray(v), want[k]["v"], err_msg=k)
    for k, p in dict(W=W, E=E, E3=E3).items():
        assert list(p.npvalue().shape) == want[k + "_np"]["shape"], k
        np.testing.assert_allclose(p.npvalue(), want[k + "_np"]["v"], err_msg=k)
    assert repr(W.forward()) == want["fwd"]
    dy.renew_cg()
    s.backward()
    np.testing.assert_allclose(s.grad_as_array(), want["s_grad"])
