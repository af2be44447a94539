"""The lazy computation graph: columnar node storage, Expression handles, and the
forward/backward entry points that hand batches to the executor.

Nodes live in parallel Python lists indexed by node id (args, shape, signature, depth,
needs-gradient, consumer count). What follows from those is not stored per node: the op
(from the signature), the size (from the interned shape); attrs and datas, which most
nodes lack, are dicts. Ids are topological: arguments always precede their users, so
"everything up to node i" is a closed set."""
from __future__ import annotations

import functools
import itertools
import operator
import threading
import time
from types import MappingProxyType
from typing import Any

import numpy as np

from . import runtime
from .errors import GradientError, GraphError, StaleExpressionError, called, user_line, user_site, where_code
from .executor import Executor
from .ops import ShapeError
from .operators import BY_OPERATOR
from .ops.fused import FUSED, FUSED_IN, SUMS
from .ops.base import WIDE_ARITY, prod
from .runtime import Strategy, parse_strategy
from .stats import Stats

# (op, input shapes, attr) -> (out shape, size, base signature id, shared input indices)
_RULES: dict = {}
_BASE_SIGS: dict = {}
# one tuple per shape value: the API's inline fast paths compare shapes by identity
_SHAPES: dict = {}
SIZE_OF: dict = {}     # interned shape -> number of elements
_GRAPH_IDS = itertools.count(1)
# a node's output: NumPy's arrays have at most 64 dimensions, and a batch adds one or two
# (DyNet's have at most 7); DyNet's dimensions count elements in 32 bits
_MAX_NDIM = 32
_MAX_SIZE = 1 << 32
# the shape of a node that cg_revert dropped: its id is not given to a later node, so that an
# Expression of it is refused where it would otherwise stand for that node, silently
DROPPED = ("dropped by cg_revert",)
SIZE_OF[DROPPED] = 0


class _Coop(threading.local):
    """Per-thread hook, set only in the instance threads of coop.batched_map:
    ``park(graph, i)`` suspends the instance until a batched forward computed node i."""
    park = None


COOP = _Coop()


def _rule(op, ins, attr):
    key = (op, ins, attr)
    r = _RULES.get(key)
    if r is None:
        if DROPPED in ins:
            api = called()
            raise StaleExpressionError(f"{api or op.name}: {_DROPPED_USE} [at {user_line()}]")
        try:
            out = tuple(op.shape(ins, attr))
            out = _SHAPES.setdefault(out, out)
        except ShapeError as e:
            raise _rule_error(op, ins, str(e)) from None
        if not all(d >= 1 for d in out):
            # checked here, once per pattern: a node of no elements (or a negative dimension)
            # would fail only at the forward, and every forward of its graph after it
            raise GraphError(f"{op.name}: an output of shape {out} (every dimension must be >= 1) "
                             f"[op {op.name}, input shapes {list(ins)}, at {user_line()}]")
        size = prod(out)
        if len(out) > _MAX_NDIM or size >= _MAX_SIZE:
            # refused here, not at the forward (NumPy's limit on dimensions, an allocation that
            # cannot succeed), where the node would fail every later forward of its graph
            raise _rule_error(op, ins, f"{op.name}: an output of shape {out} ({len(out)} dimensions, {size} "
                                       f"elements; at most {_MAX_NDIM} and {_MAX_SIZE - 1})")
        SIZE_OF[out] = size
        # the arity is part of every signature: elementwise sigs ignore shapes, and an
        # add of 2 inputs must not batch with an esum of 3 (kernels stack input j of all nodes);
        # but wide nodes of one input shape batch whatever their arity where the op takes
        # their inputs ragged (the esums of losses of instances of every size)
        arity = len(ins)
        if op.has_ragged and arity > WIDE_ARITY and ins.count(ins[0]) == arity:
            arity = ("wide", ins[0])
        base = (op.name, arity, op.sig(ins, attr)) if op.batchable else None
        if base is not None:
            base = _BASE_SIGS.setdefault(base, len(_BASE_SIGS))
        r = _RULES[key] = (out, size, base, op.shared_of(len(ins)))
    return r


def _rule_error(op, ins, msg: str) -> GraphError:
    """The error for a node op cannot make of inputs of shapes ins: msg, prefixed with the
    user's call where it is not the op itself (concatenate's reshape), the op, the shapes
    and the user's line."""
    api = called()
    api = f"{api}: " if api and api != op.name else ""
    return GraphError(f"{api}{msg} [op {op.name}, input shapes {list(ins)}, at {user_line()}]")


_DROPPED_USE = ("an Expression built after cg_checkpoint() was used after cg_revert() dropped it "
                "(DyNet: expressions built after the checkpoint are invalid)")


class Sparse(dict):
    """A column that most nodes leave empty (attrs, datas): node -> value, None where absent.
    A dict entry for the few nodes that have one costs what an append costs; the append of
    None for every other node is saved."""

    def __missing__(self, key):
        return None


class Derived:
    """A read-only column computed from another one (ops from sigs, sizes from shapes), for
    the readers that index it per node; values are not stored per node, so building pays
    nothing for them. Hot loops read the source column directly."""

    __slots__ = ("src", "of")

    def __init__(self, src: list, of):
        self.src = src
        self.of = of

    def __len__(self):
        return len(self.src)

    def __getitem__(self, i):
        if type(i) is slice:
            return list(map(self.of, self.src[i]))
        return self.of(self.src[i])

    def __iter__(self):
        return map(self.of, self.src)

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self):
        return repr(list(self))


