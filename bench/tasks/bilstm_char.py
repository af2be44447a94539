"""BiLSTM tagger with character BiLSTM (DyNet benchmark "bilstm-tagger-withchar").

Words seen fewer than 5 times are represented by a char BiLSTM (char embeddings 20, 64 units
each way -> 128, the size of a word embedding) instead of their word embedding."""
from bench import data as _data
from bench.tasks import bilstm

TITLE = "BiLSTM tagger + chars"
CEMB, RARE = 20, 5


def data(n, seed=0, path=None):
    return _data.get("bilstm_char", n, seed, path)


class Model(bilstm.Model):
    def __init__(self, dy, pc, meta, hidden):
        super().__init__(dy, pc, meta, hidden)
        self.counts, self.chars = meta["counts"], meta["chars"]
        self.C = pc.add_lookup_parameters((len(self.chars), CEMB))
        self.cfwd = dy.VanillaLSTMBuilder(1, CEMB, bilstm.WEMB // 2, pc)
        self.cbwd = dy.VanillaLSTMBuilder(1, CEMB, bilstm.WEMB // 2, pc)

    def new_state(self, dy):
        return self.cfwd.initial_state(), self.cbwd.initial_state()

    def word_rep(self, dy, w, state):
        if self.counts.get(w, 0) >= RARE:
            return dy.lookup(self.E, self.vocab.get(w))
        pad = self.chars.get("<w>")
        cs = [dy.lookup(self.C, c) for c in [pad] + [self.chars.get(ch) for ch in w] + [pad]]
        f0, b0 = state
        return dy.concatenate([f0.transduce(cs)[-1], b0.transduce(cs[::-1])[-1]])


def torch_model(meta, hidden):
    return bilstm.torch_model(meta, hidden, char=True)
