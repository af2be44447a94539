"""Tracing a vertex function F once into a small static program over the lazy graph's op set.

While F runs, a TraceGraph stands in for the current computation graph, so F calls the
ordinary DyNet-named functions (dy.logistic, dy.affine_transform, E[id], ...) and they
validate shapes and append *symbols* exactly as they append nodes to a lazy graph. The
vertex handle `v` adds the four Cavs operators: pull (external input), gather (a child's
scattered state), scatter (this vertex's state for its parents), push (output to the outside).

A Trace then sorts its instructions into three phases (Cavs' lazy batching, §3.4):
  pre   -- do not depend on any gather: run once over all vertices of the kind;
  front -- depend on a gather and feed the scatter: run once per frontier;
  post  -- depend on a gather but feed only pushes: run once over all vertices, at the end.
"""
from __future__ import annotations

import numbers

from ..errors import GraphError, user_line
from ..graph import Expression, ThroughAdd, _rule, expression
from .. import runtime
from ..ops.base import Op
from ..ops import OPS
from ..ops.fused import FUSED, SUMS
from ..ops.random import _Random

PARAM, PULL, GATHER, OP = "param", "pull", "gather", "op"
CONST, IDS, SEED = "const", "ids", "seed"          # what an op's per-vertex data is


class NeedScatterShapes(Exception):
    """gather() before any trace told what vertices scatter; try another kind first."""


class VertexIndex:
    """A per-vertex integer pulled by ``v.pull(name)`` (a word id, a label). Usable where
    the lazy API takes an index (lookup, pickneglogsoftmax, pick, hinge): the op's per-node
    data becomes the pulled ids, checked against `bound` at every call."""

    is_vertex_index = True
    __slots__ = ("name", "bound")

    def __init__(self, name):
        self.name = name
        self.bound = None

    def require_below(self, n):
        self.bound = n if self.bound is None else min(self.bound, n)

    def __index__(self):
        raise GraphError(f"v.pull({self.name!r}) is a per-vertex id, not a Python int: use it directly "
                         f"in E[...], dy.lookup, dy.pickneglogsoftmax, dy.pick [at {user_line()}]")

    def __repr__(self):
        return f"VertexIndex({self.name!r})"

    def _arith(self, *_):
        raise GraphError(f"v.pull({self.name!r}) is a per-vertex id (the input was integers): use it as an "
                         f"index (E[...], dy.lookup, dy.pick, dy.pickneglogsoftmax); pass floats for values "
                         f"to compute with [at {user_line()}]")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _arith
    __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __pow__ = _arith


class TraceGraph(ThroughAdd):
    """Duck-types the parts of ComputationGraph that the API functions use."""

    is_trace = True

    def refuse(self, what):
        """What only a computation graph does (renew it, checkpoint it, compute values)."""
        raise GraphError(f"{what} inside vertex function {self.name}: F describes one vertex and is traced "
                         f"once; call it outside F [at {user_line()}]")

    def checkpoint(self):
        self.refuse("cg_checkpoint()")

    def revert(self):
        self.refuse("cg_revert()")

    def renew(self, *args, **kwargs):
        self.refuse("cg().renew()")

    def dump(self, *args, **kwargs):
        self.refuse("cg().dump()")

    def print_graphviz(self, *args, **kwargs):
        self.refuse("cg().print_graphviz()")

    def __init__(self, name, dtype, xp):
        self.name = name
        self.alive = True
        self.dtype = dtype
        self.xp = xp
        self.seed = 0
        self.src: list = []        # per symbol: (PARAM, p, update) | (PULL, name, is_expr) | (GATHER, k, j) | (OP, ...)
        self.ops: list = []        # per symbol: op or None (len() is used by dy.dropout's seed)
        self.shapes: list = []
        self.sizes: list = []
        self.ext: dict = {}        # symbol -> Parameter (api checks "is a parameter node" here)
        self.pnode: dict = {}
        self._cells: dict = {}     # as ComputationGraph's (RNNState.s())

    def _new(self, src, op, shape):
        n = len(self.src)
        self.src.append(src)
        self.ops.append(op)
        self.shapes.append(tuple(shape))
        size = 1
        for d in shape:
            size *= d
        self.sizes.append(size)
        return n

    def add(self, op, args, attr=None, data=None):
        ins = tuple([self.shapes[a] for a in args])
        out, _, _, shared = _rule(op, ins, attr)
        for j in shared:
            if args[j] not in self.ext:
                raise GraphError(f"{op.name} inside a vertex function: input {j} must be a parameter "
                                 f"[at {user_line()}]")
        if isinstance(data, VertexIndex):
            dkind = IDS
        elif isinstance(op, _Random):
            dkind = SEED
        else:
            dkind = CONST
        n = self._new((OP, op, tuple(args), attr, data, dkind), op, out)
        return expression(self, n)

    def pid(self, p, update=True):
        key = (id(p), bool(update))
        n = self.pnode.get(key)
        if n is None:
            n = self.pnode[key] = self._new((PARAM, p, bool(update)), None, p.data.shape)
            self.ext[n] = p
        return n

    def param_expr(self, p, update=True):
        return expression(self, self.pid(p, update))

    # values do not exist while tracing
    def value_of(self, i):
        raise GraphError(f"inside vertex function {self.name}: a symbol has no value while F is traced; "
                         f"push it and read the output instead [at {user_line()}]")

    forward_to = backward_from = value_of

    @property
    def backend(self):                    # Expression.npvalue() reaches value_of through it
        raise GraphError(f"inside vertex function {self.name}: a symbol has no value while F is traced; "
                         f"push it and read the output instead [at {user_line()}]")

    def describe(self, i):
        return f"symbol {i} of vertex function {self.name} (shape {self.shapes[i]})"


