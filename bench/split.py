"""Where a training pass goes: each phase of ours split into kernels and engine, beside DyNet's.

    python -m bench.split [--task treelstm] [--hidden 256] [--n 256] [--repeats 5] [--peer dynet]

Kernels are the time spent inside the array code: the ops' batched forward and backward, the
backend's gathers and scatters, the deferred parameter-gradient products, adding gradients to
parameters and the trainer's update rule (the calls below are timed; a kernel that calls
another counts once). The engine is the rest of each phase: the graph built by the user's dy
calls, scheduling, and the executor's bookkeeping, including its inline array statements (adds
into views, flat copies), so the kernels column is if anything short. The timers cost about
a quarter of a microsecond per kernel call (5,000 calls, 1.2 ms, per 256 Tree-LSTM trees).

The last lines answer how fast a pass could be if the engine took no time at all: the kernels
as measured, plus the user's program with every dy call at the cost of a bare Python function
that records a node (six list appends and a handle, no checks), plus the
update. That bound needs the model to call only dy functions (a universal stand-in answers the
calls); the builders' tasks say n/a.

Measurements run in fresh processes on one BLAS thread, with the bench's protocol (warm-up
pass, median of the passes); `--threads 0` leaves the libraries' defaults.
"""
import argparse
import json
import sys
import time

_KERNEL_METHODS = ("forward", "forward_into", "forward_stacked", "forward_ragged", "backward",
                   "backward_stacked", "backward_ragged", "grad_prologue", "input_grads", "param_grads")


def _subclasses(cls):
    for s in cls.__subclasses__():
        yield s
        yield from _subclasses(s)


class KernelClock:
    """While entered, the kernel calls add their wall time to ``total`` (seconds); on exit the
    methods are restored."""

    def __init__(self):
        self.total = 0.0
        self._depth = 0
        self._saved = []

    def _wrap(self, f):
        clock = self

        def timed(*a, **k):
            if clock._depth:
                return f(*a, **k)
            clock._depth = 1
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                clock.total += time.perf_counter() - t0
                clock._depth = 0
        return timed

    def _patch(self, cls, name):
        f = cls.__dict__.get(name)
        if callable(f):
            self._saved.append((cls, name, f))
            setattr(cls, name, self._wrap(f))

    def __enter__(self):
        from autobatch import executor, trainers
        from autobatch.backends import numpy_backend
        from autobatch.ops import base
        for cls in {base.Op, *_subclasses(base.Op)}:
            for name in _KERNEL_METHODS:
                self._patch(cls, name)
        self._patch(base.ProductGrad, "dense")
        backends = [numpy_backend.NumpyBackend]
        try:
            from autobatch.backends import cupy_backend
            backends.append(cupy_backend.CupyBackend)
        except Exception:       # no CuPy here: nothing of it runs either
            pass
        for cls in backends:
            for name in ("gather", "scatter_add", "add_rows", "index", "ragged_index"):
                self._patch(cls, name)
        for name in ("_merge_products", "_apply"):
            self._patch(executor.Executor, name)
        for cls in {trainers.Trainer, *_subclasses(trainers.Trainer)}:
            for name in ("_apply", "_clip_scale"):
                self._patch(cls, name)
        return self

    def __exit__(self, *exc):
        for cls, name, f in reversed(self._saved):
            setattr(cls, name, f)
        self._saved = []
        return False


# ------------------------------------------------------------------ the user program's floor
class _Stand:
    """Answers every dy call, method and operator with a new handle from _record."""
    __slots__ = ("i",)

    def __getattr__(self, name):
        return _record

    def __iter__(self):
        raise TypeError("a stand-in handle is not a sequence")


for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "neg", "getitem", "pow"):
    setattr(_Stand, "__%s__" % _name, lambda self, *a: _record(self, *a))

_COLS = [[] for _ in range(6)]


def _record(*a):
    """A bare node record: what any lazy graph must store for a node, with no checks."""
    d, nd, u, s, ar, sh = _COLS
    d.append(1)
    nd.append(True)
    u.append(0)
    n = len(s)
    s.append(3)
    ar.append(a)
    sh.append(None)
    e = _Stand()
    e.i = n
    return e


class _StandModule:
    def __getattr__(self, name):
        setattr(self, name, _record)      # found in the instance from then on, as a module's names
        return _record


