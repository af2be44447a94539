"""``@dy.vertex_function``: declare F once; each call runs F over a batch of input graphs as
ONE node of the current lazy graph (op ``vertex_call``), whose forward is the vertex engine
and whose backward is ∂F. Its inputs are the parameters F uses and the lazy-graph
Expressions it pulls, so gradients flow both ways and the two front ends mix in one model."""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from .. import runtime
from ..errors import GraphError, GraphIndexError, StaleExpressionError, user_line
from ..graph import Expression, cg
from ..minibatch import BatchedExpression
from ..params import Parameter
from ..ops import OPS
from .engine import Run
from .graphdata import InputGraph
from .plan import Plan
from .trace import NeedScatterShapes, Trace, TraceGraph, Vertex


class UnreadInputWarning(UserWarning):
    """A vertex function was given a named input that it never read."""


def _dims(d):
    return (int(d),) if isinstance(d, numbers.Integral) else tuple(int(k) for k in d)


class PullSource:
    """One named external input of a call, N rows in input order."""

    __slots__ = ("kind", "ids", "vals", "exprs", "shape", "size")

    def __init__(self, kind, shape, ids=None, vals=None, exprs=None):
        self.kind, self.shape, self.ids, self.vals, self.exprs = kind, tuple(shape), ids, vals, exprs
        size = 1
        for d in self.shape:
            size *= d
        self.size = size

    def spec(self):
        return ("ids",) if self.kind == "ids" else (self.kind, self.shape)


def _pull_source(fname, name, src, sizes, N, g):
    where = f"{fname}(..., {name}=...)"

    def exprs_of(items):
        rows, shape = [], None
        for it in items:
            if it.cg is not g:
                raise StaleExpressionError(f"{where}: an Expression of another (renewed?) computation graph "
                                           f"[at {user_line()}]")
            rows.append(it)
        return rows

    if isinstance(src, Parameter):                    # a parameter's rows, one per vertex
        from ..api import parameter
        src = parameter(src)
    elif type(src) is BatchedExpression:              # DyNet's minibatch: an element per vertex
        if len(src.xs) != N:
            raise GraphError(f"{where}: a minibatch of {len(src.xs)} elements for {N} vertices; each "
                             f"vertex takes one element [at {user_line()}]")
        xs = _same_shapes(where, exprs_of(src.xs), g)
        return PullSource("expr", g.shapes[xs[0].i], exprs=xs)
    if type(src) is Expression:                       # one Expression, a row per vertex
        s = g.shapes[exprs_of([src])[0].i]
        if not s or s[0] != N:
            raise GraphError(f"{where}: an Expression of shape {s} needs {N} rows, one per vertex [at {user_line()}]")
        return PullSource("expr", s[1:] or (1,), exprs=[src])
    if isinstance(src, (list, tuple)) and src and not isinstance(src[0], (numbers.Number, np.generic)):
        first = src[0]
        if type(first) is Expression or (isinstance(first, (list, tuple)) and first and type(first[0]) is Expression):
            # stale ones first: their node ids mean nothing in this graph's columns
            exprs_of([e for it in src for e in (it if isinstance(it, (list, tuple)) else [it]) if type(e) is Expression])
            if len(src) == len(sizes) and _rows_per_graph(src, sizes, g):
                groups = src                  # one entry per graph
            elif len(src) == N and all(type(e) is Expression for e in src):
                groups = [list(src)]          # one Expression per vertex, all graphs in turn
                sizes = [N]
            elif len(src) == len(sizes):
                groups = src                  # per graph, and wrong: its errors say where
            else:
                raise GraphError(f"{where}: {len(src)} entries for {len(sizes)} graphs of {N} vertices; pass "
                                 f"one Expression per vertex, or one entry per graph [at {user_line()}]")
            exprs, shape = [], None
            for gi, (item, n) in enumerate(zip(groups, sizes)):
                if type(item) is Expression:
                    s = g.shapes[item.i]
                    if not s or s[0] != n:
                        raise GraphError(f"{where}: graph {gi} has {n} vertices but its Expression has shape {s} "
                                         f"[at {user_line()}]")
                    s = s[1:] or (1,)
                    items = [item]
                else:
                    if len(item) != n:
                        raise GraphError(f"{where}: graph {gi} has {n} vertices but {len(item)} Expressions "
                                         f"[at {user_line()}]")
                    items = list(item)
                    s = g.shapes[items[0].i]
                    for k, e in enumerate(items):
                        if type(e) is not Expression or g.shapes[e.i] != s:
                            got = g.shapes[e.i] if type(e) is Expression else type(e).__name__
                            what = f"entry {k}" if groups is not src else f"vertex {k} of graph {gi}"
                            raise GraphError(f"{where}: per-vertex Expressions must all have shape {s}; {what} "
                                             f"is {got} [at {user_line()}]")
                if shape is None:
                    shape = s
                elif s != shape:
                    raise GraphError(f"{where}: rows of shape {s} in graph {gi}, {shape} before [at {user_line()}]")
                exprs += exprs_of(items)
            return PullSource("expr", shape, exprs=exprs)
        arr = None
        if len(src) == len(sizes):            # one array-like per graph
            try:
                arrs = [np.asarray(a) for a in src]
            except ValueError:
                raise GraphError(f"{where}: values of different shapes; every vertex needs the same shape "
                                 f"[at {user_line()}]") from None
            bad = [(gi, a, n) for gi, (a, n) in enumerate(zip(arrs, sizes)) if a.ndim == 0 or a.shape[0] != n]
            if not bad:
                try:
                    arr = np.concatenate(arrs)
                except ValueError:
                    raise GraphError(f"{where}: graphs' values of different shapes "
                                     f"({', '.join(str(a.shape[1:]) for a in arrs)}); every vertex needs the same "
                                     f"shape [at {user_line()}]") from None
            elif len(src) != N:               # one vertex per graph: src is one value per vertex
                gi, a, n = bad[0]
                raise GraphError(f"{where}: graph {gi} has {n} vertices but {a.shape[0] if a.ndim else 1} values "
                                 f"[at {user_line()}]")
        if arr is None:
            arr = _values(where, src, N)
    else:
        arr = _values(where, src, N)
    if arr.dtype.kind in "iu":
        if arr.ndim != 1:
            raise GraphError(f"{where}: integer inputs are ids, one per vertex; got shape {arr.shape} [at {user_line()}]")
        return PullSource("ids", (), ids=arr.astype(np.int64))
    if arr.dtype.kind not in "fb":
        raise GraphError(f"{where}: expected numbers or Expressions, got {arr.dtype} [at {user_line()}]")
    return PullSource("float", arr.shape[1:] or (1,), vals=arr.reshape(N, -1) if arr.ndim == 1 else arr)


