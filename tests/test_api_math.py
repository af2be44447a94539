"""DyNet's further math functions (autobatch/api_math.py, ops/unary_math.py): values and
gradients against NumPy / the math module, the special functions' accuracy, rounding and
gradient modes, errors, batching, the CUDA expressions, and use inside a vertex function.
Expected values are computed here independently (NumPy, math, closed forms, identities)."""
import math

import numpy as np
import pytest

import autobatch as dy
from autobatch import api_math
from autobatch.api import _op1
from autobatch.errors import GraphError
from autobatch.ops import OPS
from autobatch.ops import unary_math as um

from conftest import to_np

SELU_L, SELU_A = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717   # DyNet's docs
EULER = 0.57721566490153286060651209008240243
X = np.array([-1.7, -0.3, 0.05, 0.4, 1.2, 2.2])
UNIT = np.array([-0.9, -0.3, 0.05, 0.4, 0.75])        # inside (-1, 1)
ABOVE1 = np.array([1.05, 1.5, 2.0, 4.0, 10.0])

_erf = np.vectorize(math.erf)
_lgamma = np.vectorize(math.lgamma)


def _sig(x):
    return 1 / (1 + np.exp(-x))


# name -> (function, input points, value, derivative), the references written independently
CASES = {
    "sin": (dy.sin, X, np.sin, np.cos),
    "cos": (dy.cos, X, np.cos, lambda x: -np.sin(x)),
    "tan": (dy.tan, X / 2, np.tan, lambda x: 1 / np.cos(x) ** 2),
    "asin": (dy.asin, UNIT, np.arcsin, lambda x: 1 / np.sqrt(1 - x * x)),
    "acos": (dy.acos, UNIT, np.arccos, lambda x: -1 / np.sqrt(1 - x * x)),
    "atan": (dy.atan, X, np.arctan, lambda x: 1 / (1 + x * x)),
    "sinh": (dy.sinh, X, np.sinh, np.cosh),
    "cosh": (dy.cosh, X, np.cosh, np.sinh),
    "asinh": (dy.asinh, X, np.arcsinh, lambda x: 1 / np.sqrt(1 + x * x)),
    "acosh": (dy.acosh, ABOVE1, np.arccosh, lambda x: 1 / np.sqrt(x * x - 1)),
    "atanh": (dy.atanh, UNIT, np.arctanh, lambda x: 1 / (1 - x * x)),
    "erf": (dy.erf, np.concatenate([X, [-3.1, 2.6, 4.0]]), _erf,
            lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x)),
    "lgamma": (dy.lgamma, np.array([0.1, 0.5, 1.3, 2.5, 7.2, 15.0, -0.4, -2.7]), _lgamma,
               lambda x: (_lgamma(x + 1e-5) - _lgamma(x - 1e-5)) / 2e-5),   # checked at 1e-7 below
    "cube": (dy.cube, X, lambda x: x ** 3, lambda x: 3 * x * x),
    "log_sigmoid": (dy.log_sigmoid, np.concatenate([X, [-40.0, 40.0]]), lambda x: np.log(_sig(x)),
                    lambda x: 1 - _sig(x)),
    "softsign": (dy.softsign, X, lambda x: x / (1 + np.abs(x)), lambda x: 1 / (1 + np.abs(x)) ** 2),
    "selu": (dy.selu, X, lambda x: np.where(x > 0, SELU_L * x, SELU_L * SELU_A * (np.exp(x) - 1)),
             lambda x: np.where(x > 0, SELU_L, SELU_L * SELU_A * np.exp(x))),
    "silu": (dy.silu, X, lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x)))),
    "silu_beta": (lambda e: dy.silu(e, beta=2.5), X, lambda x: x * _sig(2.5 * x),
                  lambda x: _sig(2.5 * x) * (1 + 2.5 * x * (1 - _sig(2.5 * x)))),
}


def _near(got, want, scale, tol):
    """|got - want| <= tol·scale elementwise (scale: the size of the terms that cancel)."""
    err = np.abs(np.asarray(got) - want)
    assert np.all(err <= tol * scale), f"worst {np.max(err / scale):.3g}·scale > {tol}"


