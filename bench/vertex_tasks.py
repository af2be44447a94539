"""The bench tasks written for the vertex-function front end (``--strategy vertex``).

Each class wraps the task's lazy `Model` (bench/tasks/<name>.py) and uses ITS parameters, so
the two front ends compute the same function and `check_vs_lazy` can compare them:

    VertexModel(dy, model, meta)     model: the lazy bench Model of the same task
    .batch_loss(dy, batch) -> Expression   the summed loss of a minibatch (one call of F, or
                                           a few, per minibatch instead of one graph per instance)

The structure of each instance becomes a dy.InputGraph; per-vertex data (word ids, labels)
becomes named inputs that F pulls.
"""
from functools import lru_cache

import numpy as np

NAMES = ["treelstm", "treefc", "rnnlm", "bilstm", "bilstm_char"]


def get(name):
    try:
        return {"treelstm": TreeLSTM, "treefc": TreeFC, "rnnlm": RNNLM, "bilstm": BiLSTM,
                "bilstm_char": BiLSTMChar}[name]
    except KeyError:
        raise ValueError("no vertex version of task %r (have: %s)" % (name, ", ".join(NAMES))) from None


# ---------------------------------------------------------------- Tree-LSTM
class TreeLSTM:
    """Leaf and internal cells exactly as bench/tasks/treelstm.py; a loss at every node."""

    def __init__(self, dy, m, meta):
        (Wi, Wo, Wu), (Ui, Uo, Uu), (Ufl, Ufr), (bi, bo, bu, bf) = m.W_iou, m.U_iou, m.U_f, m.b
        E, W_out, b_out = m.E, m.W_out, m.b_out

        @dy.vertex_function(max_children=2)
        def cell(v):
            if v.is_leaf:
                x = E[v.pull("word")]
                i = dy.logistic(dy.affine_transform([bi, Wi, x]))
                o = dy.logistic(dy.affine_transform([bo, Wo, x]))
                u = dy.tanh(dy.affine_transform([bu, Wu, x]))
                c = dy.cmult(i, u)
            else:
                (hl, cl), (hr, cr) = v.gather(0), v.gather(1)
                x = dy.concatenate([hl, hr])
                i = dy.logistic(dy.affine_transform([bi, Ui, x]))
                o = dy.logistic(dy.affine_transform([bo, Uo, x]))
                u = dy.tanh(dy.affine_transform([bu, Uu, x]))
                fl = dy.logistic(dy.affine_transform([bf, Ufl, hl]))
                fr = dy.logistic(dy.affine_transform([bf, Ufr, hr]))
                c = dy.esum([dy.cmult(i, u), dy.cmult(fl, cl), dy.cmult(fr, cr)])
            h = dy.cmult(o, dy.tanh(c))
            v.scatter(h, c)
            v.push("h", h)          # for predictions (examples/treelstm_vertex.py)
            v.push("loss", dy.pickneglogsoftmax(dy.affine_transform([b_out, W_out, h]), v.pull("label")))

        self.cell = cell

    @staticmethod
    def graph(dy, tree):
        """InputGraph of a bench Tree (post-order vertices, as Tree.nodes()), its word ids and
        labels."""
        kids, words, labels = TreeLSTM._walk([tree])
        return dy.InputGraph(kids), words, labels

    @staticmethod
    def _walk(trees):
        """(kids, words, labels) of the trees' vertices, tree after tree, each in post-order:
        kids[v] = v's children as indices into kids (a leaf's is the shared ()), numbered as
        they are emitted. A recursion (trees are a few dozen levels deep) allocates less than
        a stack of (node, done) pairs: 0.36 vs 0.60 ms per 64 trees."""
        kids, words, labels = [], [], []

        def walk(t):
            if t.left is None:
                kids.append(())
            else:
                a = walk(t.left)
                kids.append([a, walk(t.right)])
            words.append(t.word or 0)
            labels.append(t.label)
            return len(kids) - 1
        for t in trees:
            walk(t)
        return kids, words, labels

    def batch_loss(self, dy, batch):
        # one InputGraph per tree, as the user writes it (ONE forest graph per
        # minibatch, self._walk(batch), builds ~1 ms per 256 trees faster: not used, so the
        # bench measures the usual call)
        gs, words, labels = zip(*[self.graph(dy, t) for t in batch])
        out = self.cell(list(gs), word=list(words), label=list(labels))
        return dy.sum_elems(out["loss"])


# ---------------------------------------------------------------- Tree-FC
@lru_cache(maxsize=8)
def _complete(n):
    """Child lists of the lazy model's recursion over n leaves (leaves are vertices 0..n-1),
    and the root's index."""
    kids = [[] for _ in range(n)]

    def rep(lo, hi):
        if hi - lo == 1:
            return lo
        mid = (lo + hi) // 2
        left, right = rep(lo, mid), rep(mid, hi)
        kids.append([left, right])
        return len(kids) - 1
    root = rep(0, n)
    return kids, root


