"""Arc-hybrid transition-based dependency parser (Kiperwasser & Goldberg 2016): BiLSTM features of
s0, s1, s2, b0 -> MLP -> scores of SHIFT / LEFT / RIGHT, trained with a hinge loss and the dynamic
oracle of Goldberg & Nivre (2013): the next transition is the model's OWN best valid choice, so the
graph cannot be built without reading scores mid-way (one npvalue() per transition).

The model is written per sentence against a `dy` argument (autobatch or real DyNet). With autobatch,
`batch_losses` runs the sentences of a minibatch under `dy.batched_map`, which batches their value
reads: about 2*max_len forward rounds per minibatch instead of 2*sum(len). The task `parser_seq`
is the same model run sentence by sentence (what DyNet must do).

Data: seeded synthetic projective trees by default (POS-driven attachment preferences, so the
parser can learn), CoNLL-U via `path` (non-projective sentences are dropped).
"""
import numpy as np

from bench import data as _data

TITLE = "Arc-hybrid parser, batched_map"
WEMB, PEMB, MLP = 64, 16, 100
SHIFT, LEFT, RIGHT = 0, 1, 2
N_POS = 12


# ---------------------------------------------------------------- data
def synthetic_trees(n, seed=0, n_words=3000, mean_len=16, max_len=45):
    """Projective trees: each POS prefers a head POS and a side, words are Zipf within their POS.

    Nodes attach one by one to an earlier node (mostly the latest one of the preferred head POS);
    each node's left and right dependents are kept in creation order, and the sentence is the
    in-order walk, so every subtree is contiguous (projective)."""
    rng = np.random.default_rng(seed)
    head_pos = rng.integers(0, N_POS, size=N_POS)      # preferred head POS of each POS
    side = rng.random(N_POS) < 0.5                       # preferred side (True: left of its head)
    per = n_words // N_POS
    zipf = _data.zipf_probs(per)
    sents = []
    for L in _data.lengths(rng, n, mean_len, 3, max_len):
        pos = [int(rng.integers(N_POS))]
        heads, left, right = [-1], [[]], [[]]
        for k in range(1, L):
            p = int(rng.integers(N_POS))
            cands = [j for j in range(k) if pos[j] == head_pos[p]]
            h = cands[-1] if cands and rng.random() < 0.85 else int(rng.integers(k))  # the latest one
            to_left = side[p] if rng.random() < 0.9 else not side[p]
            (left if to_left else right)[h].append(k)
            pos.append(p)
            heads.append(h)
            left.append([])
            right.append([])
        order = []

        def walk(j):
            for d in reversed(left[j]):
                walk(d)
            order.append(j)
            for d in right[j]:
                walk(d)
        walk(0)
        place = {j: i + 1 for i, j in enumerate(order)}  # node -> 1-based position
        words = [1 + pos[j] * per + int(rng.choice(per, p=zipf)) for j in order]
        tags = [pos[j] for j in order]
        gold = [0 if heads[j] < 0 else place[heads[j]] for j in order]
        sents.append((["w%d" % w for w in words], ["P%d" % t for t in tags], gold))
    return sents


def is_projective(heads):
    arcs = [(min(h, d), max(h, d)) for d, h in enumerate(heads, 1)]
    return not any(a < c < b < e for a, b in arcs for c, e in arcs)


def load_conllu(path):
    """(words, UPOS tags, heads) per sentence; skips multiword ranges, empty nodes and comments."""
    sents, cur = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                if cur:
                    sents.append(cur)
                cur = []
            elif not line.startswith("#"):
                c = line.split("\t")
                if len(c) >= 7 and c[0].isdigit():
                    cur.append((c[1], c[3], int(c[6])))
    if cur:
        sents.append(cur)
    return [([w for w, _, _ in s], [p for _, p, _ in s], [h for _, _, h in s]) for s in sents]


def index(sents):
    """Instances (word ids, POS ids, heads) and the vocabularies (id 0: unknown)."""
    wv = _data.Vocab(sorted({w for ws, _, _ in sents for w in ws}))
    pv = _data.Vocab(sorted({p for _, ps, _ in sents for p in ps}))
    insts = [(tuple(wv.get(w) for w in ws), tuple(pv.get(p) for p in ps), tuple(hs)) for ws, ps, hs in sents]
    return insts, {"n_words": len(wv), "n_pos": len(pv), "vocab": wv, "pos": pv}


def data(n, seed=0, path=None):
    if path:
        sents = [s for s in load_conllu(path) if is_projective(s[2])]
        sents = [sents[i % len(sents)] for i in range(n)]
    else:
        sents = synthetic_trees(n, seed=seed)
    return index(sents)


