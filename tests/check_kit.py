"""Checks that several test files make in the same way: values of one graph holding several
instances, parameter gradients against central differences, batched against unbatched
execution, and runs of real DyNet in a separate process."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import autobatch as dy


def uniform_inputs(specs, seed):
    """Arrays drawn uniformly: specs is a list of (shape, (lo, hi))."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(lo, hi, shape) for shape, (lo, hi) in specs]


def check_instances(build, ref, inputs, strategy, rtol, atol, name):
    """One graph under strategy with one instance per entry of inputs (its arrays, given to
    build as inputTensors): each output has ref's shape and values. Built together, the
    instances run through batched kernels."""
    dy.renew_cg(strategy)
    outs = [build(*[dy.inputTensor(a) for a in arrs]) for arrs in inputs]
    for out, arrs in zip(outs, inputs):
        want = np.asarray(ref(*arrs), dtype=np.float64)
        got = out.npvalue()
        assert got.shape == out.dim()[0] == want.shape, name
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


def check_param_grads(loss, params, rng=None, n=None, rtol=1e-5, atol=1e-8, step=1e-6):
    """The gradient backward() gives each parameter of params equals central differences of
    loss() (a fresh graph, a scalar) at n elements per parameter that rng picks, or at every
    element when rng is None. Every parameter must get some gradient."""
    for p in params:
        p.zero_grad()
    loss().backward()
    for p in params:
        g, w = p.grad_as_array().reshape(-1), p.as_array()
        assert np.abs(g).max() > 0, f"no gradient for a parameter of shape {w.shape}"
        flat = w.reshape(-1)
        picks = range(w.size) if rng is None else rng.choice(w.size, min(w.size, n), replace=False)
        for k in picks:
            e = np.zeros(w.size)
            e[k] = step
            p.set_value((flat + e).reshape(w.shape))
            up = loss().scalar_value()
            p.set_value((flat - e).reshape(w.shape))
            down = loss().scalar_value()
            p.set_value(w)
            assert g[k] == pytest.approx((up - down) / (2 * step), rel=rtol, abs=atol)


def value_grads_stats(loss, params):
    """loss's value, then the gradients of params after its backward, and the graph's stats."""
    val = loss.scalar_value()
    loss.backward()
    return val, [p.grad_as_array() for p in params], dy.stats()


def assert_batching_agrees(run, rtol=1e-9, atol=1e-12):
    """run(strategy) -> value_grads_stats(...) of one graph of several instances: autobatching
    gives the unbatched value and gradients, in fewer than half the forward batches."""
    v0, g0, s0 = run("none")
    v1, g1, s1 = run("agenda")
    assert v1 == pytest.approx(v0, rel=1e-12)
    assert len(g1) == len(g0)
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    assert s1["forward_batches"] < s0["forward_batches"] / 2


needs_dynet = pytest.mark.skipif(importlib.util.find_spec("dynet") is None, reason="DyNet is not installed")


def run_dynet(script, inp):
    """Runs script with real DyNet in a separate process (its stdin: inp) and returns the JSON
    it printed after "RESULT" on its last such line."""
    r = subprocess.run([sys.executable, "-c", script], input=inp, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=""), cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    line = [s for s in r.stdout.splitlines() if s.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def run_dynet_files(tmp_path, script):
    """Runs script with real DyNet in a separate process inside tmp_path, where it reads and
    writes files; returns the arrays of the out.npz it wrote there."""
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with np.load(tmp_path / "out.npz") as z:
        return {k: z[k] for k in z.files}


def graph_columns(g, names):
    """The named columns of graph g as lists, for comparing two ways of building a graph;
    "uses" only for computed nodes: a parameter node's consumer count is not kept (the
    affine and lookup fast paths skip it), so it differs between the ways."""
    # a sparse column (attrs, datas) is a dict: its values, not only the nodes that have one
    cols = {c: dict(col) if isinstance(col, dict) else list(col) for c in names for col in [getattr(g, c)]}
    if "uses" in cols:
        cols["uses"] = [u if s >= 0 else None for u, s in zip(cols["uses"], g.sigs)]
    return cols
