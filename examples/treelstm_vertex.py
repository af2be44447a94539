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
from bench import data
from bench.tasks.treelstm import Model


def tree_cell(dy, m):
    """The bench Tree-LSTM (bench/tasks/treelstm.py) as a vertex function over m's parameters."""
    (Wi, Wo, Wu), (Ui, Uo, Uu), (Ufl, Ufr), (bi, bo, bu, bf) = m.W_iou, m.U_iou, m.U_f, m.b

    @dy.vertex_function(max_children=2)
    def cell(v):
        if v.is_leaf:
            x = m.E[v.pull("word")]
            i = dy.logistic(dy.affine_transform([bi, Wi, x]))
            o = dy.logistic(dy.affine_transform([bo, Wo, x]))
            u = dy.tanh(dy.affine_transform([bu, Wu, x]))
            c = dy.cmult(i, u)
        else:
            (hl, cl), (hr, cr) = v.gather(0), v.gather(1)     # what the children scattered
            x = dy.concatenate([hl, hr])
            i = dy.logistic(dy.affine_transform([bi, Ui, x]))
            o = dy.logistic(dy.affine_transform([bo, Uo, x]))
            u = dy.tanh(dy.affine_transform([bu, Uu, x]))
            fl = dy.logistic(dy.affine_transform([bf, Ufl, hl]))
            fr = dy.logistic(dy.affine_transform([bf, Ufr, hr]))
            c = dy.esum([dy.cmult(i, u), dy.cmult(fl, cl), dy.cmult(fr, cr)])
        h = dy.cmult(o, dy.tanh(c))
        v.scatter(h, c)                                       # what the parent gathers
        v.push("h", h)
        v.push("loss", dy.pickneglogsoftmax(dy.affine_transform([m.b_out, m.W_out, h]), v.pull("label")))

    return cell


def graph_of(dy, tree):
    """A bench Tree as data: child lists (post-order: the root is the last vertex), words, labels."""
    nodes = tree.nodes()
    idx = {id(n): k for k, n in enumerate(nodes)}
    kids = [[] if n.is_leaf() else [idx[id(n.left)], idx[id(n.right)]] for n in nodes]
    return dy.InputGraph(kids), [n.word or 0 for n in nodes], [n.label for n in nodes]


def main(argv=None):
    ap = _common.parser(__doc__, epochs=6, hidden=64, batch_size=32)
    ap.add_argument("--n-train", type=int, default=1000)
    ap.add_argument("--n-dev", type=int, default=200)
    args = ap.parse_args(argv)
    if args.dynet:
        raise SystemExit("the vertex-function front end is autobatch's own: run without --dynet")
    fw = _common.framework(args)
    dy = fw.dy

    if args.train:
        train, meta = data.load_sst(args.train)
        dev = data.load_sst(args.dev, meta["vocab"])[0] if args.dev else train[-args.n_dev:]
        train = train if args.dev else train[:-args.n_dev]
    else:
        trees, meta = data.synthetic_sst(args.n_train + args.n_dev, seed=args.seed)
        train, dev = trees[:args.n_train], trees[args.n_train:]
    labels = np.bincount([t.label for t in train], minlength=5)
    majority = np.mean([t.label == labels.argmax() for t in dev])

    pc = dy.ParameterCollection()
    model = Model(dy, pc, meta, args.hidden)
    cell = tree_cell(dy, model)
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
