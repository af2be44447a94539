"""LSTM language model, one graph per sentence, autobatched across the minibatch.

Prints train and dev perplexity per epoch next to two baselines: uniform (vocabulary size) and
the unigram model of the training data -- beating unigram means the LSTM uses context.

    python examples/rnnlm.py                                  # synthetic 10k-word text
    python examples/rnnlm.py --train ../shared/data/text/dev.txt --autobatch depth
"""
import math
import random
import time
from collections import Counter

import _common
from bench import data
from bench.tasks.rnnlm import EOS, Model


def main(argv=None):
    ap = _common.parser(__doc__, epochs=3, hidden=64, batch_size=32)
    ap.add_argument("--n-train", type=int, default=1500)
    ap.add_argument("--n-dev", type=int, default=200)
    args = ap.parse_args(argv)
    fw = _common.framework(args)
    dy = fw.dy

    if args.train:
        sents, meta = data.load_text(args.train)
        dev = data.load_text(args.dev, meta["vocab"])[0] if args.dev else sents[-args.n_dev:]
        train = sents if args.dev else sents[:-args.n_dev]
    else:
        sents, meta = data.synthetic_lm(args.n_train + args.n_dev, seed=args.seed)
        train, dev = sents[:args.n_train], sents[args.n_train:]
    # unigram baseline (add-one smoothed), counting the end-of-sentence token like the model does
    uni = Counter(w for s in train for w in s + [EOS])
    tot = sum(uni.values()) + meta["n_words"]
    uni_ppl = math.exp(-sum(math.log((uni[w] + 1) / tot) for s in dev for w in s + [EOS]) /
                       sum(len(s) + 1 for s in dev))

    pc = dy.ParameterCollection()
    model = Model(dy, pc, meta, args.hidden)
    trainer = dy.AdamTrainer(pc, 0.005)  # alpha: faster than the 0.001 default on small data
    rng = random.Random(args.seed)
    history = []
    for epoch in range(1, args.epochs + 1):
        t0, total, toks = time.time(), 0.0, 0
        rng.shuffle(train)
        for batch in _common.minibatches(train, args.batch_size):
            fw.renew()
            loss = dy.esum([model.loss(dy, s) for s in batch])  # one graph per sentence
            total += loss.value()
            toks += sum(len(s) + 1 for s in batch)
            loss.backward()
            trainer.update()
        dev_loss = 0.0
        for batch in _common.minibatches(dev, 100):
            fw.renew()
            dev_loss += dy.esum([model.loss(dy, s) for s in batch]).value()
        dev_ppl = math.exp(dev_loss / sum(len(s) + 1 for s in dev))
        history.append((total / toks, dev_ppl))
        print("epoch %d  train ppl %.1f  dev ppl %.1f  (unigram %.1f, uniform %d)  %.1fs"
              % (epoch, math.exp(total / toks), dev_ppl, uni_ppl, meta["n_words"], time.time() - t0), flush=True)
    return history, uni_ppl


if __name__ == "__main__":
    main()
