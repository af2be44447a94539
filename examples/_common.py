"""Boilerplate shared by the examples: import path, common flags, choosing the framework."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root: bench/

from bench.frameworks import AUTOBATCH_STRATEGIES, DyFramework  # noqa: E402


def parser(doc, epochs, hidden, batch_size):
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--autobatch", default="agenda", choices=list(AUTOBATCH_STRATEGIES),
                    help="how autobatch groups the per-instance graphs into batches")
    ap.add_argument("--dynet", action="store_true", help="run the same model code on real DyNet instead")
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--hidden", type=int, default=hidden)
    ap.add_argument("--batch-size", type=int, default=batch_size)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train", help="real training data (default: synthetic)")
    ap.add_argument("--dev", help="real dev data (default: held out from --train, or synthetic)")
    return ap


def framework(args):
    """`fw.dy` is the module the model code calls; fw.renew() starts a graph per minibatch."""
    return DyFramework("dynet" if args.dynet else "autobatch", args.autobatch, seed=args.seed)


def minibatches(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]