def _follows_current(method):
    """DyNet's dy.cg() is one graph that renew_cg() renews in place, so DyNet programs keep a
    handle to it across renewals; here every renewal makes a new graph. Called on a renewed
    (or closed) graph, the methods of DyNet's graph object act on the current one, as they
    would in DyNet; a renewed graph's expressions stay stale."""
    @functools.wraps(method)
    def f(self, *args, **kwargs):
        if not self.alive:
            self = cg()
        return method(self, *args, **kwargs)
    return f


class ComputationGraph:
    """One graph: created by ``renew_cg()``; usable as a context manager."""

    def __init__(self, strategy=None):
        rt = runtime.state()
        self.strategy: Strategy = parse_strategy(strategy) if strategy is not None else rt.strategy
        self.backend = rt.backend
        self.xp = self.backend.xp
        self.dtype = rt.dtype
        self.gid = next(_GRAPH_IDS)
        rt.graph_seed += 1
        self.seed = (rt.seed * 1000003 + rt.graph_seed) & 0xFFFFFFFF
        self.alive = True
        self.args: list = []
        self.attrs = Sparse()       # node -> attr, for the nodes that have one
        self.datas = Sparse()       # node -> data (lookup row, label, input values, seed)
        self.shapes: list = []
        self.sigs: list = []
        self.depths: list = []
        self.needs: list = []
        # number of consumers of each computed node; a parameter node's entry is not kept
        # (the scheduler walks computed nodes only), so affine and lookup skip counting it
        self.uses: list = []
        self.ext: dict = {}         # node -> Parameter (its value lives outside the arena)
        self.pnode: dict = {}       # (id(param), update) -> node
        self._pfast: dict = {}      # param -> node, for update=True
        self._pexpr: dict = {}      # param -> its Expression, for dy.parameter(p)
        self._cells: dict = {}      # lstm_cell [h; c] node -> its c slice, for RNNState.s() (builders.py)
        self._masked: dict = {}     # builders' sequences -> the first node of their dropout masks
        self._sigtab: dict = {}     # per-graph signature interning (shared node ids are per graph)
        self._fast: dict = {}       # add1/add2 caches (signatures are per graph)
        self._faff: dict = {}       # add_affine cache
        self._fmm: dict = {}        # add_shared_matmul cache: W (its node or Parameter) -> entry
        self._fa: dict = {}         # op -> add_unary's last entry + (input shape, attr); read as g._fa
        # the last entry of each kind, keyed by one object (no key tuple to build and hash);
        # the API's inline fast paths read them and check the input shapes by identity
        self._f1: dict = {}         # op -> add1 entry + (input shape,)
        self._f2: dict = {}         # op -> add2 entry + (input shapes, attr)
        self._f3: dict = {}         # op -> add3 entry + (input shapes,)
        self._fw: dict = {}         # W -> add_affine entry (b and x's shape in it)
        self._flk: dict = {}        # lookup table -> (out, size, sig, diff, node, rows)
        self._fuse: dict = {}       # (signature, activation op[, input]) -> fused signature, -1: none
        self._sums: dict = {}       # (signature, parameter node) -> absorb_sum's signature, -1: none
        self.fuses = rt.fuse
        self._bind()
        self._recipes: dict = {}    # recipes.step templates (signatures are per graph)
        self._transduce: dict = {}  # builder -> its transduce memo of those templates (builders.py)
        self.sig_op: list = []      # signature -> op (tie-breaks, stats)
        # signatures whose nodes are read one step at a time by the nodes built right after
        # them (an RNN's input projections, all computed in one batch): a batch of them lays
        # its rows out in the order of those readers' depths (Executor: _by_reader)
        self.by_reader: set = set()
        # parameters (signature -1) have no op; the lambda holds no reference to the graph,
        # which reference counting must free at renew_cg
        self.ops = Derived(self.sigs, lambda s, sig_op=self.sig_op: sig_op[s] if s >= 0 else None)
        self.sizes = Derived(self.shapes, SIZE_OF.__getitem__)
        self.stats = Stats()
        self.exe = Executor(self)
        self._t_mark = time.perf_counter()
        self.where: dict = {}       # node -> (file, line) where it was built; debug mode only
        self._checkpoints: list = []
        self.dropped = 0            # nodes revert() dropped (their ids are not reused)
        if rt.debug:
            self.__class__ = _DebugGraph   # recording add(); the normal add() pays nothing

    # --- context manager ----------------------------------------------------
    def __enter__(self):
        """Make this graph the current one (the previous one becomes stale, as with
        renew_cg), so ``with dy.ComputationGraph("depth") as g:`` builds into g."""
        rt = runtime.state()
        if rt.graph is not self:
            if not self.alive:
                raise StaleExpressionError("this computation graph was renewed or closed; create a new one")
            if rt.graph is not None:
                rt.graph.alive = False
                rt.graph.exe.release()
            rt.graph = self
        return self

    def __exit__(self, *exc):
        """Close the graph: free its arena; its expressions become stale and the next
        operation starts a fresh graph."""
        rt = runtime.state()
        self.alive = False
        self.exe.release()
        if rt.graph is self:
            rt.graph = None
        return False

    # --- building -------------------------------------------------------------
    def add(self, op, args: tuple, attr: Any = None, data: Any = None) -> "Expression":
        """Append a node; shape rule and signature come from a cache keyed by
        (op, input shapes, attr), so a repeated pattern costs a dict lookup.
        This is the hottest path of graph building: keep it lean."""
        shapes = self.shapes
        depths = self.depths
        needs = self.needs
        uses = self.uses           # consumer counts: the agenda finds the graph's end with them
        na = len(args)
        if na == 1:
            a = args[0]
            ins = (shapes[a],)
            d = depths[a]
            need = needs[a]
            uses[a] += 1
        elif na == 2:              # unrolled: list comprehensions cost a frame each
            a, b = args
            ins = (shapes[a], shapes[b])
            d = depths[a]
            if depths[b] > d:
                d = depths[b]
            need = needs[a] or needs[b]
            uses[a] += 1
            uses[b] += 1
        elif na == 3:              # affine_transform([b, W, x])
            a, b, c = args
            ins = (shapes[a], shapes[b], shapes[c])
            d = depths[a]
            if depths[b] > d:
                d = depths[b]
            if depths[c] > d:
                d = depths[c]
            need = needs[a] or needs[b] or needs[c]
            uses[a] += 1
            uses[b] += 1
            uses[c] += 1
        else:
            ins = tuple([shapes[a] for a in args])
            d = 0
            need = False
            for a in args:
                if depths[a] > d:
                    d = depths[a]
                if needs[a]:
                    need = True
                uses[a] += 1
        r = _RULES.get((op, ins, attr)) or _rule(op, ins, attr)
        base = r[2]
        if base is None:            # not batchable: a signature of its own, whatever its inputs
            key = ("alone", len(self.sigs))
        elif r[3]:
            sh = r[3]
            if len(sh) == 1:
                key = (base, args[sh[0]])
            elif len(sh) == 2:
                key = (base, args[sh[0]], args[sh[1]])
            else:
                key = (base,) + tuple([args[j] for j in sh])
        else:
            key = base
        sig = self._sigtab.get(key)
        if sig is None:
            sig = self._intern(key, op)
        depths.append(d + 1)
        needs.append(need and op.differentiable)
        uses.append(0)
        n = len(self.sigs)
        self.args.append(args)
        if attr is not None:
            self.attrs[n] = attr
        if data is not None:
            self.datas[n] = data
        shapes.append(r[0])
        self.sigs.append(sig)
        e = Expression()
        e.cg = self
        e.i = n
        return e

    # Fast paths for the common node kinds. Each caches, per graph, everything add()
    # derives from the inputs' shapes and attr (output shape, size, this graph's signature),
    # so a repeated pattern costs one dict lookup and the appends. A signature that depends
    # on node ids (shared inputs) is cached under those ids (lookup tables, parameters).
    # The appends are written out in each on purpose: a shared helper would cost one more
    # Python call per node, about a tenth of building a node.
    def add1(self, op, a: int, data: Any = None, shared: bool = False) -> "Expression":
        """add(op, (a,), None, data) for an op without attr (tanh, pick, ...). shared:
        a is the op's shared input (a lookup's table), so the cache is keyed by node a."""
        key = (op, a) if shared else (op, self.shapes[a])
        r = self._fast.get(key)
        if r is None:
            return self._add_caching(op, (a,), key, data, shared)
        if not shared:
            self._f1[op] = r
        depths, needs, uses = self.depths, self.needs, self.uses
        depths.append(depths[a] + 1)
        needs.append(r[3] and needs[a])
        uses[a] += 1
        uses.append(0)
        n = len(self.sigs)
        self.args.append((a,))
        if data is not None:
            self.datas[n] = data
        self.shapes.append(r[0])
        self.sigs.append(r[2])
        e = Expression()
        e.cg = self
        e.i = n
        return e

    def add2(self, op, a: int, b: int, attr: Any = None) -> "Expression":
        """add(op, (a, b), attr) for an op without data (cmult, add, concatenate, ...)."""
        shapes = self.shapes
        key = (op, shapes[a], shapes[b], attr)
        r = self._fast.get(key)
        if r is None:
            return self._add_caching(op, (a, b), key, None, False, attr)
        self._f2[op] = r
        depths, needs, uses = self.depths, self.needs, self.uses
        d = depths[a]
        if depths[b] > d:
            d = depths[b]
        depths.append(d + 1)
        needs.append(r[3] and (needs[a] or needs[b]))
        uses[a] += 1
        uses[b] += 1
        uses.append(0)
        n = len(self.sigs)
        self.args.append((a, b))
        if attr is not None:
            self.attrs[n] = attr
        shapes.append(r[0])
        self.sigs.append(r[2])
        e = Expression()
        e.cg = self
        e.i = n
        return e

    def add3(self, op, a: int, b: int, c: int) -> "Expression":
        """add(op, (a, b, c)) for an op without attr, data or shared inputs (esum of three);
        the cache serves esum's inline fast path, so a hit here needs no fast code."""
        shapes = self.shapes
        key = (op, shapes[a], shapes[b], shapes[c])
        r = self._fast.get(key)
        if r is None:
            return self._add_caching(op, (a, b, c), key)
        self._f3[op] = r
        return self.add(op, (a, b, c))

    def add_affine(self, op, b, w, x: int) -> "Expression":
        """b + W·x with Parameters b and W: keyed by the parameter objects, so the two
        parameter-node lookups and the signature come from one dict lookup."""
        sx = self.shapes[x]
        key = (b, w, sx)
        r = self._faff.get(key)
        if r is None:
            e = self.add(op, (self.pid(b), self.pid(w), x))
            pb, pw = self.args[e.i][0], self.args[e.i][1]
            r = _RULES[(op, (self.shapes[pb], self.shapes[pw], sx), None)]
            self._faff[key] = self._fw[w] = (r[0], r[1], self.sigs[e.i], op.differentiable, b, sx, pb, pw)
            return e
        self._fw[w] = r
        pb, pw = r[6], r[7]
        depths, needs, uses = self.depths, self.needs, self.uses
        depths.append(depths[x] + 1)    # parameters have depth 0
        needs.append(r[3] and (needs[pb] or needs[pw] or needs[x]))
        uses[x] += 1                    # pb, pw: parameters, whose uses are not kept
        uses.append(0)
        n = len(self.sigs)
        self.args.append((pb, pw, x))
        self.shapes.append(r[0])
        self.sigs.append(r[2])
        e = Expression()
        e.cg = self
        e.i = n
        return e

    def add_unary(self, op, a: int, attr: Any = None, data: Any = None, key: Any = None) -> "Expression":
        """add(op, (a,), attr, data), recording the entry that op's inline path appends from
        while a's shape and the attr are the same (api: pick, softmax, log_softmax, dropout),
        where the node's signature names no node; under key, if given (the scale_shift of
        the operators with a number keeps one per (a, b): -x and x * 0.5 alternate)."""
        e = self.add(op, (a,), attr, data)
        r = _RULES[(op, (self.shapes[a],), attr)]
        if r[2] is not None and not r[3]:
            self._fa[op if key is None else key] = (r[0], r[1], self.sigs[e.i], op.differentiable, self.shapes[a], attr)
        return e

    def add_affine_nodes(self, op, pb: int, pw: int, x: int) -> "Expression":
        """b + W·x for the parameter nodes pb and pw (dy.parameter handles) through add(),
        recording the entry the inline path appends from (api.affine_transform), under W's
        node: where both parameters need gradients, as that path assumes."""
        e = self.add(op, (pb, pw, x))
        if self.needs[pb] and self.needs[pw]:
            sx = self.shapes[x]
            r = _RULES[(op, (self.shapes[pb], self.shapes[pw], sx), None)]
            self._fw[pw] = (r[0], r[1], self.sigs[e.i], op.differentiable, pb, sx, pb, pw)
        return e

    def add_shared_matmul(self, op, key, w: int, x: int) -> "Expression":
        """W·x for the parameter node w (DyNet's ``W * x``) through add(), recording the entry
        for key (w, or the Parameter) that the operator's inline path appends from while x's
        shape is the same (api.py: Expression.__mul__, Parameter.__mul__)."""
        sx = self.shapes[x]
        e = self.add(op, (w, x))
        q = _RULES[(op, (self.shapes[w], sx), None)]
        self._fmm[key] = (q[0], q[1], self.sigs[e.i], op.differentiable, sx, w)
        return e

    def _bind(self) -> None:
        """The columns and fast-path caches in one tuple, which become the inline fast paths'
        globals while this graph is the current one (fastpath.bind). Only revert() replaces
        a cache; the columns change in place."""
        self._cols = (self.depths, self.needs, self.uses, self.sigs, self.args, self.shapes,
                      self.attrs, self.datas, self._f1, self._f2, self._f3, self._fw, self._flk, self._fmm)
        if runtime.state().graph is self:
            runtime.graph_changed(self)

    # --- DyNet's checkpoints: build a candidate, evaluate it, drop it (beam search) -------
    @_follows_current
    def checkpoint(self) -> None:
        """Remember the current end of the graph; revert() drops what is built after it."""
        if COOP.park is not None:
            # the instances of coop.batched_map build into one graph in turn: a revert would
            # drop the nodes the others built after the checkpoint
            raise GraphError(f"cg_checkpoint() inside batched_map: its instances share one computation graph, "
                             f"so cg_revert() would drop the other instances' nodes; score candidates with a "
                             f"plain loop [at {user_line()}]")
        self._checkpoints.append(len(self.sigs))

    @_follows_current
    def revert(self) -> None:
        """Drop every node built since the last checkpoint() (nothing if there is none, as in
        DyNet). Their ids are not reused: each stays a node of shape DROPPED, never computed,
        which refuses its Expressions (about 150 bytes a node until the graph is renewed)."""
        if not self._checkpoints:
            return
        n = self._checkpoints.pop()
        k = len(self.sigs) - n
        if k <= 0:
            return
        self.exe.truncate(n)
        uses = self.uses
        for args in self.args[n:]:
            for a in args:
                if a < n:
                    uses[a] -= 1
        self.dropped += k - self.shapes[n:].count(DROPPED)     # (a nested revert drops some again)
        self.args[n:] = [()] * k
        self.shapes[n:] = [DROPPED] * k
        self.sigs[n:] = [-1] * k        # as a parameter's node: the scheduler skips it
        self.depths[n:] = [0] * k
        self.needs[n:] = [False] * k
        uses[n:] = [0] * k
        if self.exe.done == n:
            # nothing to compute there: the next forward (forward_to's, ending at the next
            # checkpoint) starts after them, not with an empty one over them
            self.exe.done = n + k
        for col in (self.attrs, self.datas):
            # a node's entry is made when it is built (set() and invalidate() only replace
            # one), so the dict's order is node order: the dropped nodes' entries are last
            while col and next(reversed(col)) >= n:
                col.popitem()
        # the caches that name nodes: parameter nodes, fast-path entries keyed by a node,
        # affine entries holding parameter nodes, step templates holding parameter nodes
        for k in [k for k in self.ext if k >= n]:
            del self.ext[k]
        self.pnode = {k: v for k, v in self.pnode.items() if v < n}
        self._pfast = {k: v for k, v in self._pfast.items() if v < n}
        self._pexpr = {k: v for k, v in self._pexpr.items() if v.i < n}
        self._cells = {k: v for k, v in self._cells.items() if v.i < n}      # (a slice follows its cell)
        for run in [r for r, i in self._masked.items() if i >= n]:
            del self._masked[run]
            run.drop_masks()        # drawn after the checkpoint: the next input draws them again
        self._fast = {k: v for k, v in self._fast.items() if not (type(k[1]) is int and k[1] >= n)}
        self._faff = {k: v for k, v in self._faff.items() if v[6] < n and v[7] < n}
        self._fmm = {k: v for k, v in self._fmm.items() if v[5] < n}
        self._fw = {k: v for k, v in self._fw.items() if v[6] < n and v[7] < n}
        self._sums = {k: v for k, v in self._sums.items() if k[1] < n}     # (signature, parameter node)
        self._flk = {k: v for k, v in self._flk.items() if v[4] < n}
        self._bind()
        self._recipes = {}
        self._transduce = {}
        self.where = {k: v for k, v in self.where.items() if k < n}
        # signature keys that name dropped nodes (shared inputs, "alone" nodes) cannot match
        # again (their ids are not reused): dropped, to keep the table to the live graph
        self._sigtab = {k: v for k, v in self._sigtab.items()
                        if type(k) is not tuple or not any(type(a) is int and a >= n for a in k[1:])}

    # --- DyNet's methods of dy.cg() (called on a renewed graph: of the current one) ---------
    def renew(self, immediate_compute: bool = False, check_validity: bool = False,
              autobatching=None) -> "ComputationGraph":
        """renew_cg(...): the new current graph (DyNet renews its one graph in place; a handle
        to this one still reaches it through these methods)."""
        return renew_cg(immediate_compute, check_validity, autobatching)

    @_follows_current
    def print_graphviz(self, compact: bool = False, show_dims: bool = True, expr_names=None,
                       lookup_names=None, cluster=None, file=None) -> None:
        """dy.print_graphviz(...) of this graph (keywords as there)."""
        from .api_graph import dot
        dot(self, file)

    @_follows_current
    def dump(self, filename="", show_values: bool = True, show_gradients: bool = True,
             nan_check_only: bool = False) -> None:
        """dy.dump_cg(...) of this graph."""
        from .api_graph import dump
        dump(self, filename, show_values, show_gradients, nan_check_only)

    @_follows_current
    def version(self) -> int:
        """Which graph this is: a new number at every renew_cg() (of the current graph, when
        called on a renewed one, as DyNet's)."""
        return self.gid

    def invalidate(self) -> None:
        """Forget all computed values, as DyNet's invalidate: the next forward recomputes
        the graph from its first node, and random nodes (dropout, noise, samples) draw new
        numbers -- new seeds, still per node, so every strategy draws the same ones."""
        from .ops.random import reseed
        self.exe.invalidate()
        ops, datas = self.ops, self.datas
        for n in list(datas):       # random nodes carry their seed as data
            op = ops[n]
            if op is not None and op.redraws:
                datas[n] = reseed(int(datas[n]))

    def _intern(self, key, op) -> int:
        """A new signature for key (a base signature and the ids of shared operands)."""
        sig = self._sigtab[key] = len(self.sig_op)
        self.sig_op.append(op)
        return sig

    def fused_sig(self, a: int, act) -> int:
        """The signature of node a with activation act fused into it (ops/fused.py), or -1
        where that pair does not fuse. It is the signature add() gives a node of the fused
        op, so fused nodes batch with those that replayed templates (recipes.py) append;
        cached by (a's signature, act) for the API's fast path."""
        sig = self.sigs[a]
        op = FUSED.get((self.sig_op[sig], act)) if sig >= 0 and self.fuses else None
        s = -1 if op is None else self._sig_of(op, self.args[a], self.attrs[a])
        self._fuse[(sig, act)] = s
        return s

    def fused_in_sig(self, t: int, op, j: int) -> int:
        """The signature of op with its input j the activation node t taken in (ops/fused.py
        FusedIn), or -1 where they do not fuse; cached by (t's signature, op, j) for the API's
        fast path, which rewrites t in place. Elementwise ops only: the signature then
        depends on no shape and no node."""
        s = self.sigs[t]
        fop = FUSED_IN.get((op, self.sig_op[s], j)) if s >= 0 and self.fuses else None
        sig = -1
        if fop is not None and fop.elementwise:
            a = self.args[t][0]
            sig = self._sig_of(fop, (a, a), None)
        self._fuse[(s, op, j)] = sig
        return sig

    def absorb_sum(self, t, o, caller):
        """t + o as one node, where t, a temporary only the caller's + operator holds (the API
        checks the count: fastpath.ABSORB; caller: the frame of the code that wrote the +,
        whose instruction must be that operator), is the newest node, not yet computed, and
        its op declares a form with a bias (W·x: ops/fused.py SUMS); a parameter's node may
        follow it (``W * x + dy.parameter(b)`` adds b's node after the product). o, a
        parameter of t's shape (or its Expression), becomes the node's first input: W·x + b is
        then the node affine_transform([b, W, x]) makes, so that an activation over it fuses
        too. Returns t, or None where the rule does not apply (a plain sum is added instead)."""
        n1 = t.i
        sigs = self.sigs
        n = len(sigs) - 1
        if n1 != n and not (n1 == n - 1 and sigs[n] < 0 and not self.args[n]):
            return None
        s = sigs[n1]
        if s < 0 or not self.fuses or n1 < self.exe.done or self.sig_op[s] not in SUMS \
                or BY_OPERATOR is None or not BY_OPERATOR(caller):
            return None
        if self._checkpoints and self._checkpoints[-1] > n1:
            # a checkpoint taken after the product (inside the other operand): revert() would
            # keep the product node, rewritten to read b's node, which it may drop
            return None
        if type(o) is Expression:
            if o.cg is not self:
                return None
            k = o.i
        elif getattr(o, "is_lookup", True) is False:      # a Parameter (not a lookup table)
            k = self.pid(o)     # may append the parameter's node: n1 stays unread by any node
        else:
            return None
        # a parameter (a bias) only: a computed addend would make the node one step deeper
        # than its product's input wherever that addend lies deeper (W·h_left + U·h_right: the
        # left child's product is a node of its own), and equal cells of a tree level would
        # stop sharing a depth
        if self.shapes[k] is not self.shapes[n1] or k not in self.ext:
            return None
        key = (s, k)
        ns = self._sums.get(key)
        if ns is None:
            ns = self._sums[key] = self._sig_of(SUMS[self.sig_op[s]], (k,) + self.args[n1], self.attrs[n1])
        self.args[n1] = (k,) + self.args[n1]
        sigs[n1] = ns
        depths = self.depths
        if depths[k] >= depths[n1]:
            depths[n1] = depths[k] + 1
        self.needs[n1] = self.needs[n1] or self.needs[k]
        self.uses[k] += 1
        return t

    def _sig_of(self, op, args, attr) -> int:
        """The signature add() gives a batchable node of op over the nodes args, interned on
        first use (add() inlines the same steps: it is the hot path)."""
        r = _rule(op, tuple([self.shapes[j] for j in args]), attr)
        key = (r[2],) + tuple([args[j] for j in r[3]]) if r[3] else r[2]
        s = self._sigtab.get(key)
        return s if s is not None else self._intern(key, op)

    def _add_caching(self, op, args, key, data=None, by_node=False, attr=None):
        e = self.add(op, args, attr, data)
        r = _RULES[(op, tuple([self.shapes[a] for a in args]), attr)]
        if r[2] is not None and (not r[3] or by_node):
            # the key's shapes (and attr) ride along: the inline fast paths check them
            self._fast[key] = f = (r[0], r[1], self.sigs[e.i], op.differentiable) + key[1:]
            if not by_node:
                (self._f1, self._f2, self._f3)[len(args) - 1][op] = f
        return e

    def add_lookup(self, op, p, index: int) -> "Expression":
        """add1(op, pid(p), index, True) for a checked row of table p; remembers the entry
        under p for api.lookup's inline fast path."""
        a = self.pid(p)
        e = self.add1(op, a, index, True)
        r = self._fast.get((op, a))
        if r is not None:
            self._flk[p] = r + (self.shapes[a][0],)     # r ends with a: the key's tail
        return e

    def pid(self, p, update: bool = True) -> int:
        """Node id of parameter p in this graph (created on first use)."""
        if update is True:
            n = self._pfast.get(p)          # keyed by the object: no key tuple to build
            if n is None:
                n = self._pfast[p] = self.param_expr(p, True).i
            return n
        n = self.pnode.get((id(p), update))
        return n if n is not None else self.param_expr(p, update).i

    def param_expr(self, p, update: bool = True) -> "Expression":
        """The node of parameter p in this graph (one per parameter and graph)."""
        key = (id(p), update)
        n = self.pnode.get(key)
        if n is None:
            if not hasattr(p, "is_lookup") or not hasattr(p, "data"):     # before any column grows
                raise GraphError(f"parameter: needs a Parameter or LookupParameter, got {type(p).__name__} "
                                 f"[at {user_line()}]")
            n = len(self.sigs)
            self.pnode[key] = n
            self.ext[n] = p
            self.args.append(())
            s = tuple(p.data.shape)
            s = _SHAPES.setdefault(s, s)
            SIZE_OF[s] = int(p.data.size)
            self.shapes.append(s)
            self.sigs.append(-1)
            self.depths.append(0)
            self.needs.append(bool(update))
            self.uses.append(0)
            self.exe.mark_external(n)
        return expression(self, n)

    # --- running ----------------------------------------------------------------
    def forward_to(self, i: int) -> None:
        """Compute every node up to and including i that is not computed yet."""
        if not self.alive:
            raise StaleExpressionError("this computation graph was renewed; its expressions can no longer be evaluated")
        if i >= self.exe.done and COOP.park is not None:
            COOP.park(self, i)  # inside batched_map: wait for the batched forward of all instances
        for c in self._checkpoints:
            if self.exe.done < c <= i:
                # a forward ends at each checkpoint, so cg_revert drops the candidate's
                # forward alone and the part built before the checkpoint keeps its values
                self.exe.forward(c)
        self.exe.forward(i + 1)

    def backward_from(self, i: int, full: bool = False) -> None:
        self.forward_to(i)
        self.exe.backward(i, full)

    def value_of(self, i: int):
        self.forward_to(i)
        return self.exe.value(i)

    def family_key(self) -> frozenset:
        """What names the kind of graph for the scheduler's per-kind choices: the sets of ops
        and parameters it uses. Sets, not sequences: signatures appear in the order the data
        first needs them (a one-word first sentence, an esum of every arity), which changes
        from one minibatch to the next while the model stays the same."""
        return frozenset(map(id, self.sig_op)) | frozenset(map(id, self.ext.values()))

    def heavy_of_sig(self, s: int) -> bool:
        return self.sig_op[s].heavy

    def sig_name(self, s: int) -> str:
        op = self.sig_op[s]
        return f"{op.name}#{s}"

    def node_count(self) -> int:
        """The number of nodes, as DyNet counts them (not those cg_revert dropped)."""
        return len(self.sigs) - self.dropped

    def describe(self, i: int) -> str:
        op = self.ops[i]
        name = "parameter" if op is None else op.name
        ins = [self.shapes[a] for a in self.args[i]]
        site = self.where.get(i)
        made = f", created at {where_code(site)}" if site is not None else ""
        return f"node {i} ({name}, input shapes {ins}, output shape {self.shapes[i]}{made})"


