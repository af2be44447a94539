"""CuPy backend. Three layers, so that as much as possible is checked without a GPU:
- host only: the generated kernel sources;
- CuPy installed (no device needed): every ``xp.<name>`` the engine and the ops use
  exists in CuPy, and the kernel sources compile with NVRTC;
- a CUDA device: copy kernels against NumPy, one launch per batch, parameters on the
  device, no host sync in forward, and whole programs equal to the NumPy backend."""
import pathlib
import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import autobatch as dy
from autobatch import runtime
from autobatch.backends import cupy_backend as cb
from autobatch.backends.numpy_backend import NumpyBackend

from conftest import cupy_unavailable_reason
from programs import all_params, build, make_params, programs

ROOT = pathlib.Path(dy.__file__).resolve().parent


def _cupy_module():
    try:
        import cupy
    except Exception as e:
        pytest.skip(f"CuPy is not installed ({type(e).__name__}); pip install -e '.[cuda]'")
    return cupy


# --- host only ------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(cb.KERNELS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernel_source_is_specialised(kind, dtype):
    src, name = cb.kernel_source(kind, dtype)
    ctype = "float" if dtype == "float32" else "double"
    assert name == f"{kind}_{ctype}" and f"void {name}(" in src
    assert f"{ctype}* __restrict__ buf" in src and "T*" not in src
    assert ("atomicAdd" in src) == (kind == "ab_scatter_add")
    assert ("const " + ctype + "* __restrict__ buf" in src) == (kind == "ab_gather")