def _batch_sizes(name):
    return [s for sig, ss in dy.stats()["signatures"].items() if sig.split("#")[0] == name for s in ss]


def _grad_of(fn, x, w=None):
    """(value, d(Σ w·fn(p))/dp) at p = x, through a parameter."""
    pc = dy.ParameterCollection()
    p = pc.add_parameters(x.shape, init=np.asarray(x, dtype=float))
    w = np.linspace(0.5, 1.5, x.size).reshape(x.shape) if w is None else w
    dy.renew_cg()
    y = fn(p)
    loss = dy.sum_elems(dy.cmult(y, dy.inputTensor(w)))
    v = y.npvalue()
    loss.backward()
    return v, p.grad_as_array(), w


def test_the_dynet_names_are_exported():
    names = ("sin cos tan asin acos atan sinh cosh asinh acosh atanh erf lgamma cube log_sigmoid "
             "softsign selu silu pow bmin round ceil floor scale_gradient flip_gradient nobackprop").split()
    assert sorted(api_math.__all__) == sorted(names)
    for n in names:
        assert getattr(dy, n) is getattr(api_math, n)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients(name, f64, backend):
    fn, x, val, der = CASES[name]
    v, g, w = _grad_of(fn, x)
    np.testing.assert_allclose(v, val(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(g, w * der(x), rtol=1e-7 if name == "lgamma" else 1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["sin", "erf", "lgamma", "selu", "cube"])
def test_matrix_input_keeps_shape(name, f64):
    fn, x, val, _ = CASES[name]
    m = np.abs(x[:6]).reshape(2, 3) + 0.1
    dy.renew_cg()
    e = fn(dy.inputTensor(m))
    assert e.dim() == ((2, 3), 1)
    np.testing.assert_allclose(e.npvalue(), val(m), rtol=1e-13)


def test_float32_values():
    x = np.linspace(-4, 4, 41).astype(np.float32)
    dy.renew_cg()
    e = dy.inputVector(x)
    np.testing.assert_allclose(dy.erf(e).npvalue(), _erf(x.astype(float)), atol=1e-6)
    pos = np.linspace(0.1, 30, 41)
    np.testing.assert_allclose(dy.lgamma(dy.inputVector(pos)).npvalue(), _lgamma(pos), rtol=1e-5, atol=1e-5)
    assert dy.erf(e).npvalue().dtype == np.float32


# --- the special functions, written with xp operations ----------------------------------
def test_erf_accuracy():
    # both sides of the series / continued fraction split, tails, signed zero
    x = np.concatenate([np.linspace(-7, 7, 14001), np.linspace(2.49, 2.51, 201), [1e-300, -0.0, 30, -1e10]])
    np.testing.assert_allclose(um.erf(np, x), _erf(x), rtol=0, atol=2e-15)
    assert um.erf(np, np.array([np.nan]))[0] != um.erf(np, np.array([np.nan]))[0]    # NaN stays NaN


def test_lgamma_accuracy():
    x = np.concatenate([np.geomspace(1e-8, 1e6, 4001), -np.linspace(0.01, 20, 2003) + 1e-3])
    x = x[x != np.floor(x)]
    want = _lgamma(x)
    _near(um.lgamma(np, x), want, np.maximum(1, np.abs(want)), 1e-13)
    assert np.all(np.isposinf(um.lgamma(np, np.array([0.0, -1.0, -2.0, -30.0]))))    # poles, as C's lgamma
    np.testing.assert_allclose(um.lgamma(np, np.array([1.0, 2.0])), 0, atol=5e-15)


def test_digamma_identities():
    dg = lambda v: um.digamma(np, np.asarray(v, dtype=float))   # noqa: E731
    np.testing.assert_allclose(dg([1.0]), [-EULER], rtol=1e-15)
    np.testing.assert_allclose(dg([0.5]), [-EULER - 2 * math.log(2)], rtol=1e-14)
    harmonic = np.cumsum(1 / np.arange(1, 40))
    np.testing.assert_allclose(dg(np.arange(2, 41)), harmonic - EULER, rtol=1e-14)
    x = np.concatenate([np.geomspace(1e-4, 50, 501), -np.linspace(0.05, 9.95, 199) + 0.013])
    _near(dg(x + 1), dg(x) + 1 / x, 1 + np.abs(1 / x) + np.abs(dg(x)), 1e-14)   # recurrence
    # Gauss's closed forms at rationals, and through the recurrence at negative half-integers
    g, l2, l3, r3 = EULER, math.log(2), math.log(3), math.sqrt(3)
    np.testing.assert_allclose(
        dg([0.25, 0.75, 1 / 3, 2 / 3, -0.5, -1.5, -2.5]),
        [-g - math.pi / 2 - 3 * l2, -g + math.pi / 2 - 3 * l2, -g - math.pi / (2 * r3) - 1.5 * l3,
         -g + math.pi / (2 * r3) - 1.5 * l3, -g - 2 * l2 + 2, -g - 2 * l2 + 2 + 2 / 3, -g - 2 * l2 + 2 + 2 / 3 + 2 / 5],
        rtol=1e-13)
    # the derivative of math.lgamma (central differences, error ~1e-10)
    z = np.concatenate([np.linspace(0.2, 30, 60), -np.linspace(0.3, 4.7, 12)])
    np.testing.assert_allclose(dg(z), (_lgamma(z + 1e-5) - _lgamma(z - 1e-5)) / 2e-5, rtol=1e-7, atol=1e-7)
    assert np.all(np.isposinf(dg([0.0, -3.0])))


# --- rounding -----------------------------------------------------------------------------
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7, 3.9])