def _same_shapes(where, exprs, g) -> list:
    s = g.shapes[exprs[0].i]
    for k, e in enumerate(exprs):
        if g.shapes[e.i] != s:
            raise GraphError(f"{where}: per-vertex Expressions must all have shape {s}; entry {k} is "
                             f"{g.shapes[e.i]} [at {user_line()}]")
    return exprs


def _values(where, src, N):
    """src as an array of one value per vertex."""
    try:
        arr = np.asarray(src)
    except ValueError:                      # ragged
        raise GraphError(f"{where}: values of different shapes; every vertex needs the same shape "
                         f"[at {user_line()}]") from None
    if arr.ndim == 0 or arr.shape[0] != N:
        raise GraphError(f"{where}: {arr.shape[0] if arr.ndim else 1} values for {N} vertices; pass one "
                         f"entry per vertex, or one list per graph [at {user_line()}]")
    return arr


def _rows_per_graph(src, sizes, g) -> bool:
    """Each entry of src is graph k's rows: an Expression of sizes[k] rows or a list of
    sizes[k] Expressions. (With one vertex per graph src may also be one Expression per
    vertex, which this tells apart when their first dimension is not 1.)"""
    for item, n in zip(src, sizes):
        if type(item) is Expression:
            s = g.shapes[item.i] if item.cg is g else None
            if not s or s[0] != n:
                return False
        elif not isinstance(item, (list, tuple)) or len(item) != n:
            return False
    return True


