"""python -m bench: train each task with each autobatch strategy and with the peers, print tables.

Examples:
    python -m bench --quick                       # everything, small, < 3 minutes on 2 cores
    python -m bench --task treelstm,treefc --strategy depth,agenda --peer dynet
    python -m bench --data ../shared/data --json out.json --plot out.png
"""
import argparse
import json
import sys
import time

from bench import report, runner, tasks, vertex_tasks
from bench.frameworks import AUTOBATCH_STRATEGIES, BACKENDS, DYNET_MODES, INSTALL_HINT, available

QUICK = dict(n=16, repeats=1, warmup="batch")  # one minibatch of warm-up, one timed pass


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="all", help="comma list of %s, or 'all'" % ",".join(tasks.NAMES))
    ap.add_argument("--strategy", default="none,depth,agenda",
                    help="autobatch strategies, comma list of %s ('' for none)" % ",".join(AUTOBATCH_STRATEGIES))
    ap.add_argument("--backend", default="numpy", choices=BACKENDS)
    ap.add_argument("--peer", default="dynet,torch",
                    help="comma list of dynet,torch ('' for none). DyNet runs the requested strategies it has, "
                         "and always agenda (the reference column)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--n", type=int, default=None, help="training instances per pass (default 512; --quick 16)")
    ap.add_argument("--repeats", type=int, default=None, help="timed passes, median kept (default 3; --quick 1)")
    ap.add_argument("--trainer", default="adam", choices=("adam", "sgd"))
    ap.add_argument("--data", default=None, help="real data: a file, or a directory laid out like ../shared/data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS/OpenMP/torch threads per run (default 1: DyNet's CPU build is single-threaded, "
                         "so every framework gets one core; 0 = each library's default)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every run of a task this many times, interleaved (the order reversed "
                         "each round), and report the median (the lower middle for an even number); ratios "
                         "to DyNet are the median of the per-round ratios, so the host's slow spells "
                         "cancel (default 1)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds allowed per measurement")
    ap.add_argument("--json", default=None, metavar="FILE")
    ap.add_argument("--plot", default=None, metavar="FILE.png")
    ap.add_argument("--quick", action="store_true", help="small n, 1 repeat, warm-up of one minibatch")
    return ap.parse_args(argv)


def _csv(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def plan(args):
    """The list of (framework, strategy) runs per task, plus lines explaining what was skipped."""
    notes, runs = [], []
    strategies = _csv(args.strategy)
    for s in strategies:
        if s not in AUTOBATCH_STRATEGIES:
            sys.exit("unknown strategy %r (known: %s)" % (s, ", ".join(AUTOBATCH_STRATEGIES)))
    if strategies and not available("autobatch"):
        notes.append("autobatch is not importable: skipped (%s)" % INSTALL_HINT["autobatch"])
    elif strategies and args.backend == "cupy" and not available("cupy"):
        notes.append("cupy is not installed: autobatch runs skipped (%s)" % INSTALL_HINT["cupy"])
    else:
        runs += [("autobatch", s) for s in strategies]
    for peer in _csv(args.peer):
        if peer not in ("dynet", "torch"):
            sys.exit("unknown peer %r (known: dynet, torch)" % peer)
        if not available(peer):
            notes.append("%s is not installed: skipped (%s)" % (peer, INSTALL_HINT[peer]))
        elif peer == "torch":
            runs.append(("torch", "eager"))
        else:
            modes = [s for s in strategies if s in DYNET_MODES]
            runs += [("dynet", s) for s in DYNET_MODES if s in modes or s == "agenda"]
    if args.backend != "numpy" and _csv(args.peer):
        notes.append("peers run on CPU; only autobatch uses the %s backend" % args.backend)
    return runs, notes


def main(argv=None):
    args = parse(argv)
    names = tasks.NAMES if args.task == "all" else _csv(args.task)
    for t in names:
        tasks.get(t)  # fail early on a typo
    runs, notes = plan(args)
    for line in notes:
        print(line)
    base = dict(backend=args.backend, hidden=args.hidden, batch_size=args.batch_size, trainer=args.trainer,
                data=args.data, seed=args.seed, threads=args.threads, n=512, repeats=3, warmup="pass")
    if args.quick:
        base.update(QUICK)
    base.update({k: v for k, v in (("n", args.n), ("repeats", args.repeats)) if v is not None})
    machine = report.machine() + ", threads per run: %s" % (args.threads or "library default")
    print("machine: " + machine)
    if args.data:
        print("data: %s (synthetic where the task has no real data there)" % args.data)

    rounds = max(1, args.rounds)
    records, total, k, t0 = [], len(names) * len(runs) * rounds, 0, time.time()
    for t in names:
        todo = [(fw, s) for fw, s in runs if s != "vertex" or t in vertex_tasks.NAMES]
        if len(todo) < len(runs):
            print("%s: no vertex version of this task (have: %s): skipped" % (t, ", ".join(vertex_tasks.NAMES)))
        per_round = []
        for r in range(rounds):
            recs = []
            for fw, strategy in (todo if r % 2 == 0 else todo[::-1]):
                k += 1
                cfg = dict(base, task=t, framework=fw, strategy=strategy)
                what = fw if fw == "torch" else fw + "/" + strategy
                rec = runner.run_isolated(cfg, "[%d/%d] %s %s" % (k, total, t, what), timeout=args.timeout)
                rec["machine"] = machine
                recs.append(rec)
            per_round.append(sorted(recs, key=lambda x: todo.index((x["framework"], x["strategy"]))))
        recs = report.merge_rounds(per_round) if rounds > 1 else per_round[0]
        records += recs
        if recs:
            print()
            print(report.table(recs, "%s [%s]" % (tasks.get(t).TITLE, t)))
            sys.stdout.flush()
    if records:
        print()
        print(report.FOOTER)
        print("total %.0fs" % (time.time() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
        print("wrote %s (%d records)" % (args.json, len(records)))
    if args.plot:
        err = report.plot(records, args.plot)
        print(err or "wrote %s" % args.plot)
    return 1 if any(r.get("error") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