@pytest.mark.parametrize("name,ref", [("round", np.array([-2, -2, -0., 0, 2, 2, 0, -1, 4])),   # as DyNet
                                      ("ceil", np.ceil(HALVES)), ("floor", np.floor(HALVES))])
@pytest.mark.parametrize("mode", ["zero_gradient", "straight_through_gradient", None])
def test_rounding(name, ref, mode, backend):
    f = getattr(dy, name)
    v, g, w = _grad_of((lambda e: f(e)) if mode is None else (lambda e: f(e, gradient_mode=mode)), HALVES)
    np.testing.assert_array_equal(v, ref)
    np.testing.assert_array_equal(g, w if mode == "straight_through_gradient" else 0 * w)


def _zero_mode_graph(build):
    """x = 3·tanh(p) (needs a gradient), y = build(x), loss = Σ w ⊙ y with a parameter w:
    (graph, x, y, p's gradient, w's gradient) after backward."""
    pc = dy.ParameterCollection()
    p = pc.add_parameters(4, init=np.array([0.3, -0.4, 0.55, 0.1]))
    w = pc.add_parameters(4, init=np.array([1.0, 2.0, -3.0, 4.0]))
    dy.renew_cg()
    x = 3 * dy.tanh(p)
    y = build(x)
    dy.sum_elems(dy.cmult(y, w)).backward()
    return dy.cg(), x, y, p.grad_as_array(), w.grad_as_array()


@pytest.mark.parametrize("name", ["round", "ceil", "floor"])
def test_zero_gradient_op_is_not_differentiable(name, f64, monkeypatch):
    """The zero-gradient op stops the gradient without a backward: its node needs none, so the
    engine never calls it; the straight-through op still passes the gradient."""
    def boom(*a):
        raise AssertionError(f"{name}_zero's backward ran")
    monkeypatch.setattr(type(OPS[name + "_zero"]), "backward", boom)
    ref = getattr(np, "rint" if name == "round" else name)
    x0 = 3 * np.tanh([0.3, -0.4, 0.55, 0.1])
    g, x, y, gp, gw = _zero_mode_graph(lambda x: _op1(OPS[name + "_zero"], x))
    assert g.needs[x.i] and not g.needs[y.i]
    np.testing.assert_array_equal(gp, 0)
    np.testing.assert_array_equal(gw, ref(x0))
    g, x, y, gp, gw = _zero_mode_graph(lambda x: getattr(dy, name)(x, "straight_through_gradient"))
    assert g.needs[y.i]
    dx = 3 * (1 - np.tanh([0.3, -0.4, 0.55, 0.1]) ** 2)
    np.testing.assert_allclose(gp, np.array([1.0, 2.0, -3.0, 4.0]) * dx, rtol=1e-14)