class TreeFC:
    """h_leaf = E[w]; h = tanh(W[h_l; h_r] + b); a loss at the root only (kind 1)."""

    def __init__(self, dy, m, meta):
        E, W, b, W_out, b_out = m.E, m.W, m.b, m.W_out, m.b_out

        @dy.vertex_function(max_children=2)
        def node(v):
            if v.is_leaf:
                h = E[v.pull("word")]
            else:
                hl, hr = v.gather(0), v.gather(1)
                h = dy.tanh(dy.affine_transform([b, W, dy.concatenate([hl, hr])]))
            v.scatter(h)
            if v.kind == 1:
                v.push("loss", dy.pickneglogsoftmax(dy.affine_transform([b_out, W_out, h]), v.pull("label")))

        self.node = node
        self._graphs = {}

    def batch_loss(self, dy, batch):
        n = len(batch[0][0])
        g = self._graphs.get(n)
        if g is None:                       # every instance has the same structure: build it once
            kids, root = _complete(n)
            kind = np.zeros(len(kids), dtype=np.int64)
            kind[root] = 1
            g = self._graphs[n] = (dy.InputGraph(kids), kind, root, len(kids))
        graph, kind, root, V = g
        words = np.zeros((len(batch), V), dtype=np.int64)
        labels = np.zeros((len(batch), V), dtype=np.int64)
        for k, (ws, y) in enumerate(batch):
            words[k, :n] = ws
            labels[k, root] = y
        out = self.node([graph] * len(batch), kind=np.tile(kind, len(batch)),
                        word=words.reshape(-1), label=labels.reshape(-1))
        return dy.sum_elems(out["loss"])


# ---------------------------------------------------------------- LSTM chains
def lstm_chain(dy, builder, pull="x", lookup=None, x_of=None):
    """A vertex function for one layer of a bench VanillaLSTMBuilder: vertex t gathers step t-1.
    Its input is lookup[v.pull(pull)], or v.pull(pull) without a lookup, or x_of(v).

    W_x·x is written as its own affine so that it does not depend on gather: the engine then
    runs it once over every token of the call (lazy batching) instead of once per step; the
    result equals the builder's b + W_x·x + W_h·h up to float rounding. The gates are the
    builder's own fused cell (dy.lstm_cell with its forget bias), one instruction per step."""
    Wx, Wh, b = builder.get_parameters()[0]
    H, fb = builder.hidden_dim, builder.forget_bias

    @dy.vertex_function(max_children=1)
    def step(v):
        if x_of is not None:
            x = x_of(v)
        else:
            x = lookup[v.pull(pull)] if lookup is not None else v.pull(pull)
        a = dy.affine_transform([b, Wx, x])
        if v.is_leaf:
            y = dy.lstm_cell(a, None, fb)              # the builder's own fused cell: [h; c]
        else:
            h0, c0 = v.gather(0)
            y = dy.lstm_cell(a + Wh * h0, c0, fb)
        h, c = dy.pickrange(y, 0, H), dy.pickrange(y, H, 2 * H)
        v.scatter(h, c)
        v.push("h", h)

    return step


class RNNLM:
    """One chain per sentence over [EOS] + words; a softmax loss at every step."""

    def __init__(self, dy, m, meta):
        self.m = m
        self.step = lstm_chain(dy, m.lstm, pull="word", lookup=m.E)
        W, b = m.W, m.b

        @dy.vertex_function(max_children=0)
        def out(v):
            v.push("loss", dy.pickneglogsoftmax(dy.affine_transform([b, W, v.pull("h")]), v.pull("target")))

        self.out = out

    def batch_loss(self, dy, batch):
        from bench.tasks.rnnlm import EOS
        gs, words, targets = [], [], []
        for sent in batch:
            gs.append(dy.InputGraph.chain(len(sent) + 1))
            words.append([EOS] + list(sent))
            targets.append(list(sent) + [EOS])
        hs = self.step(gs, word=words)["h"]
        flat = [dy.InputGraph([[]] * len(w)) for w in words]
        return dy.sum_elems(self.out(flat, h=hs, target=targets)["loss"])


class BiLSTM:
    """Two chains (forward, backward) over the word embeddings, then the MLP and loss as a
    third vertex function without edges that pulls both chains' outputs (lazy Expressions)."""

    def __init__(self, dy, m, meta):
        self.m = m
        self.fwd = lstm_chain(dy, m.fwd, pull="word", lookup=m.E)
        self.bwd = lstm_chain(dy, m.bwd, pull="word", lookup=m.E)
        self.mlp = self.mlp_function(dy, m)

    @staticmethod
    def mlp_function(dy, m):
        W_h, b_h, W_o, b_o = m.W_h, m.b_h, m.W_o, m.b_o

        @dy.vertex_function(max_children=0)
        def mlp(v):
            x = dy.concatenate([v.pull("f"), v.pull("b")])
            s = dy.affine_transform([b_o, W_o, dy.tanh(dy.affine_transform([b_h, W_h, x]))])
            v.push("loss", dy.pickneglogsoftmax(s, v.pull("tag")))

        return mlp

    def batch_loss(self, dy, batch):
        vocab = self.m.vocab
        fg, bg, flat, words, tags = [], [], [], [], []
        for ws, ts in batch:
            n = len(ws)
            fg.append(dy.InputGraph.chain(n))
            bg.append(dy.InputGraph([[t + 1] for t in range(n - 1)] + [[]]))   # reads right to left
            flat.append(dy.InputGraph([[]] * n))
            words.append([vocab.get(w) for w in ws])
            tags.append(list(ts))
        f = self.fwd(fg, word=words)["h"]
        b = self.bwd(bg, word=words)["h"]
        return dy.sum_elems(self.mlp(flat, f=f, b=b, tag=tags)["loss"])


