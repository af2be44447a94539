"""CuPy kernel fusion of the vertex engine (vertex/fuse.py), checked without a GPU: runs of
elementwise instructions are grouped as specified, the generated kernel body computes what the
ops compute (run through NumPy with the engine in its fused mode), and the CUDA source of a
group's kernel compiles with NVRTC. On a GPU the same models run with real kernels
(test_vertex.py's backend-parametrised tests)."""
import numpy as np
import pytest

import autobatch as dy
from autobatch.vertex import fuse

from test_vertex import TreeLSTM, _close, _run, _tree_batch


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
    fuse.ENABLED = False
    try:
        emulated.clear()
        plain = _run(pc, build)
        assert not emulated
    finally:
        fuse.ENABLED = True
    _close(fused, plain, 1e-12)


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


@pytest.mark.parametrize("ctype", ["float", "double"])
def test_generated_kernels_compile_with_nvrtc(ctype):
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"NVRTC is not available ({type(e).__name__})")
    pc, f = _chain_model()
    gs, xs = _graphs(np.random.default_rng(4))
    dy.renew_cg()
    f(gs, x=xs)["loss"].value()
    groups = [g for t in f.last_run.traces for g in fuse.plan(t)[0].values()]
    assert groups
    for g in groups:
        src = _standalone_source(g, ctype)
        prog = nvrtc.createProgram(src, "fused.cu", [], [])
        try:
            try:
                nvrtc.compileProgram(prog, ["--gpu-architecture=compute_60"])
            except Exception:
                pytest.fail(f"does not compile:\n{src}\n{nvrtc.getProgramLog(prog)}")
        finally:
            nvrtc.destroyProgram(prog)
