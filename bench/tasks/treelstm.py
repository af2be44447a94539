"""Binary Tree-LSTM sentiment model (DyNet benchmark "treenn-bulk" style).

Leaves and internal nodes run different cells (leaf: gates from the word embedding; internal:
gates from [h_left; h_right] with one forget gate per child), and every node gets a 5-way
pickneglogsoftmax loss -- so a tree of w words makes 2w-1 loss nodes, which is what makes the
task a good batching test: the same cell appears at many depths across and within trees.
"""
from bench import data as _data

TITLE = "Tree-LSTM"


def data(n, seed=0, path=None):
    return _data.get("treelstm", n, seed, path)


class Model:
    def __init__(self, dy, pc, meta, hidden, emb=None):
        H, E = hidden, emb or hidden
        self.E = pc.add_lookup_parameters((meta["n_words"], E))
        self.W_iou = [pc.add_parameters((H, E)) for _ in "iou"]        # leaf gates
        self.U_iou = [pc.add_parameters((H, 2 * H)) for _ in "iou"]    # internal gates
        self.U_f = [pc.add_parameters((H, H)) for _ in "lr"]           # forget gate per child
        self.b = [pc.add_parameters((H,)) for _ in "iouf"]
        self.W_out = pc.add_parameters((meta["n_labels"], H))
        self.b_out = pc.add_parameters((meta["n_labels"],))

    # Parameters go straight into expressions: DyNet >= 2.1 adds them to the graph itself (and
    # warns that dy.parameter() is deprecated); autobatch accepts both.
    def _encode(self, dy, t, out):
        """Returns (h, c) of node t; appends (node, h) for every node to `out`."""
        (Wi, Wo, Wu), (Ui, Uo, Uu), (Ufl, Ufr), (bi, bo, bu, bf) = self.W_iou, self.U_iou, self.U_f, self.b
        if t.is_leaf():
            x = dy.lookup(self.E, t.word)
            i = dy.logistic(dy.affine_transform([bi, Wi, x]))
            o = dy.logistic(dy.affine_transform([bo, Wo, x]))
            u = dy.tanh(dy.affine_transform([bu, Wu, x]))
            c = dy.cmult(i, u)
        else:
            hl, cl = self._encode(dy, t.left, out)
            hr, cr = self._encode(dy, t.right, out)
            x = dy.concatenate([hl, hr])
            i = dy.logistic(dy.affine_transform([bi, Ui, x]))
            o = dy.logistic(dy.affine_transform([bo, Uo, x]))
            u = dy.tanh(dy.affine_transform([bu, Uu, x]))
            fl = dy.logistic(dy.affine_transform([bf, Ufl, hl]))
            fr = dy.logistic(dy.affine_transform([bf, Ufr, hr]))
            c = dy.esum([dy.cmult(i, u), dy.cmult(fl, cl), dy.cmult(fr, cr)])
        h = dy.cmult(o, dy.tanh(c))
        out.append((t, h))
        return h, c

    def _scores(self, dy, h):
        return dy.affine_transform([self.b_out, self.W_out, h])

    def loss(self, dy, tree):
        nodes = []
        self._encode(dy, tree, nodes)
        return dy.esum([dy.pickneglogsoftmax(self._scores(dy, h), t.label) for t, h in nodes])

    def root_scores(self, dy, tree):
        h, _ = self._encode(dy, tree, [])
        return self._scores(dy, h)


def torch_model(meta, hidden, emb=None):
    """Eager PyTorch peer: recursion over one tree at a time, same cell equations."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    H, E = hidden, emb or hidden

    class TorchTreeLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.E = nn.Embedding(meta["n_words"], E)
            self.W_iou = nn.Linear(E, 3 * H)       # leaf gates i, o, u
            self.U_iou = nn.Linear(2 * H, 3 * H)   # internal gates i, o, u
            self.U_fl = nn.Linear(H, H)
            self.U_fr = nn.Linear(H, H, bias=False)  # shares the forget bias with U_fl
            self.out = nn.Linear(H, meta["n_labels"])

        def _encode(self, t, hs, labels):
            if t.is_leaf():
                i, o, u = self.W_iou(self.embs[self.leaf_pos[id(t)]]).chunk(3)
                c = torch.sigmoid(i) * torch.tanh(u)
            else:
                hl, cl = self._encode(t.left, hs, labels)
                hr, cr = self._encode(t.right, hs, labels)
                i, o, u = self.U_iou(torch.cat([hl, hr])).chunk(3)
                fl = torch.sigmoid(self.U_fl(hl))
                fr = torch.sigmoid(self.U_fl.bias + self.U_fr(hr))
                c = torch.sigmoid(i) * torch.tanh(u) + fl * cl + fr * cr
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
            labels.append(t.label)
            return h, c

        def loss(self, tree):
            # one embedding call per tree (per-word calls would each backprop a dense V x E grad)
            leaves = tree.leaves()
            self.leaf_pos = {id(t): k for k, t in enumerate(leaves)}
            self.embs = self.E(torch.tensor([t.word for t in leaves]))
            hs, labels = [], []
            self._encode(tree, hs, labels)
            # a per-instance user stacks the tree's node states for one loss call
            return F.cross_entropy(self.out(torch.stack(hs)), torch.tensor(labels), reduction="sum")

    return TorchTreeLSTM()