# ---------------------------------------------------------------- the transition system
class Config:
    """Stack (root 0 at the bottom), buffer = tokens b..n, predicted heads."""

    def __init__(self, n):
        self.n, self.stack, self.b, self.heads = n, [0], 1, [None] * (n + 1)

    def done(self):
        return self.b > self.n and len(self.stack) == 1

    def valid(self):
        st, buf = self.stack, self.b <= self.n
        return [buf, buf and st[-1] != 0, len(st) >= 2]

    def apply(self, t):
        st = self.stack
        if t == SHIFT:
            st.append(self.b)
            self.b += 1
        elif t == LEFT:
            self.heads[st.pop()] = self.b
        else:
            d = st.pop()
            self.heads[d] = st[-1]

    def costs(self, gold):
        """Gold arcs each transition makes unreachable (dynamic oracle; gold[d-1] = head of d)."""
        st, b, n = self.stack, self.b, self.n
        h = lambda d: gold[d - 1]  # noqa: E731
        in_buf = lambda x: b <= x <= n  # noqa: E731
        c = [0, 0, 0]
        if b <= n:   # SHIFT: b loses dependents on the stack and heads below s0
            c[SHIFT] = sum(1 for d in st if d and h(d) == b) + (h(b) in st[:-1])
        s0 = st[-1]
        if s0:
            deps = sum(1 for d in range(b, n + 1) if h(d) == s0)
            s1 = st[-2] if len(st) >= 2 else None
            c[LEFT] = deps + (h(s0) != b and (h(s0) == s1 or in_buf(h(s0))))
            c[RIGHT] = deps + (h(s0) != s1 and in_buf(h(s0)))
        return c


# ---------------------------------------------------------------- the model
class Model:
    batched = True   # batch_losses uses dy.batched_map where the framework has it

    def __init__(self, dy, pc, meta, hidden):
        self.E = pc.add_lookup_parameters((meta["n_words"], WEMB))
        self.P = pc.add_lookup_parameters((meta["n_pos"], PEMB))
        self.fwd = dy.VanillaLSTMBuilder(1, WEMB + PEMB, hidden, pc)
        self.bwd = dy.VanillaLSTMBuilder(1, WEMB + PEMB, hidden, pc)
        self.root = pc.add_parameters((2 * hidden,))
        self.pad = pc.add_parameters((2 * hidden,))
        self.W1 = pc.add_parameters((MLP, 4 * 2 * hidden))
        self.b1 = pc.add_parameters((MLP,))
        self.W2 = pc.add_parameters((3, MLP))
        self.b2 = pc.add_parameters((3,))

    def encode(self, dy, words, pos):
        """vecs[i] for token i (1..n); vecs[0] is the root's learned vector."""
        xs = [dy.concatenate([dy.lookup(self.E, w), dy.lookup(self.P, p)]) for w, p in zip(words, pos)]
        fs = self.fwd.initial_state().transduce(xs)
        bs = self.bwd.initial_state().transduce(xs[::-1])[::-1]
        return [dy.parameter(self.root)] + [dy.concatenate([f, b]) for f, b in zip(fs, bs)]

    def scores(self, dy, vecs, pad, cfg):
        st = cfg.stack
        feats = [vecs[st[-k]] if len(st) >= k else pad for k in (1, 2, 3)]
        feats.append(vecs[cfg.b] if cfg.b <= cfg.n else pad)
        h = dy.tanh(dy.affine_transform([self.b1, self.W1, dy.concatenate(feats)]))
        return dy.affine_transform([self.b2, self.W2, h])

    def parse(self, dy, inst, train=True):
        """Predicted heads (1-based, index 0 unused) and the hinge losses of the mistakes."""
        words, pos, gold = inst
        vecs = self.encode(dy, words, pos)
        pad = dy.parameter(self.pad)
        cfg = Config(len(words))
        losses = []
        while not cfg.done():
            e = self.scores(dy, vecs, pad, cfg)
            s = e.npvalue()                      # the value read that batched_map batches
            valid = cfg.valid()
            best = max((t for t in range(3) if valid[t]), key=lambda t: s[t])
            if train:
                c = cfg.costs(gold)
                cmin = min(c[t] for t in range(3) if valid[t])
                good = max((t for t in range(3) if valid[t] and c[t] == cmin), key=lambda t: s[t])
                bad = [t for t in range(3) if valid[t] and c[t] > cmin]
                if bad:
                    wrong = max(bad, key=lambda t: s[t])
                    if s[wrong] + 1.0 > s[good]:
                        losses.append(dy.pick(e, wrong) - dy.pick(e, good) + 1.0)
            cfg.apply(best)                      # dynamic: follow the model's own choice
        return cfg.heads, losses

    def loss(self, dy, inst):
        _, losses = self.parse(dy, inst)
        return dy.esum(losses) if losses else dy.scalarInput(0.0)

    def batch_losses(self, dy, batch):
        """Losses of a minibatch: under batched_map with autobatch, sentence by sentence otherwise."""
        fn = lambda inst: self.loss(dy, inst)  # noqa: E731
        if self.batched and hasattr(dy, "batched_map"):
            return dy.batched_map(fn, batch)
        return [fn(inst) for inst in batch]

    def predict(self, dy, batch):
        fn = lambda inst: self.parse(dy, inst, train=False)[0]  # noqa: E731
        if self.batched and hasattr(dy, "batched_map"):
            return dy.batched_map(fn, batch)
        return [fn(inst) for inst in batch]


