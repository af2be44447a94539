"""LSTM language model over variable-length sentences (DyNet benchmark "rnnlm-batch", but
written per sentence and left to the autobatcher). Embedding = hidden size; a softmax over the
full vocabulary (10k) at every token, including the end-of-sentence token."""
from bench import data as _data

TITLE = "RNNLM"
EOS = 0  # bench.data uses id 0 as the sentence boundary / unknown word


def data(n, seed=0, path=None):
    return _data.get("rnnlm", n, seed, path)


class Model:
    def __init__(self, dy, pc, meta, hidden):
        V = meta["n_words"]
        self.E = pc.add_lookup_parameters((V, hidden))
        self.lstm = dy.VanillaLSTMBuilder(1, hidden, hidden, pc)
        self.W = pc.add_parameters((V, hidden))
        self.b = pc.add_parameters((V,))

    def loss(self, dy, sent):
        inputs, targets = [EOS] + list(sent), list(sent) + [EOS]
        hs = self.lstm.initial_state().transduce([dy.lookup(self.E, w) for w in inputs])
        W, b = self.W, self.b  # Parameters used directly
        return dy.esum([dy.pickneglogsoftmax(dy.affine_transform([b, W, h]), t) for h, t in zip(hs, targets)])


def torch_model(meta, hidden):
    import torch
    import torch.nn.functional as F
    from torch import nn

    class TorchLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.E = nn.Embedding(meta["n_words"], hidden)
            self.lstm = nn.LSTM(hidden, hidden)
            self.out = nn.Linear(hidden, meta["n_words"])

        def loss(self, sent):
            inputs, targets = [EOS] + list(sent), list(sent) + [EOS]
            hs, _ = self.lstm(self.E(torch.tensor(inputs))[:, None])
            return F.cross_entropy(self.out(hs[:, 0]), torch.tensor(targets), reduction="sum")

    return TorchLM()
