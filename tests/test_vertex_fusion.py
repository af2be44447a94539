"""CuPy kernel fusion of the vertex engine (vertex/fuse.py), checked without a GPU: runs of
elementwise instructions are grouped as specified, the generated kernel body computes what the
ops compute (run through NumPy with the engine in its fused mode), and the CUDA source of a
group's kernel compiles with NVRTC. On a GPU the same models run with real kernels
(test_vertex.py's backend-parametrised tests)."""
import re

import numpy as np
import pytest

import autobatch as dy
from autobatch.api import _op1
from autobatch.ops import OPS
from autobatch.ops.base import Op
from autobatch.vertex import fuse

from test_vertex import TreeLSTM, _close, _run, _tree_batch


def _unfused(pc, build, emulated):
    """The same run with fusion switched off: it must launch no generated kernel."""
    fuse.ENABLED = False
    try:
        emulated.clear()
        plain = _run(pc, build)
        assert not emulated
    finally:
        fuse.ENABLED = True
    return plain


def _chain_model():
    """A vertex function whose front phase is a run of every fusable op kind, with a parameter
    (broadcast) inside the run and an op that cannot be fused (log) splitting it."""
    pc = dy.ParameterCollection()
    W, b, c = pc.add_parameters((3, 3)), pc.add_parameters(3), pc.add_parameters(3)

    @dy.vertex_function(max_children=2, scatter_dims=[3])
    def f(v):
        x = v.pull("x")
        a = W * (v.gather(0) + v.gather(1)) + x
        y = dy.logistic(a) + b                      # a run: logistic, add, ...
        z = dy.cmult(dy.tanh(y), dy.rectify(a - c))
        z = dy.esum([dy.square(z), dy.exp(-z), 2 * z + 1])
        w = dy.log(dy.logistic(z) + 1)              # log is not fused: it ends the run
        h = dy.cmult(w, dy.tanh(z)) * 0.5
        v.scatter(h)
        v.push("loss", dy.sum_elems(h))
    return pc, f


def _graphs(rng):
    gs = [dy.InputGraph([[], [], [0, 1], [2]]), dy.InputGraph.chain(3), dy.InputGraph([[]])]
    xs = [rng.normal(size=(g.n, 3)) for g in gs]
    return gs, xs


@pytest.fixture
def emulated(monkeypatch):
    """The engine's fused mode on NumPy: groups run their generated body through NumPy."""
    launched = []
    monkeypatch.setattr(fuse, "kernels_for", lambda xp: fuse.ENABLED)
    monkeypatch.setattr(fuse.Group, "launch",
                        lambda self, xp, xs, outs: launched.append(self) or fuse.emulate(self, xs, outs))
    return launched


def test_groups_split_at_unfusable_ops():
    pc, f = _chain_model()
    gs, xs = _graphs(np.random.default_rng(0))
    dy.renew_cg()
    f(gs, x=xs)["loss"].value()
    t = [t for t in f.last_run.traces if t.front][0]
    first, skip = fuse.plan(t)
    names = [[t.src[s][1].name for s in g.members] for g in first.values()]
    assert any(len(n) >= 8 for n in names), names        # logistic ... scale_shift in one run
    for g, n in zip(first.values(), names):
        assert "log" not in n and len(n) >= 2
        assert list(g.members) == sorted(g.members)
    assert skip == {s for g in first.values() for s in g.members[1:]}


@pytest.mark.parametrize("model", ["chain", "treelstm"])
def test_fused_mode_matches_unfused(f64, emulated, model):
    if model == "chain":
        pc, f = _chain_model()
        gs, xs = _graphs(np.random.default_rng(1))

        def build():
            return dy.sum_elems(f(gs, x=xs)["loss"])
    else:
        m = TreeLSTM()
        pc = m.pc
        gs, words, labels = _tree_batch(np.random.default_rng(2))

        def build():
            return dy.sum_elems(m.cell(gs, word=words, label=labels)["loss"])
    fused = _run(pc, build)
    assert emulated, "no group was launched"
    _close(fused, _unfused(pc, build, emulated), 1e-12)


