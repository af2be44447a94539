"""One measurement: a task trained by one framework/strategy, timed phase by phase.

Protocol (identical for every framework): a warm-up pass, then `repeats` full training passes
over the same n instances in minibatches; we keep the median pass. Per minibatch:
    renew_cg; build the losses of batch_size instances; esum; forward value; backward; update.
PyTorch runs eagerly, so its "forward" includes building and "build" is not reported.

`measure(cfg)` runs in the current process; `run_isolated(cfg)` runs it in a fresh subprocess
(`python -m bench.runner JSON`), which DyNet needs (its autobatch mode is fixed per process) and
which makes peak-RSS figures comparable.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import traceback

from bench import tasks

DEFAULTS = dict(task="treelstm", framework="autobatch", strategy="agenda", backend="numpy", hidden=256,
                batch_size=64, n=512, repeats=3, seed=0, data=None, warmup="pass", trainer="adam",
                label=None, dynet_mem=256, threads=1)   # dynet_mem: DyNet runs as fast with 256 as with 1024 MB
STAT_KEYS = ("nodes", "forward_batches", "backward_batches", "copies_done", "copies_skipped",
             "build_s", "schedule_s", "forward_s", "backward_s")
PHASES = ("build_s", "schedule_s", "forward_s", "backward_s", "update_s")
MARK = "BENCH_RECORD "
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


# ------------------------------------------------------------------ progress (stderr, plain \r)
class Progress:
    """Shown only on a terminal (or BENCH_PROGRESS=1) and only once a run exceeds `after` s."""

    def __init__(self, label, total, after=2.0):
        self.label, self.total, self.after = label, total, after
        self.on = sys.stderr.isatty() or os.environ.get("BENCH_PROGRESS") == "1"
        self.t0 = self.last = time.time()
        self.shown = False

    def update(self, done, what=""):
        now = time.time()
        if not self.on or now - self.t0 < self.after or now - self.last < 0.25:
            return
        self.last, self.shown = now, True
        k = int(12 * done / max(self.total, 1))
        sys.stderr.write("\r%-38s [%s%s] %3d%% %-9s %4.0fs " % (
            self.label[:38], "#" * k, "." * (12 - k), 100 * done // max(self.total, 1), what, now - self.t0))
        sys.stderr.flush()

    def close(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()


# ------------------------------------------------------------------ training loops
def _stats_delta(before, after):
    """Per-minibatch stats whether dy.stats() is cumulative or reset by renew_cg."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in STAT_KEYS if k in after}
    sb, sa = before.get("signatures", {}) or {}, after.get("signatures", {}) or {}
    d["signatures"] = {k: list(v)[len(sb.get(k, [])):] if len(v) >= len(sb.get(k, [])) else list(v)
                       for k, v in sa.items()}
    return d


def _add_stats(acc, d):
    for k, v in d.items():
        if k == "signatures":
            sig = acc.setdefault("signatures", {})
            for name, sizes in v.items():
                sig.setdefault(name, []).extend(sizes)
        else:
            acc[k] = acc.get(k, 0) + v


def _backend_of(fw):
    """autobatch's array backend (None for DyNet): on CuPy, kernels run asynchronously."""
    rt = getattr(fw.dy, "runtime", None) if fw.kind == "autobatch" else None
    return rt.state().backend if rt is not None else None


class DyLoop:
    def __init__(self, fw, model, trainer):
        self.fw, self.model, self.trainer = fw, model, trainer
        self.batch_loss = None
        self.clock = None      # bench.split.KernelClock: kernel seconds by phase as well
        # wait for queued GPU work before reading each phase's clock (a no-op on NumPy);
        # forward needs none: loss.value() copies to the host
        self.sync = getattr(_backend_of(fw), "synchronize", None) or (lambda: None)

    def step(self, batch, acc):
        dy, fw = self.fw.dy, self.fw
        kt = []
        mark = (lambda: kt.append(self.clock.total)) if self.clock is not None else (lambda: None)
        mark()
        t0 = time.perf_counter()
        fw.renew()
        t1 = time.perf_counter()
        s0 = fw.stats()  # outside the timed phases
        t2 = time.perf_counter()
        if self.batch_loss is not None:   # --strategy vertex: one call of F per minibatch
            loss = self.batch_loss(dy, batch)
        elif hasattr(self.model, "batch_losses"):   # models that read values mid-way (parser):
            loss = dy.esum(self.model.batch_losses(dy, batch))   # dy.batched_map where available
        else:
            loss = dy.esum([self.model.loss(dy, x) for x in batch])
        t3 = time.perf_counter()
        mark()
        value = loss.value()
        t4 = time.perf_counter()
        mark()
        loss.backward()
        self.sync()
        t5 = time.perf_counter()
        mark()
        self.trainer.update()
        self.sync()
        t6 = time.perf_counter()
        mark()
        if s0 is not None:
            _add_stats(acc.setdefault("stats", {}), _stats_delta(s0, fw.stats()))
        for k, dt in (("wall_build_s", t1 - t0 + t3 - t2), ("wall_forward_s", t4 - t3),
                      ("wall_backward_s", t5 - t4), ("wall_update_s", t6 - t5)):
            acc[k] = acc.get(k, 0.0) + dt
        if self.clock is not None:
            for k, (a, b) in zip(("build", "forward", "backward", "update"), zip(kt, kt[1:])):
                acc["kernel_%s_s" % k] = acc.get("kernel_%s_s" % k, 0.0) + b - a
        return float(value)


