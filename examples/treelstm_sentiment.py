"""Tree-LSTM sentiment classification on SST-style trees, autobatched.

Each tree is built as its own little graph (recursion over the tree, a loss at every node);
autobatch groups the same cell across all trees of a minibatch into batched NumPy kernels.

    python examples/treelstm_sentiment.py                       # synthetic SST-like trees
    python examples/treelstm_sentiment.py --train ../shared/data/sst/dev.txt --autobatch depth
"""
import random
import time

import numpy as np

import _common
from bench import data
from bench.tasks.treelstm import Model


def sst_data(args):
    """(train, dev, meta, majority-class dev accuracy) from --train/--dev or synthetic trees."""
    if args.train:
        train, meta = data.load_sst(args.train)
        dev = data.load_sst(args.dev, meta["vocab"])[0] if args.dev else train[-args.n_dev:]
        train = train if args.dev else train[:-args.n_dev]
    else:
        trees, meta = data.synthetic_sst(args.n_train + args.n_dev, seed=args.seed)
        train, dev = trees[:args.n_train], trees[args.n_train:]
    labels = np.bincount([t.label for t in train], minlength=5)
    return train, dev, meta, np.mean([t.label == labels.argmax() for t in dev])


def main(argv=None):
    ap = _common.parser(__doc__, epochs=6, hidden=64, batch_size=32)
    ap.add_argument("--n-train", type=int, default=1000)
    ap.add_argument("--n-dev", type=int, default=200)
    args = ap.parse_args(argv)
    fw = _common.framework(args)
    dy = fw.dy

    train, dev, meta, majority = sst_data(args)

    pc = dy.ParameterCollection()
    model = Model(dy, pc, meta, args.hidden)
    trainer = dy.AdamTrainer(pc, 0.005)  # alpha: faster than the 0.001 default on small data
    rng = random.Random(args.seed)
    history = []
    for epoch in range(1, args.epochs + 1):
        t0, total, nodes = time.time(), 0.0, 0
        rng.shuffle(train)
        for batch in _common.minibatches(train, args.batch_size):
            fw.renew()
            loss = dy.esum([model.loss(dy, tree) for tree in batch])  # one graph per tree
            total += loss.value()
            nodes += sum(len(t.nodes()) for t in batch)
            loss.backward()
            trainer.update()
        correct = 0
        for batch in _common.minibatches(dev, 100):
            fw.renew()
            scores = [model.root_scores(dy, tree) for tree in batch]
            dy.esum(scores).value()  # one forward computes every tree's scores, batched
            correct += sum(int(np.argmax(s.npvalue()) == t.label) for s, t in zip(scores, batch))
        acc = correct / len(dev)
        history.append((total / nodes, acc))
        print("epoch %d  loss/node %.3f  dev root accuracy %.3f  (majority %.3f)  %.1fs"
              % (epoch, total / nodes, acc, majority, time.time() - t0), flush=True)
    return history, majority


if __name__ == "__main__":
    main()
