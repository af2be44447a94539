"""RNN builders (DyNet's VanillaLSTMBuilder / LSTMBuilder, SimpleRNNBuilder, GRUBuilder),
written only with the public expression functions.

Each step is a handful of nodes whose signatures depend only on the builder's
parameters, so step t of every sequence in a graph shares signatures and the
scheduler batches them: one GEMM per affine per step for all sequences together.

Shapes: inputs x are (input_dim,) vectors, hidden and cell states (hidden_dim,).
Parameters live in a subcollection of the model, in DyNet's order per layer."""
from __future__ import annotations

import numbers
import operator
import weakref
from typing import List, Optional, Sequence

import numpy as np

from . import api as dy
from . import recipes, runtime
from .api_reduce import layer_norm
from .errors import GraphError, called, user_line
from .graph import Expression
from .minibatch import BatchedExpression, batch_of, run_per_element
from .params import ConstInitializer, Parameter, ParameterCollection

__all__ = ["RNNState", "VanillaLSTMBuilder", "LSTMBuilder", "SimpleRNNBuilder", "GRUBuilder"]


_I, _CG = operator.attrgetter("i"), operator.attrgetter("cg")


def _shape_of(x) -> tuple:
    if type(x) is BatchedExpression:        # DyNet's minibatch: the shape of one element
        x = x.xs[0]
    if type(x) is not Expression:
        raise TypeError(f"{called() or 'builder'}: expected an Expression, got {type(x).__name__} "
                        f"[at {user_line()}]")
    if not getattr(x.cg, "alive", True):    # now, not at the step that would read it
        raise dy._stale(x)
    return dy._shape(x)                     # (refuses a node cg_revert dropped)


def _mask_exprs(masks):
    """The Expressions (or batches' elements) among a sequence's dropout masks."""
    for ms in masks:
        for m in ms or ():
            for e in (m if type(m) is tuple else (m,)):      # CoupledLSTM: (h mask, c mask) per layer
                if type(e) is BatchedExpression:
                    yield from e.xs
                elif e is not None:
                    yield e


class _Run:
    """What one initial_state() fixes for a sequence: the parameter nodes of the
    current graph and the dropout masks (the same along the sequence, unless
    set_dropout_masks() draws new ones). pending: the masks are drawn at the first input,
    one per element of its batch, as DyNet draws them (set_dropout_masks(x's batch size))."""

    __slots__ = ("exprs", "pids", "masks_x", "masks_h", "pending", "__weakref__")

    def __init__(self, exprs, masks_x=None, masks_h=None, pending=False):
        self.exprs = exprs
        self.pids = [tuple([e.i for e in P]) for P in exprs]    # node ids, for recipes.step
        self.masks_x = masks_x
        self.masks_h = masks_h
        self.pending = pending

    def set_masks(self, masks) -> None:
        """masks: (on x, on h), lists per layer (None where off) or None. The graph keeps the
        sequence under the masks' first node, so that a cg_revert that drops them makes the
        next input draw them again (drop_masks)."""
        self.masks_x, self.masks_h = masks
        self.pending = False
        first = min((e.i for e in _mask_exprs(masks)), default=None)
        g = dy._S.graph
        kept = getattr(g, "_masked", None)      # (a vertex function's tracer keeps none: it refuses reverts)
        if kept is not None:
            if first is None:
                kept.pop(self, None)
            else:
                kept[self] = first

    def drop_masks(self) -> None:
        self.masks_x = self.masks_h = None
        self.pending = True

    def cell(self, c, H):
        """c as the (H,) cell vector: itself, or the slice of an lstm_cell output."""
        if _shape_of(c) == (H,):
            return c
        if type(c) is BatchedExpression:        # DyNet's minibatch: each element's
            return batch_of([self.cell(e, H) for e in c.xs])
        # one slice per cell node, kept by the graph, whose revert() drops it with the cell
        cells = c.cg._cells
        e = cells.get(c.i)
        if e is None:
            e = cells[c.i] = dy.pickrange(c, H, 2 * H)
        return e