def test_fused_mode_counts_fewer_launches(emulated):
    pc, f = _chain_model()
    gs, xs = _graphs(np.random.default_rng(3))
    counts = []
    for on in (True, False):
        fuse.ENABLED = on
        try:
            dy.renew_cg()
            f(gs, x=xs)["loss"].value()
            counts.append(f.last_run.stats["forward_launches"])
        finally:
            fuse.ENABLED = True
    assert counts[0] < counts[1]


def _standalone_source(group, ctype):
    """A group's body in a plain CUDA kernel that binds x_j and y_k as ElementwiseKernel does
    (const T x = in[i]; T &y = out[i])."""
    nin, nout = len(group.ins), len(group.members)
    params = [f"const {ctype}* _x{j}" for j in range(nin)] + [f"{ctype}* _y{k}" for k in range(nout)]
    binds = [f"const T x{j} = _x{j}[i];" for j in range(nin)] + [f"T &y{k} = _y{k}[i];" for k in range(nout)]
    return (f'typedef {ctype} T;\nextern "C" __global__ void fused({", ".join(params)}, int n) {{\n'
            f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n  "
            + "\n  ".join(binds) + "\n" + group.body + "\n}\n")


def _nvrtc():
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"NVRTC is not available ({type(e).__name__})")
    return nvrtc


