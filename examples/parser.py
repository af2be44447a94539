"""Arc-hybrid transition-based dependency parser, written per sentence, batched by dy.batched_map.

The parser reads the model's scores after every transition to choose the next one (dynamic
oracle training, greedy decoding), so a per-sentence graph cannot be finished before values are
needed. `dy.batched_map(parse, sentences)` runs all sentences of a minibatch as ordinary Python
code and batches their value reads: one forward per transition step for the whole minibatch.
The model lives in bench/tasks/parser.py (shared with the benchmark).

    python examples/parser.py                          # synthetic projective trees
    python examples/parser.py --data train.conllu      # CoNLL-U (dev: held out, or --dev)
    python examples/parser.py --sequential             # same code, one sentence at a time
    python examples/parser.py --dynet                  # real DyNet (sentence by sentence)
"""
import random
import time

import _common
from bench.tasks import parser as P


def main(argv=None):
    ap = _common.parser(__doc__, epochs=3, hidden=64, batch_size=32)
    ap.add_argument("--data", help="CoNLL-U training file (alias of --train)")
    ap.add_argument("--sequential", action="store_true", help="no batched_map: sentence by sentence")
    ap.add_argument("--n-train", type=int, default=800)
    ap.add_argument("--n-dev", type=int, default=200)
    args = ap.parse_args(argv)
    fw = _common.framework(args)
    dy = fw.dy

    path = args.data or args.train
    if path:
        train = [s for s in P.load_conllu(path) if P.is_projective(s[2])]
        dev = [s for s in P.load_conllu(args.dev) if P.is_projective(s[2])] if args.dev else train[-args.n_dev:]
        train = train if args.dev else train[:-args.n_dev]
    else:
        sents = P.synthetic_trees(args.n_train + args.n_dev, seed=args.seed)
        train, dev = sents[:args.n_train], sents[args.n_train:]
    insts, meta = P.index(train + dev)  # one vocabulary; dev words unseen in train still get rows
    train, dev = insts[:len(train)], insts[len(train):]

    pc = dy.ParameterCollection()
    model = P.Model(dy, pc, meta, args.hidden)
    model.batched = not args.sequential
    trainer = dy.AdamTrainer(pc)
    rng = random.Random(args.seed)
    how = "sentence by sentence" if args.sequential or args.dynet else "batched_map"
    for epoch in range(1, args.epochs + 1):
        t0, total = time.time(), 0.0
        rng.shuffle(train)
        for batch in _common.minibatches(train, args.batch_size):
            fw.renew()
            loss = dy.esum(model.batch_losses(dy, batch))  # each sentence parses itself
            total += loss.value()
            loss.backward()
            trainer.update()
        dt = time.time() - t0
        preds = []
        for batch in _common.minibatches(dev, args.batch_size):
            fw.renew()
            preds += model.predict(dy, batch)
        print("epoch %d: loss/sent %.3f, dev UAS %.3f, %.1f train sents/s (%s)" % (
            epoch, total / len(train), P.uas(preds, dev), len(train) / dt, how))


if __name__ == "__main__":
    main()