class RNNState:
    """An immutable point of a sequence: ``add_input`` returns the next state.

    ``hs`` / ``cs`` hold one (hidden_dim,) expression per layer, or are None for the
    initial state without given vectors (the first step then skips the recurrent terms)."""

    __slots__ = ("_b", "_run", "_prev", "_hs", "_cs")

    def __init__(self, builder: "_Builder", run: _Run, prev: Optional["RNNState"],
                 hs: Optional[list], cs: Optional[list]):
        self._b, self._run, self._prev, self._hs, self._cs = builder, run, prev, hs, cs

    def add_input(self, x: Expression) -> "RNNState":
        """The state after reading x of shape (input_dim,)."""
        return self._b._step(self, x)

    def add_inputs(self, xs: Sequence[Expression]) -> List["RNNState"]:
        """The states after each of xs (one per input)."""
        out, s = [], self
        for x in xs:
            s = s.add_input(x)
            out.append(s)
        return out

    def transduce(self, xs: Sequence[Expression]) -> List[Expression]:
        """The outputs (top-layer h, (hidden_dim,)) after each of xs."""
        xs = list(xs)               # (an Expression: its rows, as DyNet's, and as add_inputs)
        out = self._b._transduce(self, xs)
        return out if out is not None else [s.output() for s in self.add_inputs(xs)]

    def output(self) -> Optional[Expression]:
        """Top-layer h (hidden_dim,); None for an initial state without vectors (as DyNet)."""
        return self._hs[-1] if self._hs else None

    def h(self) -> tuple:
        """h of every layer, bottom first (empty for an initial state without vectors)."""
        return tuple(self._hs) if self._hs else ()

    def s(self) -> tuple:
        """The full state: LSTM (c_1..c_L, h_1..h_L), otherwise h_1..h_L."""
        if not self._hs:
            return ()
        if self._cs is None:
            return tuple(self._hs)
        H = self._b.hidden_dim
        return tuple([self._run.cell(c, H) for c in self._cs]) + tuple(self._hs)

    def prev(self) -> Optional["RNNState"]:
        return self._prev

    def b(self) -> "_Builder":
        return self._b

    def set_h(self, es: Sequence[Expression]) -> "RNNState":
        """A successor state whose h's are es (LSTM cells carry over from this state)."""
        hs = self._b._check_vecs(list(es), self._b.layers, "set_h")
        cs = self._cs if self._cs is not None else (self._b._zero_cells() if self._b._has_cell else None)
        return RNNState(self._b, self._run, self, hs, cs)

    def set_s(self, es: Sequence[Expression]) -> "RNNState":
        """A successor state with the full state es (see ``s()`` for the layout); an LSTM
        given its cells alone keeps this state's h's (as DyNet's)."""
        es, b = list(es), self._b
        if b._has_cell and len(es) == b.layers and self._hs:
            return RNNState(b, self._run, self, list(self._hs), b._check_vecs(es, b.layers, "set_s"))
        hs, cs = b._split_state(es, "set_s")
        return RNNState(b, self._run, self, hs, cs)


def size_arg(where: str, name: str, v) -> int:
    """A builder's size as DyNet reads it: an int, or a number it truncates (WEMBED_SIZE/2 is
    32.0 in Python 3); at least 1. Booleans and non-numbers are refused."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, numbers.Real)) or \
            not np.isfinite(v) or int(v) < 1:
        raise ValueError(f"{where}: {name} must be a positive int, got {v!r} [at {user_line()}]")
    return int(v)


def _graph_key(g):
    """A graph's number (a vertex tracer, which has none: its id)."""
    return getattr(g, "gid", None) or id(g)


