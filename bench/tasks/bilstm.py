"""BiLSTM tagger (DyNet benchmark "bilstm-tagger"): word embeddings 128, one BiLSTM layer of
`hidden` units each way, an MLP of 32 tanh units, softmax over the tags at every word."""
from bench import data as _data

TITLE = "BiLSTM tagger"
WEMB, MLP = 128, 32


def data(n, seed=0, path=None):
    return _data.get("bilstm", n, seed, path)


class Model:
    def __init__(self, dy, pc, meta, hidden):
        self.vocab = meta["vocab"]
        self.E = pc.add_lookup_parameters((len(self.vocab), WEMB))
        self.fwd = dy.VanillaLSTMBuilder(1, WEMB, hidden, pc)
        self.bwd = dy.VanillaLSTMBuilder(1, WEMB, hidden, pc)
        self.W_h = pc.add_parameters((MLP, 2 * hidden))
        self.b_h = pc.add_parameters((MLP,))
        self.W_o = pc.add_parameters((meta["n_tags"], MLP))
        self.b_o = pc.add_parameters((meta["n_tags"],))

    def word_rep(self, dy, w, state):
        return dy.lookup(self.E, self.vocab.get(w))

    def new_state(self, dy):
        """Per-sentence state shared by word_rep calls (the char model puts its LSTMs here)."""
        return None

    def scores(self, dy, words):
        state = self.new_state(dy)
        xs = [self.word_rep(dy, w, state) for w in words]
        fs = self.fwd.initial_state().transduce(xs)
        bs = self.bwd.initial_state().transduce(xs[::-1])[::-1]
        W_h, b_h, W_o, b_o = self.W_h, self.b_h, self.W_o, self.b_o  # Parameters used directly
        return [dy.affine_transform([b_o, W_o, dy.tanh(dy.affine_transform([b_h, W_h, dy.concatenate([f, b])]))])
                for f, b in zip(fs, bs)]

    def loss(self, dy, inst):
        words, tags = inst
        return dy.esum([dy.pickneglogsoftmax(s, t) for s, t in zip(self.scores(dy, words), tags)])


def torch_model(meta, hidden, char=False):
    """Eager PyTorch peer: nn.LSTM over one sentence at a time (batch of 1)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    vocab, counts, chars = meta["vocab"], meta["counts"], meta["chars"]

    class TorchTagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.E = nn.Embedding(len(vocab), WEMB)
            self.lstm = nn.LSTM(WEMB, hidden, bidirectional=True)
            self.mlp = nn.Linear(2 * hidden, MLP)
            self.out = nn.Linear(MLP, meta["n_tags"])
            if char:
                self.C = nn.Embedding(len(chars), 20)
                self.clstm = nn.LSTM(20, WEMB // 2, bidirectional=True)

        def _char_rep(self, w):
            pad = chars.get("<w>")
            ids = torch.tensor([pad] + [chars.get(c) for c in w] + [pad])
            _, (h, _) = self.clstm(self.C(ids)[:, None])   # h: (2 directions, 1, 64)
            return h.reshape(-1)

        def loss(self, inst):
            words, tags = inst
            xs = self.E(torch.tensor([vocab.get(w) for w in words]))
            if char:
                rare = [k for k, w in enumerate(words) if counts.get(w, 0) < 5]
                if rare:
                    xs = xs.clone()
                    xs[rare] = torch.stack([self._char_rep(words[k]) for k in rare])
            hs, _ = self.lstm(xs[:, None])
            logits = self.out(torch.tanh(self.mlp(hs[:, 0])))
            return F.cross_entropy(logits, torch.tensor(tags), reduction="sum")

    return TorchTagger()