class BiLSTMChar(BiLSTM):
    """The tagger whose rare words are read by a char BiLSTM: one call per char direction
    over the char chains of every rare token of the minibatch, their final states become a
    lazy (n_rare, 128) Expression, and the word chains pull a row of it for rare tokens
    (kind 1) and look up the word embedding for the others (kind 0)."""

    def __init__(self, dy, m, meta):
        self.m = m
        self.cf = lstm_chain(dy, m.cfwd, pull="char", lookup=m.C)
        self.cb = lstm_chain(dy, m.cbwd, pull="char", lookup=m.C)

        def x_of(v):
            return m.E[v.pull("word")] if v.kind == 0 else v.pull("crep")

        self.fwd = lstm_chain(dy, m.fwd, x_of=x_of)
        self.bwd = lstm_chain(dy, m.bwd, x_of=x_of)
        self.mlp = self.mlp_function(dy, m)

    def _char_reps(self, dy, batch):
        """(n_rare, 128) Expression of [char fwd final; char bwd final] per rare token, in
        token order; None when no token is rare."""
        from bench.tasks.bilstm_char import RARE
        m = self.m
        pad = m.chars.get("<w>")
        fg, bg, cids = [], [], []
        for ws, _ in batch:
            for w in ws:
                if m.counts.get(w, 0) < RARE:
                    cs = [pad] + [m.chars.get(ch) for ch in w] + [pad]
                    fg.append(dy.InputGraph.chain(len(cs)))
                    bg.append(dy.InputGraph([[t + 1] for t in range(len(cs) - 1)] + [[]]))
                    cids.append(cs)
        if not cids:
            return None
        ends = np.cumsum([len(c) for c in cids])
        f = dy.select_rows(self.cf(fg, char=cids)["h"], [int(e) - 1 for e in ends])      # last char
        b = dy.select_rows(self.cb(bg, char=cids)["h"], [0] + [int(e) for e in ends[:-1]])  # first char
        return dy.concatenate([f, b], d=1)

    def batch_loss(self, dy, batch):
        from bench.tasks.bilstm_char import RARE
        m, vocab = self.m, self.m.vocab
        crep = self._char_reps(dy, batch)
        fg, bg, flat, words, tags, kinds, rows = [], [], [], [], [], [], []
        k = 0
        for ws, ts in batch:
            n = len(ws)
            fg.append(dy.InputGraph.chain(n))
            bg.append(dy.InputGraph([[t + 1] for t in range(n - 1)] + [[]]))
            flat.append(dy.InputGraph([[]] * n))
            words.append([vocab.get(w) for w in ws])
            tags.append(list(ts))
            for w in ws:
                rare = m.counts.get(w, 0) < RARE
                kinds.append(int(rare))
                rows.append(k if rare else 0)   # kind-0 vertices do not pull their row
                k += rare
        pulls = dict(word=words)
        if crep is not None:
            pulls["crep"] = dy.select_rows(crep, rows)
        kind = np.asarray(kinds, dtype=np.int64)
        f = self.fwd(fg, kind=kind, **pulls)["h"]
        b = self.bwd(bg, kind=kind, **pulls)["h"]
        return dy.sum_elems(self.mlp(flat, f=f, b=b, tag=tags)["loss"])


# ---------------------------------------------------------------- comparison with the lazy graph
def _params(pc):
    return list(pc.parameters_list()) + list(pc.lookup_parameters_list())


def check_vs_lazy(dy, task_name, model, pc, meta, batch, strategy="agenda"):
    """Max relative difference of the loss and of every parameter gradient between the lazy
    model (`strategy`) and its vertex version on one minibatch. Leaves gradients zeroed."""
    vm = get(task_name)(dy, model, meta)
    ps = _params(pc)
    for p in ps:
        p.zero_grad()
    dy.renew_cg(autobatching=strategy)
    loss = dy.esum([model.loss(dy, x) for x in batch])
    la = loss.value()
    loss.backward()
    ga = [p.grad_as_array().copy() for p in ps]
    for p in ps:
        p.zero_grad()
    dy.renew_cg(autobatching=strategy)
    loss = vm.batch_loss(dy, batch)
    lb = loss.value()
    loss.backward()
    gb = [p.grad_as_array().copy() for p in ps]
    for p in ps:
        p.zero_grad()
    worst = abs(la - lb) / max(abs(la), 1e-30)
    for a, b in zip(ga, gb):
        scale = max(float(np.abs(a).max()) if a.size else 0.0, 1e-30)
        worst = max(worst, float(np.abs(a - b).max()) / scale if a.size else 0.0)
    return worst