class Vertex:
    """The handle F receives. Python-level facts (n_children, is_leaf, kind) are fixed per
    trace, so F may branch on them; reading one makes the trace specific to its value."""

    def __init__(self, tg, fn, arity, kind, pulls):
        self._tg, self._fn = tg, fn
        self._arity, self._kind = arity, kind
        self._pulls = pulls                # name -> ("ids",) | ("float"|"expr", shape)
        self.reads: set = set()
        self.pulled: dict = {}
        self.gathered: dict = {}           # child k -> tuple of symbols
        self.scattered = None
        self.pushed: dict = {}

    @property
    def n_children(self) -> int:
        self.reads.add("arity")
        return self._arity

    @property
    def is_leaf(self) -> bool:
        self.reads.add("arity")
        return self._arity == 0

    @property
    def kind(self) -> int:
        self.reads.add("kind")
        return self._kind

    def pull(self, name):
        """The external input `name` of this vertex: an Expression for float inputs (or
        lazy-graph Expressions), a per-vertex id for integer inputs."""
        got = self.pulled.get(name)
        if got is not None:
            return got
        spec = self._pulls.get(name)
        if spec is None:
            raise GraphError(f"vertex function {self._fn.name}: v.pull({name!r}) but the call passed no "
                             f"{name}=... (passed: {sorted(self._pulls) or 'none'}) [at {user_line()}]")
        if spec[0] == "ids":
            got = VertexIndex(name)
        else:
            got = expression(self._tg, self._tg._new((PULL, name, spec[0] == "expr"), None, spec[1]))
        self.pulled[name] = got
        return got

    def gather(self, k: int):
        """What child k scattered (zeros where the vertex has no child k): a tuple when
        scatter got several values, else the one value."""
        fn = self._fn
        if isinstance(k, numbers.Integral) and not isinstance(k, bool):
            k = int(k)
        if not isinstance(k, int) or not 0 <= k < fn.max_children:
            raise GraphError(f"vertex function {fn.name}: gather({k!r}) out of range for "
                             f"max_children={fn.max_children} [at {user_line()}]")
        got = self.gathered.get(k)
        if got is None:
            shapes = fn.scatter_shapes
            if shapes is None:
                raise NeedScatterShapes(k)
            got = tuple(expression(self._tg, self._tg._new((GATHER, k, j), None, s)) for j, s in enumerate(shapes))
            self.gathered[k] = got
        return got if len(got) > 1 else got[0]

    def scatter(self, *xs):
        """Set what parents gather from this vertex (one or more Expressions)."""
        if self.scattered is not None:
            raise GraphError(f"vertex function {self._fn.name}: scatter() called twice [at {user_line()}]")
        if not xs:
            raise GraphError(f"vertex function {self._fn.name}: scatter() needs at least one value [at {user_line()}]")
        self.scattered = tuple(self._sym(x, "scatter") for x in xs)

    def push(self, name: str, x):
        """Make x visible outside as out[name] (one row per vertex)."""
        if not isinstance(name, str):
            raise GraphError(f"vertex function {self._fn.name}: push name must be a str, got {name!r} [at {user_line()}]")
        if name in self.pushed:
            raise GraphError(f"vertex function {self._fn.name}: push({name!r}) called twice [at {user_line()}]")
        self.pushed[name] = self._sym(x, f"push({name!r})")

    def _sym(self, x, what):
        tg = self._tg
        if type(x) is Expression and x.cg is tg:
            return x.i
        if hasattr(x, "data") and hasattr(x, "grad") and hasattr(x, "shape"):   # a Parameter
            return tg.pid(x)
        raise GraphError(f"vertex function {self._fn.name}: {what} needs Expressions computed inside F, "
                         f"got {type(x).__name__} [at {user_line()}]")