def test_importing_the_module_does_not_import_cupy():
    """The backend module is importable everywhere; only CupyBackend() needs CuPy."""
    import subprocess
    import sys
    code = ("import sys; import autobatch.backends.cupy_backend as m; "
            "print('cupy' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# --- CuPy installed, no device needed ---------------------------------------------
def _xp_names():
    names = set()
    for f in ROOT.rglob("*.py"):
        names |= set(re.findall(r"\bxp\.([A-Za-z_]\w*)", f.read_text()))
    return names


def test_every_xp_function_the_engine_uses_exists_in_cupy():
    cupy = _cupy_module()
    names = _xp_names()
    assert {"tanh", "matmul", "exp"} <= names  # the scan does see the ops
    missing = sorted(n for n in names if not hasattr(cupy, n))
    assert not missing, f"NumPy-only functions used through xp: {missing}"


def test_array_methods_the_ops_use_exist_on_cupy_arrays():
    cupy = _cupy_module()
    methods = ["take", "reshape", "sum", "mean", "max", "argmax", "transpose", "astype", "copy",
               "all", "flags", "size", "ndim", "dtype", "shape", "T"]
    assert not [m for m in methods if not hasattr(cupy.ndarray, m)]


@pytest.mark.parametrize("kind", sorted(cb.KERNELS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernel_sources_compile_with_nvrtc(kind, dtype):
    """NVRTC compiles to PTX without a device (compute_60: the oldest with double atomicAdd)."""
    _cupy_module()
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"NVRTC is not available ({type(e).__name__}); pip install nvidia-cuda-nvrtc-cu12")
    src, name = cb.kernel_source(kind, dtype)
    prog = nvrtc.createProgram(src, f"{name}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, ["--gpu-architecture=compute_60"])
        except Exception:
            pytest.fail(f"{name} does not compile:\n{nvrtc.getProgramLog(prog)}")
        assert f".entry {name}(" in nvrtc.getPTX(prog).decode()
    finally:
        nvrtc.destroyProgram(prog)


# --- a CUDA device ----------------------------------------------------------------------
needs_gpu = pytest.mark.skipif(cupy_unavailable_reason() is not None,
                               reason=str(cupy_unavailable_reason()))


@pytest.fixture
def gpu():
    dy.set_backend("cupy")
    be = runtime.state().backend
    yield be
    dy.set_backend("numpy")


def _count_launches(be, monkeypatch):
    calls = []
    orig = be._launch

    def launch(kind, *a):
        calls.append(kind)
        return orig(kind, *a)
    monkeypatch.setattr(be, "_launch", launch)
    return calls


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_copy_kernels_match_numpy(gpu, dtype, monkeypatch):
    cp = gpu.xp
    calls = _count_launches(gpu, monkeypatch)
    rng = np.random.default_rng(0)
    host = rng.standard_normal(1000).astype(dtype)
    ref = NumpyBackend()
    offs, size = [500, 7, 300, 7, 123], 11                 # 7 repeats: atomics needed
    got, index = gpu.gather(cp.asarray(host), offs, size)
    want_x, ref_index = ref.gather(host, offs, size)
    np.testing.assert_array_equal(got.get(), want_x)
    vals = rng.standard_normal((5, size)).astype(dtype)
    dev, want = cp.asarray(host), host.copy()
    gpu.scatter_add(dev, index, size, cp.asarray(vals), False)     # the index gather handed back
    ref.scatter_add(want, ref_index, size, vals, False)
    np.testing.assert_allclose(dev.get(), want, rtol=1e-6)
    table = rng.standard_normal((20, 4)).astype(dtype)
    rows = np.array([3, 3, 0, 19, 3])
    dt, wt = cp.asarray(table), table.copy()
    gpu.add_rows(dt, cp.asarray(rows), cp.asarray(vals[:, :4]))
    ref.add_rows(wt, rows, vals[:, :4].copy())
    np.testing.assert_allclose(dt.get(), wt, rtol=1e-6)
    assert calls == ["ab_gather", "ab_scatter_add", "ab_scatter_add"], "one launch per call"
    assert gpu.peak_bytes() > 0


@needs_gpu
def test_parameters_live_on_device_and_npvalue_is_host(gpu):
    cp = gpu.xp
    m = dy.ParameterCollection()
    W = m.add_parameters((3, 2))
    assert isinstance(W.data, cp.ndarray) and isinstance(W.grad, cp.ndarray)
    dy.renew_cg()
    y = W * dy.inputVector([1.0, 2.0])
    v = y.npvalue()
    assert type(v) is np.ndarray
    np.testing.assert_allclose(v, W.as_array() @ [1.0, 2.0], rtol=1e-5)


@needs_gpu
def test_forward_does_not_synchronise(gpu, f64):
    import cupyx
    P = make_params(2)
    dy.renew_cg(autobatching="agenda")
    hs = []
    for c in range(6):
        h = dy.inputVector([0.0] * 3)
        for t in range(4):
            h = dy.tanh(dy.affine_transform([P["bh"], P["Wh"], h, P["Wx"], dy.lookup(P["E"][2], (c + t) % 5)]))
        hs.append(dy.pickneglogsoftmax(h, c % 3))
    loss = dy.esum(hs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # allow_synchronize is deprecated but still works
        with cupyx.allow_synchronize(False):
            loss.forward()
    assert np.isfinite(loss.scalar_value())


SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _run(prog, P, strategy):
    for p in all_params(P):
        p.zero_grad()
    dy.renew_cg(autobatching=strategy)
    loss = build(prog, P)
    v = loss.scalar_value()
    loss.backward()
    return v, [p.grad_as_array() for p in all_params(P)]


@needs_gpu
@SETTINGS
@given(prog=programs)
def test_programs_on_cupy_equal_numpy(f64, prog):
    """Same program, same initial values: CuPy (agenda) equals NumPy (none) to 1e-9."""
    dy.set_backend("numpy")
    P = make_params(9)
    ref_v, ref_g = _run(prog, P, "none")
    dy.set_backend("cupy")
    try:
        Q = make_params(9)                 # same seed: same values, now on the device
        for p, q in zip(all_params(P), all_params(Q)):
            np.testing.assert_array_equal(p.as_array(), q.as_array())
        v, grads = _run(prog, Q, "agenda")
    finally:
        dy.set_backend("numpy")
    np.testing.assert_allclose(v, ref_v, rtol=1e-9, atol=1e-12)
    for k, (a, b) in enumerate(zip(grads, ref_g)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=f"grad of parameter {k}")