class _Builder:
    """Common part: parameters per layer, dropout settings, initial states, stacking."""

    _has_cell = False
    _variational = False   # True: dropout masks fixed per sequence (built in _masks)
    _kind = "rnn"

    def __init__(self, layers: int, input_dim: int, hidden_dim: int, model: ParameterCollection):
        layers, input_dim, hidden_dim = (size_arg(type(self).__name__, name, v) for name, v in
                                         (("layers", layers), ("input_dim", input_dim), ("hidden_dim", hidden_dim)))
        if not isinstance(model, ParameterCollection):
            raise TypeError(f"{type(self).__name__}: model must be a ParameterCollection, got {type(model).__name__} "
                            f"[at {user_line()}]")
        self.layers, self.input_dim, self.hidden_dim = layers, input_dim, hidden_dim
        self.spec = (layers, input_dim, hidden_dim)
        self.model = model.add_subcollection(self._kind + "-builder")
        self.params: list = [self._make_layer(input_dim if l == 0 else hidden_dim) for l in range(layers)]
        self.dropout = 0.0
        self.dropout_h = 0.0
        self._last_run = None     # weak reference to the last initial_state()'s _Run (set_dropout_masks)
        self._state_gid = None    # the graph of the last initial_state() (get_parameter_expressions)

    # --- to be defined by each builder ------------------------------------------
    def _make_layer(self, in_dim: int) -> list:
        raise NotImplementedError

    def _layer_step(self, P: list, x: Expression, h, c, mh):
        """One layer: returns (h, c) (c None for cell-less builders)."""
        raise NotImplementedError

    # --- DyNet API ------------------------------------------------------------------
    def param_collection(self) -> ParameterCollection:
        return self.model

    def get_parameters(self) -> list:
        """Per layer, the parameters in DyNet's order."""
        return [list(P) for P in self.params]

    def get_parameter_expressions(self) -> list:
        """Per layer, the expressions of get_parameters() in the current graph, where
        initial_state() has loaded them: before it, a ValueError, as DyNet's."""
        g = dy._S.graph
        if g is None or _graph_key(g) != self._state_gid:
            raise ValueError(f"{type(self).__name__}.get_parameter_expressions: call initial_state() in this "
                             f"graph first (the expressions are the parameters it loads) [at {user_line()}]")
        return [[dy.parameter(p) for p in P] for P in self.get_parameters()]

    def whoami(self) -> str:
        return type(self).__name__

    @classmethod
    def from_spec(cls, spec, model: ParameterCollection) -> "_Builder":
        """A new builder like the one whose ``spec`` this is, its parameters in model (for dy.load)."""
        layers, input_dim, hidden_dim = spec[:3]
        return cls(layers, input_dim, hidden_dim, model)

    def set_dropout(self, f: float, p_h: Optional[float] = None) -> None:
        """Dropout rate f on each layer's input (and, for the LSTM, on the recurrent h:
        p_h, default f). Applied only while ``dy.set_dropout`` is on."""
        for v in (f, p_h):
            if v is not None and not 0 <= v < 1:
                raise ValueError(f"set_dropout: rate must be in [0, 1), got {v} [at {user_line()}]")
        self.dropout = float(f)
        self.dropout_h = float(f if p_h is None else p_h)

    def disable_dropout(self) -> None:
        self.dropout = self.dropout_h = 0.0

    def initial_state(self, vecs: Optional[Sequence[Expression]] = None, update: bool = True) -> RNNState:
        """Start a sequence in the current graph. vecs: None (zero state), or the full
        state as ``s()`` lays it out: LSTM [c_1..c_L, h_1..h_L], else [h_1..h_L], each (hidden_dim,)."""
        run = _Run(self._param_exprs(update), pending=True)
        self._state_gid = _graph_key(run.exprs[0][0].cg) if run.exprs and run.exprs[0] else None
        self._last_run = weakref.ref(run)
        if vecs is None:
            return RNNState(self, run, None, None, None)
        hs, cs = self._split_state(list(vecs), "initial_state")
        return RNNState(self, run, None, hs, cs)

    def initial_state_from_raw_vectors(self, vecs=None, update: bool = True) -> RNNState:
        """As ``initial_state`` with lists or arrays instead of expressions."""
        return self.initial_state(None if vecs is None else [dy.inputVector(v) for v in vecs], update)

    # --- internals -------------------------------------------------------------------
    def _param_exprs(self, update: bool) -> list:
        """Per layer, the expressions the steps read (_layer_step's P) in this graph."""
        return [[dy.parameter(p, update) for p in P] for P in self.params]

    def _masks(self, batch_size: int = 1):
        """Variational builders: one mask per layer on its input x (rate dropout) and on h_prev
        (rate dropout_h), drawn once per sequence; (None, None) when off. batch_size > 1:
        DyNet's minibatch, a mask per element."""
        if not self._variational or not runtime.state().dropout or (self.dropout == 0 and self.dropout_h == 0):
            return None, None
        H = self.hidden_dim

        def masks(p, dims):
            return [dy.dropout(dy.ones(d, batch_size), p) for d in dims] if p > 0 else [None] * len(dims)
        mx = masks(self.dropout, [self.input_dim] + [H] * (self.layers - 1))
        mh = masks(self.dropout_h, [H] * self.layers)
        return mx, mh

    def _zero_cells(self) -> list:
        return [dy.zeros(self.hidden_dim) for _ in range(self.layers)]

    def _check_vecs(self, es: list, n: int, where: str) -> list:
        if len(es) != n:
            raise GraphError(f"{type(self).__name__}.{where}: needs {n} vectors, got {len(es)} [at {user_line()}]")
        es = [dy.parameter(e) if isinstance(e, Parameter) else e for e in es]     # as DyNet takes them
        es = [dy.reshape(e, (self.hidden_dim,)) if _shape_of(e) == (self.hidden_dim, 1) else e for e in es]
        for e in es:
            if _shape_of(e) != (self.hidden_dim,):
                raise GraphError(f"{type(self).__name__}.{where}: state vectors must have shape "
                                 f"({self.hidden_dim},), got {_shape_of(e)} [at {user_line()}]")
        return es

    def _split_state(self, es: list, where: str):
        """(hs, cs) of state vectors given as DyNet takes them: an LSTM's cells then its h's,
        or its cells alone (h = 0, as DyNet's); one h per layer for the others."""
        L = self.layers
        if self._has_cell:
            if len(es) == L:
                cs = self._check_vecs(es, L, where)
                return [dy.zeros(self.hidden_dim) for _ in range(L)], cs
            es = self._check_vecs(es, 2 * L, where)
            return es[L:], es[:L]
        return self._check_vecs(es, L, where), None

    def _first_input(self, run: _Run, x) -> None:
        """Draw the sequence's dropout masks if x is its first input: a mask per element of
        x's batch, so that the sentences of a minibatch are not dropped alike."""
        if run.pending:
            run.set_masks(self._masks(len(x.xs) if type(x) is BatchedExpression else 1))

    def _step(self, state: RNNState, x: Expression) -> RNNState:
        self._first_input(state._run, x)
        r = self._plain_steps(state, [x], False)
        if r is not None:       # the step's template, found as transduce finds it
            return RNNState(self, state._run, state, r[1], r[2] if self._has_cell else None)
        if isinstance(x, Parameter):                 # DyNet takes a parameter for its expression
            x = dy.parameter(x)
        if _shape_of(x) == (self.input_dim, 1):      # a column passes for a vector, as in DyNet
            x = dy.reshape(x, (self.input_dim,))
        if _shape_of(x) != (self.input_dim,):
            raise GraphError(f"{type(self).__name__}.add_input: input must have shape ({self.input_dim},), "
                             f"got {_shape_of(x)} [at {user_line()}]")
        run = state._run
        hs, cs = [], []
        for l in range(self.layers):
            h = state._hs[l] if state._hs else None
            c = state._cs[l] if state._cs is not None else None
            mx = run.masks_x[l] if run.masks_x is not None else None
            if mx is not None:
                x = dy.cmult(x, mx)
            elif self.dropout > 0 and not self._variational:
                x = dy.dropout(x, self.dropout)
            mh = run.masks_h[l] if run.masks_h is not None else None
            h, c = self._replayed_step(run, l, x, h, c, mh)
            hs.append(h)
            cs.append(c)
            x = h
        return RNNState(self, run, state, hs, cs if self._has_cell else None)

    def _replayed_step(self, run: _Run, l: int, x, h, c, mh):
        """_layer_step, its nodes appended from a per-graph template after the first step of
        each form (recipes.py): a step's nodes then cost a fraction of building them one by
        one. Inputs from another graph take the normal path, which reports them."""
        if BatchedExpression in (type(x), type(h), type(c), type(mh)):
            steps = self._batched_steps(run, l, x, h, c, mh)
            if steps is not None:
                return steps
            # DyNet's minibatch: each element's step, from the template as any instance's;
            # the elements' inputs have one set of shapes, so after the first element's step
            # the others replay its template without looking it up
            kept = []

            def each(*a):
                ins = self._step_ins(run, l, *a)
                if kept and ins is not None:
                    t, form, shapes = kept[0]
                    g = dy._S.graph
                    if ins[1] == form and all(map(operator.is_, map(g.shapes.__getitem__, ins[0]), shapes)):
                        return t(g, *ins[0])
                out = self._replayed_step(run, l, *a)
                if ins is not None and not kept:
                    g = dy._S.graph
                    t = recipes.replay_of(g, (self, l, ins[1]), ins[0])
                    if t:       # (shapes are interned: an element's inputs are this set or not)
                        kept.append((t, ins[1], [g.shapes[i] for i in ins[0]]))
                return out
            return run_per_element(f"{type(self).__name__}.add_input", each, (x, h, c, mh))
        r = self._step_ins(run, l, x, h, c, mh)
        if r is None:
            return self._layer_step(run.exprs[l], x, h, c, mh)
        ins, form = r
        return recipes.step(x.cg, (self, l, form), ins, self._layer_step, run.exprs[l], x, h, c, mh)

    def _batched_steps(self, run: _Run, l: int, x, h, c, mh):
        """(h, c) of a minibatch's step (DyNet's hand batching: x, h, c batches of one size, or
        unbatched, which every element shares), every element's nodes appended by one call of
        its template's loop (recipes.many_of); None where the per-element path must run: no
        template yet (the first step records it), dropout masks, inputs of other shapes."""
        if mh is not None:
            return None
        ops = [v.xs if type(v) is BatchedExpression else v for v in (x, h, c)]
        sizes = {len(v) for v in ops if type(v) is list}
        if len(sizes) != 1:
            return None
        B = sizes.pop()
        els = [v if type(v) is list else [v] * B for v in ops]
        ins = self._step_ins(run, l, els[0][0], els[1][0], els[2][0], None)
        g = dy._S.graph
        t = recipes.replay_of(g, (self, l, ins[1]), ins[0]) if ins is not None else None
        if not t:
            return None
        shapes, fixed = g.shapes, len(run.pids[l])
        cols = []
        for v, i0 in zip([v for v in els if v[0] is not None], ins[0][fixed:]):
            # every element an Expression of g, of the first one's shape (interned: one object)
            if set(map(type, v)) != {Expression} or set(map(_CG, v)) != {g}:
                return None
            col = list(map(_I, v))
            if set(map(id, map(shapes.__getitem__, col))) != {id(shapes[i0])}:
                return None
            cols.append(col)
        outs = recipes.many_of(t, fixed)(g, ins[0][:fixed], list(zip(*cols)))
        return tuple(batch_of(z) if z[0] is not None else None for z in zip(*outs))

    @staticmethod
    def _step_ins(run: _Run, l: int, x, h, c, mh):
        """(the node ids a step of layer l reads, its form: which of h, c, mh there are), or
        None where an input is not an Expression of the current graph (the normal path then
        reports it)."""
        g = dy._S.graph
        if type(x) is not Expression or x.cg is not g or run.exprs[l][0].cg is not g:
            return None
        ins = run.pids[l] + (x.i,)
        form = 0                  # (unrolled: this runs per step)
        if h is not None:
            if type(h) is not Expression or h.cg is not g:
                return None
            ins += (h.i,)
            form = 1
        if c is not None:
            if type(c) is not Expression or c.cg is not g:
                return None
            ins += (c.i,)
            form |= 2
        if mh is not None:
            if type(mh) is not Expression or mh.cg is not g:
                return None
            ins += (mh.i,)
            form |= 4
        return ins, form

    def _transduce(self, state: RNNState, xs: list) -> Optional[List[Expression]]:
        """transduce(xs) from state without a state object and its checks per step, for the
        plain case: no dropout, state and every x in the current graph, x of shape
        (input_dim,); else None. The same nodes as add_input's: the step templates are
        looked up once per (layer, form, state shapes) instead of once per step: a third
        less build time per BiLSTM step (4.7 -> 3.2 us)."""
        if xs:
            self._first_input(state._run, xs[0])
        r = self._plain_steps(state, xs, True)
        return None if r is None else r[0]

    def _plain_steps(self, state: RNNState, xs: list, loop: bool):
        """(top-layer outputs, hs, cs) after xs from state on the plain path (see _transduce),
        or None where it does not apply. loop: the steps after the first steady one may run as
        one loop (recipes.run_of), which gives only the outputs (hs and cs are then None)."""
        run = state._run
        g = dy._S.graph
        if g is None or run.masks_x is not None or run.masks_h is not None or (self.dropout > 0 and not self._variational):
            return None
        L = self.layers
        hs = list(state._hs) if state._hs else [None] * L
        cs = list(state._cs) if state._cs is not None else [None] * L
        for P in run.exprs:
            if P[0].cg is not g:
                return None
        for v in hs + cs:
            if v is not None and (type(v) is not Expression or v.cg is not g):
                return None
        shapes, shape = g.shapes, (self.input_dim,)
        for x in xs:
            if type(x) is not Expression or x.cg is not g or shapes[x.i] != shape:
                return None
        pids, step = run.pids, self._layer_step
        # (layer, h shape, c shape) -> the step's template or False, kept per graph and builder:
        # a template fits any inputs of its shapes, and a char BiLSTM transduces one short
        # word per call, so per call its first steps would look their templates up again
        memo = getattr(g, "_transduce", None)
        if memo is None:            # a vertex function's tracer: it records every node anyway
            return None
        known = memo.get(self)
        if known is None:
            known = memo[self] = {}
        out = []
        for s, x in enumerate(xs):
            if loop:
                steady = self._steady(known, pids, hs, cs, shapes)
                if steady is not None:
                    # every layer's step has h and c of the shapes it reads: every later
                    # step is the same, so the rest of the sequence runs in one loop
                    return out + steady[0](g, steady[1], xs[s:]), None, None
            for l in range(L):
                h, c = hs[l], cs[l]
                if h is None and c is None:
                    form, ins, k = 0, pids[l] + (x.i,), (l, None, None)
                elif h is None:
                    form, ins, k = 2, pids[l] + (x.i, c.i), (l, None, shapes[c.i])
                elif c is None:
                    form, ins, k = 1, pids[l] + (x.i, h.i), (l, shapes[h.i], None)
                else:
                    form, ins, k = 3, pids[l] + (x.i, h.i, c.i), (l, shapes[h.i], shapes[c.i])
                t = known.get(k)
                if t:
                    h, c = t(g, *ins)
                else:
                    h, c = recipes.step(g, (self, l, form), ins, step, run.exprs[l], x, h, c, None)
                    if t is None:
                        t = recipes.replay_of(g, (self, l, form), ins)
                        if t is not None:       # (None: this step could not be a template)
                            known[k] = t
                hs[l], cs[l] = h, c
                x = h
            out.append(x)
        return out, hs, cs

    @staticmethod
    def _steady(known, pids, hs, cs, shapes):
        """(recipes.run_of's function, its ins) when every layer's step template is known
        (in `known`) and gives h and c of the shapes of the h and c it reads (the state's,
        hs and cs), else None."""
        ts, ins = [], ()
        for l, (h, c) in enumerate(zip(hs, cs)):
            if h is None:
                return None
            k = (l, shapes[h.i], None if c is None else shapes[c.i])
            t = known.get(k)
            if not t or (l,) + t.out_shapes != k:
                return None
            ts.append(t)
            ins += pids[l] + ((-1, h.i) if c is None else (-1, h.i, c.i))   # -1: x, set per step
        P = len(pids[0])
        carry = ((0, P + 1),) if cs[0] is None else ((0, P + 1), (1, P + 2))
        return recipes.run_of(tuple(ts), P, carry, 0), ins


