"""The BLAS bound of each task: how many training instances/s this machine's sgemm allows if
everything but the matrix products took no time (no graph building, scheduling, copies,
elementwise ops or updates). No framework can beat it on the same machine and thread count,
so it says how much of a speed target is reachable at all.

    python -m bench.floor [--task all] [--hidden 256] [--threads 1,2] [--n 256]

Counting: the task's model is built with autobatch for n instances (the same DyNet-style
code every framework runs); every product of a shared weight W (m, k) with a per-instance
vector is one row of a GEMM. Training runs three products per row: W·x forward, Wᵀ·g for
x's gradient and g·xᵀ summed into W's gradient. Each (m, k) is timed as one GEMM of
`--rows` rows in each of the three layouts (the best case: real batches are smaller and
slower), and the bound is n / Σ over weights of rows x (time per row).
"""
import argparse
import os
import sys
import time

# the thread count must be set before NumPy loads its BLAS: each count runs in a subprocess
_THREADS_ENV = "BENCH_FLOOR_THREADS"
if os.environ.get(_THREADS_ENV):
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_v] = os.environ[_THREADS_ENV]

import numpy as np  # noqa: E402

from bench import tasks  # noqa: E402

# ops whose inputs are [c, W1, x1, W2, x2, ...] with shared W's (autobatch's op names: this
# is a measuring tool, not the engine, so naming them is fine)
_PRODUCT_OPS = ("affine", "matmul_add")


def product_rows(task_name, hidden, n, seed=0):
    """{(m, k): rows}: how many vectors each weight shape multiplies in n instances."""
    import autobatch as dy
    task = tasks.get(task_name)
    data, meta = task.data(n, seed=seed)
    pc = dy.ParameterCollection()
    model = task.Model(dy, pc, meta, hidden)
    rows: dict = {}
    for i in range(0, len(data), 64):
        dy.renew_cg()
        if hasattr(model, "batch_losses"):
            losses = model.batch_losses(dy, data[i:i + 64])
        else:
            losses = [model.loss(dy, x) for x in data[i:i + 64]]
        dy.esum(losses)
        g = dy.cg()
        for op, args in zip(g.ops, g.args):
            op = getattr(op, "base", op)      # an activation fused into a product (ops/fused.py)
            if op is None or op.name not in _PRODUCT_OPS:
                continue
            for j in range(1, len(args), 2):
                w, x = g.shapes[args[j]], g.shapes[args[j + 1]]
                if len(w) == 2 and len(x) == 1:
                    rows[w] = rows.get(w, 0) + 1
    return rows, len(data)


def _best(f, reps=5):
    f()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def seconds_per_row(m, k, rows, dtype=np.float32):
    """Time per row of forward + both gradients for W (m, k), from GEMMs of `rows` rows."""
    rng = np.random.default_rng(0)
    W = rng.standard_normal((m, k)).astype(dtype)
    X = rng.standard_normal((rows, k)).astype(dtype)
    G = rng.standard_normal((rows, m)).astype(dtype)
    fwd = min(_best(lambda: X @ W.T), _best(lambda: W @ X.T))   # whichever layout is faster
    dx = _best(lambda: G @ W)
    dw = _best(lambda: G.T @ X)
    return (fwd + dx + dw) / rows


def bound(task_name, hidden, n, rows_per_gemm):
    counts, n_inst = product_rows(task_name, hidden, n)
    t = sum(r * seconds_per_row(m, k, rows_per_gemm) for (m, k), r in counts.items())
    flops = sum(6 * m * k * r for (m, k), r in counts.items())
    return dict(task=task_name, hidden=hidden, threads=os.environ.get(_THREADS_ENV, "default"),
                gflop_per_inst=flops / n_inst / 1e9, gflops=flops / t / 1e9 if t else 0.0,
                bound_ips=n_inst / t if t else float("inf"))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="all")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--threads", default="1,2", help="comma list; each runs in its own process")
    ap.add_argument("--rows", type=int, default=512, help="rows of each timed GEMM")
    args = ap.parse_args(argv)
    names = tasks.NAMES if args.task == "all" else args.task.split(",")
    if os.environ.get(_THREADS_ENV):            # the child: one thread count
        for t in names:
            r = bound(t, args.hidden, args.n, args.rows)
            print("%-12s %6s %14.4f %12.1f %14.0f" % (t, r["threads"], r["gflop_per_inst"], r["gflops"], r["bound_ips"]))
            sys.stdout.flush()
        return 0
    import subprocess
    print("BLAS bound, H=%d, GEMMs of %d rows (training = forward + 2 gradient products)" % (args.hidden, args.rows))
    print("%-12s %6s %14s %12s %14s" % ("task", "threads", "GFLOP/inst", "GFLOP/s", "bound inst/s"))
    sys.stdout.flush()
    rc = 0
    for th in args.threads.split(","):
        env = dict(os.environ, **{_THREADS_ENV: th})
        cmd = [sys.executable, "-m", "bench.floor", "--task", ",".join(names), "--hidden", str(args.hidden),
               "--n", str(args.n), "--rows", str(args.rows)]
        rc |= subprocess.call(cmd, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return rc


if __name__ == "__main__":
    sys.exit(main())
