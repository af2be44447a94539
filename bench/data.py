"""Seeded synthetic data with the shape of the classic DyNet benchmarks, plus real-format loaders.

Synthetic sets copy the statistics that drive batching cost (lengths, tree shapes, vocabulary
sizes, Zipf word frequencies; see ../shared/data/README.md) and carry a LEARNABLE signal, so the
examples can show accuracy rising above the majority baseline:
  * SST-like trees: each word has a hidden polarity; a node's label buckets the polarity sum of
    its span, so composition matters.
  * tagged sentences: entity spans (B-X I-X ...) drawn from type-specific vocabularies whose words
    share a type-specific suffix, so rare words are taggable from their characters.
  * LM text: words belong to classes that follow a sparse Markov chain, so context lowers perplexity.
Everything is deterministic in `seed`. Only numpy is needed.
"""
import os
import re
from collections import Counter

import numpy as np

UNK = "<unk>"


# ---------------------------------------------------------------- helpers
def zipf_probs(n, s=1.0, q=2.7):
    """Zipf-Mandelbrot frequencies over n ranks: a few very frequent words, a long rare tail."""
    p = 1.0 / (np.arange(n) + q) ** s
    return p / p.sum()


def lengths(rng, n, mean, lo, hi, shape=3.5):
    """Gamma-distributed lengths (right-skewed like real sentence lengths), clipped to [lo, hi]."""
    return np.clip(np.rint(rng.gamma(shape, mean / shape, size=n)), lo, hi).astype(int)


class Vocab:
    """String <-> id map with id 0 reserved for the unknown word."""

    def __init__(self, words=()):
        self.i2w = [UNK]
        self.w2i = {UNK: 0}
        for w in words:
            self.add(w)

    def add(self, w):
        if w not in self.w2i:
            self.w2i[w] = len(self.i2w)
            self.i2w.append(w)
        return self.w2i[w]

    def get(self, w):
        return self.w2i.get(w, 0)

    def __len__(self):
        return len(self.i2w)


# ---------------------------------------------------------------- trees
class Tree:
    """Binary tree node: a leaf holds a word id, an internal node two children; labels everywhere."""

    __slots__ = ("label", "word", "left", "right")

    def __init__(self, label, word=None, left=None, right=None):
        self.label, self.word, self.left, self.right = label, word, left, right

    def is_leaf(self):
        return self.left is None

    def nodes(self):
        """All nodes, children before parents (post-order)."""
        out, stack = [], [(self, False)]
        while stack:
            t, done = stack.pop()
            if done or t.is_leaf():
                out.append(t)
            else:
                stack += [(t, True), (t.right, False), (t.left, False)]
        return out

    def leaves(self):
        return [t for t in self.nodes() if t.is_leaf()]

    def height(self):
        return 0 if self.is_leaf() else 1 + max(self.left.height(), self.right.height())


def _polarity_label(score):
    """Bucket a polarity sum into SST's 5 classes (0 very negative .. 4 very positive)."""
    return int(np.clip(score, -2, 2)) + 2


def synthetic_sst(n, seed=0, vocab_size=4000, mean_len=19, max_len=54):
    """SST-style binarised trees with labels 0-4 at every node.

    Split points are chosen so heights are close to SST's (about 2.4 log2(len), ~10 on average)."""
    rng = np.random.default_rng(seed)
    # hidden polarity per word: mostly neutral, like SST where ~70% of nodes are label 2
    pol = rng.choice([-2, -1, 0, 1, 2], size=vocab_size, p=[0.04, 0.08, 0.76, 0.08, 0.04])
    pol[:101] = 0  # <unk> and the 100 most frequent words (function words) are neutral
    p = zipf_probs(vocab_size - 1)

    def build(ws):
        if len(ws) == 1:
            return Tree(_polarity_label(pol[ws[0]]), word=int(ws[0])), int(pol[ws[0]])
        # parse trees are deeper than random splits: often peel off one word at an end
        r = rng.random()
        k = 1 if r < 0.3 else len(ws) - 1 if r < 0.6 else int(rng.integers(1, len(ws)))
        (l, sl), (r, sr) = build(ws[:k]), build(ws[k:])
        return Tree(_polarity_label(sl + sr), left=l, right=r), sl + sr

    trees = []
    for L in lengths(rng, n, mean_len, 2, max_len):
        words = 1 + rng.choice(vocab_size - 1, size=L, p=p)
        trees.append(build(list(words))[0])
    meta = {"n_words": vocab_size, "n_labels": 5, "vocab": Vocab("w%d" % i for i in range(1, vocab_size))}
    return trees, meta


