"""Shared fixtures: every test starts from default settings, and `backend` runs a
test body once per array backend (CuPy cases skip where there is no CUDA device)."""
import numpy as np
import pytest

import autobatch as dy
from autobatch import runtime


def cupy_unavailable_reason():
    try:
        import cupy
    except Exception as e:  # ImportError, or a broken CUDA install
        return f"CuPy is not installed ({type(e).__name__}); pip install -e '.[cuda]' on a CUDA machine"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy is installed but no CUDA device is visible"
    except Exception as e:
        return f"CuPy is installed but no CUDA device is usable ({e})"
    return None


BACKENDS = ["numpy", "cupy"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Run the test with each backend; yields the backend name."""
    if request.param == "cupy":
        why = cupy_unavailable_reason()
        if why:
            pytest.skip(why)
    dy.set_backend(request.param)
    dy.renew_cg()
    yield request.param
    dy.set_backend("numpy")


@pytest.fixture
def f64():
    """float64 parameters and graphs (tight gradient and equivalence checks)."""
    dy.set_dtype("float64")
    yield
    dy.set_dtype("float32")


@pytest.fixture(autouse=True)
def _fresh_state():
    st = runtime.state()
    saved = (st.strategy, st.dtype, st.dropout, st.backend_name)
    dy.reset_random_seed(1234)
    dy.renew_cg()
    yield
    st.strategy, st.dtype, st.dropout = saved[:3]
    if st.backend_name != saved[3]:
        dy.set_backend(saved[3])
    dy.renew_cg()


def to_np(a):
    """Host copy of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.fixture
def poisoned(monkeypatch):
    """Vertex-function arenas come back full of NaN: a fresh one is often zeroed by the OS,
    which would hide a gradient block read before anything wrote it (the vertex engine's
    backward does not zero its arena)."""
    from autobatch.vertex.function import VertexFunction
    arena = VertexFunction._arena

    def nan_arena(self, xp, dtype, n):
        a = arena(self, xp, dtype, n)
        a[...] = np.nan
        return a
    monkeypatch.setattr(VertexFunction, "_arena", nan_arena)
