"""Tables, machine description and the optional plot for benchmark records."""
import os
import platform
import statistics

REF = "dynet/agenda"  # the ratio column compares against DyNet's own agenda autobatching


def label(r):
    return "torch" if r["framework"] == "torch" else "%s/%s" % (r["framework"], r["strategy"])


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import numpy
    threads = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS") if k in os.environ}
    return "%s, %d cores, %s, Python %s, numpy %s%s" % (
        cpu, os.cpu_count() or 0, platform.system(), platform.python_version(), numpy.__version__,
        "".join(", %s=%s" % kv for kv in threads.items()))


def _f(x, fmt):
    return "-" if x is None else fmt % x


def _vs_ref(r, ref):
    """Speed relative to DyNet agenda: the median of the per-round ratios when the run had
    rounds (each round's ratio is taken side by side, so a slow spell of the host cancels)."""
    if r.get("vs_ref") is not None:
        return r["vs_ref"]
    return ref and r["instances_per_s"] / ref


def merge_rounds(rounds):
    """Records of one task measured in several rounds (a list per round, same runs in each)
    -> one record per run: the round with its median rate, plus every round's rate
    (`round_ips`) and the median of the per-round ratios to DyNet agenda (`vs_ref`); with an
    even number of rounds both take the lower middle, so rate and ratio come from one rule."""
    by: dict = {}
    for recs in rounds:
        ok = {label(r): r for r in recs if not r.get("error")}
        ref = ok.get(REF)
        for r in recs:
            e = by.setdefault(label(r), {"recs": [], "ratios": []})
            e["recs"].append(r)
            if not r.get("error") and ref is not None:
                e["ratios"].append(r["instances_per_s"] / ref["instances_per_s"])
    out = []
    for e in by.values():
        ok = sorted((r for r in e["recs"] if not r.get("error")), key=lambda r: r["instances_per_s"])
        if not ok:
            out.append(e["recs"][0])
            continue
        rec = dict(ok[(len(ok) - 1) // 2])
        rec["round_ips"] = [r["instances_per_s"] for r in e["recs"] if not r.get("error")]
        if e["ratios"]:
            rec["vs_ref"] = statistics.median_low(e["ratios"])
        out.append(rec)
    return out


def table(records, title=None):
    """A plain-text table for the records of one task."""
    ok = [r for r in records if not r.get("error")]
    ref = next((r["instances_per_s"] for r in ok if label(r) == REF), None)
    r0 = records[0]
    rounds = max((len(r.get("round_ips", ())) for r in ok), default=0)
    head = "%s  (H=%d, batch %d, n=%d, median of %d%s, backend %s)" % (
        title or r0["task"], r0["hidden"], r0["batch_size"], r0["n"], r0["repeats"],
        " passes, median of %d interleaved rounds" % rounds if rounds > 1 else "", r0["backend"])
    cols = "%-22s %9s %8s %8s %8s | %7s %7s %7s %7s %7s | %8s %8s" % (
        "framework", "inst/s", "vs DyNet", "fwd b/i", "bwd b/i", "build", "sched", "fwd", "bwd", "upd", "mem MB",
        "peak MB")
    sub = "%-22s %9s %8s %8s %8s | %39s | %8s %8s" % ("", "", "agenda", "", "", "seconds per pass", "", "")
    lines = [head, cols, sub, "-" * len(cols)]
    for r in records:
        if r.get("error"):
            lines.append("%-22s  failed: %s" % (label(r), r["error"]))
            continue
        lines.append("%-22s %9.1f %8s %8s %8s | %7s %7s %7s %7s %7s | %8s %8s" % (
            label(r), r["instances_per_s"], _f(_vs_ref(r, ref), "%.2fx"),
            _f(r.get("fwd_batches_per_inst"), "%.2f"), _f(r.get("bwd_batches_per_inst"), "%.2f"),
            _f(r.get("build_s"), "%.3f"), _f(r.get("schedule_s"), "%.3f"), _f(r.get("forward_s"), "%.3f"),
            _f(r.get("backward_s"), "%.3f"), _f(r.get("update_s"), "%.3f"), _f(r.get("rss_delta_mb"), "%.0f"),
            _f(r.get("peak_rss_mb"), "%.0f")))
    for r in ok:
        npi = r.get("nodes_per_inst")
        if r["framework"] == "autobatch" and r.get("strategy") != "vertex" and npi and r.get("build_s") is not None:
            us = 1e6 / (npi * r["n"])     # seconds per pass -> microseconds per node
            lines.append("per node (%s, %.0f nodes per instance): build %.2f us, schedule %.2f us, "
                         "forward + backward %.2f us" % (label(r), npi, r["build_s"] * us,
                                                         (r.get("schedule_s") or 0.0) * us,
                                                         (r["forward_s"] + r["backward_s"]) * us))
    for r in ok:
        if r.get("check_vs_lazy") is not None:
            lines.append("check_vs_lazy (%s): max relative difference of loss and parameter gradients "
                         "vs agenda on the first batch: %.1e" % (label(r), r["check_vs_lazy"]))
    return "\n".join(lines)


FOOTER = """\
inst/s: training instances per second over a full pass (median pass). b/i: kernel batches launched
per instance (from dy.stats(); '-' for peers, which do not report them). sched: autobatch's
scheduling time (part of its forward call; DyNet and PyTorch include theirs in fwd). PyTorch is
eager, so its fwd also includes building. mem MB: peak RSS minus the RSS right after importing the
framework (each run is a fresh process), i.e. what the model, data and training added. DyNet
preallocates its memory pool at import (dynet_mem), so that pool is in its baseline and its
figure shows only memory used outside the pool. peak MB: the whole process's peak RSS
(interpreter, libraries, pool and all), the figure to compare memory across frameworks.
per node: autobatch's phases divided by the graph nodes built per pass (lazy strategies)."""


def plot(records, path):
    """Grouped bar chart of instances/s per task (log scale). Returns an error string or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib); no plot written"
    ok = [r for r in records if not r.get("error")]
    task_names = list(dict.fromkeys(r["task"] for r in ok))
    labels = list(dict.fromkeys(label(r) for r in ok))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(task_names) + 2), 4))
    w = 0.8 / max(len(labels), 1)
    for j, lab in enumerate(labels):
        ys = [next((r["instances_per_s"] for r in ok if r["task"] == t and label(r) == lab), 0) for t in task_names]
        ax.bar([i + j * w for i in range(len(task_names))], ys, w, label=lab)
    ax.set_xticks([i + w * (len(labels) - 1) / 2 for i in range(len(task_names))], task_names)
    ax.set_yscale("log")
    ax.set_ylabel("training instances / s")
    r0 = ok[0] if ok else {"hidden": "?", "batch_size": "?"}
    ax.set_title("autobatch benchmark (H=%s, batch %s)" % (r0["hidden"], r0["batch_size"]))
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return None


def markdown(records):
    """The per-task tables of `records` (from --json) as Markdown code blocks, with the footer."""
    parts = []
    for t in dict.fromkeys(r["task"] for r in records):
        parts.append("```\n%s\n```" % table([r for r in records if r["task"] == t], t))
    return "\n\n".join(parts) + "\n\n" + FOOTER + "\n"


def summary(records):
    """One Markdown row per task: instances/s of every autobatch strategy and peer, the
    ratios to DyNet agenda, and peak memory (whole process) of agenda, vertex and DyNet."""
    ok = [r for r in records if not r.get("error")]
    cols = list(dict.fromkeys(label(r) for r in ok))
    head = ["task"] + cols + ["agenda ÷ DyNet", "vertex ÷ DyNet", "peak MB agenda / vertex / DyNet"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for t in dict.fromkeys(r["task"] for r in ok):
        by = {label(r): r for r in ok if r["task"] == t}
        ips = {k: r["instances_per_s"] for k, r in by.items()}
        ref = ips.get(REF)
        row = [t] + [_f(ips.get(c), "%.0f") for c in cols]
        for k in ("autobatch/agenda", "autobatch/vertex"):
            row.append(_f(k in by and _vs_ref(by[k], ref) or None, "%.2f×"))
        row.append(" / ".join(_f(by[k].get("peak_rss_mb") if k in by else None, "%.0f")
                              for k in ("autobatch/agenda", "autobatch/vertex", REF)))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    # python -m bench.report [--summary] RUN.json [...]: tables of saved runs (bench/RESULTS.md)
    import json
    import sys
    args = sys.argv[1:]
    brief = "--summary" in args
    recs = []
    for path in [a for a in args if a != "--summary"]:
        with open(path) as f:
            recs += json.load(f)
    print(summary(recs) if brief else markdown(recs))
