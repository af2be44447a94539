"""What the RNN builder tests share: random weights set through the builders' own
parameters, the Elman RNN's NumPy reference, a builder's last output in a fresh graph, and a
classification loss over sequences of different lengths (for batched against unbatched)."""
import numpy as np

import autobatch as dy
from check_kit import value_grads_stats


def sig(x):
    return 1 / (1 + np.exp(-x))


def random_weights(builder, rng):
    """Give every parameter random values (biases too) via set_value; returns them per layer."""
    out = []
    for layer in builder.get_parameters():
        ws = []
        for p in layer:
            w = rng.normal(0, 0.5, p.shape())
            p.set_value(w)
            ws.append(w)
        out.append(ws)
    return out


def vecs(rng, n, d):
    return [rng.normal(size=d) for _ in range(n)]


def ref_rnn(weights, xs, h0=None):
    """Elman RNN, weights per layer (Wx, Wh, b): the top layer's h per step."""
    L = len(weights)
    hs = list(h0) if h0 is not None else [np.zeros(weights[0][1].shape[0])] * L
    outs = []
    for x in xs:
        for l, (Wx, Wh, b) in enumerate(weights):
            hs[l] = np.tanh(b + Wx @ x + Wh @ hs[l])
            x = hs[l]
        outs.append(x)
    return outs


def last_output(builder, xs):
    """In a fresh graph, the builder's output after reading the vectors xs from its initial state."""
    dy.renew_cg()
    return builder.initial_state().transduce([dy.inputVector(x) for x in xs])[-1]


def sequence_loss(make, strategy, lengths, seed):
    """value_grads_stats of Σ -log softmax(V·h_last)[y] over random token sequences of the
    given lengths, for the builder make(m) (input 3, hidden 4) under strategy; the gradients
    are those of every parameter, then of the lookup table."""
    rng = np.random.default_rng(seed)
    dy.reset_random_seed(7)
    m = dy.ParameterCollection()
    b = make(m)
    E = m.add_lookup_parameters((10, 3))
    V = m.add_parameters((5, 4))
    data = [([int(t) for t in rng.integers(0, 10, n)], int(rng.integers(0, 5))) for n in lengths]
    dy.renew_cg(autobatching=strategy)
    loss = dy.esum([dy.pickneglogsoftmax(V * b.initial_state().transduce([E[t] for t in toks])[-1], y)
                    for toks, y in data])
    return value_grads_stats(loss, m.parameters_list() + m.lookup_parameters_list())