@pytest.mark.parametrize("name", ["round", "ceil", "floor"])
def test_zero_gradient_mode_uses_the_non_differentiable_op(name, f64):
    for build in (getattr(dy, name), lambda x: getattr(dy, name)(x, "zero_gradient")):
        g, x, y, gp, gw = _zero_mode_graph(build)
        assert g.ops[y.i] is OPS[name + "_zero"] and not g.needs[y.i]
        np.testing.assert_array_equal(gp, 0)


# --- gradient manipulation -------------------------------------------------------------------
@pytest.mark.parametrize("fn,scale", [(lambda e: dy.scale_gradient(e, 0.3), 0.3),
                                      (lambda e: dy.scale_gradient(e, lambd=-2), -2.0),
                                      (dy.scale_gradient, 1.0), (dy.flip_gradient, -1.0),
                                      (dy.nobackprop, 0.0)])
def test_gradient_ops(fn, scale, f64, backend):
    v, g, w = _grad_of(fn, X)
    np.testing.assert_array_equal(v, X)
    np.testing.assert_allclose(g, scale * w, rtol=1e-15)


def test_nobackprop_blocks_one_path_only(f64):
    pc = dy.ParameterCollection()
    p = pc.add_parameters(4, init=np.array([0.5, -1.0, 2.0, 3.0]))
    dy.renew_cg()
    loss = dy.sum_elems(dy.cmult(p, dy.nobackprop(p)))      # Σ p·sg(p): gradient p, not 2p
    loss.backward()
    np.testing.assert_allclose(p.grad_as_array(), [0.5, -1.0, 2.0, 3.0])
    p.zero_grad()
    dy.renew_cg()
    loss = dy.sum_elems(dy.nobackprop(dy.square(p)))         # nothing needs a gradient
    assert loss.value() == pytest.approx(14.25)
    loss.backward()
    assert not p.grad_as_array().any()


# --- pow and bmin --------------------------------------------------------------------------
def test_pow_values_and_gradients(f64, backend):
    pc = dy.ParameterCollection()
    x0, e0 = np.array([[0.5, 1.5, 2.0], [3.0, 0.25, 1.0]]), 1.7
    px, pe = pc.add_parameters((2, 3), init=x0), pc.add_parameters(1, init=np.array([e0]))
    w = np.arange(1.0, 7.0).reshape(2, 3)
    dy.renew_cg()
    y = dy.pow(px, pe)
    assert y.dim() == ((2, 3), 1)
    dy.sum_elems(dy.cmult(y, dy.inputTensor(w))).backward()
    np.testing.assert_allclose(y.npvalue(), x0 ** e0, rtol=1e-14)
    np.testing.assert_allclose(px.grad_as_array(), w * e0 * x0 ** (e0 - 1), rtol=1e-13)
    np.testing.assert_allclose(pe.grad_as_array(), [np.sum(w * x0 ** e0 * np.log(x0))], rtol=1e-13)


def test_pow_number_exponent_and_edge_points(f64):
    dy.renew_cg()
    np.testing.assert_allclose(dy.pow(dy.inputVector([1.5, -2.0, 0.0]), 2).npvalue(), [2.25, 4.0, 0.0])
    pc = dy.ParameterCollection()
    pe = pc.add_parameters(1, init=np.array([2.0]))
    dy.renew_cg()
    dy.sum_elems(dy.pow(dy.inputVector([0.0, 3.0]), pe)).backward()   # x = 0: x^e stays 0 as e moves
    np.testing.assert_allclose(pe.grad_as_array(), [9 * math.log(3)])


def test_pow_operator(f64):
    pc = dy.ParameterCollection()
    p = pc.add_parameters(2, init=np.array([2.0, 3.0]))
    dy.renew_cg()
    x = dy.inputVector([1.5, 2.0])
    np.testing.assert_allclose((x ** 2.5).npvalue(), [1.5 ** 2.5, 2.0 ** 2.5])
    np.testing.assert_allclose((x ** dy.scalarInput(-1.0)).npvalue(), [1 / 1.5, 0.5])
    np.testing.assert_allclose((p ** 2).npvalue(), [4.0, 9.0])