def complete_trees(n, seed=0, leaves=256, vocab_size=1000, n_labels=2):
    """Tree-FC data: complete binary trees over `leaves` word ids, one label at the root.

    The label is the sign of the leaves' hidden polarity sum (learnable, if slowly)."""
    rng = np.random.default_rng(seed)
    pol = rng.choice([-1, 0, 1], size=vocab_size, p=[0.2, 0.6, 0.2])
    data = []
    for _ in range(n):
        words = rng.integers(0, vocab_size, size=leaves)
        data.append((words.tolist(), int(pol[words].sum() > 0) % n_labels))
    return data, {"n_words": vocab_size, "n_labels": n_labels, "leaves": leaves}


def _parse_sexpr(line, vocab, grow):
    toks = re.findall(r"\(|\)|[^\s()]+", line)
    pos = 0

    def rec():
        nonlocal pos
        assert toks[pos] == "(", line
        label = int(toks[pos + 1])
        pos += 2
        kids = []
        while toks[pos] != ")":
            if toks[pos] == "(":
                kids.append(rec())
            else:
                w = toks[pos]
                kids.append(Tree(label, word=vocab.add(w) if grow else vocab.get(w)))
                pos += 1
        pos += 1
        if len(kids) == 1:  # preterminal (label word) or unary chain: collapse
            kids[0].label = label
            return kids[0]
        while len(kids) > 2:  # n-ary: binarise to the right
            kids[-2:] = [Tree(label, left=kids[-2], right=kids[-1])]
        return Tree(label, left=kids[0], right=kids[1])

    return rec()


def load_sst(path, vocab=None):
    """Read one s-expression tree per line; grows `vocab` unless one is given (then unseen -> 0)."""
    grow = vocab is None
    vocab = vocab or Vocab()
    with open(path, encoding="utf-8") as f:
        trees = [_parse_sexpr(l, vocab, grow) for l in f if l.strip()]
    return trees, {"n_words": len(vocab), "n_labels": 5, "vocab": vocab}


# ---------------------------------------------------------------- tagged sentences
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
_SUFFIX = {"PER": "son", "LOC": "ia", "ORG": "corp", "MISC": "ish"}
_LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def _rand_word(rng, suffix=""):
    return "".join(rng.choice(_LETTERS, size=int(rng.integers(2, 8)))) + suffix


def synthetic_tags(n, seed=0, o_vocab=3000, ent_vocab=600, mean_len=24, max_len=80):
    """Sentences of (word, tag) with ~9 BIO tags; entity words end in a type-specific suffix.

    Zipf frequencies make most types rare (<5 occurrences), which is what the char model is for."""
    rng = np.random.default_rng(seed)
    lex = {"O": sorted({_rand_word(rng) for _ in range(o_vocab)})}
    for t, suf in _SUFFIX.items():
        lex[t] = sorted({_rand_word(rng, suf) for _ in range(ent_vocab)})
    probs = {t: zipf_probs(len(ws)) for t, ws in lex.items()}
    types = list(_SUFFIX)

    def word(t):
        return lex[t][rng.choice(len(lex[t]), p=probs[t])]

    sents = []
    for L in lengths(rng, n, mean_len, 3, max_len):
        ws, ts = [], []
        while len(ws) < L:
            if rng.random() < 0.8:
                ws.append(word("O"))
                ts.append("O")
            else:  # an entity span of 1-3 words
                t = types[rng.integers(len(types))]
                for j in range(int(rng.integers(1, 4))):
                    ws.append(word(t))
                    ts.append(("B-" if j == 0 else "I-") + t)
        sents.append((ws[:L], ts[:L]))
    return index_tagged(sents, TAGS)


