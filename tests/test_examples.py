"""The examples learn: on tiny synthetic data, a few epochs lower the training loss (and the
tagger beats its majority baseline). Each runs in a few seconds with autobatch."""
import importlib
import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def example(name):
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)  # the examples import their sibling _common
    return importlib.import_module(name)


@pytest.mark.parametrize("strategy", ["none", "depth", "agenda"])
def test_treelstm_sentiment_learns(strategy, capsys):
    history, majority = example("treelstm_sentiment").main(
        ["--autobatch", strategy, "--epochs", "5", "--n-train", "40", "--n-dev", "20", "--hidden", "16",
         "--batch-size", "10"])
    losses = [loss for loss, _ in history]
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.9 * losses[0]
    assert 0 <= history[-1][1] <= 1 and 0 < majority < 1
    assert "dev root accuracy" in capsys.readouterr().out


def test_bilstm_tagger_learns():
    history, majority = example("bilstm_tagger").main(
        ["--epochs", "4", "--n-train", "150", "--n-dev", "20", "--hidden", "16", "--batch-size", "10"])
    assert history[-1][0] < 0.7 * history[0][0]
    assert history[-1][1] > majority  # beats always-"O"


def test_bilstm_tagger_with_chars_learns():
    history, _ = example("bilstm_tagger").main(
        ["--chars", "--epochs", "3", "--n-train", "50", "--n-dev", "10", "--hidden", "16", "--batch-size", "10"])
    assert history[-1][0] < 0.75 * history[0][0]


def test_rnnlm_written_with_dynets_minibatch_functions_learns_the_same_loss():
    """--minibatch: DyNet's rnnlm-batch form (lookup_batch, masks, sum_batches) gives the
    per-sentence loss of the same sentences and learns."""
    rnnlm = example("rnnlm")
    import autobatch as dy
    from bench import data
    from bench.tasks.rnnlm import Model
    sents, meta = data.synthetic_lm(6, seed=1)
    dy.reset_random_seed(0)
    pc = dy.ParameterCollection()
    model = Model(dy, pc, meta, 8)
    dy.renew_cg()
    per_sentence = dy.esum([model.loss(dy, s) for s in sents]).value()
    dy.renew_cg()
    assert rnnlm.minibatch_loss(dy, model, sents).value() == pytest.approx(per_sentence, rel=1e-5)
    history, _ = rnnlm.main(["--minibatch", "--epochs", "3", "--n-train", "40", "--n-dev", "10", "--hidden", "16",
                             "--batch-size", "10"])
    assert history[-1][0] < history[0][0]


def test_rnnlm_learns():
    history, unigram = example("rnnlm").main(
        ["--epochs", "3", "--n-train", "40", "--n-dev", "10", "--hidden", "16", "--batch-size", "10"])
    assert history[-1][0] < history[0][0]  # mean train loss per token falls
    assert history[-1][1] < 10000          # dev perplexity below uniform over the vocabulary