class Trace:
    """F traced for one vertex kind: symbols, instructions by phase, and what flows in/out."""

    def __init__(self, tg: TraceGraph, v: Vertex):
        self.src, self.shapes, self.sizes = list(tg.src), tg.shapes, tg.sizes
        self.reads = frozenset(v.reads)
        self.scatter = v.scattered or ()
        self.push = dict(v.pushed)
        self._fuse_activations()
        self.gathers = sorted((k, j, x.i) for k, syms in v.gathered.items() for j, x in enumerate(syms))
        self.pulls = [(s, name) for name, x in v.pulled.items()
                      if type(x) is Expression for s in [x.i]]
        self.bounds = {x.name: x.bound for x in v.pulled.values() if isinstance(x, VertexIndex)}
        self.pulled = frozenset(v.pulled)   # every name F read, live or not
        self.params = [(s, src[1], src[2]) for s, src in enumerate(tg.src) if src[0] == PARAM]
        self.param_shapes = [tuple(p.data.shape) for _, p, _ in self.params]
        n = len(self.src)
        dep = [False] * n                   # depends on a gather
        for s, src in enumerate(self.src):
            if src[0] == GATHER:
                dep[s] = True
            elif src[0] == OP:
                dep[s] = any(dep[a] for a in src[2])
        feeds = [False] * n                 # the scatter needs it
        for s in self.scatter:
            feeds[s] = True
        for s in range(n - 1, -1, -1):
            if feeds[s] and self.src[s][0] == OP:
                for a in self.src[s][2]:
                    feeds[a] = True
        self.phase = ["pre" if not dep[s] else ("front" if feeds[s] else "post") for s in range(n)]
        live = [False] * n                  # dead code (feeds neither scatter nor push) is dropped
        for s in list(self.scatter) + list(self.push.values()):
            live[s] = True
        for s in range(n - 1, -1, -1):
            if live[s] and self.src[s][0] == OP:
                for a in self.src[s][2]:
                    live[a] = True
        self.live = live
        self.pulls = [(s, name) for s, name in self.pulls if live[s]]
        self.gathers = [(k, j, s) for k, j, s in self.gathers if live[s]]
        ops = [s for s in range(n) if self.src[s][0] == OP and live[s]]
        self.pre = [s for s in ops if self.phase[s] == "pre"]
        self.front = [s for s in ops if self.phase[s] == "front"]
        self.post = [s for s in ops if self.phase[s] == "post"]
        # which symbols carry a gradient (cf. ComputationGraph.needs)
        need = [False] * n
        for s, src in enumerate(self.src):
            if src[0] == PARAM:
                need[s] = src[2]
            elif src[0] == PULL:
                need[s] = src[2]          # lazy-graph Expressions: yes; float data: no
            elif src[0] == GATHER:
                need[s] = True
            else:
                need[s] = src[1].differentiable and any(need[a] for a in src[2])
        self.need = need
        self.is_param = [src[0] == PARAM for src in self.src]
        self.alias = self._concat_aliases(ops)
        self.instr = self._instructions(ops)
        self._gradient_writes(ops)
        self._gather_groups()

    def _fuse_activations(self):
        """act(p) of a product p that nothing else reads (no other symbol, scatter or push)
        becomes the fused op over p's inputs (ops/fused.py), as the lazy API fuses a
        temporary: the activation runs in place over the product's rows, and backward turns
        its gradient into the product's once (Op.grad_prologue). p is then dead code."""
        if not runtime.state().fuse:
            return
        src = self.src
        readers = [0] * len(src)
        for sr in src:
            if sr[0] == OP:
                for a in sr[2]:
                    readers[a] += 1
        for a in list(self.scatter) + list(self.push.values()):
            readers[a] += 1
        # p + b (W * x + b) of a parameter b of p's shape: the affine node over (b, *p's inputs),
        # as the lazy API's + makes it (ComputationGraph.absorb_sum); an activation then fuses
        add = OPS["add"]
        for s, sr in enumerate(src):
            if sr[0] == OP and sr[1] is add and len(sr[2]) == 2 and sr[3] is None:
                for q, k in (sr[2], sr[2][::-1]):
                    p = src[q]
                    if p[0] == OP and p[1] in SUMS and readers[q] == 1 and src[k][0] == PARAM \
                            and self.shapes[k] == self.shapes[q] and p[3] is None and p[4] is None:
                        # p is dead code now; its reads of its inputs are s's
                        src[s] = (OP, SUMS[p[1]], (k,) + p[2]) + p[3:]
                        readers[q] = 0
                        break
        for s, sr in enumerate(src):
            if sr[0] == OP and len(sr[2]) == 1 and sr[3] is None and src[sr[2][0]][0] == OP:
                p = src[sr[2][0]]
                f = FUSED.get((p[1], sr[1]))
                if f is not None and readers[sr[2][0]] == 1:
                    src[s] = (OP, f) + p[2:]

    def _concat_aliases(self, ops):
        """{input symbol: (concat symbol, first column)} for vector concatenations whose inputs
        can live inside the concat's own buffer: producers (gathers included) then write in
        place and the concat costs nothing, forward or backward (its gradient buffer is
        likewise the inputs' gradient buffers side by side)."""
        alias = {}
        targets = set()
        for s in ops:
            src = self.src[s]
            if src[1].name != "concatenate" or src[3] != 0 or len(self.shapes[s]) != 1:
                continue
            args = src[2]
            if len(set(args)) != len(args) or any(
                    self.is_param[a] or a in alias or a in targets or len(self.shapes[a]) != 1 for a in args):
                continue
            col = 0
            for a in args:
                alias[a] = (s, col)
                col += self.sizes[a]
            targets.add(s)
        self.concat_free = targets
        return alias

    def _instructions(self, ops):
        """Per op symbol: (op, args, attr, [(arg, its Parameter or None, stacked)], needs,
        shared, grad_into plan or None). The engine runs each instruction once per frontier,
        and looking these up each time was a good part of its Python time."""
        instr = {}
        need, is_param = self.need, self.is_param
        for s in ops:
            _, op, args, attr = self.src[s][:4]
            shared = op.shared_of(len(args))
            spec = tuple((a, self.src[a][1] if is_param[a] else None, j not in shared) for j, a in enumerate(args))
            into = op.grad_into_inputs([self.shapes[a] for a in args], [is_param[a] for a in args])
            ent = None
            if into is not None:            # ([(j, arg) grad_into writes], whether the others need param_grads)
                ent = ([(j, a) for j, a in enumerate(args) if need[a] and j in into],
                       any(need[a] for j, a in enumerate(args) if j not in into))
            instr[s] = (op, args, attr, spec, [need[a] for a in args], shared, ent)
        return instr

    def _gradient_writes(self, ops):
        """What backward needs to know to leave the gradient arena unzeroed (engine.py):
        gparts[c] = [(part, first column, end column)] of a concat whose inputs live in its
        buffer (writing c's gradient writes theirs); gzero = the symbols zeroed up front: those
        that frontiers add rows to (pre-phase inputs of front instructions) and that later
        get whole-buffer writes, where first-write-assigns cannot tell which rows are set."""
        self.gparts = {}
        for a, (c, col) in self.alias.items():
            self.gparts.setdefault(c, []).append((a, col, col + self.sizes[a]))
        zero = set()
        for s in self.front:
            for a, p, stacked in self.instr[s][3]:
                if p is None and (self.phase[a] == "pre" or not stacked):
                    zero.update(q for q, _, _ in self.gparts.get(a, [(a, 0, 0)]))
        self.gzero = zero
        # front symbols whose frontier gradient may be the array an op returned (engine.py):
        # read only within their frontier, so not concat parts (their concat's buffer holds
        # them) nor outputs of ops that split their backward (param_grads reads all rows)
        deferring = {s for s in ops if type(self.src[s][1]).input_grads is not Op.input_grads}
        self.gfree = frozenset(s for s in range(len(self.src))
                               if self.phase[s] == "front" and not self.is_param[s] and s not in zero
                               and s not in self.alias and s not in self.gparts and s not in deferring)

    def _gather_groups(self):
        """gather_groups = [(concat, j, children)] for the front-phase concats of values that
        children scattered in slot j (x = [h_l; h_r]): the concat's block, as rows of slot j,
        is the children's rows, so forward fills it with ONE take and backward returns its
        gradient with one scatter, instead of one strided copy per child each way.
        front_gathers = the other front-phase gathers, one take each."""
        gathered = {s: (c, j) for c, j, s in self.gathers if self.phase[s] == "front"}
        self.gather_groups, grouped = [], set()
        for x, parts in self.gparts.items():
            cj = [gathered.get(p) for p, _, _ in parts]
            if None not in cj and len({j for _, j in cj}) == 1:
                self.gather_groups.append((x, cj[0][1], [c for c, _ in cj]))
                grouped.update(p for p, _, _ in parts)
        self.front_gathers = [g for g in self.gathers if self.phase[g[2]] == "front" and g[2] not in grouped]

    def key_of(self, arity, kind):
        return (arity if "arity" in self.reads else None, kind if "kind" in self.reads else None)
