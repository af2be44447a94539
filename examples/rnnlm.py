"""LSTM language model, one graph per sentence, autobatched across the minibatch.

Prints train and dev perplexity per epoch next to two baselines: uniform (vocabulary size) and
the unigram model of the training data -- beating unigram means the LSTM uses context.

    python examples/rnnlm.py                                  # synthetic 10k-word text
    python examples/rnnlm.py --train ../shared/data/text/dev.txt --autobatch depth
    python examples/rnnlm.py --minibatch     # the loss written as DyNet's rnnlm-batch example does

--minibatch writes the same loss the way hand-batched DyNet programs do: sentences padded to one
length, one lookup_batch and one pickneglogsoftmax_batch per time step, padding masked out by a
batched input, sum_batches at the end. autobatch runs such programs unchanged (each batch element
is an instance of its own, batched for you), with the same loss and gradients.
"""
import math
import random
import time
from collections import Counter

import _common
from bench import data
from bench.tasks.rnnlm import EOS, Model


def minibatch_loss(dy, model, batch):
    """Σ over the batch's sentences of their token losses, as DyNet's rnnlm-batch writes it."""
    inputs = [[EOS] + list(s) for s in batch]
    targets = [list(s) + [EOS] for s in batch]
    state, losses = model.lstm.initial_state(), []
    for t in range(max(map(len, inputs))):
        ids = [x[t] if t < len(x) else EOS for x in inputs]
        nxt = [y[t] if t < len(y) else EOS for y in targets]
        mask = dy.inputTensor([1.0 if t < len(y) else 0.0 for y in targets], batched=True)
        state = state.add_input(dy.lookup_batch(model.E, ids))
        scores = dy.affine_transform([model.b, model.W, state.output()])
        losses.append(dy.cmult(dy.pickneglogsoftmax_batch(scores, nxt), mask))
    return dy.sum_batches(dy.esum(losses))


def main(argv=None):
    ap = _common.parser(__doc__, epochs=3, hidden=64, batch_size=32)
    ap.add_argument("--n-train", type=int, default=1500)
    ap.add_argument("--n-dev", type=int, default=200)
    ap.add_argument("--minibatch", action="store_true",
                    help="write the loss with DyNet's minibatch functions (see above)")
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
            if args.minibatch:
                loss = minibatch_loss(dy, model, batch)
            else:
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