class VanillaLSTMBuilder(_Builder):
    """DyNet's vanilla LSTM. Per layer: W_x (4H, in), W_h (4H, H), b (4H), gates in the
    order i, f, o, g::

        a = b + W_x·x + W_h·h_prev          (one affine: two GEMMs per step for the batch)
        i, f, o = σ(a[0:H]), σ(a[H:2H] + forget_bias), σ(a[2H:3H]);  g = tanh(a[3H:4H])
        c = f⊙c_prev + i⊙g;  h = o⊙tanh(c)

    b starts at 0 and forget_bias (default 1) is a constant of every step, as in DyNet, so
    b's values, weight decay and weights copied from DyNet agree with DyNet's (the step's
    fused cell adds it: no node of its own). Dropout is
    DyNet's variational dropout: masks on x and h_prev drawn once per initial_state(), at
    the sequence's first input and one per element of its batch, as DyNet's (each sequence,
    an instance, has its own masks).

    ``ln_lstm=True``: DyNet's layer-normalised LSTM. Each layer has six more parameters,
    created after its b: g_h, b_h, g_x, b_x (4H) and g_c, b_c (H), gains starting at 1 and
    biases at 0, and with LN(v; g, β) = g⊙(v - mean v)/(std v + 1e-8) + β::

        a = b + LN(W_x·x; g_x, b_x) + LN(W_h·h_prev; g_h, b_h)      (no h term at a first step)
        c = f⊙c_prev + i⊙g (as above);  h = o⊙tanh(LN(c; g_c, b_c))

    get_parameters() gives [W_x, W_h, b] per layer, as DyNet; param_collection() holds all
    nine per layer in the order DyNet's model lists them. (DyNet 2.1 puts the six into the
    model given to the builder, named /_0, /_1, ..., so that its builder collection lacks them;
    here they are in the builder's collection, so saving the builder keeps them.)"""

    _has_cell = True
    _variational = True
    _kind = "vanilla-lstm"

    def __init__(self, layers: int, input_dim: int, hidden_dim: int, model: ParameterCollection,
                 ln_lstm: bool = False, forget_bias: float = 1.0):
        self.ln_lstm = bool(ln_lstm)
        self.forget_bias = float(forget_bias)
        super().__init__(layers, input_dim, hidden_dim, model)
        self.spec = (self.layers, self.input_dim, self.hidden_dim, self.ln_lstm, self.forget_bias)   # as DyNet's
        if self.ln_lstm:
            # an instance attribute: the plain builder's steps do not test for layer norm
            self._layer_step = self._ln_layer_step

    @classmethod
    def from_spec(cls, spec, model: ParameterCollection) -> "VanillaLSTMBuilder":
        layers, input_dim, hidden_dim = spec[:3]
        return cls(layers, input_dim, hidden_dim, model, *spec[3:])

    def get_parameters(self) -> list:
        """Per layer [W_x, W_h, b] (DyNet's list leaves out ln_lstm's gains and biases)."""
        return [list(P[:3]) for P in self.params]

    def set_dropouts(self, d: float, d_r: float) -> None:
        """DyNet's name for set_dropout(d, d_r): rates on the input and on the recurrent h."""
        self.set_dropout(d, d_r)

    def set_dropout_masks(self, batch_size: int = 1) -> None:
        """New dropout masks for the sequence the last initial_state() began (in the current
        graph): its following steps use them, as DyNet's. Without it, the sequence's first
        input draws them, one per element of its batch.
        batch_size: a DyNet minibatch's size, for a mask per element."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"set_dropout_masks: batch_size must be a positive int, got {batch_size!r} [at "
                             f"{user_line()}]")
        run = self._last_run() if self._last_run is not None else None
        if run is not None and run.exprs[0][0].cg is dy._S.graph:
            run.set_masks(self._masks(batch_size))

    def _make_layer(self, in_dim: int) -> list:
        H = self.hidden_dim
        m = self.model
        # created in DyNet's order (W_x, W_h, b), so parameters_list() and names match its
        Wx, Wh = m.add_parameters((4 * H, in_dim)), m.add_parameters((4 * H, H))
        P = [Wx, Wh, m.add_parameters((4 * H,), ConstInitializer(0.0))]
        if self.forget_bias:    # autobatch's first files held b with the forget bias in it
            P[2].npz_offset = (H, 2 * H, self.forget_bias)
        if self.ln_lstm:        # DyNet's order: g_h, b_h, g_x, b_x, g_c, b_c
            for n in (4 * H, 4 * H, H):
                P += [m.add_parameters((n,), ConstInitializer(1.0)), m.add_parameters((n,), ConstInitializer(0.0))]
        return P

    def _layer_step(self, P, x, h, c, mh):
        Wx, Wh, b = P
        H = self.hidden_dim
        # b + W_x·x does not depend on the previous step: as its own node it runs for every
        # step of every sequence in one GEMM; the step adds W_h·h to it (matmul_add)
        a = dy.affine_transform([b, Wx, x])
        # read by this step's next node: the batch of all steps' projections is laid out
        # step by step, so that each step reads its rows as one block (executor._by_reader)
        g = a.cg if type(a) is Expression else None
        laid = getattr(g, "by_reader", None)
        if laid is not None:
            laid.add(g.sigs[a.i])
        if h is not None:
            if mh is not None:
                h = dy.cmult(h, mh)
            a = dy.affine_transform([a, Wh, h])
        # one fused node for the gates (see ops/cells.py); the state keeps the cell node
        # [h; c] itself as "c" (the next step reads its second half), and s() slices it
        y = dy.lstm_cell(a, c, self.forget_bias)
        return dy.pickrange(y, 0, H), y

    def _ln_layer_step(self, P, x, h, c, mh):
        Wx, Wh, b, gh, bh, gx, bx, gc, bc = P
        H = self.hidden_dim
        a = layer_norm(Wx * x, gx, bx) + b        # batched over all steps, as above
        if h is not None:
            if mh is not None:
                h = dy.cmult(h, mh)
            a = a + layer_norm(Wh * h, gh, bh)
        # lstm_cell gives the cell (its h, o⊙tanh(c), is not the normalised one)
        y = dy.lstm_cell(a, c, self.forget_bias)
        o = dy.logistic(dy.pickrange(a, 2 * H, 3 * H))
        return dy.cmult(o, dy.tanh(layer_norm(dy.pickrange(y, H, 2 * H), gc, bc))), y


LSTMBuilder = VanillaLSTMBuilder


class SimpleRNNBuilder(_Builder):
    """Elman RNN. Per layer: W_x (H, in), W_h (H, H), b (H)::

        h = tanh(b + W_x·x + W_h·h_prev)

    Dropout is DyNet's variational dropout, as VanillaLSTMBuilder's: set_dropout(d, d_h=d)
    or set_dropouts(d, d_h) set the rates of masks on each layer's input x and on h_prev
    (a given initial h included), drawn once per sequence (at its first input, one per
    element of its batch) and scaled by 1/(1 - rate);
    set_dropout_masks() draws new ones mid-sequence."""

    _kind = "simple-rnn"
    _variational = True
    set_dropout_masks = VanillaLSTMBuilder.set_dropout_masks

    def set_dropouts(self, d: float, d_h: float) -> None:
        """DyNet's name for set_dropout(d, d_h): rates on the input and on h_prev."""
        self.set_dropout(d, d_h)

    def _make_layer(self, in_dim: int) -> list:
        H, m = self.hidden_dim, self.model
        return [m.add_parameters((H, in_dim)), m.add_parameters((H, H)), m.add_parameters((H,), ConstInitializer(0.0))]

    def _layer_step(self, P, x, h, c, mh):
        Wx, Wh, b = P
        if h is not None and mh is not None:
            h = dy.cmult(h, mh)
        a = dy.affine_transform([b, Wx, x] if h is None else [b, Wx, x, Wh, h])
        return dy.tanh(a), None