class ThroughAdd:
    """The fast paths (add1, add2, add_affine) routed through add(), for graphs whose add()
    must see every node: the debug graph records lines, the vertex tracer records symbols."""

    # the API's inline fast paths find nothing here, so every node goes through add()
    _f1 = _f2 = _f3 = _fw = _flk = _fa = MappingProxyType({})
    _cols = (None,) * 8 + (_f1,) * 6    # no columns (TraceGraph), caches that stay empty

    def absorb_sum(self, t, o, caller):   # nothing is rewritten in place here (fastpath.ABSORB)
        return None

    def add3(self, op, a, b, c):
        return self.add(op, (a, b, c))

    def add_lookup(self, op, p, index):
        return self.add(op, (self.pid(p),), None, index)

    def add1(self, op, a, data=None, shared=False):
        return self.add(op, (a,), None, data)

    def add2(self, op, a, b, attr=None):
        return self.add(op, (a, b), attr)

    def add_affine(self, op, b, w, x):
        return self.add(op, (self.pid(b), self.pid(w), x))

    def add_unary(self, op, a, attr=None, data=None, key=None):
        return self.add(op, (a,), attr, data)

    def add_affine_nodes(self, op, pb, pw, x):
        return self.add(op, (pb, pw, x))

    def add_shared_matmul(self, op, key, w, x):
        return self.add(op, (w, x))