def uas(preds, insts):
    right = total = 0
    for heads, (_, _, gold) in zip(preds, insts):
        right += sum(int(heads[d] == g) for d, g in enumerate(gold, 1))
        total += len(gold)
    return right / max(total, 1)


# ---------------------------------------------------------------- sequential vs batched_map
def measure(cfg):
    """Sentences/s of training (median of `repeats` passes after a warm-up pass), in this process."""
    import statistics
    import time

    from bench.frameworks import DyFramework
    fw = DyFramework(cfg["framework"], cfg["strategy"], seed=cfg["seed"])
    dy = fw.dy
    insts, meta = data(cfg["n"], seed=cfg["seed"], path=cfg.get("data"))
    pc = dy.ParameterCollection()
    model = Model(dy, pc, meta, cfg["hidden"])
    model.batched = cfg["mode"] == "map"
    trainer = fw.trainer(pc, "adam")
    bs = cfg["batch_size"]
    batches = [insts[i:i + bs] for i in range(0, len(insts), bs)]
    times, rounds, loss = [], [], 0.0
    for rep in range(cfg["repeats"] + 1):
        t0, loss = time.perf_counter(), 0.0
        for b in batches:
            fw.renew()
            total = dy.esum(model.batch_losses(dy, b))
            loss += total.value()
            total.backward()
            trainer.update()
            st = fw.stats()
            if st is not None and rep == 0:
                rounds.append(st["forward_rounds"])
        if rep:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return dict(cfg, sents_per_s=len(insts) / med, pass_s=times, loss_per_sent=loss / len(insts),
                rounds_per_batch=statistics.fmean(rounds) if rounds else None,
                transitions_per_batch=2 * sum(len(w) for w, _, _ in insts) / len(batches))


def main(argv=None):
    """python -m bench.tasks.parser: sequential vs batched_map per strategy, DyNet sequential as a peer."""
    import argparse
    import json
    import os
    import subprocess
    import sys

    from bench.frameworks import available
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--strategy", default="none,depth,agenda")
    ap.add_argument("--mode", default="seq,map")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", help="a CoNLL-U file (default: synthetic projective trees)")
    ap.add_argument("--no-dynet", action="store_true")
    args = ap.parse_args(argv)
    if args.one:
        print("RECORD " + json.dumps(measure(json.loads(args.one))))
        return 0
    base = dict(n=args.n, batch_size=args.batch_size, hidden=args.hidden, repeats=args.repeats,
                seed=args.seed, data=args.data)
    runs = [("autobatch", s, m) for s in args.strategy.split(",") for m in args.mode.split(",")]
    if not args.no_dynet and available("dynet"):
        runs.append(("dynet", "agenda", "seq"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print("parser: n=%d batch=%d hidden=%d, OPENBLAS_NUM_THREADS=%s" % (
        args.n, args.batch_size, args.hidden, os.environ.get("OPENBLAS_NUM_THREADS", "unset")))
    print("%-10s %-7s %-4s %9s %14s %12s" % ("framework", "strategy", "mode", "sents/s", "rounds/batch", "loss/sent"))
    for fwk, s, m in runs:   # one process each: DyNet fixes its autobatch mode at import
        cfg = dict(base, framework=fwk, strategy=s, mode=m)
        p = subprocess.run([sys.executable, "-m", "bench.tasks.parser", "--one", json.dumps(cfg)],
                           cwd=repo, env=env, stdout=subprocess.PIPE, text=True)
        recs = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RECORD ")]
        if not recs:
            print("%-10s %-7s %-4s failed (exit %d)" % (fwk, s, m, p.returncode))
            continue
        r = recs[0]
        rb = "%.0f" % r["rounds_per_batch"] if r["rounds_per_batch"] else "-"
        print("%-10s %-7s %-4s %9.1f %14s %12.3f" % (fwk, s, m, r["sents_per_s"], rb, r["loss_per_sent"]))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
