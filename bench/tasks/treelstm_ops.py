"""The Tree-LSTM of bench/tasks/treelstm.py written the way DyNet's own benchmark programs
write it (neulab/dynet-benchmark, dynet-py/treenn-bulk.py): every gate as an operator
expression ``dy.logistic(b + W * x)``, ``dy.parameter(...)`` called for every parameter at
every tree node, the cell state a chain of ``+``, the per-node loss ``W * h`` without a bias.

DyNet builds each gate as three nodes (product, sum, activation); autobatch's ``+`` takes the
bias into a temporary product (ComputationGraph.absorb_sum), so a gate is one node there, as
with ``affine_transform``. Not in ``--task all``: run it with ``--task treelstm_ops``.
"""
from bench.tasks import treelstm
from bench.tasks.treelstm import data, torch_model  # noqa: F401  (the same data and cell)

TITLE = "Tree-LSTM, operators"


class Model(treelstm.Model):
    """treelstm's parameters (b_out unused), its cell written with operators."""

    def _encode(self, dy, t, out):
        """Returns (h, c) of node t; appends (node, h) for every node to `out`."""
        if t.is_leaf():
            x = self.E[t.word]
            Wi, Wo, Wu = [dy.parameter(w) for w in self.W_iou]
            bi, bo, bu, _ = [dy.parameter(b) for b in self.b]
            i = dy.logistic(bi + Wi * x)
            o = dy.logistic(bo + Wo * x)
            u = dy.tanh(bu + Wu * x)
            c = dy.cmult(i, u)
        else:
            hl, cl = self._encode(dy, t.left, out)
            hr, cr = self._encode(dy, t.right, out)
            Ui, Uo, Uu = [dy.parameter(u) for u in self.U_iou]
            Ufl, Ufr = [dy.parameter(u) for u in self.U_f]
            bi, bo, bu, bf = [dy.parameter(b) for b in self.b]
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

    def _scores(self, dy, h):
        return dy.parameter(self.W_out) * h
