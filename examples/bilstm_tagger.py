"""BiLSTM tagger (optionally with a char BiLSTM for rare words), autobatched.

Each sentence is its own graph (word reps -> BiLSTM -> MLP -> softmax at every word); autobatch
groups LSTM steps and MLPs across the sentences of a minibatch.

    python examples/bilstm_tagger.py                 # synthetic NER-like data, word model
    python examples/bilstm_tagger.py --chars         # + char BiLSTM for words seen < 5 times
    python examples/bilstm_tagger.py --train ../shared/data/tags/dev.txt
"""
import random
import time
from collections import Counter

import numpy as np

import _common
from bench import data
from bench.tasks import bilstm, bilstm_char


def main(argv=None):
    ap = _common.parser(__doc__, epochs=3, hidden=64, batch_size=32)
    ap.add_argument("--chars", action="store_true", help="char BiLSTM for rare words")
    ap.add_argument("--n-train", type=int, default=800)
    ap.add_argument("--n-dev", type=int, default=200)
    args = ap.parse_args(argv)
    fw = _common.framework(args)
    dy = fw.dy

    if args.train:  # index train + dev together: one tag and char inventory
        raw = data.read_tagged(args.train)
        n_train = len(raw) - (0 if args.dev else args.n_dev)
        raw += data.read_tagged(args.dev) if args.dev else []
        sents, meta = data.index_tagged(raw, sorted({t for _, ts in raw for t in ts}))
        train, dev = sents[:n_train], sents[n_train:]
    else:
        sents, meta = data.synthetic_tags(args.n_train + args.n_dev, seed=args.seed)
        train, dev = sents[:args.n_train], sents[args.n_train:]
    meta["counts"] = Counter(w for ws, _ in train for w in ws)  # "rare" means rare in training data
    majority = Counter(t for _, ts in train for t in ts).most_common(1)[0][0]
    base = np.mean([t == majority for _, ts in dev for t in ts])

    pc = dy.ParameterCollection()
    model = (bilstm_char if args.chars else bilstm).Model(dy, pc, meta, args.hidden)
    trainer = dy.AdamTrainer(pc, 0.005)  # alpha: faster than the 0.001 default on small data
    rng = random.Random(args.seed)
    history = []
    for epoch in range(1, args.epochs + 1):
        t0, total, words = time.time(), 0.0, 0
        rng.shuffle(train)
        for batch in _common.minibatches(train, args.batch_size):
            fw.renew()
            loss = dy.esum([model.loss(dy, sent) for sent in batch])  # one graph per sentence
            total += loss.value()
            words += sum(len(ws) for ws, _ in batch)
            loss.backward()
            trainer.update()
        good = n = 0
        for batch in _common.minibatches(dev, 50):
            fw.renew()
            scores = [model.scores(dy, ws) for ws, _ in batch]
            dy.esum([s for ss in scores for s in ss]).value()  # one batched forward for all
            for ss, (_, ts) in zip(scores, batch):
                good += sum(int(np.argmax(s.npvalue()) == t) for s, t in zip(ss, ts))
                n += len(ts)
        history.append((total / words, good / n))
        print("epoch %d  loss/word %.3f  dev tag accuracy %.3f  (majority tag %.3f)  %.1fs"
              % (epoch, total / words, good / n, base, time.time() - t0), flush=True)
    return history, base


if __name__ == "__main__":
    main()