def test_pow_batches_per_shape(f64):
    dy.renew_cg("agenda")
    xs = [dy.inputVector([1.0 + k, 2.0]) for k in range(3)]
    ys = [dy.pow(x, dy.scalarInput(0.5 * k)) for k, x in enumerate(xs)]
    loss = dy.esum([dy.sum_elems(y) for y in ys])
    assert loss.value() == pytest.approx(sum((1 + k) ** (0.5 * k) + 2 ** (0.5 * k) for k in range(3)))
    assert max(_batch_sizes("pow")) == 3


def test_bmin(f64, backend):
    pc = dy.ParameterCollection()
    a0, b0 = np.array([1.0, 2.0, 3.0, -1.0]), np.array([1.0, 5.0, 0.0, -0.5])
    pa, pb = pc.add_parameters(4, init=a0), pc.add_parameters(4, init=b0)
    w = np.array([1.0, 2.0, 3.0, 4.0])
    dy.renew_cg()
    y = dy.bmin(pa, pb)
    dy.sum_elems(dy.cmult(y, dy.inputVector(w))).backward()
    np.testing.assert_array_equal(y.npvalue(), np.minimum(a0, b0))
    np.testing.assert_array_equal(pa.grad_as_array(), [0, 2, 0, 4])      # the tie (index 0) goes to b,
    np.testing.assert_array_equal(pb.grad_as_array(), [1, 0, 3, 0])      # as in DyNet


# --- batching -------------------------------------------------------------------------------
def test_mixed_lengths_batch_and_match_one_at_a_time(f64):
    fns = [dy.sin, dy.erf, dy.lgamma, dy.selu, lambda e: dy.silu(e, 0.7), dy.log_sigmoid,
           lambda e: dy.round(e, "straight_through_gradient"), dy.nobackprop, dy.flip_gradient]
    data = [np.linspace(0.2, 1.9, n) * (1 + k) for k, n in enumerate((3, 5, 4))]

    def run(strategy, which):
        pc = dy.ParameterCollection()
        ps = [pc.add_parameters(len(d), init=d) for d in data]
        dy.renew_cg(strategy)
        loss = dy.esum([dy.sum_elems(dy.cmult(f(ps[k]), dy.inputVector(np.cos(np.arange(len(data[k]))))))
                        for k in which for f in fns])
        v = loss.value()
        loss.backward()
        return v, [p.grad_as_array() for p in ps]

    v, g = run("agenda", range(3))
    for name in ("sin", "erf", "lgamma", "selu", "silu", "log_sigmoid", "round", "nobackprop", "scale_gradient"):
        assert max(_batch_sizes(name)) == 3, name
    single = [run("none", [k]) for k in range(3)]
    assert v == pytest.approx(sum(s[0] for s in single), rel=1e-13)
    for k in range(3):
        np.testing.assert_allclose(g[k], single[k][1][k], rtol=1e-13)


# --- errors ---------------------------------------------------------------------------------
def _raises(fn, *parts):
    with pytest.raises(GraphError) as info:
        fn()
    msg = str(info.value)
    where = f"{__file__}:{fn.__code__.co_firstlineno}"
    for p in (where,) + parts:
        assert p in msg, f"{p!r} not in {msg!r}"


def test_errors_name_the_op_and_line():
    dy.renew_cg()
    x, v3, v2 = dy.inputTensor(np.ones((2, 3))), dy.inputVector([1.0, 2, 3]), dy.inputVector([1.0, 2])
    n = len(dy.cg().ops)
    _raises(lambda: dy.pow(x, v3), "pow", "(3,)", "(2, 3)", "shape (1,)")
    _raises(lambda: dy.bmin(v3, v2), "bmin", "(3,)", "(2,)")
    _raises(lambda: dy.round(v3, "zero"), "round", "'zero'", "straight_through_gradient")
    _raises(lambda: dy.floor(v3, gradient_mode=None), "floor", "None")
    _raises(lambda: dy.silu(v3, beta="2"), "silu", "beta")
    _raises(lambda: dy.scale_gradient(v3, lambd=None), "scale_gradient", "lambd")
    assert len(dy.cg().ops) == n                             # nothing was added
    np.testing.assert_allclose(dy.sin(v3).npvalue(), np.sin([1, 2, 3]), rtol=1e-6)   # still usable