def _same_nodes(g, nodes) -> bool:
    """The graph still holds these (id, op, args, attr) records."""
    n = len(g.ops)
    return all(i < n and g.ops[i] is op and g.args[i] == args and g.attrs[i] == attr
               for i, op, args, attr in nodes)


class VertexOutputs:
    """What a call pushed: ``out[name]`` is a lazy-graph Expression with one row per vertex
    (all graphs, input order), shape (N, *pushed shape).

    Its nodes (a pickrange of the call's node and a reshape) are built when first asked for:
    an output nobody reads then costs the lazy graph nothing, where its reshape's backward
    alone was a transposing copy of N rows per minibatch."""

    def __init__(self, node, pushes, offsets, run):
        self._node, self._pushes, self.offsets, self.run = node, pushes, offsets, run
        self._e = {}

    def __getitem__(self, name) -> Expression:
        got = self._e.get(name)
        if got is not None and _same_nodes(got[0].cg, got[1]):
            return got[0]
        if name not in self._pushes:
            raise KeyError(f"nothing was pushed as {name!r} (pushed: {sorted(self._pushes)}) [at {user_line()}]")
        from ..api import pickrange, reshape
        node = self._node
        node._check()                   # a renewed graph: the usual error, not a new node
        sh, size, o, N = self._pushes[name]
        g, n0 = node.cg, len(node.cg.ops)
        e = node if len(self._pushes) == 1 else pickrange(node, o, o + N * size)
        e = reshape(e, (N,) + sh)
        # what the nodes were, to tell them from others that took their ids after a cg_revert
        # that dropped them (read first between cg_checkpoint and cg_revert)
        self._e[name] = (e, [(i, g.ops[i], g.args[i], g.attrs[i]) for i in range(n0, len(g.ops))])
        if name not in self.run.read:
            self.run.read.add(name)
            if node.i < g.exe.done:         # the call ran before anything read this output
                self.run.write_push(g.exe.value(node.i), name)
        return e

    def __contains__(self, name):
        return name in self._pushes

    def keys(self):
        return self._pushes.keys()

    def __iter__(self):
        return iter(self._pushes)

    def __len__(self):
        return len(self._pushes)

    def items(self):
        return [(name, self[name]) for name in self._pushes]

    def graph(self, name, i: int) -> Expression:
        """The rows of graph i: shape (n_i, *pushed shape)."""
        from ..api import pickrange
        i = self._graph_index(i)
        return pickrange(self[name], int(self.offsets[i]), int(self.offsets[i + 1]), 0)

    def vertex(self, name, i: int, v: int) -> Expression:
        """The value pushed by vertex v of graph i."""
        from ..api import pick
        i = self._graph_index(i)
        n = int(self.offsets[i + 1] - self.offsets[i])
        if not 0 <= int(v) < n:
            raise GraphIndexError(f"vertex {v} out of range: graph {i} of this call has {n} vertices "
                                  f"[at {user_line()}]")
        return pick(self[name], int(self.offsets[i]) + int(v), 0)

    def _graph_index(self, i) -> int:
        k = len(self.offsets) - 1
        if not 0 <= int(i) < k:
            raise GraphIndexError(f"graph {i} out of range: this call has {k} graphs [at {user_line()}]")
        return int(i)