class _DebugGraph(ThroughAdd, ComputationGraph):
    """A graph that records each node's creation line (runtime.set_debug(True))."""

    def add(self, op, args: tuple, attr: Any = None, data: Any = None) -> "Expression":
        e = ComputationGraph.add(self, op, args, attr, data)
        self.where[e.i] = user_site()
        return e


class Tensor(np.ndarray):
    """What tensor_value() returns: a NumPy array with DyNet's Tensor.as_numpy()."""

    def as_numpy(self) -> np.ndarray:
        return self.view(np.ndarray)


class Expression:
    """A handle to one node of one graph. Cheap: two slots, and no __init__: ``Expression()``
    with two slot stores costs a third less than a call of __init__ or of __new__; make one
    with expression(cg, i)."""

    __slots__ = ("cg", "i")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's functions of an Expression (np.add(x, 1.0), np.sum(x)) apply its operators to
        it, as to any Python object. An array of elements beside it (array + x) is refused,
        naming the operator and the user's line, as DyNet's operators refuse it, where NumPy
        would make an array of Expressions, one per element."""
        if any(isinstance(a, np.ndarray) and a.ndim > 0 for a in inputs):
            what = f"operator {_SYMBOLS[ufunc.__name__]}" if ufunc.__name__ in _SYMBOLS else f"numpy.{ufunc.__name__}"
            raise TypeError(f"{what}: expected an Expression or Parameter, got ndarray (dy.inputTensor makes "
                            f"an expression of an array) [at {user_line()}]")
        if method == "__call__" and len(inputs) == 2 and not kwargs and ufunc.__name__ in _BINARY:
            # a NumPy scalar and an Expression (np.float32(2) * x): the Python operator, on the
            # scalar's number (NumPy's object loop would hand a longdouble back to NumPy)
            a, b = map(_python, inputs)
            return _BINARY[ufunc.__name__](a, b)
        r = getattr(ufunc, method)(*[_object(a) for a in inputs], **kwargs)
        return r[()] if isinstance(r, np.ndarray) and r.ndim == 0 and r.dtype == object else r

    # --- values -----------------------------------------------------------------
    def _check(self):
        g = self.cg
        if not g.alive:
            raise StaleExpressionError(
                f"Expression {g.describe(self.i)} belongs to a computation graph that was "
                f"renewed (renew_cg() was called after it was built) [at {user_line()}]")
        if g.shapes[self.i] is DROPPED:
            raise StaleExpressionError(f"{called() or 'Expression'}: {_DROPPED_USE} [at {user_line()}]")

    def forward(self, recalculate: bool = False) -> None:
        """Compute this node (and what it needs). recalculate: recompute the whole graph,
        with fresh random numbers, as DyNet does."""
        self._check()
        if recalculate:
            self.cg.invalidate()
        self.cg.forward_to(self.i)

    def npvalue(self, recalculate: bool = False):
        """The value as a NumPy array (a copy; on the host for CuPy). recalculate: as in
        forward()."""
        self._check()
        if recalculate:
            self.cg.invalidate()
        return self.cg.backend.to_host(self.cg.value_of(self.i)).copy()

    def value(self, recalculate: bool = False):
        """As in DyNet: a float for a one-element vector, a list for vectors, and the
        NumPy array (npvalue) for matrices and tensors (a (1, 1) matrix too)."""
        v = self.npvalue(recalculate)
        if v.size == 1 and v.ndim <= 1:
            return float(v.reshape(()))
        return v.tolist() if v.ndim == 1 else v

    def scalar_value(self, recalculate: bool = False) -> float:
        v = self.npvalue(recalculate)
        if v.size != 1:
            raise GraphError(f"scalar_value() on an expression of shape {v.shape} [at {user_line()}]")
        return float(v.reshape(()))

    def vec_value(self, recalculate: bool = False) -> list:
        return self.npvalue(recalculate).reshape(-1, order="F").tolist()

    def tensor_value(self, recalculate: bool = False):
        """npvalue() as DyNet's Tensor: an array that also answers as_numpy()."""
        return self.npvalue(recalculate).view(Tensor)

    def dim(self):
        """(shape, batch size) as in DyNet; batch size is always 1 here."""
        self._check()
        return (self.cg.shapes[self.i], 1)

    def backward(self, full: bool = False) -> None:
        """Accumulate d(self)/d(parameter) into every parameter's gradient."""
        self._check()
        self.cg.backward_from(self.i, full)

    def gradient(self):
        """d(loss)/d(this node) from the last backward() of its graph, as a NumPy array of
        this node's shape. Nodes that no parameter depends on (inputs, constants) get one
        only from backward(full=True); before any backward, this is an error. A parameter's
        node answers with its part of the last backward, as DyNet's (the parameter's
        grad_as_array() holds the sum since the last update)."""
        self._check()
        g = self.cg
        gr = g.exe.gradient(self.i)
        if gr is None:
            why = ("call backward() first" if g.exe.gbuf is None else
                   "a constant parameter's node (update=False) gets no gradient here" if self.i in g.ext else
                   "this node was not computed when the last backward() ran")
            raise GradientError(f"gradient(): {why}; {g.describe(self.i)} [at {user_line()}]")
        return g.backend.to_host(gr).copy()

    def incremental_forward(self) -> None:
        self.forward()

    # a handle is immutable, so a copy is the handle itself: an activation fuses into a node
    # that only one handle reaches (fastpath.py), which a second handle would break
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return f"Expression(node={self.i}, shape={self.cg.shapes[self.i]})"

    # --- arithmetic (defined in api.py to keep the op wiring in one place) --------