class TorchLoop:
    def __init__(self, model, trainer):
        import torch
        self.torch, self.model = torch, model
        self.opt = torch.optim.Adam(model.parameters()) if trainer == "adam" else \
            torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, batch, acc):
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = self.torch.stack([self.model.loss(x) for x in batch]).sum()
        value = loss.item()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.opt.step()
        t3 = time.perf_counter()
        for k, dt in (("wall_forward_s", t1 - t0), ("wall_backward_s", t2 - t1), ("wall_update_s", t3 - t2)):
            acc[k] = acc.get(k, 0.0) + dt
        return value


def _run_pass(loop, batches, prog, what, offset, total):
    acc, loss = {}, 0.0
    t0 = time.perf_counter()
    for k, b in enumerate(batches):
        loss += loop.step(b, acc)
        prog.update(offset + k + 1, what)
    acc["total_s"] = time.perf_counter() - t0
    acc["loss"] = loss
    return acc


def _phases(p, framework):
    """Seconds per pass by phase. For autobatch the split of forward into schedule + compute
    comes from dy.stats(); peers report wall-clock phases (their scheduling is inside forward)."""
    out = {"build_s": p.get("wall_build_s"), "schedule_s": None, "forward_s": p.get("wall_forward_s"),
           "backward_s": p.get("wall_backward_s"), "update_s": p.get("wall_update_s")}
    st = p.get("stats")
    if framework == "autobatch" and st and "schedule_s" in st:
        out["schedule_s"] = st["schedule_s"]
        # whatever scheduling happened inside value() is not forward compute
        out["forward_s"] = max(0.0, p["wall_forward_s"] - st["schedule_s"])
    return out


