"""The Tree-LSTM of bench/tasks/treelstm.py written the way DyNet's own benchmark programs
write it (neulab/dynet-benchmark, dynet-py/treenn-bulk.py): every gate as an operator
expression ``dy.logistic(b + W * x)``, ``dy.parameter(...)`` called for every parameter at
every tree node, the cell state a chain of ``+``, the per-node loss ``W * h`` without a bias.

DyNet builds each gate as three nodes (product, sum, activation); autobatch's ``+`` takes the
bias into a temporary product (ComputationGraph.absorb_sum), so a gate is one node there, as
with ``affine_transform``. Not in ``--task all``: run it with ``--task treelstm_ops``.
"""
from bench import data as _data
from bench.tasks.treelstm import torch_model  # noqa: F401  (the same cell; its loss has a bias)

TITLE = "Tree-LSTM, operators"


def data(n, seed=0, path=None):
    return _data.get("treelstm", n, seed, path)


class Model:
    def __init__(self, dy, pc, meta, hidden, emb=None):
        H, E = hidden, emb or hidden
        self.E = pc.add_lookup_parameters((meta["n_words"], E))
        self.WS = [pc.add_parameters((H, E)) for _ in "iou"]        # leaf gates
        self.US = [pc.add_parameters((H, 2 * H)) for _ in "iou"]    # internal gates
        self.UFS = [pc.add_parameters((H, H)) for _ in "lr"]        # forget gate per child
        self.BS = [pc.add_parameters((H,)) for _ in "iouf"]
        self.W_out = pc.add_parameters((meta["n_labels"], H))

    def _encode(self, dy, t, out):
        """Returns (h, c) of node t; appends (node, h) for every node to `out`."""
        if t.is_leaf():
            x = self.E[t.word]
            Wi, Wo, Wu = [dy.parameter(w) for w in self.WS]
            bi, bo, bu, _ = [dy.parameter(b) for b in self.BS]
            i = dy.logistic(bi + Wi * x)
            o = dy.logistic(bo + Wo * x)
            u = dy.tanh(bu + Wu * x)
            c = dy.cmult(i, u)
        else:
            hl, cl = self._encode(dy, t.left, out)
            hr, cr = self._encode(dy, t.right, out)
            Ui, Uo, Uu = [dy.parameter(u) for u in self.US]
            Ufl, Ufr = [dy.parameter(u) for u in self.UFS]
            bi, bo, bu, bf = [dy.parameter(b) for b in self.BS]
            x = dy.concatenate([hl, hr])
            i = dy.logistic(bi + Ui * x)
            o = dy.logistic(bo + Uo * x)
            fl = dy.logistic(bf + Ufl * hl)
            fr = dy.logistic(bf + Ufr * hr)
            u = dy.tanh(bu + Uu * x)
            c = dy.cmult(i, u) + dy.cmult(fl, cl) + dy.cmult(fr, cr)
        h = dy.cmult(o, dy.tanh(c))
        out.append((t, h))
        return h, c

    def loss(self, dy, tree):
        nodes = []
        self._encode(dy, tree, nodes)
        W = dy.parameter(self.W_out)
        return dy.esum([dy.pickneglogsoftmax(W * h, t.label) for t, h in nodes])

    def root_scores(self, dy, tree):
        h, _ = self._encode(dy, tree, [])
        return dy.parameter(self.W_out) * h
