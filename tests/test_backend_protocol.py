"""The engine talks to arrays only through a backend object (xp plus the copy
primitives). These tests run without a GPU: a recording backend that is *not*
NumpyBackend drives the whole engine, which shows (1) nothing bypasses the protocol,
(2) the copies are one call per stacked input per batch, not per node, and (3) the
results are those of NumpyBackend. They also pin down how asking for CuPy fails."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch import backends, runtime
from autobatch.backends.numpy_backend import NumpyBackend

from programs import all_params, build, make_params, programs


class RecordingBackend:
    """Delegates to NumpyBackend by composition and logs every copy call."""
    name = "recording"
    xp = np

    def __init__(self):
        self._np = NumpyBackend()
        self.log = []

    def arange(self, n):
        return self._np.arange(n)

    def index(self, offsets, size):
        return self._np.index(offsets, size)

    def ragged_index(self, offsets, sizes):
        self.log.append(("ragged", list(offsets), list(sizes)))
        return self._np.ragged_index(offsets, sizes)

    def gather(self, buf, offsets, size):
        out, index = self._np.gather(buf, offsets, size)
        assert out.shape == (len(offsets), size)
        handle = (offsets, index)           # a tuple: the index is opaque to the executor
        self.log.append(("gather", offsets, size, handle))
        return out, handle

    def scatter_add(self, buf, index, size, vals, unique):
        # a gather's handle, or a ragged index (element numbers, size 1)
        offsets, index = index if type(index) is tuple else (index, index)
        assert vals.size == len(offsets) * size, "scatter_add got a block of the wrong size"
        assert unique == (len(set(np.asarray(offsets).tolist())) == len(offsets))
        self.log.append(("scatter", offsets, size))
        self._np.scatter_add(buf, index, size, vals, unique)

    def add_rows(self, table, rows, vals):
        self.log.append(("rows", len(rows)))
        self._np.add_rows(table, rows, vals)

    def to_host(self, a):
        return self._np.to_host(a)

    def synchronize(self):
        self.log.append(("sync",))


@pytest.fixture
def rec(monkeypatch):
    """Install a RecordingBackend under the name 'recording' and select it."""
    be = RecordingBackend()
    monkeypatch.setitem(backends._CACHE, "recording", be)
    dy.set_backend("recording")
    yield be
    dy.set_backend("numpy")


def _run(prog, P, strategy, be=None):
    """Forward, then backward; returns loss, grads and the graph's executor."""
    for p in all_params(P):
        p.zero_grad()
    dy.renew_cg(autobatching=strategy)
    loss = build(prog, P)
    v = loss.value()
    n_fwd = len(be.log) if be is not None else 0
    loss.backward()
    grads = [p.grad_as_array() for p in all_params(P)]
    return v, grads, dy.cg(), n_fwd


def _kinds(g, kind):
    return [info for b in g.exe.batches for info in b.ins if info is not None and info[0] == kind]


SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def P():
    dy.set_dtype("float64")
    try:
        return make_params(21)
    finally:
        dy.set_dtype("float32")


@SETTINGS
@given(prog=programs, strategy=st.sampled_from(["depth", "agenda"]))
def test_recording_backend_matches_numpy_and_copies_once_per_batch(rec, P, prog, strategy):
    dy.set_backend("numpy")
    ref_v, ref_g, _, _ = _run(prog, P, strategy)
    dy.set_backend("recording")
    rec.log.clear()
    v, grads, g, n_fwd = _run(prog, P, strategy, rec)
    assert g.backend is rec
    # same kernels underneath; not asserted bit-identical because BLAS may take other
    # code paths for differently aligned arena buffers (recycled by autobatch.memory)
    np.testing.assert_allclose(v, ref_v, rtol=1e-12, atol=1e-14)
    for a, b in zip(grads, ref_g):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    fwd, bwd = rec.log[:n_fwd], rec.log[n_fwd:]
    gathers = [e for e in fwd if e[0] == "gather"]
    assert not [e for e in bwd if e[0] == "gather"], "backward must not gather"
    assert not [e for e in fwd if e[0] in ("scatter", "rows")], "forward must not scatter"
    # exactly one gather call per gathered stacked input per batch, with every node's block
    infos = _kinds(g, "gather")
    assert len(gathers) == len(infos)
    for e, info in zip(gathers, infos):
        assert e[3] is info[2] and len(e[1]) == len(info[1]) >= 2
    # backward: one scatter per gathered input that needs a gradient, never one per node,
    # and it takes the index forward's gather handed back (no conversion or upload again)
    scat = [e for e in bwd if e[0] == "scatter" and isinstance(e[1], list)]
    ids = [id(e[1]) for e in scat]
    assert len(ids) == len(set(ids)), "an input block was scattered twice"
    assert set(ids) <= {id(info[2][0]) for info in infos}
    want = sum(1 for info in infos if any(g.needs[s] for s in info[1]))
    assert len(scat) == want
    # mixed-size elementwise batches: one ragged index per batch input, one scatter each
    flats = [info for info in _kinds(g, "flat") if info[2] is not None]
    assert len([e for e in fwd if e[0] == "ragged"]) == len(flats)