class GRUBuilder(_Builder):
    """GRU as DyNet's. Per layer, DyNet's order [W_xz, W_hz, b_z, W_xr, W_hr, b_r, W_xh, W_hh, b_h]::

        z = σ(b_z + W_xz·x + W_hz·h_prev);  r = σ(b_r + W_xr·x + W_hr·h_prev)
        ĥ = tanh(b_h + W_xh·x + W_hh·(r⊙h_prev))
        h = (1-z)⊙h_prev + z⊙ĥ     (computed as h_prev + z⊙(ĥ - h_prev))

    Separate gate matrices cost no more batches than one stacked affine plus slices
    (z and r are two affine batches instead of one affine and two slice batches).
    Dropout is fresh per step on each layer's input, as DyNet's. (DyNet 2.1 also drops the
    top layer's output(), with another fresh mask per step, while its h() and the recurrence
    keep the undropped h; not done here.)"""

    _kind = "gru"

    def _make_layer(self, in_dim: int) -> list:
        H, m = self.hidden_dim, self.model
        out = []
        for _ in range(3):
            out += [m.add_parameters((H, in_dim)), m.add_parameters((H, H)), m.add_parameters((H,), ConstInitializer(0.0))]
        return out

    def _layer_step(self, P, x, h, c, mh):
        Wxz, Whz, bz, Wxr, Whr, br, Wxh, Whh, bh = P
        if h is None:
            z = dy.logistic(dy.affine_transform([bz, Wxz, x]))
            return dy.cmult(z, dy.tanh(dy.affine_transform([bh, Wxh, x]))), None
        z = dy.logistic(dy.affine_transform([bz, Wxz, x, Whz, h]))
        r = dy.logistic(dy.affine_transform([br, Wxr, x, Whr, h]))
        hh = dy.tanh(dy.affine_transform([bh, Wxh, x, Whh, dy.cmult(r, h)]))
        return h + dy.cmult(z, hh - h), None