_SYMBOLS = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/", "divide": "/", "power": "**",
            "matmul": "@"}
_BINARY = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "true_divide": operator.truediv,
           "divide": operator.truediv, "power": operator.pow}


def _python(v):
    """A NumPy number (or 0-d array) as Python's; anything else as it is. (item() keeps a
    longdouble a NumPy scalar.)"""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if isinstance(v, np.generic):
        for kind, to in ((np.bool_, bool), (np.integer, int), (np.floating, float), (np.complexfloating, complex)):
            if isinstance(v, kind):
                return to(v)
    return v


def _object(a):
    """a as NumPy's object loop should see it: an Expression or Parameter as a 0-d object array
    (NumPy then calls its operators), a NumPy number as Python's (a longdouble would call
    NumPy, and so this method, again)."""
    if isinstance(a, (np.generic, np.ndarray)):
        return _python(a) if a.ndim == 0 and a.dtype != object else a
    if hasattr(a, "__array_ufunc__"):
        o = np.empty((), dtype=object)
        o[()] = a
        return o
    return a


def expression(cg, i: int) -> Expression:
    e = Expression()
    e.cg = cg
    e.i = i
    return e


def cg() -> ComputationGraph:
    """The current graph (one is created on first use)."""
    g = runtime.state().graph
    if g is None:
        g = renew_cg()
    return g