def test_batched_chains_gather_many_nodes_per_call(rec, f64):
    """Eight RNN chains over lookups: batches of 8 nodes go through one gather each. (The
    chains have different lengths, so a step's lookups are not evenly spaced in the lookup
    batch; evenly spaced sources would be a strided view instead of a gather.)"""
    P = make_params(4)
    dy.renew_cg(autobatching="agenda")
    E, Wh, Wx, b = P["E"][2], P["Wh"], P["Wx"], P["bh"]
    losses = []
    for c in range(8):
        h = dy.inputVector([0.0] * 3)
        for t in range(3 + c % 3):
            h = dy.tanh(dy.affine_transform([b, Wh, h, Wx, dy.lookup(E, (c + t) % 5)]))
        losses.append(dy.pickneglogsoftmax(h, c % 3))
    loss = dy.esum(losses)
    loss.value()
    sizes = [len(e[1]) for e in rec.log if e[0] == "gather"]
    assert sizes and max(sizes) == 8, sizes
    assert len(sizes) < 8 * 5, "copies must be per batch, not per node"
    n = len(rec.log)
    loss.backward()
    rows = [e for e in rec.log[n:] if e[0] == "rows"]
    assert rows and all(r[1] > 1 for r in rows), "lookup gradients go in one add_rows per batch"
    assert P["E"][2].grad_as_array().any()


def test_ragged_index_is_concatenated_ranges():
    be = NumpyBackend()
    offs, sizes = [10, 0, 37, 5], [3, 1, 4, 2]
    want = np.concatenate([np.arange(o, o + s) for o, s in zip(offs, sizes)])
    np.testing.assert_array_equal(be.ragged_index(offs, sizes), want)