class VertexFunction:
    """F declared once (see ``vertex_function``); call it with graphs and named inputs."""

    def __init__(self, f, max_children, scatter_dims=None, name=None):
        if not isinstance(max_children, numbers.Integral) or max_children < 0:
            raise GraphError(f"vertex_function: max_children must be an int >= 0, got {max_children!r} "
                             f"[at {user_line()}]")
        self.f = f
        self.name = name or getattr(f, "__name__", "F")
        self.max_children = int(max_children)
        self._declared = None if scatter_dims is None else [_dims(d) for d in scatter_dims]
        self.n_traced = 0                   # traces made so far (all kinds, all calls)
        self._warned: set = set()           # input names _unread warned of
        self.clear()
        self._runs: list = []               # (graph, run) whose arenas may come back
        self._free: list = []               # arenas of runs whose graph was renewed

    def clear(self):
        """Forget the traces (done automatically when a parameter changes shape)."""
        self.traces: dict = {}
        self.scatter_shapes = None if self._declared is None else list(self._declared)
        self.reads = None

    # ------------------------------------------------------------------ memory
    def _arena(self, xp, dtype, n):
        """A 1-D buffer of >= n elements for a run's dynamic tensors. Buffers of runs whose
        graph was renewed are recycled: fresh tens of MB per minibatch cost page faults
        comparable to the compute."""
        keep = []
        for g, r in self._runs:
            if g.alive:
                keep.append((g, r))
            else:
                # (a run whose node never ran has no arena)
                self._free += [b for b in (getattr(r, "arena", None), getattr(r, "garena", None)) if b is not None]
                r.arena = r.garena = None
        self._runs = keep
        best = None
        for k, b in enumerate(self._free):
            if b.dtype == dtype and isinstance(b, xp.ndarray) and b.shape[0] >= n and \
                    (best is None or b.shape[0] < self._free[best].shape[0]):
                best = k
        if best is not None:
            return self._free.pop(best)
        # none fits: the free ones are too small for runs of this size, so they go (keeping
        # them would hold several arenas at once), and the new one has headroom for the
        # next minibatches, whose sizes vary
        self._free = [b for b in self._free if b.dtype != dtype or not isinstance(b, xp.ndarray)]
        return xp.empty(n + n // 4, dtype=dtype)

    # ------------------------------------------------------------------ tracing
    def _trace(self, arity, kind, pulls):
        rt = runtime.state()
        g = cg()
        tg = TraceGraph(self.name, g.dtype, g.xp)
        v = Vertex(tg, self, arity, kind, pulls)
        saved = rt.graph
        rt.graph = tg
        try:
            self.f(v)
        except StaleExpressionError as e:
            raise GraphError(f"vertex function {self.name} uses an Expression of the lazy graph directly; "
                             f"pass it as a named input (f(graphs, x=expr)) and v.pull('x') it ({e})") from None
        finally:
            rt.graph = saved
        if v.gathered and v.scattered is None:
            raise GraphError(f"vertex function {self.name}: gathers from children but never calls v.scatter(...) "
                             f"[at {user_line()}]")
        shapes = [tg.shapes[s] for s in (v.scattered or ())]
        if v.scattered is not None:
            if self.scatter_shapes is None:
                self.scatter_shapes = shapes
            elif shapes != self.scatter_shapes:
                raise GraphError(f"vertex function {self.name}: scatters shapes {shapes} for vertices with "
                                 f"{arity} children but {self.scatter_shapes} elsewhere (declared, or traced "
                                 f"in this or an earlier call: {self.name}.clear() forgets the traces); "
                                 f"every vertex must scatter the same shapes [at {user_line()}]")
        self.n_traced += 1
        return Trace(tg, v)

    def _get_trace(self, arity, kind, pulls, psig):
        for key in ((arity, kind), (arity, None), (None, kind), (None, None)):
            t = self.traces.get((key, psig))
            if t is not None and t.key_of(arity, kind) == key:
                return t
        t = self._trace(arity, kind, pulls)
        self.traces[(t.key_of(arity, kind), psig)] = t
        return t

    def _check_params(self):
        for t in self.traces.values():
            for (_, p, _), s in zip(t.params, t.param_shapes):
                if tuple(p.data.shape) != s:
                    self.clear()
                    return

    # ------------------------------------------------------------------ calling
    def __call__(self, graphs, kind=None, **inputs) -> VertexOutputs:
        if isinstance(graphs, InputGraph):
            graphs = [graphs]
        graphs = list(graphs)
        if not graphs:
            raise GraphError(f"{self.name}: needs at least one InputGraph [at {user_line()}]")
        for gi, gr in enumerate(graphs):
            if not isinstance(gr, InputGraph):
                raise GraphError(f"{self.name}: graph {gi} is a {type(gr).__name__}, not a dy.InputGraph "
                                 f"[at {user_line()}]")
            if gr.child.shape[1] > self.max_children and int(gr.arity.max()) > self.max_children:
                v = int(np.argmax(gr.arity))
                raise GraphError(f"{self.name}: vertex {v} of graph {gi} has {int(gr.arity[v])} children, "
                                 f"more than max_children={self.max_children} [at {user_line()}]")
        g = cg()
        if isinstance(g, TraceGraph):
            raise GraphError(f"vertex function {self.name} is called inside vertex function {g.name}: "
                             f"call it outside and pull its outputs in (v.pull of an Expression) "
                             f"[at {user_line()}]")
        sizes = [gr.n for gr in graphs]
        N = int(sum(sizes))
        pulls = {name: _pull_source(self.name, name, src, sizes, N, g) for name, src in inputs.items()}
        specs = {name: p.spec() for name, p in pulls.items()}
        psig = (tuple(sorted(specs.items())), g.dtype, runtime.state().dropout)
        arity = np.concatenate([gr.arity for gr in graphs])
        if kind is None:
            ukind = np.zeros(N, dtype=np.int64)
        else:
            ukind = _pull_source(self.name, "kind", kind, sizes, N, g)
            if ukind.kind != "ids":
                raise GraphError(f"{self.name}: kind= takes one int per vertex [at {user_line()}]")
            ukind = ukind.ids
            if ukind.size and int(ukind.min()) < 0:
                raise GraphError(f"{self.name}: kind= takes ints >= 0, got {int(ukind.min())} "
                                 f"[at {user_line()}]")
        self._check_params()
        shapes_before, traced_before = self.scatter_shapes, set(self.traces)
        try:
            traces, kind_of = self._kinds(arity, ukind, specs, psig)
        except Exception:
            # a call that fails (bad data met while tracing) leaves nothing behind: not the
            # scatter shapes, which would refuse the next, correct call, nor the traces that
            # taught them, which that call would reuse without learning the shapes again
            self.scatter_shapes = shapes_before
            for key in set(self.traces) - traced_before:
                del self.traces[key]
            raise
        for ti, t in enumerate(traces):
            for name, bound in t.bounds.items():
                ids = pulls[name].ids
                if bound is None or not ids.size:
                    continue
                ids = ids[kind_of == ti] if len(traces) > 1 else ids    # only where this kind reads it
                if ids.size and (ids.min() < 0 or ids.max() >= bound):
                    bad = int(ids[(ids < 0) | (ids >= bound)][0])
                    raise GraphError(f"{self.name}: {name}={bad} out of range: F uses {name} as an index "
                                     f"below {bound} [at {user_line()}]")
        self._unread(inputs)
        self._check_scatters(graphs, traces, kind_of)
        plan = Plan(graphs, kind_of, len(traces), self.max_children)
        return self._node(g, traces, plan, pulls, N, psig)

    def _check_scatters(self, graphs, traces, kind_of):
        """A child whose parent gathers it must be of a kind that scatters: the parent would
        gather zeros."""
        if all(t.scatter for t in traces):
            return
        scatters = np.array([bool(t.scatter) for t in traces])
        gathers = [{k for k, _, _ in t.gathers} for t in traces]      # child slots each kind reads
        base = 0
        for gi, gr in enumerate(graphs):
            for slot in range(gr.child.shape[1]):
                parents = np.flatnonzero(gr.child[:, slot] >= 0)
                kids = gr.child[parents, slot]
                bad = ~scatters[kind_of[base + kids]] & np.array(
                    [slot in gathers[t] for t in kind_of[base + parents]], dtype=bool)
                if bad.any():
                    v = int(kids[bad][0])
                    raise GraphError(f"vertex function {self.name}: vertex {v} of graph {gi} is gathered by its "
                                     f"parent, but F never calls v.scatter(...) at its kind of vertex "
                                     f"({gr.arity[v]} children), so the parent would gather zeros "
                                     f"[at {user_line()}]")
            base += gr.n

    def _unread(self, inputs):
        """Warn (once per name) of an input that no trace of F read: a misspelt name would
        otherwise be dropped silently. A warning, not an error: F may read a name only at
        kinds of vertex that no call has brought yet."""
        read = set().union(*(t.pulled for t in self.traces.values()))
        for name in inputs:
            if name not in read and name not in self._warned:
                self._warned.add(name)
                warnings.warn(f"{self.name}(..., {name}=...): F has not read an input named {name!r} at any "
                              f"kind of vertex so far (it reads: {', '.join(sorted(read)) or 'nothing'}); "
                              f"a misspelt name?", UnreadInputWarning, stacklevel=3)

    def unbatched(self, graphs, kind=None, **inputs) -> dict:
        """The reference semantics: run F once per vertex, building ordinary lazy-graph nodes
        (no tracing). Returns {name: [Expression or None per vertex]} in input order. Slow;
        for tests and debugging."""
        from .. import api
        if isinstance(graphs, InputGraph):
            graphs = [graphs]
        graphs = list(graphs)
        g = cg()
        sizes = [gr.n for gr in graphs]
        N = int(sum(sizes))
        pulls = {name: _pull_source(self.name, name, src, sizes, N, g) for name, src in inputs.items()}
        ukind = None if kind is None else _pull_source(self.name, "kind", kind, sizes, N, g).ids
        rows = {}
        for name, src in pulls.items():
            if src.kind == "expr":
                if len(src.exprs) == N and all(g.shapes[e.i] == src.shape for e in src.exprs):
                    rows[name] = list(src.exprs)            # one Expression per vertex
                else:                                       # Expressions with a row per vertex
                    rows[name] = [api.pick(e, r, 0) for e in src.exprs for r in range(g.shapes[e.i][0])]
        out: dict = {}
        base = 0
        for gi, gr in enumerate(graphs):
            state = [None] * gr.n
            for v in np.argsort(gr.level, kind="stable").tolist():
                gid = base + v
                kids = gr.children(v)
                lv = _LazyVertex(self, len(kids), 0 if ukind is None else int(ukind[gid]),
                                 [state[u] for u in kids], pulls, rows, gid)
                self.f(lv)
                state[v] = lv.scattered
                for name, x in lv.pushed.items():
                    out.setdefault(name, [None] * N)[gid] = x
            base += gr.n
        return out

    def _kinds(self, arity, ukind, specs, psig):
        """One trace per distinct vertex kind; kind = (arity, user kind) as far as F reads them."""
        code = arity * (int(ukind.max()) + 1 if ukind.size else 1) + ukind
        uniq, first, inv = np.unique(code, return_index=True, return_inverse=True)
        pairs = [(int(arity[i]), int(ukind[i])) for i in first]
        got = {}
        pending = sorted(range(len(pairs)), key=lambda i: pairs[i])
        while pending:
            left = []
            for i in pending:
                try:
                    got[i] = self._get_trace(pairs[i][0], pairs[i][1], specs, psig)
                except NeedScatterShapes as e:
                    left.append((i, e))
            if len(left) == len(pending):
                k = left[0][1].args[0]
                raise GraphError(
                    f"vertex function {self.name}: gather({k}) is used before anything tells what vertices "
                    f"scatter; declare it (@vertex_function(..., scatter_dims=[...])) or branch on v.is_leaf "
                    f"so that leaves are traced first [at {user_line()}]")
            pending = [i for i, _ in left]
        traces, kid = [], {}
        kind_of_pair = np.empty(len(pairs), dtype=np.int64)
        for i in range(len(pairs)):
            t = got[i]
            if id(t) not in kid:
                kid[id(t)] = len(traces)
                traces.append(t)
            kind_of_pair[i] = kid[id(t)]
        return traces, kind_of_pair[inv.reshape(-1)]

    def _node(self, g, traces, plan, pulls, N, psig):
        params, seen = [], set()
        for t in traces:
            for _, p, u in t.params:
                if (id(p), u) not in seen:
                    seen.add((id(p), u))
                    params.append((p, u))
        exprs = [e for name, src in pulls.items() if src.kind == "expr" for e in src.exprs]
        pushes, off, shapes = [], 0, {}
        for t in traces:
            for name, s in t.push.items():
                sh = t.shapes[s]
                if shapes.setdefault(name, sh) != sh:
                    raise GraphError(f"vertex function {self.name}: push({name!r}) has shape {sh} for one kind "
                                     f"of vertex and {shapes[name]} for another [at {user_line()}]")
        # names that kinds absent from this call push (their traces are kept from earlier calls):
        # zero rows, as any vertex of a kind that does not push a name gets, not a KeyError that
        # depends on which kinds a minibatch happens to hold
        for (_, ps), t in self.traces.items():
            if ps == psig:
                for name, s in t.push.items():
                    shapes.setdefault(name, t.shapes[s])
        if not shapes:
            raise GraphError(f"vertex function {self.name}: pushes nothing, so the call would have no output; "
                             f"use v.push(name, x) [at {user_line()}]")
        for name, sh in shapes.items():
            size = int(np.prod(sh))
            pushes.append((name, sh, size, off))
            off += N * size
        rt = runtime.state()
        rt.graph_seed += 1
        run = Run(self, traces, plan, pulls, params, [(e, None) for e in exprs], pushes, off, g.dtype,
                  (g.seed * 7919 + rt.graph_seed) & 0xFFFFFFFF)
        args = tuple([g.pid(p, u) for p, u in params] + [e.i for e in exprs])
        node = g.add(OPS["vertex_call"], args, (off,), run)
        self.last_run = run
        self._runs.append((g, run))
        return VertexOutputs(node, {name: (sh, size, o, N) for name, sh, size, o in pushes}, plan.offsets, run)


def vertex_function(max_children: int = 2, scatter_dims=None):
    """Decorator: ``@dy.vertex_function(max_children=2)`` over ``def F(v): ...``.

    Inside F, ``v.pull(name)`` reads the call's input `name` for this vertex, ``v.gather(k)``
    what child k scattered (zeros if there is no child k), ``v.scatter(*xs)`` sets what parents
    gather, ``v.push(name, x)`` what the call returns as ``out[name]``; ``v.is_leaf``,
    ``v.n_children`` and ``v.kind`` (from ``kind=``) may be branched on. F is traced once per
    kind of vertex and per input shapes, into the same ops as the lazy graph, and the traces
    are reused by later calls: Python state that F reads besides v (a training flag, a global
    rebound to another Parameter) is frozen into them until ``F.clear()``. ``scatter_dims``
    declares the scattered shapes when F gathers at every vertex (no leaf branch to learn
    them from).

    A call ``F(graphs, kind=None, **inputs)`` takes each named input as one value per vertex
    (all graphs in turn: an array of N rows, a list of N values or of N Expressions, or one
    Expression of N rows) or as one entry per graph (a list, an array or an Expression of that
    graph's rows, or a list of its per-vertex Expressions). Integer values are ids (for
    lookups and picks), floats and Expressions are vectors. An input F never reads is warned
    of (``dy.UnreadInputWarning``), as a misspelt name would otherwise be dropped."""
    def wrap(f):
        vf = VertexFunction(f, max_children, scatter_dims)
        vf.__doc__ = f.__doc__
        return vf
    if callable(max_children) and not isinstance(max_children, numbers.Integral):
        f, max_children = max_children, 2      # bare @dy.vertex_function: the default arity
        return wrap(f)
    return wrap


class _LazyVertex:
    """The vertex handle of VertexFunction.unbatched: builds lazy-graph nodes directly."""

    def __init__(self, fn, arity, kind, kids, pulls, rows, gid):
        self._fn, self.n_children, self.kind = fn, arity, kind
        self.is_leaf = arity == 0
        self._kids, self._pulls, self._rows, self._gid = kids, pulls, rows, gid
        self.scattered, self.pushed = None, {}

    def pull(self, name):
        src = self._pulls[name]
        if src.kind == "ids":
            return int(src.ids[self._gid])
        if src.kind == "float":
            from ..api import inputTensor
            return inputTensor(np.asarray(src.vals[self._gid]).reshape(src.shape))
        return self._rows[name][self._gid]

    def gather(self, k):
        from ..api import zeros
        if k < len(self._kids):
            got = self._kids[k]
        else:
            shapes = self._fn.scatter_shapes
            if shapes is None:
                raise GraphError(f"{self._fn.name}: gather({k}) of a missing child needs scatter_dims")
            got = tuple(zeros(s) for s in shapes)
        return got if len(got) > 1 else got[0]

    def scatter(self, *xs):
        self.scattered = tuple(xs)
        if self._fn.scatter_shapes is None:
            self._fn.scatter_shapes = [x.dim()[0] for x in xs]

    def push(self, name, x):
        self.pushed[name] = x
