"""Tree-FC: one fully connected layer per vertex of a complete binary tree with 256 leaves.

h_leaf = embedding(word);  h_v = tanh(W [h_left; h_right] + b);  one softmax loss at the root.
Every internal vertex runs the same op, so an ideal batcher needs only one batch per tree level
(8 levels), while unbatched execution launches 255 matrix products per tree.
"""
from bench import data as _data

TITLE = "Tree-FC"


def data(n, seed=0, path=None):
    return _data.get("treefc", n, seed, path)  # synthetic only: no real data has this shape


class Model:
    def __init__(self, dy, pc, meta, hidden):
        H = hidden
        self.E = pc.add_lookup_parameters((meta["n_words"], H))
        self.W = pc.add_parameters((H, 2 * H))
        self.b = pc.add_parameters((H,))
        self.W_out = pc.add_parameters((meta["n_labels"], H))
        self.b_out = pc.add_parameters((meta["n_labels"],))

    def _rep(self, dy, words, lo, hi, W, b):
        """Recursive over the span [lo, hi) of leaves, the way one writes it for one tree."""
        if hi - lo == 1:
            return dy.lookup(self.E, words[lo])
        mid = (lo + hi) // 2
        x = dy.concatenate([self._rep(dy, words, lo, mid, W, b), self._rep(dy, words, mid, hi, W, b)])
        return dy.tanh(dy.affine_transform([b, W, x]))

    def root_scores(self, dy, inst):
        words, _ = inst
        h = self._rep(dy, words, 0, len(words), self.W, self.b)  # Parameters used directly
        return dy.affine_transform([self.b_out, self.W_out, h])

    def loss(self, dy, inst):
        return dy.pickneglogsoftmax(self.root_scores(dy, inst), inst[1])


def torch_model(meta, hidden):
    import torch
    import torch.nn.functional as F
    from torch import nn

    class TorchTreeFC(nn.Module):
        def __init__(self):
            super().__init__()
            self.E = nn.Embedding(meta["n_words"], hidden)
            self.fc = nn.Linear(2 * hidden, hidden)
            self.out = nn.Linear(hidden, meta["n_labels"])

        def _rep(self, embs, lo, hi):
            if hi - lo == 1:
                return embs[lo]
            mid = (lo + hi) // 2
            return torch.tanh(self.fc(torch.cat([self._rep(embs, lo, mid), self._rep(embs, mid, hi)])))

        def loss(self, inst):
            words, label = inst
            embs = self.E(torch.tensor(words))  # one lookup per tree
            logits = self.out(self._rep(embs, 0, len(words)))
            return F.cross_entropy(logits[None], torch.tensor([label]), reduction="sum")

    return TorchTreeFC()
