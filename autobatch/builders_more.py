"""DyNet's other builders: CompactVanillaLSTMBuilder, CoupledLSTMBuilder, FastLSTMBuilder,
BiRNNBuilder, StackedRNNState and the softmax builders (SoftmaxBuilder, StandardSoftmaxBuilder,
ClassFactoredSoftmaxBuilder), written on the machinery of builders.py (states,
dropout masks, step templates), so their steps batch across sequences like the others'.

Equations, parameter shapes, order and collection names were checked against DyNet 2.1
with equal parameter values (see each class)."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from . import api as dy
from . import runtime
from .builders import VanillaLSTMBuilder, _Builder, _shape_of, size_arg
from .errors import GraphError, user_line
from .graph import Expression
from .minibatch import BatchedExpression
from .params import ConstInitializer, ParameterCollection

__all__ = ["CompactVanillaLSTMBuilder", "SparseLSTMBuilder", "CoupledLSTMBuilder", "FastLSTMBuilder", "BiRNNBuilder",
           "StackedRNNState", "SoftmaxBuilder", "StandardSoftmaxBuilder", "ClassFactoredSoftmaxBuilder"]


def _rate(where: str, v: float) -> float:
    if not 0 <= v < 1:
        raise ValueError(f"{where}: dropout rate must be in [0, 1), got {v} [at {user_line()}]")
    return float(v)


class CompactVanillaLSTMBuilder(VanillaLSTMBuilder):
    """DyNet's CompactVanillaLSTMBuilder: the same parameters ([W_x (4H, in), W_h (4H, H),
    b (4H)] per layer, in a "compact-vanilla-lstm-builder" collection), the same equations
    and the same variational dropout as VanillaLSTMBuilder (DyNet fuses them into three
    nodes; the values are equal). In addition ``set_weightnoise(std)``: Gaussian noise of
    that deviation on W_x, W_h and b, drawn afresh at every step while dropout is switched on
    (``dy.set_dropout``); the steps are then built one by one."""

    _kind = "compact-vanilla-lstm"

    def __init__(self, layers: int, input_dim: int, hidden_dim: int, model: ParameterCollection):
        super().__init__(layers, input_dim, hidden_dim, model)   # DyNet's has no forget_bias argument
        self.spec = (self.layers, self.input_dim, self.hidden_dim)   # nor ln_lstm: its spec, as DyNet's
        self.weightnoise_std = 0.0

    def set_weightnoise(self, std: float) -> None:
        if not std >= 0:
            raise ValueError(f"set_weightnoise: std must be >= 0, got {std} [at {user_line()}]")
        self.weightnoise_std = float(std)

    def _noisy(self) -> bool:
        return self.weightnoise_std > 0 and runtime.state().dropout

    def _replayed_step(self, run, l, x, h, c, mh):
        if self._noisy():
            return self._layer_step(run.exprs[l], x, h, c, mh)
        return super()._replayed_step(run, l, x, h, c, mh)

    def _plain_steps(self, state, xs, loop):
        return None if self._noisy() else super()._plain_steps(state, xs, loop)

    def _layer_step(self, P, x, h, c, mh):
        if self._noisy():
            P = [dy.noise(p, self.weightnoise_std) for p in P]
        return super()._layer_step(P, x, h, c, mh)


class SparseLSTMBuilder(VanillaLSTMBuilder):
    """DyNet's SparseLSTMBuilder (experimental there; Narang et al., 2017): the vanilla LSTM
    whose W_x and W_h are multiplied by masks. Per layer get_parameters() gives [W_x, W_h, b,
    M_x, M_h] (masks of W's shapes, all ones at first), created in DyNet's order (W_x, W_h,
    M_x, M_h, b) in its "vanilla-lstm-builder" collection, so that files go both ways.
    ``set_sparsity(s)`` zeroes the masks at the fraction s of all the builder's W_x and W_h
    entries (every layer's, one threshold, as DyNet's) of the smallest magnitude; an entry
    masked before counts as 0 then, so that sparsity raised step by step keeps what it took.
    The masks enter each graph as constants: they take no gradient, and the masked weights
    get none either (checked against DyNet 2.1: masks, values and updates)."""

    def _make_layer(self, in_dim: int) -> list:
        H, m = self.hidden_dim, self.model
        # DyNet's creation order (the names /_0../_4 and its files): W_x, W_h, M_x, M_h, b
        Wx, Wh = m.add_parameters((4 * H, in_dim)), m.add_parameters((4 * H, H))
        Mx, Mh = m.add_parameters(Wx.shape(), ConstInitializer(1.0)), m.add_parameters(Wh.shape(), ConstInitializer(1.0))
        P = [Wx, Wh, m.add_parameters((4 * H,), ConstInitializer(0.0)), Mx, Mh]
        if self.ln_lstm:
            for n in (4 * H, 4 * H, H):
                P += [m.add_parameters((n,), ConstInitializer(1.0)), m.add_parameters((n,), ConstInitializer(0.0))]
        return P

    def get_parameters(self) -> list:
        """Per layer [W_x, W_h, b, M_x, M_h], as DyNet's."""
        return [list(P[:5]) for P in self.params]

    def _param_exprs(self, update: bool) -> list:
        out = []
        for P in self.params:
            Wx, Wh, b = [dy.parameter(p, update) for p in P[:3]]
            Mx, Mh = P[3:5]
            out.append([dy.cmult(Wx, dy.const_parameter(Mx)), dy.cmult(Wh, dy.const_parameter(Mh)), b]
                       + [dy.parameter(p, update) for p in P[5:]])
        return out

    def set_sparsity(self, sparsity: float) -> None:
        """Mask the fraction ``sparsity`` (in [0, 1]) of the weights of smallest magnitude."""
        if not 0 <= sparsity <= 1:
            raise ValueError(f"set_sparsity: sparsity must be in [0, 1], got {sparsity!r} [at {user_line()}]")
        pairs = [(P[k], P[k + 3]) for P in self.params for k in (0, 1)]
        mags = [np.abs(np.asarray(w.as_array()) * np.asarray(m.as_array())).ravel() for w, m in pairs]
        allm = np.concatenate(mags)
        n = int(round(float(sparsity) * allm.size))
        # the n smallest magnitudes (ties broken by position, so exactly n are masked)
        drop = np.zeros(allm.size, dtype=bool)
        drop[np.argsort(allm, kind="stable")[:n]] = True
        k = 0
        for (w, m), mag in zip(pairs, mags):
            keep = ~drop[k:k + mag.size]
            k += mag.size
            m.set_value(keep.reshape(w.shape()).astype(np.float64))


class CoupledLSTMBuilder(_Builder):
    """DyNet's CoupledLSTMBuilder (its C++ "LSTMBuilder"): input and forget gates coupled,
    full-matrix peepholes. Per layer, DyNet's order
    [W_xi, W_hi, W_ci, b_i, W_xo, W_ho, W_co, b_o, W_xc, W_hc, b_c] (W_x* (H, in), others
    (H, H), biases (H,) starting at 0), in an "lstm-builder" collection::

        i = σ(b_i + W_xi·x + W_hi·h_prev + W_ci·c_prev);  f = 1 − i
        c = f⊙c_prev + i⊙tanh(b_c + W_xc·x + W_hc·h_prev)
        o = σ(b_o + W_xo·x + W_ho·h_prev + W_co·c);  h = o⊙tanh(c)

    At the first step without given state the h_prev and c_prev terms are absent (c = i⊙tanh(..)).
    Dropout (``set_dropout(p, p_h=p, p_c=p)``) is variational: masks on x, h_prev and on the
    cell where it feeds the gates (c_prev and c), drawn once per ``initial_state()``."""

    _has_cell = True
    _variational = True
    _kind = "lstm"
    _peepholes = True

    def __init__(self, layers: int, input_dim: int, hidden_dim: int, model: ParameterCollection):
        super().__init__(layers, input_dim, hidden_dim, model)
        self.dropout_c = 0.0

    def _make_layer(self, in_dim: int) -> list:
        H, m = self.hidden_dim, self.model
        peep = (H, H) if self._peepholes else (H, 1)
        out = []
        for gate in ("i", "o", "c"):
            out.append(m.add_parameters((H, in_dim)))
            out.append(m.add_parameters((H, H)))
            if gate != "c":
                out.append(m.add_parameters(peep))
            out.append(m.add_parameters((H,), ConstInitializer(0.0)))
        return out

    def set_dropout(self, f: float, p_h: Optional[float] = None, p_c: Optional[float] = None) -> None:
        """Dropout rates on x (f), h_prev and the cell (p_h, p_c default to f)."""
        self.dropout = _rate("set_dropout", f)
        self.dropout_h = _rate("set_dropout", f if p_h is None else p_h)
        self.dropout_c = _rate("set_dropout", f if p_c is None else p_c)

    def disable_dropout(self) -> None:
        self.dropout = self.dropout_h = self.dropout_c = 0.0

    def _masks(self, batch_size: int = 1):
        if not runtime.state().dropout or not (self.dropout or self.dropout_h or self.dropout_c):
            return None, None
        H, L = self.hidden_dim, self.layers

        def mask(p, d):
            return dy.dropout(dy.ones(d, batch_size), p) if p > 0 else None
        mx = [mask(self.dropout, self.input_dim if l == 0 else H) for l in range(L)]
        # one (h mask, c mask) pair per layer: the step receives it as its "mh"
        mhc = [(mask(self.dropout_h, H), mask(self.dropout_c, H)) for _ in range(L)]
        return mx, mhc

    def _layer_step(self, P, x, h, c, mh):
        x2i, h2i, c2i, bi, x2o, h2o, c2o, bo, x2c, h2c, bc = P
        mh, mc = mh if mh is not None else (None, None)
        if h is None:
            i = dy.logistic(dy.affine_transform([bi, x2i, x]))
            c_new = dy.cmult(i, dy.tanh(dy.affine_transform([bc, x2c, x])))
            o_terms = [bo, x2o, x]
        else:
            if mh is not None:
                h = dy.cmult(h, mh)
            c_in = c if mc is None else dy.cmult(c, mc)
            i_terms = [bi, x2i, x, h2i, h]
            if self._peepholes:
                i_terms += [c2i, c_in]
            i = dy.logistic(dy.affine_transform(i_terms))
            w = dy.tanh(dy.affine_transform([bc, x2c, x, h2c, h]))
            c_new = c + dy.cmult(i, w - c)          # (1−i)⊙c + i⊙w with one product
            o_terms = [bo, x2o, x, h2o, h]
        if self._peepholes:
            o_terms += [c2o, c_new if mc is None else dy.cmult(c_new, mc)]
        o = dy.logistic(dy.affine_transform(o_terms))
        return dy.cmult(o, dy.tanh(c_new)), c_new


class FastLSTMBuilder(CoupledLSTMBuilder):
    """DyNet's FastLSTMBuilder: CoupledLSTMBuilder's parameters with (H, 1) peephole
    vectors W_ci, W_co, in a "fast-lstm-builder" collection. As in DyNet 2.1 the peepholes
    are created but not used (its source leaves them as a TODO), so the equations are
    CoupledLSTMBuilder's without the W_c* terms, and there is no dropout: ``set_dropout`` is
    accepted and ignored, as DyNet does."""

    _kind = "fast-lstm"
    _peepholes = False

    def _masks(self, batch_size: int = 1):
        return None, None


class BiRNNBuilder:
    """DyNet's BiRNNBuilder: ``num_layers`` pairs of one-layer builders made by
    ``rnn_builder_factory(1, in, hidden_dim // 2, collection)``, forward and backward, in a
    "birnn" sub-collection. Layer k reads the concatenated [forward; backward] outputs of
    layer k−1, so every output has shape (hidden_dim,); hidden_dim must be even.

    ``builder_layers``: a list of (forward, backward) builders to use instead (then the
    other arguments are ignored, as DyNet's)."""

    def __init__(self, num_layers: int, input_dim: int, hidden_dim: int, model: ParameterCollection,
                 rnn_builder_factory=None, builder_layers=None):
        if builder_layers is not None:
            self.builder_layers = [tuple(p) for p in builder_layers]
            if not self.builder_layers or any(len(p) != 2 for p in self.builder_layers):
                raise ValueError(f"BiRNNBuilder: builder_layers must be a non-empty list of (forward, backward) pairs "
                                 f"[at {user_line()}]")
            self.model = None
            self.spec = None
            return
        num_layers, input_dim, hidden_dim = (
            size_arg("BiRNNBuilder", name, v)
            for name, v in (("num_layers", num_layers), ("input_dim", input_dim), ("hidden_dim", hidden_dim)))
        if hidden_dim % 2:
            raise ValueError(f"BiRNNBuilder: hidden dimension must be even, got {hidden_dim} [at {user_line()}]")
        if not isinstance(model, ParameterCollection):
            raise TypeError(f"BiRNNBuilder: model must be a ParameterCollection, got {type(model).__name__} [at "
                            f"{user_line()}]")
        if not callable(rnn_builder_factory):
            raise TypeError(f"BiRNNBuilder: rnn_builder_factory must be a builder class (e.g. dy.LSTMBuilder) [at "
                            f"{user_line()}]")
        self.model = model.add_subcollection("birnn")
        self.spec = (num_layers, input_dim, hidden_dim, rnn_builder_factory, None)   # as DyNet's
        self.builder_layers = []
        d = input_dim
        for _ in range(num_layers):
            f = rnn_builder_factory(1, d, hidden_dim // 2, self.model)
            b = rnn_builder_factory(1, d, hidden_dim // 2, self.model)
            self.builder_layers.append((f, b))
            d = hidden_dim

    @staticmethod
    def from_spec(spec, model: ParameterCollection) -> "BiRNNBuilder":
        num_layers, input_dim, hidden_dim, factory = spec[:4]    # DyNet's 5th item: builder_layers, None
        return BiRNNBuilder(num_layers, input_dim, hidden_dim, model, factory)

    def param_collection(self) -> ParameterCollection:
        if self.model is None:
            raise GraphError("BiRNNBuilder.param_collection: this builder was made from builder_layers "
                             "and owns no collection")
        return self.model

    def whoami(self) -> str:
        return "BiRNNBuilder"

    def set_dropout(self, p: float) -> None:
        for f, b in self.builder_layers:
            f.set_dropout(p)
            b.set_dropout(p)

    def disable_dropout(self) -> None:
        for f, b in self.builder_layers:
            f.disable_dropout()
            b.disable_dropout()

    def _pass(self, f, b, es):
        fs = f.initial_state().transduce(es)
        bs = b.initial_state().transduce(es[::-1])
        return [dy.concatenate([x, y]) for x, y in zip(fs, reversed(bs))]

    def transduce(self, es: Sequence[Expression]) -> List[Expression]:
        """The top layer's [forward; backward] output for each input, (hidden_dim,) each."""
        es = list(es)
        for f, b in self.builder_layers:
            es = self._pass(f, b, es)
        return es

    def add_inputs(self, es: Sequence[Expression]) -> List[tuple]:
        """For each input, the pair (forward state, backward state) of the top layer
        (the backward state that has read the sequence from the end down to this input)."""
        es = list(es)
        for f, b in self.builder_layers[:-1]:
            es = self._pass(f, b, es)
        f, b = self.builder_layers[-1]
        fs = f.initial_state().add_inputs(es)
        bs = b.initial_state().add_inputs(es[::-1])
        return list(zip(fs, reversed(bs)))


class StackedRNNState:
    """DyNet's StackedRNNState: the states of several builders read as one stack (e.g. layers
    of different kinds or sizes): ``add_input(x)`` feeds x to the first state, its output to
    the second, and so on, and returns the next StackedRNNState. It is not BiRNNBuilder's
    state type (that one's ``add_inputs`` gives (forward, backward) RNNState pairs).

    DyNet 2.2's own class cannot be made (its constructor raises AttributeError: ``prev`` is
    both a method and a read-only attribute there); this one works as its source intends."""

    __slots__ = ("states", "_prev")

    def __init__(self, states: Sequence, prev: Optional["StackedRNNState"] = None):
        states = list(states)
        if not states or any(not hasattr(s, "add_input") or not hasattr(s, "output") for s in states):
            raise ValueError("StackedRNNState: states must be a non-empty list of RNN states "
                             f"(e.g. builder.initial_state()) [at {user_line()}]")
        if prev is not None and not isinstance(prev, StackedRNNState):
            raise TypeError(f"StackedRNNState: prev must be a StackedRNNState or None, got {type(prev).__name__} [at "
                            f"{user_line()}]")
        self.states, self._prev = states, prev

    def add_input(self, x: Expression) -> "StackedRNNState":
        """The stack after reading x (the first state's input size)."""
        nxt = []
        for s in self.states:
            nxt.append(s.add_input(x))
            x = nxt[-1].output()
        return StackedRNNState(nxt, self)

    def add_inputs(self, xs: Sequence[Expression]) -> List["StackedRNNState"]:
        """The stacks after each of xs, one by one."""
        out, cur = [], self
        for x in xs:
            cur = cur.add_input(x)
            out.append(cur)
        return out

    def output(self) -> Optional[Expression]:
        """The last state's output (None before any input when it had no initial vectors)."""
        return self.states[-1].output()

    def prev(self) -> Optional["StackedRNNState"]:
        return self._prev

    def h(self) -> list:
        """Per state, its ``h()`` tuple."""
        return [s.h() for s in self.states]

    def s(self) -> list:
        """Per state, its ``s()`` tuple."""
        return [s.s() for s in self.states]


# --- softmax builders ------------------------------------------------------------------
def _check_dims(where: str, **dims) -> list:
    return [size_arg(where, name, v) for name, v in dims.items()]


def _draw(logits: np.ndarray) -> int:
    """An index drawn with probabilities softmax(logits), from the runtime's generator."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    z = np.exp(z - z.max())
    u = runtime.state().rng.random() * z.sum()
    return int(min(np.searchsorted(np.cumsum(z), u, side="right"), len(z) - 1))


class SoftmaxBuilder:
    """DyNet's interface of softmax layers: p(c | x) for a representation x of shape
    (rep_dim,). Subclasses define ``full_logits``, ``neg_log_softmax`` and ``sample``;
    parameters live in ``param_collection()`` (the weight matrix first)."""

    rep_dim: int
    model: ParameterCollection

    def param_collection(self) -> ParameterCollection:
        return self.model

    def full_logits(self, x: Expression, update: bool = True) -> Expression:
        raise NotImplementedError(f"{type(self).__name__}.full_logits")

    def full_log_distribution(self, x: Expression, update: bool = True) -> Expression:
        """log p(c | x) for every class (log_softmax of ``full_logits``)."""
        return dy.log_softmax(self.full_logits(x, update))

    def neg_log_softmax(self, x: Expression, c: int, update: bool = True) -> Expression:
        raise NotImplementedError(f"{type(self).__name__}.neg_log_softmax")

    def sample(self, x: Expression) -> int:
        raise NotImplementedError(f"{type(self).__name__}.sample")

    def neg_log_softmax_batch(self, x, c, update: bool = True):
        """neg_log_softmax of each element of DyNet's minibatch x with its class c[k]."""
        from .minibatch import batch_of
        xs = list(x.xs) if type(x) is BatchedExpression else [x]
        cs = list(c)
        if len(xs) > 1 and len(xs) != len(cs):
            raise GraphError(f"{type(self).__name__}.neg_log_softmax_batch: {len(cs)} classes for a batch of "
                             f"{len(xs)} [at {user_line()}]")
        return batch_of(self.neg_log_softmax(xs[k if len(xs) > 1 else 0], ck, update) for k, ck in enumerate(cs))

    def _rep(self, x: Expression) -> Expression:
        if _shape_of(x) != (self.rep_dim,):
            raise GraphError(f"{type(self).__name__}: input must have shape ({self.rep_dim},), "
                             f"got {_shape_of(x)} [at {user_line()}]")
        return x

    @staticmethod
    def _affine(W, b, x: Expression, update: bool) -> Expression:
        W = dy.parameter(W, update)
        return W * x if b is None else dy.affine_transform([dy.parameter(b, update), W, x])


class StandardSoftmaxBuilder(SoftmaxBuilder):
    """DyNet's StandardSoftmaxBuilder: p(c | x) = softmax(W·x + b)[c] with W (num_labels,
    rep_dim) (Glorot) and b (num_labels,) (zeros; none when ``bias=False``), in a
    "standard-softmax-builder" collection. ``neg_log_softmax`` gives shape (1,), as DyNet.
    ``sample`` draws from softmax(W·x) also without bias (DyNet 2.2 then reads the raw
    logits as probabilities)."""

    def __init__(self, rep_dim: int, num_labels: int, model: ParameterCollection, bias: bool = True):
        rep_dim, num_labels = _check_dims("StandardSoftmaxBuilder", rep_dim=rep_dim, num_labels=num_labels)
        if not isinstance(model, ParameterCollection):
            raise TypeError(f"StandardSoftmaxBuilder: model must be a ParameterCollection, got {type(model).__name__} "
                            f"[at {user_line()}]")
        self.model = model.add_subcollection("standard-softmax-builder")
        self.W = self.model.add_parameters((num_labels, rep_dim))
        self.b = self.model.add_parameters((num_labels,), ConstInitializer(0.0)) if bias else None
        self.rep_dim, self.num_labels = int(rep_dim), int(num_labels)
        self.spec = (self.rep_dim, self.num_labels, bool(bias))

    @staticmethod
    def from_spec(spec, model: ParameterCollection) -> "StandardSoftmaxBuilder":
        return StandardSoftmaxBuilder(spec[0], spec[1], model, spec[2])

    def full_logits(self, x: Expression, update: bool = True) -> Expression:
        """W·x + b, shape (num_labels,)."""
        return self._affine(self.W, self.b, self._rep(x), update)

    def neg_log_softmax(self, x: Expression, c: int, update: bool = True) -> Expression:
        """−log p(c | x), shape (1,)."""
        if not isinstance(c, (int, np.integer)) or isinstance(c, bool) or not 0 <= c < self.num_labels:
            raise GraphError(f"StandardSoftmaxBuilder.neg_log_softmax: class {c!r} out of range "
                             f"for {self.num_labels} classes [at {user_line()}]")
        return dy.pickneglogsoftmax(self.full_logits(x, update), int(c))

    def sample(self, x: Expression) -> int:
        """A class drawn from p(· | x) (runs the forward pass up to x's logits)."""
        return _draw(self.full_logits(x, update=False).npvalue())


def _read_clusters(path: str, word_dict: Mapping[str, int]) -> List[list]:
    """[[class name, [word ids]], ...] in order of first appearance, from lines
    "class word" (space or tab separated, further fields ignored, blank lines skipped)."""
    if not isinstance(word_dict, Mapping):
        raise TypeError(f"ClassFactoredSoftmaxBuilder: word_dict must be a dict word -> id, "
                        f"got {type(word_dict).__name__} [at {user_line()}]")
    ids = {}
    for w, i in word_dict.items():
        if isinstance(i, bool) or not isinstance(i, (int, np.integer, float)) or i != int(i):
            raise ValueError(f"ClassFactoredSoftmaxBuilder: word_dict id of {w!r} must be an int, got {i!r} [at "
                             f"{user_line()}]")
        ids[w] = int(i)
    if sorted(ids.values()) != list(range(len(ids))):
        raise ValueError(f"ClassFactoredSoftmaxBuilder: word_dict must give the words unique ids 0..n-1 (as DyNet) "
                         f"[at {user_line()}]")
    clusters: Dict[str, list] = {}
    seen = set()
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 2:
                raise ValueError(f"ClassFactoredSoftmaxBuilder: {path}:{n}: expected 'class word', "
                                 f"got {line.strip()!r} [at {user_line()}]")
            c, w = parts[0], parts[1]
            if w not in ids:
                raise ValueError(f"ClassFactoredSoftmaxBuilder: {path}:{n}: word {w!r} is not in word_dict [at "
                                 f"{user_line()}]")
            if ids[w] in seen:
                raise ValueError(f"ClassFactoredSoftmaxBuilder: {path}:{n}: word {w!r} is listed twice [at "
                                 f"{user_line()}]")
            seen.add(ids[w])
            clusters.setdefault(c, []).append(ids[w])
    if not clusters:
        raise ValueError(f"ClassFactoredSoftmaxBuilder: {path} lists no words [at {user_line()}]")
    return [[c, ws] for c, ws in clusters.items()]


class ClassFactoredSoftmaxBuilder(SoftmaxBuilder):
    """DyNet's ClassFactoredSoftmaxBuilder: p(w | x) = p(c(w) | x)·p(w | c(w), x), with each
    word's class c(w) read from ``cluster_file`` (a line "class word" per word, space or tab
    separated, further fields ignored; classes numbered in order of first appearance, words
    within a class in file order; blank lines are skipped, DyNet rejects them) and word ids
    from ``word_dict`` (word -> id, ids 0..n-1; every word of the file must be in it).

    Parameters, in a "class-factored-softmax-builder" collection, in DyNet's order: r2c
    (classes, rep_dim) (Glorot), class bias (classes,) (zeros), then for each class of more
    than one word, in class order, its word matrix (words, rep_dim) and bias (words,); no
    biases when ``bias=False``. A single-word class has no word parameters: −log p(w | x) is
    then −log p(c | x).

    ``full_logits`` is DyNet's formula, not log-probabilities: entry w (w = 0 .. largest
    clustered id) is log p(c | x) + p(w | c, x), log p(c | x) alone in a single-word class,
    and −10000 for an id in no class; ``full_log_distribution`` is its log_softmax."""

    def __init__(self, rep_dim: int, cluster_file: str, word_dict: Mapping[str, int],
                 model: ParameterCollection, bias: bool = True):
        rep_dim, = _check_dims("ClassFactoredSoftmaxBuilder", rep_dim=rep_dim)
        if not isinstance(model, ParameterCollection):
            raise TypeError(f"ClassFactoredSoftmaxBuilder: model must be a ParameterCollection, "
                            f"got {type(model).__name__} [at {user_line()}]")
        self._setup(int(rep_dim), _read_clusters(cluster_file, word_dict), model, bool(bias))

    @classmethod
    def from_spec(cls, spec, model: ParameterCollection) -> "ClassFactoredSoftmaxBuilder":
        """The builder whose ``spec`` this is (it holds the clusters, not the file)."""
        obj = cls.__new__(cls)
        obj._setup(int(spec[0]), [[c, [int(w) for w in ws]] for c, ws in spec[1]], model, bool(spec[2]))
        return obj

    def _setup(self, rep_dim: int, clusters: list, model: ParameterCollection, bias: bool) -> None:
        self.rep_dim, self.clusters = rep_dim, clusters
        self.spec = (rep_dim, clusters, bias)
        self.model = m = model.add_subcollection("class-factored-softmax-builder")
        C = len(clusters)
        self.r2c = m.add_parameters((C, rep_dim))
        self.cbias = m.add_parameters((C,), ConstInitializer(0.0)) if bias else None
        self.rc2w, self.rc2wbias = [None] * C, [None] * C
        self.where = {}                     # word id -> (class, row in its class)
        for c, (_, ws) in enumerate(clusters):
            for r, w in enumerate(ws):
                self.where[w] = (c, r)
            if len(ws) > 1:
                self.rc2w[c] = m.add_parameters((len(ws), rep_dim))
                if bias:
                    self.rc2wbias[c] = m.add_parameters((len(ws),), ConstInitializer(0.0))
        self.num_words = max(self.where) + 1    # DyNet's full_logits size
        # full_logits gathers [word part of multi-word classes; class log-probs; -10000]
        multi = [c for c in range(C) if self.rc2w[c] is not None]
        order = [w for c in multi for w in clusters[c][1]]
        self._multi, self._multi_cls = multi, [self.where[w][0] for w in order]
        pos = {w: k for k, w in enumerate(order)}
        n = len(order)
        self._gather = [pos[w] if w in pos else (n + self.where[w][0] if w in self.where else n + C)
                        for w in range(self.num_words)]
        self._missing = len(self.where) < self.num_words

    def _class_index(self, where: str, c) -> int:
        if not isinstance(c, (int, np.integer)) or isinstance(c, bool) or not 0 <= c < len(self.clusters):
            raise GraphError(f"ClassFactoredSoftmaxBuilder.{where}: class {c!r} out of range for "
                             f"{len(self.clusters)} classes [at {user_line()}]")
        if self.rc2w[c] is None:
            raise GraphError(f"ClassFactoredSoftmaxBuilder.{where}: class {c} ({self.clusters[c][0]!r}) has a "
                             f"single word and no subclass parameters [at {user_line()}]")
        return int(c)

    def class_logits(self, x: Expression, update: bool = True) -> Expression:
        """r2c·x + class bias, shape (classes,)."""
        return self._affine(self.r2c, self.cbias, self._rep(x), update)

    def class_log_distribution(self, x: Expression, update: bool = True) -> Expression:
        """log p(c | x) for every class, shape (classes,)."""
        return dy.log_softmax(self.class_logits(x, update))

    def subclass_logits(self, x: Expression, classid: int, update: bool = True) -> Expression:
        """The word logits of class ``classid`` (of more than one word), shape (its words,)."""
        c = self._class_index("subclass_logits", classid)
        return self._affine(self.rc2w[c], self.rc2wbias[c], self._rep(x), update)

    def subclass_log_distribution(self, x: Expression, classid: int, update: bool = True) -> Expression:
        """log p(w | classid, x) for the words of that class, in file order."""
        return dy.log_softmax(self.subclass_logits(x, classid, update))

    def neg_log_softmax(self, x: Expression, c: int, update: bool = True) -> Expression:
        """−log p(word c | x) = −log p(class | x) − log p(c | class, x), shape (1,)."""
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or int(c) not in self.where:
            raise GraphError(f"ClassFactoredSoftmaxBuilder.neg_log_softmax: word id {c!r} is in no class "
                             f"of the cluster file [at {user_line()}]")
        k, r = self.where[int(c)]
        loss = dy.pickneglogsoftmax(self.class_logits(x, update), k)
        if self.rc2w[k] is None:
            return loss
        return loss + dy.pickneglogsoftmax(self._affine(self.rc2w[k], self.rc2wbias[k], x, update), r)

    def full_logits(self, x: Expression, update: bool = True) -> Expression:
        """DyNet's full_logits (see the class), shape (largest clustered word id + 1,)."""
        cls = self.class_log_distribution(x, update)
        parts = []
        if self._multi:
            words = [dy.softmax(self._affine(self.rc2w[c], self.rc2wbias[c], x, update)) for c in self._multi]
            w = words[0] if len(words) == 1 else dy.concatenate(words)
            parts.append(w + dy.select_rows(cls, self._multi_cls))
        parts.append(cls)
        if self._missing:
            parts.append(dy.constant((1,), -10000.0))
        return dy.select_rows(parts[0] if len(parts) == 1 else dy.concatenate(parts), self._gather)

    def sample(self, x: Expression) -> int:
        """A word id drawn from p(· | x): a class, then a word of it (runs the forward pass)."""
        c = _draw(self.class_logits(x, update=False).npvalue())
        ws = self.clusters[c][1]
        if len(ws) == 1:
            return ws[0]
        return ws[_draw(self._affine(self.rc2w[c], self.rc2wbias[c], x, False).npvalue())]