def renew_cg(immediate_compute: bool = False, check_validity: bool = False, autobatching=None) -> ComputationGraph:
    """Start a new graph; expressions of the old one become stale.

    The arguments in DyNet's order. autobatching: None (the default strategy),
    "none"|"depth"|"agenda", a Strategy, DyNet's 0/1/2 or a bool. A strategy name or Strategy
    given first (``renew_cg("depth")``) is taken as autobatching; a bool or number first is
    DyNet's immediate_compute. immediate_compute and check_validity (DyNet's debugging aids)
    are accepted and change nothing: ``dy.set_debug(True)`` names each node's line instead."""
    if isinstance(immediate_compute, (str, runtime.Strategy)):
        if autobatching is not None:
            raise TypeError(f"renew_cg: a strategy given first and autobatching={autobatching!r} "
                            f"[at {user_line()}]")
        immediate_compute, autobatching = False, immediate_compute
    rt = runtime.state()
    if getattr(rt.graph, "is_trace", False):
        rt.graph.refuse("renew_cg()")
    new = ComputationGraph(autobatching)   # first: a bad strategy must not kill the old graph
    if rt.graph is not None:
        rt.graph.alive = False
        rt.graph.exe.release()
    rt.graph = new
    return rt.graph


def lookup(p, index, update: bool = True) -> Expression:
    from .api import lookup as _lookup
    return _lookup(p, index, update)