# ------------------------------------------------------------------ one measurement
def measure(cfg, progress_label=None):
    cfg = {**DEFAULTS, **cfg}
    task = tasks.get(cfg["task"])
    fwk = cfg["framework"]
    if fwk == "torch":
        import torch
        torch.manual_seed(cfg["seed"])
        if cfg["threads"]:
            torch.set_num_threads(cfg["threads"])
    else:
        from bench.frameworks import DyFramework
        fw = DyFramework(fwk, cfg["strategy"], cfg["backend"], seed=cfg["seed"], mem=cfg["dynet_mem"])
    base_rss = maxrss_mb()  # post-import baseline: the framework's own footprint

    data, meta = task.data(cfg["n"], seed=cfg["seed"], path=cfg["data"])
    if fwk == "torch":
        loop = TorchLoop(task.torch_model(meta, cfg["hidden"]), cfg["trainer"])
    else:
        pc = fw.dy.ParameterCollection()
        model = task.Model(fw.dy, pc, meta, cfg["hidden"])
        loop = DyLoop(fw, model, fw.trainer(pc, cfg["trainer"]))
    bs = cfg["batch_size"]
    batches = [data[i:i + bs] for i in range(0, len(data), bs)]
    vertex = fwk == "autobatch" and cfg["strategy"] == "vertex"
    if vertex:
        from bench import vertex_tasks
        loop.batch_loss = vertex_tasks.get(cfg["task"])(fw.dy, model, meta).batch_loss
    warm = batches if cfg["warmup"] == "pass" else batches[:1]

    label = progress_label or cfg["label"] or "%s %s" % (cfg["task"], fwk if fwk == "torch" else fwk + "/" + cfg["strategy"])
    total = len(warm) + cfg["repeats"] * len(batches)
    prog = Progress(label, total)
    clock = None
    if cfg.get("split") and fwk == "autobatch":
        from bench.split import KernelClock
        clock = loop.clock = KernelClock().__enter__()
    try:
        first = _run_pass(loop, warm, prog, "warm-up", 0, total)
        passes = [_run_pass(loop, batches, prog, "rep %d/%d" % (r + 1, cfg["repeats"]),
                            len(warm) + r * len(batches), total) for r in range(cfg["repeats"])]
    finally:
        prog.close()
        if clock is not None:
            clock.__exit__(None, None, None)

    med = sorted(passes, key=lambda p: p["total_s"])[(len(passes) - 1) // 2]
    n = len(data)
    rec = dict(cfg)
    rec.update(
        instances_per_s=n / med["total_s"],
        total_s=med["total_s"],
        pass_s=[p["total_s"] for p in passes],
        loss_warmup=first["loss"] / sum(len(b) for b in warm),
        loss_last=passes[-1]["loss"] / n,
        baseline_rss_mb=base_rss,
        peak_rss_mb=maxrss_mb(),
    )
    rec["rss_delta_mb"] = rec["peak_rss_mb"] - base_rss
    if clock is not None:
        rec["kernel_s"] = {k: med.get("kernel_%s_s" % k, 0.0) for k in ("build", "forward", "backward", "update")}
    if vertex:   # max relative difference of loss and gradients, vertex vs agenda; after the
        # peak-memory reading, since its lazy-graph run is not part of the vertex training
        rec["check_vs_lazy"] = vertex_tasks.check_vs_lazy(fw.dy, cfg["task"], model, pc, meta, batches[0])
    be = _backend_of(fw) if fwk != "torch" else None
    if be is not None and hasattr(be, "peak_bytes"):   # CuPy: device memory held by its pool
        rec["gpu_peak_mb"] = be.peak_bytes() / 2 ** 20
    rec.update(_phases(med, fwk))
    rec.update({k: med.get(k) for k in ("wall_build_s", "wall_forward_s", "wall_backward_s", "wall_update_s")})
    st = med.get("stats")
    if st:
        rec["fwd_batches_per_inst"] = st.get("forward_batches", 0) / n
        rec["bwd_batches_per_inst"] = st.get("backward_batches", 0) / n
        rec["nodes_per_inst"] = st.get("nodes", 0) / n
        rec["stats"] = {k: v for k, v in st.items() if k != "signatures"}
        # name -> [launches, mean batch size]; the full size lists would bloat the JSON
        rec["signatures"] = {k: [len(v), statistics.fmean(v) if v else 0.0] for k, v in st.get("signatures", {}).items()}
    else:
        rec["fwd_batches_per_inst"] = rec["bwd_batches_per_inst"] = rec["nodes_per_inst"] = None
    rec["framework_version"] = _version(fwk)
    return rec


def _version(fwk):
    try:
        from importlib.metadata import version
        return version({"dynet": "dyNET38", "torch": "torch", "autobatch": "autobatch"}[fwk])
    except Exception:
        return None


def run_isolated(cfg, progress_label=None, timeout=None):
    """measure() in a fresh interpreter; returns the record, or one with an "error" field."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    threads = cfg.get("threads", DEFAULTS["threads"])
    if threads:  # BLAS/OpenMP pools size themselves at import, so this must be set before it
        env.update({k: str(threads) for k in THREAD_VARS})
    arg = json.dumps({"cfg": cfg, "label": progress_label})
    try:
        p = subprocess.run([sys.executable, "-m", "bench.runner", arg], cwd=REPO, env=env, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=None, text=True)
    except subprocess.TimeoutExpired:
        return {**DEFAULTS, **cfg, "error": "timed out after %ss" % timeout}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARK):
            rec = json.loads(line[len(MARK):])
            # DyNet cannot grow its pool while autobatching: retry with a bigger preallocation
            mem = rec.get("dynet_mem", DEFAULTS["dynet_mem"])
            if "dynamic increasing of memory pool" in rec.get("error", "") and mem < 8192:
                return run_isolated(dict(cfg, dynet_mem=2 * mem), progress_label, timeout)
            return rec
    return {**DEFAULTS, **cfg, "error": "subprocess exited %d without a record" % p.returncode}


def main(argv):
    req = json.loads(argv[0])
    try:
        rec = measure(req["cfg"], req.get("label"))
    except Exception as e:  # report in the table (where it happened too), don't crash the benchmark
        if os.environ.get("BENCH_DEBUG"):
            traceback.print_exc()
        fr = traceback.extract_tb(e.__traceback__)[-1]
        rec = {**DEFAULTS, **req["cfg"], "error": "%s: %s [%s:%d] (BENCH_DEBUG=1 for the traceback)" % (
            type(e).__name__, e, os.path.relpath(fr.filename, REPO), fr.lineno)}
    sys.stdout.write("\n" + MARK + json.dumps(rec) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
