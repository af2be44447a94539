"""Tree-LSTM sentiment classification through the vertex-function front end (Cavs style).

The cell is declared ONCE as a vertex function F; each tree's structure is data (a
dy.InputGraph), its words and labels are named inputs that F pulls. A call runs F over all
trees of the minibatch frontier by frontier, as one node of the lazy graph: the pushed
losses and states come back as ordinary Expressions.

    python examples/treelstm_vertex.py                # synthetic SST-like trees
    python examples/treelstm_vertex.py --train ../shared/data/sst/dev.txt
"""
import random
import time

import numpy as np

import _common
from bench.tasks.treelstm import Model
from bench.vertex_tasks import TreeLSTM   # the cell, declared once as a vertex function
from treelstm_sentiment import sst_data


def main(argv=None):
    ap = _common.parser(__doc__, epochs=6, hidden=64, batch_size=32)
    ap.add_argument("--n-train", type=int, default=1000)
    ap.add_argument("--n-dev", type=int, default=200)
    args = ap.parse_args(argv)
    if args.dynet:
        raise SystemExit("the vertex-function front end is autobatch's own: run without --dynet")
    fw = _common.framework(args)
    dy = fw.dy

    train, dev, meta, majority = sst_data(args)

    pc = dy.ParameterCollection()
    model = Model(dy, pc, meta, args.hidden)
    vertex_model = TreeLSTM(dy, model, meta)
    cell, graph_of = vertex_model.cell, vertex_model.graph
    trainer = dy.AdamTrainer(pc, 0.005)
    rng = random.Random(args.seed)
    history = []
    for epoch in range(1, args.epochs + 1):
        t0, total, nodes = time.time(), 0.0, 0
        rng.shuffle(train)
        for batch in _common.minibatches(train, args.batch_size):
            fw.renew()
            gs, words, labs = zip(*[graph_of(dy, t) for t in batch])
            out = cell(list(gs), word=list(words), label=list(labs))
            loss = dy.sum_elems(out["loss"])                  # every node's loss, no Python loop
            total += loss.value()
            nodes += sum(g.n for g in gs)
            loss.backward()
            trainer.update()
        correct = 0
        for batch in _common.minibatches(dev, 100):
            fw.renew()
            gs, words, labs = zip(*[graph_of(dy, t) for t in batch])
            out = cell(list(gs), word=list(words), label=list(labs))
            # the roots' states go on in the lazy graph: one affine per tree, batched
            scores = [dy.affine_transform([model.b_out, model.W_out, out.vertex("h", k, g.n - 1)])
                      for k, g in enumerate(gs)]
            dy.esum(scores).value()
            correct += sum(int(np.argmax(s.npvalue()) == t.label) for s, t in zip(scores, batch))
        acc = correct / len(dev)
        history.append((total / nodes, acc))
        print("epoch %d  loss/node %.3f  dev root accuracy %.3f  (majority %.3f)  %.1fs"
              % (epoch, total / nodes, acc, majority, time.time() - t0), flush=True)
    return history, majority


if __name__ == "__main__":
    main()