def _clear():
    for c in _COLS:
        c.clear()


def floor_call_ns(n=200000):
    """Nanoseconds of one bare record called with one handle (the best of five loops)."""
    from autobatch.executor import _no_gc      # a floor: no collector passes over the records
    h = _record()
    best = float("inf")
    with _no_gc():
        for _ in range(5):
            _clear()
            t0 = time.perf_counter()
            for _ in range(n):
                _record(h)
            best = min(best, time.perf_counter() - t0)
    _clear()
    return best / n * 1e9


def build_floor(task_name, hidden, n, batch_size=64, reps=5):
    """Seconds per pass for the task's model with every dy call a bare record (None if the model
    needs more than a stand-in gives, e.g. builders that return lists)."""
    from autobatch.executor import _no_gc
    from bench import tasks
    task = tasks.get(task_name)
    data, meta = task.data(n, seed=0)
    dy = _StandModule()
    try:
        with _no_gc():
            model = task.Model(dy, dy, meta, hidden)
            best = float("inf")
            for _ in range(reps + 1):
                _clear()
                t0 = time.perf_counter()
                for i in range(0, len(data), batch_size):
                    dy.esum([model.loss(dy, x) for x in data[i:i + batch_size]])
                best = min(best, time.perf_counter() - t0)
            return best, len(_COLS[3])
    except Exception:
        return None, None
    finally:
        _clear()


# ------------------------------------------------------------------ the command
def _row(label, rec):
    ph = [rec.get(k) or 0.0 for k in ("wall_build_s", "wall_forward_s", "wall_backward_s", "wall_update_s")]
    return label, ph, sum(ph)


def main(argv=None):
    from bench import runner
    ap = argparse.ArgumentParser(prog="python -m bench.split", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="treelstm")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--peer", default="dynet", help="'dynet' or '' for none")
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args(argv)
    base = dict(task=args.task, hidden=args.hidden, n=args.n, repeats=args.repeats, threads=args.threads)
    ours = runner.run_isolated(dict(base, framework="autobatch", strategy="agenda", split=True))
    recs = {"autobatch": ours}
    if args.peer:
        recs["dynet"] = runner.run_isolated(dict(base, framework="dynet", strategy="agenda"))
    bad = [k for k, r in recs.items() if "error" in r]
    if bad:
        for k in bad:
            print("%s: %s" % (k, recs[k]["error"]))
        return 1
    scale = 1e3 * 256 / args.n    # ms per 256 instances
    print("%s, H=%d, ms per 256 instances (%s threads)" % (args.task, args.hidden, args.threads or "default"))
    print("%-22s %8s %8s %8s %8s %8s" % ("", "build", "forward", "backward", "update", "pass"))
    rows = [_row("autobatch/agenda", ours)]
    k = ours["kernel_s"]
    rows.append(("  kernels", [k["build"], k["forward"], k["backward"], k["update"]], sum(k.values())))
    rows.append(("  engine", [p - q for p, q in zip(rows[0][1], rows[1][1])], rows[0][2] - rows[1][2]))
    if "dynet" in recs:
        rows.append(_row("dynet/agenda", recs["dynet"]))
    for label, ph, tot in rows:
        print("%-22s %s %8.1f" % (label, " ".join("%8.1f" % (p * scale) for p in ph), tot * scale))
    floor, calls = build_floor(args.task, args.hidden, args.n)
    print("\nbare dy call (six appends and a handle): %.0f ns" % floor_call_ns())
    if floor is None:
        print("no-engine bound: n/a (the model needs more than a stand-in for dy)")
    else:
        bound = floor + k["forward"] + k["backward"] + k["update"]
        print("the user's program at that floor: %.1f ms (%d calls)" % (floor * scale, calls))
        print("no-engine bound (that build + kernels + update): %.1f ms = %.0f inst/s" % (bound * scale, args.n / bound))
        if "dynet" in recs:
            dyn = rows[-1][2]
            print("  against DyNet's pass: %.2fx" % (dyn / bound))
            print("  the engine's time above that build floor: ours %.1f ms; at 1.0x DyNet it would have %.1f, "
                  "at 0.8x %.1f" % ((rows[0][2] - bound) * scale, (dyn - bound) * scale, (dyn / 0.8 - bound) * scale))
        recs["bound"] = dict(build_floor_s=floor, calls=calls, pass_s=bound)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(recs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