def _compile(nvrtc, src):
    prog = nvrtc.createProgram(src, "fused.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, ["--gpu-architecture=compute_60"])
        except Exception:
            pytest.fail(f"does not compile:\n{src}\n{nvrtc.getProgramLog(prog)}")
    finally:
        nvrtc.destroyProgram(prog)


@pytest.mark.parametrize("ctype", ["float", "double"])
def test_generated_kernels_compile_with_nvrtc(ctype):
    nvrtc = _nvrtc()
    pc, f = _chain_model()
    gs, xs = _graphs(np.random.default_rng(4))
    dy.renew_cg()
    f(gs, x=xs)["loss"].value()
    groups = [g for t in f.last_run.traces for g in fuse.plan(t)[0].values()]
    assert groups
    for g in groups:
        _compile(nvrtc, _standalone_source(g, ctype))


# --- every op with a C expression -------------------------------------------------------------
_ST = "straight_through_gradient"


def _zero(name):
    """The zero-gradient rounding op, built directly (dy.round(x) reaches it once api_math picks
    it for that mode)."""
    return lambda x: _op1(OPS[name + "_zero"], x)


# op name -> its use on u, v in (-0.5, 0.5) (of shape (3,)), inside each function's domain and
# reaching the interesting ranges (erf's continued fraction past 2.5, lgamma's reflection below 0.5)
ONE_OP = {
    "tanh": lambda u, v: dy.tanh(3 * u), "logistic": lambda u, v: dy.logistic(3 * u),
    "rectify": lambda u, v: dy.rectify(u), "exp": lambda u, v: dy.exp(u), "square": lambda u, v: dy.square(u),
    "scale_shift": lambda u, v: 3 * u + 1, "add": lambda u, v: u + v, "sub": lambda u, v: u - v,
    "cmult": lambda u, v: dy.cmult(u, v), "bmin": lambda u, v: dy.bmin(u, v),
    "sin": lambda u, v: dy.sin(4 * u), "cos": lambda u, v: dy.cos(4 * u), "tan": lambda u, v: dy.tan(2 * u),
    "asin": lambda u, v: dy.asin(u), "acos": lambda u, v: dy.acos(u), "atan": lambda u, v: dy.atan(4 * u),
    "sinh": lambda u, v: dy.sinh(4 * u), "cosh": lambda u, v: dy.cosh(4 * u),
    "asinh": lambda u, v: dy.asinh(4 * u), "acosh": lambda u, v: dy.acosh(u + 2), "atanh": lambda u, v: dy.atanh(u),
    "erf": lambda u, v: dy.erf(7 * u), "lgamma": lambda u, v: dy.lgamma(u + 0.7),
    "cube": lambda u, v: dy.cube(u), "log_sigmoid": lambda u, v: dy.log_sigmoid(8 * u),
    "softsign": lambda u, v: dy.softsign(4 * u), "selu": lambda u, v: dy.selu(4 * u),
    "silu": lambda u, v: dy.silu(4 * u, 1.7),
    "round": lambda u, v: dy.round(6 * u, _ST), "ceil": lambda u, v: dy.ceil(6 * u, _ST),
    "floor": lambda u, v: dy.floor(6 * u, _ST),
    "round_zero": lambda u, v: _zero("round")(6 * u), "ceil_zero": lambda u, v: _zero("ceil")(6 * u),
    "floor_zero": lambda u, v: _zero("floor")(6 * u),
    "scale_gradient": lambda u, v: dy.scale_gradient(u, 0.3), "nobackprop": lambda u, v: dy.nobackprop(u),
}


def _one_op_model(use):
    """A vertex function whose front phase is one run of fusable ops with use(u, v) inside it."""
    pc = dy.ParameterCollection()
    W, b, c = pc.add_parameters((3, 3)), pc.add_parameters(3), pc.add_parameters(3)

    @dy.vertex_function(max_children=1)
    def f(v):
        x = v.pull("x")
        pre = W * x if v.is_leaf else W * v.gather(0) + x
        p, q = 0.5 * dy.tanh(pre + b), 0.5 * dy.tanh(pre - c)
        y = dy.cmult(use(p, q), q) + p
        v.scatter(dy.tanh(y))
        v.push("loss", dy.sum_elems(y))
    return pc, f


def test_every_op_with_a_c_expr_has_a_case():
    """A new fusable op must get a case below (and emulate() its C functions)."""
    assert sorted(ONE_OP) == sorted(n for n, op in OPS.items() if type(op).c_expr is not Op.c_expr)


def _fused_groups(f):
    return [(t, g) for t in f.last_run.traces for g in fuse.plan(t)[0].values()]


@pytest.mark.parametrize("name", sorted(ONE_OP))
def test_each_c_expr_op_fused_matches_unfused(f64, emulated, name):
    """The op runs inside a fused group, whose generated body (run through emulate with the C
    functions it names, every one known to emulate) gives the unfused NumPy values and gradients."""
    pc, f = _one_op_model(ONE_OP[name])
    gs = [dy.InputGraph.chain(3), dy.InputGraph([[]]), dy.InputGraph.chain(2)]
    xs = [np.random.default_rng(7).normal(size=(g.n, 3)) for g in gs]

    def build():
        return dy.sum_elems(f(gs, x=xs)["loss"])
    fused = _run(pc, build)
    groups = _fused_groups(f)
    assert any(t.src[s][1] is OPS[name] for t, g in groups for s in g.members), f"{name} was not fused"
    assert len(emulated) >= len(groups)
    called = {c for _, g in groups for c in re.findall(r"\b([A-Za-z_]\w*)\s*\(", g.body)}
    assert called <= set(fuse.C_FUNCTIONS), f"emulate() lacks {sorted(called - set(fuse.C_FUNCTIONS))}"
    _close(fused, _unfused(pc, build, emulated), 1e-12)
    assert np.abs(fused[1][0]).sum() > 0


def test_emulate_hides_python_builtins():
    """A C function emulate() does not know fails, even where Python has one of that name."""
    g = fuse.Group((0,), (0,), "T v0 = round(x0); y0 = v0;")
    with pytest.raises(NameError, match="round"):
        fuse.emulate(g, [np.array([0.4])], [np.empty(1)])


@pytest.mark.parametrize("ctype", ["float", "double"])
def test_each_c_expr_op_compiles_with_nvrtc(ctype):
    """Every op's C expression (its C functions exist for float and double) in one program."""
    nvrtc = _nvrtc()
    src = []
    for k, name in enumerate(sorted(ONE_OP)):
        pc, f = _one_op_model(ONE_OP[name])
        gs = [dy.InputGraph.chain(2)]
        dy.renew_cg()
        f(gs, x=[np.ones((2, 3))])["loss"].value()
        for j, (_, g) in enumerate(_fused_groups(f)):
            src.append(_standalone_source(g, ctype).replace("void fused(", f"void fused_{k}_{j}(")
                       .replace(f"typedef {ctype} T;\n", ""))
    src = f"typedef {ctype} T;\n" + "".join(src)
    _compile(nvrtc, src)