def read_tagged(path):
    """Read `word|TAG word|TAG ...` lines (the tag is after the LAST '|') as string pairs."""
    sents = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            pairs = [tok.rsplit("|", 1) for tok in line.split()]
            if pairs:
                sents.append(([w for w, _ in pairs], [t for _, t in pairs]))
    return sents


def load_tagged(path):
    sents = read_tagged(path)
    return index_tagged(sents, sorted({t for _, ts in sents for t in ts}))


def index_tagged(sents, tags):
    """Instances are (list of word strings, list of tag ids); meta has vocabularies and counts.

    Words stay strings so a model can spell out unseen/rare words with the char BiLSTM."""
    t2i = {t: i for i, t in enumerate(tags)}
    counts = Counter(w for ws, _ in sents for w in ws)
    chars = Vocab(sorted({c for w in counts for c in w}) + ["<w>"])
    data = [(ws, [t2i[t] for t in ts]) for ws, ts in sents]
    meta = {"vocab": Vocab(sorted(counts)), "counts": counts, "chars": chars, "tags": list(tags), "n_tags": len(tags)}
    return data, meta


# ---------------------------------------------------------------- LM text
EOS = "<s>"


def synthetic_lm(n, seed=0, vocab_size=10000, n_classes=50, mean_len=21, max_len=80):
    """Token-id sentences; id 0 is the sentence boundary <s>.

    Words have PTB-like Zipf frequencies and are dealt round-robin into classes (so every class
    has frequent and rare words); the class sequence is a sparse Markov chain (3 likely successors),
    so an LM that tracks context beats the unigram model even after little training."""
    rng = np.random.default_rng(seed)
    p = zipf_probs(vocab_size - 1)
    members = [np.arange(c, vocab_size - 1, n_classes) for c in range(n_classes)]
    in_class = [p[m] / p[m].sum() for m in members]
    succ = np.array([rng.permutation(n_classes)[:3] for _ in range(n_classes)])
    succ_p = np.array([0.6, 0.3, 0.1])
    sents = []
    for L in lengths(rng, n, mean_len, 1, max_len):
        c = int(rng.integers(n_classes))
        toks = []
        for _ in range(L):
            toks.append(1 + int(members[c][rng.choice(len(members[c]), p=in_class[c])]))
            c = succ[c, rng.choice(3, p=succ_p)]
        sents.append(toks)
    return sents, {"n_words": vocab_size, "vocab": Vocab(["w%d" % i for i in range(1, vocab_size)])}


def load_text(path, vocab=None, max_vocab=10000):
    """Plain token lines (PTB style). Keeps the `max_vocab` most frequent types; the rest -> id 0."""
    with open(path, encoding="utf-8") as f:
        lines = [l.split() for l in f if l.strip()]
    if vocab is None:
        counts = Counter(w for l in lines for w in l)
        vocab = Vocab(w for w, _ in counts.most_common(max_vocab - 1))
    sents = [[vocab.get(w) for w in l] for l in lines]
    return sents, {"n_words": len(vocab), "vocab": vocab}


# ---------------------------------------------------------------- task dispatch
# default real-data file per task when --data names a directory (layout of ../shared/data)
REAL_FILES = {"treelstm": "sst/dev.txt", "bilstm": "tags/dev.txt", "bilstm_char": "tags/dev.txt", "rnnlm": "text/dev.txt"}
LOADERS = {"treelstm": load_sst, "bilstm": load_tagged, "bilstm_char": load_tagged, "rnnlm": load_text}
SYNTHETIC = {"treelstm": synthetic_sst, "treefc": complete_trees, "bilstm": synthetic_tags,
             "bilstm_char": synthetic_tags, "rnnlm": synthetic_lm}


def resolve_path(task, path):
    """`path` may be a file or a directory laid out like ../shared/data; None if nothing applies."""
    if path is None or task not in REAL_FILES:
        return None
    if os.path.isdir(path):
        path = os.path.join(path, REAL_FILES[task])
    return path if os.path.exists(path) else None


def get(task, n, seed=0, path=None):
    """n instances for `task`: real data (cycled to n) when `path` applies, else synthetic."""
    real = resolve_path(task, path)
    if real is None:
        return SYNTHETIC[task](n, seed=seed)
    data, meta = LOADERS[task](real)
    return [data[i % len(data)] for i in range(n)], meta