@pytest.mark.parametrize("size", [8, 4, 1])
@pytest.mark.parametrize("offs", [[8, 0, 24], [8, 3, 24], [0, 0, 16], [4, 28, 12], [2, 30, 18], [4, 4, 20]])
def test_numpy_scatter_add_takes_the_index_its_gather_handed_back(offs, size):
    """gather returns the blocks' index with the copy (row numbers when the blocks are
    aligned, rows of a divisor of the size when the offsets are its multiples, block starts
    when neither); scatter_add with it adds to those same blocks (every repeat of a block,
    with unique=False; the buffered add when they are distinct), as does a ragged index with
    size 1."""
    buf = np.arange(40, dtype=np.float64)
    vals = np.arange(3.0 * size).reshape(3, size)
    be = NumpyBackend()
    x, index = be.gather(buf, offs, size)
    np.testing.assert_array_equal(x, np.stack([buf[o:o + size] for o in offs]))
    d = np.gcd.reduce(offs + [size])
    assert index.shape == ((3,) if d == size else (3, size // d) if d > 1 else (3, 1)), \
        "the index kind: rows of the size, rows of its largest divisor, or element numbers"
    want = np.zeros(40)
    for k, o in enumerate(offs):
        want[o:o + size] += vals[k]
    out = np.zeros(40)
    be.scatter_add(out, index, size, vals, unique=False)
    np.testing.assert_array_equal(out, want)
    if min(np.diff(sorted(offs))) >= size:    # distinct, disjoint blocks
        out = np.zeros(40)
        be.scatter_add(out, index, size, vals, unique=True)
        np.testing.assert_array_equal(out, want)
    out = np.zeros(40)
    be.scatter_add(out, be.ragged_index(offs, [size] * 3), 1, vals, unique=False)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("offs, size", [([1, 1000], 1000), ([0] * 4 + [64] * 4 + [128] * 4, 64),
                                        ([256 * (k % 8) for k in range(256)], 256), ([k * 999 + 1 for k in range(40)], 1000)])
def test_numpy_scatter_add_of_repeated_or_overlapping_blocks(offs, size):
    """Blocks that share elements (two long slices of one block meeting in one element), a few
    repeated rows, and many: each element gets every block's addition."""
    L = max(offs) + size + 3
    rng = np.random.default_rng(0)
    vals = rng.standard_normal((len(offs), size))
    be = NumpyBackend()
    _, index = be.gather(np.zeros(L), offs, size)
    out = np.zeros(L)
    be.scatter_add(out, index, size, vals, unique=False)
    want = np.zeros(L)
    for k, o in enumerate(offs):
        want[o:o + size] += vals[k]
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_set_backend_cupy_without_cupy_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)     # import cupy -> ImportError
    monkeypatch.delitem(backends._CACHE, "cupy", raising=False)
    before = runtime.state().backend
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[cuda\]'"):
        dy.set_backend("cupy")
    # the failed request changed nothing: numpy stays, and graphs still run
    assert runtime.state().backend is before
    assert runtime.state().backend_name == "numpy"
    dy.renew_cg()
    assert dy.inputVector([1.0, 2.0]).npvalue().tolist() == [1.0, 2.0]


def test_set_backend_cupy_without_device_is_one_clear_error(monkeypatch):
    """With the real environment: CuPy missing or no usable GPU both give the hint."""
    from conftest import cupy_unavailable_reason
    if cupy_unavailable_reason() is None:
        pytest.skip("a CUDA device is usable here")
    monkeypatch.delitem(backends._CACHE, "cupy", raising=False)
    with pytest.raises(RuntimeError, match=r"the 'cupy' backend needs .*pip install -e"):
        dy.set_backend("cupy")
    assert runtime.state().backend_name == "numpy"


def test_env_cupy_without_cupy_imports_and_fails_on_use():
    """AUTOBATCH_BACKEND=cupy must not break `import autobatch`; the error comes on first use."""
    code = (
        "import sys; sys.modules['cupy'] = None\n"
        "import autobatch as dy\n"
        "print('imported')\n"
        "try:\n"
        "    dy.ParameterCollection().add_parameters(3)\n"
        "except RuntimeError as e:\n"
        "    print('error:', e)\n"
    )
    env = dict(os.environ, AUTOBATCH_BACKEND="cupy")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "imported" in r.stdout
    assert "error: the 'cupy' backend needs CuPy" in r.stdout and "pip install -e '.[cuda]'" in r.stdout


def test_unknown_backend_name_is_rejected():
    with pytest.raises(ValueError, match="unknown backend"):
        dy.set_backend("opencl")
    assert runtime.state().backend_name == "numpy"


@pytest.mark.parametrize("n, width", [(5, (3,)), (3000, (3,)), (3000, (64,)), (3000, (4, 16))])
def test_numpy_add_rows_sums_repeated_rows(n, width):
    """Every path of add_rows adds every repeated row's values, into a table with existing
    content: np.add.at for few rows; for many, one sort and then either one reduceat (many
    short repeats: 3000 lookups of 50 rows of 3) or one block sum per repeated row (few
    repeats next to the elements: rows of 64 or 4x16)."""
    rng = np.random.default_rng(n)
    table = rng.normal(size=(50,) + width)
    rows = rng.integers(0, 50, n)
    vals = rng.normal(size=(n,) + width)
    want = table.copy()
    np.add.at(want, rows, vals)
    NumpyBackend().add_rows(table, rows, vals)
    np.testing.assert_allclose(table, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rows", [[], [2], [1, 1], [-1, 3], [3, -1, 0, -4], [0, 1, 2, 3]])
@pytest.mark.parametrize("width", [(), (3,)])
def test_numpy_add_rows_edge_rows(rows, width):
    """As np.add.at: an empty list, a 1-D table, and negative rows (-1 is the last row, so -1
    and 3 of 4 rows are one row, added twice)."""
    table = np.arange(4.0 * int(np.prod(width))).reshape((4,) + width)
    vals = np.ones((len(rows),) + width)
    want = table.copy()
    np.add.at(want, np.asarray(rows, dtype=np.intp), vals)
    NumpyBackend().add_rows(table, rows, vals)
    np.testing.assert_array_equal(table, want)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(2, 400), st.sampled_from([1, 8, 200]), st.integers(0, 2**31))
def test_row_grad_summed_has_each_row_once_with_its_sum(V, n, d, seed):
    """RowGrad.summed: distinct rows, each with the sum of its values, whichever segment-sum
    path the sizes pick (d=200 with few distinct rows takes the per-segment one)."""
    _check_summed(V, n, d, 0, seed)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 2000), st.integers(2, 3000), st.sampled_from([1, 8, 64]),
       st.sampled_from([0, 65536]), st.integers(0, 2**31))
def test_row_grad_summed_in_chunks(V, n, d, far, seed):
    """A gradient larger than L2 is summed a chunk of whole runs at a time (here chunks of
    about 512 elements; a run may be longer than a chunk: few distinct rows); rows that reach
    2**16 (here r and r + 2**16 side by side, equal as 16-bit numbers) sort as int64."""
    from unittest import mock

    from autobatch.ops import base
    with mock.patch.object(base, "_SUM_WHOLE", 1024), mock.patch.object(base, "_SUM_CHUNK", 512):
        _check_summed(V, n, d, far, seed)


def _check_summed(V, n, d, far, seed):
    from autobatch.ops import RowGrad
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, V, n) + far * (rng.random(n) < 0.5)
    vals = rng.normal(size=(n, d))
    g = RowGrad(rows, vals).summed(np)
    assert len(set(g.rows.tolist())) == len(g.rows)
    got = np.zeros((far + V, d))
    got[g.rows] = g.vals
    want = np.zeros((far + V, d))
    np.add.at(want, rows, vals)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