def test_non_expression_input():
    dy.renew_cg()
    with pytest.raises(TypeError, match="erf"):
        dy.erf([1.0, 2.0])


# --- CUDA expressions ------------------------------------------------------------------------
_C_ENV = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
          "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
          "atanh": np.arctanh, "erf": _erf, "lgamma": _lgamma, "tanh": np.tanh, "exp": np.exp,
          "expm1": np.expm1, "log1p": np.log1p, "fabs": np.abs, "fmin": np.fmin, "fmax": np.fmax,
          "rint": np.rint, "ceil": np.ceil, "floor": np.floor}
_NEW_OPS = ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf",
            "lgamma", "cube", "log_sigmoid", "softsign", "selu", "silu", "bmin", "round", "ceil", "floor",
            "round_zero", "ceil_zero", "floor_zero", "scale_gradient", "nobackprop"]


@pytest.mark.parametrize("name", _NEW_OPS)
def test_c_expr_matches_forward(name):
    """The fused-kernel expression is the NumPy formula (run here with C's functions mapped to
    NumPy's: what fuse.emulate does for the ops it knows)."""
    op = OPS[name]
    attr = {"silu": 1.3, "scale_gradient": -1.0, "round": False, "ceil": True, "floor": False}.get(name)
    x = np.array([0.3, -0.45, 0.8, 0.05, -0.9, 0.6])
    xs = [x, x[::-1].copy()] if name == "bmin" else [x + 2 if name == "acosh" else x]
    code = op.c_expr([f"a{j}" for j in range(len(xs))], attr)
    got = eval(code.replace("(T)", ""), dict(_C_ENV, **{f"a{j}": v for j, v in enumerate(xs)}))
    np.testing.assert_allclose(got, op.forward(np, xs, attr, None), rtol=1e-13, atol=1e-15)
    assert OPS["silu"].c_expr(["a"], float("inf")) is None                   # no C literal


# --- inside a vertex function -----------------------------------------------------------------
def test_in_a_vertex_function(f64):
    pc = dy.ParameterCollection()
    rng = np.random.default_rng(5)
    W = pc.add_parameters((2, 2), init=rng.normal(size=(2, 2)))
    U = pc.add_parameters((2, 2), init=rng.normal(size=(2, 2)))
    ex = pc.add_parameters(1, init=np.array([1.3]))

    @dy.vertex_function(max_children=1)
    def f(v):
        x = v.pull("x")
        pre = W * x if v.is_leaf else U * v.gather(0) + x
        h = dy.selu(dy.sin(pre)) + dy.erf(pre) + dy.bmin(pre, dy.flip_gradient(x))
        v.scatter(dy.softsign(h))
        y = dy.lgamma(dy.pow(dy.square(h) + 0.5, ex)) + dy.log_sigmoid(h) + dy.cmult(dy.nobackprop(h), h)
        v.push("y", dy.sum_elems(dy.round(y, "straight_through_gradient")) + dy.sum_elems(y))

    gs = [dy.InputGraph.chain(3), dy.InputGraph.chain(2)]
    x = rng.normal(size=(5, 2))

    def run(build):
        for p in (W, U, ex):
            p.zero_grad()
        dy.renew_cg("agenda")
        loss = build()
        v = loss.value()
        loss.backward()
        return v, [to_np(p.grad).copy() for p in (W, U, ex)]

    lazy = run(lambda: dy.esum([y for y in f.unbatched(gs, x=x)["y"] if y is not None]))
    vert = run(lambda: dy.sum_elems(f(gs, x=x)["y"]))
    assert lazy[0] == pytest.approx(vert[0], rel=1e-12)
    for a, b in zip(lazy[1], vert[1]):
        assert np.abs(a).sum() > 0
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
