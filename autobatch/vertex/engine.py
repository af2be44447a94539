"""Runs traced vertex functions over a Plan: forward by frontiers, backward (∂F) over the same
frontiers in reverse.

Memory (Cavs' dynamic tensors, §3.3): every symbol of a kind's trace owns ONE contiguous
buffer with a row per vertex of that kind, in frontier order; frontier t writes its block of
rows. Since the plan knows every frontier's size up front, buffers are allocated once at full
size instead of grown. The scatter state is one (N+1, *shape) array per scattered value
(row N stays zero: what a missing child gathers). gather = one take per (child, value) into
the gather symbol's rows, or one per concat of a value of all children (Trace.gather_groups);
scatter = one slice copy; pull/push = one index copy per kind (pushes nobody read: none).
Copies that the layout makes needless are views instead: where a kind's vertices are
consecutive state rows, its scattered symbols live in the state (_scatter_views), and a
concat of children that lie side by side there is the state's rows (_side_by_side).

Backward does not zero its (recycled) gradient arena: the first write to a gradient block
assigns, later ones add (see _gput), and a frontier's gradient may stay the array an op
returned (Trace.gfree). The common ops' input gradients are written straight into their
blocks (Op.grad_into: no temporaries, no copy). TRACK = False runs the plain paths, for tests.

Lazy batching (§3.4): instructions that do not depend on a gather run once over all rows of
the kind ("pre"), those that only feed pushes once at the end ("post"); only the gather→scatter
path runs per frontier. Parameter gradients of products on that path are summed once over
all frontiers (see lazygrad.py)."""
from __future__ import annotations

import numpy as np

from .. import backends
from ..ops import ProductGrad, RowGrad
from ..ops.base import prod
from .trace import CONST, IDS, SEED
from . import fuse, lazygrad


class _Kind:
    """Runtime state of one kind in one call."""

    __slots__ = ("t", "rows", "n", "buf", "g", "ids", "seeds", "code", "deferred", "gz", "full", "blk",
                 "free", "ov", "sbs", "sv")

    def __init__(self, t, rows):
        self.t, self.rows, self.n = t, rows, rows.n
        self.buf, self.g, self.ids, self.seeds = {}, {}, {}, None
        self.deferred = []
        # backward: gradient blocks holding values (the rest of the arena is stale): gz was
        # zeroed up front, full was written over all rows, blk over the current frontier's
        self.gz, self.full, self.blk = (), set(), set()
        # free: symbols (Trace.gfree) whose frontier gradient may stay the array an op
        # returned, ov: those arrays for the current frontier (no copy into the arena)
        self.free, self.ov = (), {}
        self.sbs, self.sv = {}, {}          # see Run._side_by_side, Run._scatter_views


# False: the plain paths, for tests: the whole gradient arena zeroed and every gradient added,
# gathered children and scattered values copied (no views of the scatter state)
TRACK = True


class _All:
    """Every symbol (TRACK off: the whole gradient arena is zeroed)."""

    def __contains__(self, s):
        return True


_ALL = _All()


def _take_into(xp, src, idx, out):
    """out[...] = src[idx] along axis 0 without a temporary where out is contiguous."""
    if out.flags.c_contiguous:
        xp.take(src, idx, axis=0, out=out)
    else:
        out[...] = src[idx]


def _fusion_plan(t):
    """fuse.plan(t), kept on the trace: a vertex function is traced once and run many times."""
    p = getattr(t, "fusion", None)
    if p is None:
        p = t.fusion = fuse.plan(t)
    return p


def _progression(idx):
    """idx (a host int array) as a slice when it steps evenly upwards (the children of a
    level of a complete tree: every other row), else None: a strided view then replaces the
    gather, and backward adds into that view in place instead of a gather-add-scatter."""
    n = len(idx)
    if n < 2:
        return None if n == 0 else slice(int(idx[0]), int(idx[0]) + 1)
    a, step = int(idx[0]), int(idx[1] - idx[0])
    if step <= 0 or int(idx[-1]) != a + step * (n - 1) or not (np.diff(idx) == step).all():
        return None
    return slice(a, a + step * (n - 1) + 1, step)


def _gather(xp, src, idx, out):
    """out[...] = src[idx] for host row indices idx: a strided copy where they step evenly."""
    sl = _progression(idx)
    if sl is not None:
        out[...] = src[sl]
    else:
        _take_into(xp, src, xp.asarray(idx), out)


def _child_rows(childpos, r0, r1, cs):
    """The state rows of children cs of rows r0:r1, row by row: what a concat of their values
    (Trace.gather_groups) holds as rows of the state."""
    if cs == list(range(childpos.shape[1])):
        return childpos[r0:r1].reshape(-1)
    return childpos[r0:r1, cs].reshape(-1)


def _as_rows(block, state):
    """A concat's (n, m*d) block as the (n*m, d) rows of a state of (d,) rows."""
    return block.reshape((-1,) + state.shape[1:])


def _add_at(xp, a, idx, v):
    """a[idx] += v for rows idx that may repeat."""
    if hasattr(xp.add, "at"):           # (repeats summed first: np.add.at costs a microsecond a row)
        backends.get("numpy").add_rows(a, idx, v)
    else:                                   # CuPy
        import cupyx
        cupyx.scatter_add(a, idx, v)


class Run:
    """One call of a vertex function: the data object of its vertex_call lazy-graph node."""

    def __init__(self, fn, traces, plan, pulls, params, expr_inputs, pushes, total, dtype, seed):
        self.fn, self.traces, self.plan = fn, traces, plan
        self.pulls = pulls                  # name -> PullSource
        self.params = params                # [(p, update)] = the node's first inputs
        self.pindex = {(id(p), u): j for j, (p, u) in enumerate(params)}
        self.expr_inputs = expr_inputs      # [(name, rows)] = the node's remaining inputs
        self.pushes = pushes                # [(name, shape, size, offset)]
        self.total, self.dtype, self.seed = total, dtype, seed
        self.kinds = None
        self.stats = {}
        self.fused = None                   # id(trace) -> fuse.plan, where kernels are generated
        self.read = set()                   # pushed names whose output Expression was built

    def describe_non_finite(self):
        """Where in F a NaN or inf first shows (the ops in trace order, kind by kind): the lazy
        graph's NonFiniteError names it, instead of only this call's node. None if nowhere."""
        xp, offsets = self.xp, np.asarray(self.plan.offsets)
        for K in self.kinds or ():
            t = K.t
            for s in t.pre + t.front + t.post:
                v = K.buf.get(s)
                if v is None or not v.size:
                    continue
                bad = ~xp.isfinite(v[:K.n].reshape(K.n, -1)).all(axis=1)
                if bool(bad.any()):
                    gid = int(np.asarray(K.rows.gids)[int(xp.argmax(bad))])
                    gi = int(np.searchsorted(offsets, gid, side="right")) - 1
                    return (f"in vertex function {self.fn.name}: op {t.src[s][1].name} at vertex "
                            f"{gid - int(offsets[gi])} of graph {gi}")
        return None

    # ------------------------------------------------------------------ helpers
    def _x(self, K, a, stacked, r0, r1):
        t = K.t
        if t.is_param[a]:
            v = t.src[a][1].data
            return self.xp.broadcast_to(v, (r1 - r0,) + v.shape) if stacked else v
        return K.buf[a][r0:r1]

    def _xs(self, K, spec, r0, r1):
        """The inputs of an instruction over rows r0:r1 (_x of every argument)."""
        buf, xs = K.buf, []
        for a, p, stacked in spec:
            if p is None:
                xs.append(buf[a][r0:r1])
            else:
                v = p.data
                xs.append(self.xp.broadcast_to(v, (r1 - r0,) + v.shape) if stacked else v)
        return xs

    def _launches(self, t, seq):
        if self.fused is None:
            return len(seq)
        return len(seq) - sum(1 for s in seq if s in self.fused[id(t)][1])

    def _data(self, K, src, s, r0, r1):
        dkind = src[5]
        if dkind == CONST:
            return [src[4]] * (r1 - r0)
        if dkind == IDS:
            return K.ids[src[4].name][r0:r1]
        return K.seeds[r0:r1] ^ ((s * 0x9E3779B1) & 0x7FFFFFFF)

    def _layout(self):
        """Offsets of every dynamic tensor in one arena: per kind, one block of n_k rows per
        symbol (concat inputs live inside their concat's block), then the scatter state."""
        off = 0
        self.offs = []
        for K in self.kinds:
            t, o = K.t, {}
            for s in range(len(t.src)):
                if t.live[s] and not t.is_param[s] and s not in t.alias:     # dead code has no rows
                    o[s] = off
                    off += -(-K.n * t.sizes[s] // 16) * 16        # 64-byte aligned blocks
            self.offs.append(o)
        self.state_offs = []
        for shape in self.fn.scatter_shapes or ():
            size = 1
            for d in shape:
                size *= d
            self.state_offs.append((off, shape))
            off += -(-(self.plan.N + 1) * size // 16) * 16
        return off

    def _views(self, arena, kinds, K_attr):
        """Per-kind symbol views (into K.buf or K.g) of an arena laid out by _layout; returns
        the scatter-state views."""
        N1 = self.plan.N + 1
        states = [arena[off:off + N1 * prod(shape)].reshape((N1,) + shape) for off, shape in self.state_offs]
        for K, o in zip(kinds, self.offs):
            t, n = K.t, K.n
            d = {}
            for s, off in o.items():
                d[s] = arena[off:off + n * t.sizes[s]].reshape((n,) + t.shapes[s])
            if K_attr == "buf":
                for s, (j, p0) in K.sv.items():
                    d[s] = states[j][p0:p0 + n]
            for c, (j, a0) in K.sbs.items():
                d[c] = states[j][a0:a0 + n * t.sizes[c] // t.sizes[t.gparts[c][0][0]]].reshape((n,) + t.shapes[c])
            for a in sorted(t.alias, reverse=True):
                c, col = t.alias[a]
                d[a] = d[c].reshape(n, -1)[:, col:col + t.sizes[a]].reshape((n,) + t.shapes[a])
            setattr(K, K_attr, d)
        return states

    @staticmethod
    def _scatter_views(K):
        """{symbol: (j, p0)}: scattered symbols whose forward buffer is state j's rows p0..,
        where the kind's vertices are consecutive state rows (each kind on its own levels,
        as leaves and internal nodes of trees): forward then copies nothing into the state.
        (Backward keeps their gradients apart: pushes and post-phase ops add to them before
        the parents' gradients arrive in the state.)"""
        t, pos = K.t, K.rows.pos
        if not K.n or int(pos[-1]) - int(pos[0]) + 1 != K.n:
            return {}
        out = {}
        for j, s in enumerate(t.scatter):
            if not (t.is_param[s] or s in t.alias or s in t.gparts or s in out):
                out[s] = (j, int(pos[0]))
        return out

    def _side_by_side(self, K):
        """{concat: (j, a0)} for the concats of gathers whose rows are, over every vertex of
        the kind, consecutive rows of scatter state j from a0 on (a complete tree in level
        order: children 2i and 2i+1 side by side). The concat's buffer is then a view of the
        state, so forward gathers nothing and backward's gradient lands in the state's."""
        t = K.t
        if not K.n or not t.gather_groups or not self._scatter_once([K], self.plan.shared_children):
            return {}                       # (backward's writes into the state must be its only ones)
        out = {}
        for x, j, cs in t.gather_groups:
            rows = _child_rows(K.rows.childpos, 0, K.n, cs)
            a0 = int(rows[0])
            if a0 + len(rows) <= self.plan.N and (rows == np.arange(a0, a0 + len(rows))).all():
                out[x] = (j, a0)
        return out

    def _run(self, K, s, r0, r1):
        if s in K.t.concat_free:
            return
        if self.fused is not None:
            first, skip = self.fused[id(K.t)]
            if s in skip:
                return                      # ran inside its group's kernel
            grp = first.get(s)
            if grp is not None:
                grp.launch(self.xp, [self._x(K, a, False, r0, r1) for a in grp.ins],
                           [K.buf[m][r0:r1] for m in grp.members])
                return
        op, args, attr, spec, _, _, _ = K.t.instr[s]
        xs = self._xs(K, spec, r0, r1)
        out = K.buf[s][r0:r1]
        data = self._data(K, K.t.src[s], s, r0, r1) if op.has_data else None
        if fuse.into(op):
            op.forward_into(self.xp, xs, attr, data, out)
            return
        y = op.forward(self.xp, xs, attr, data)
        out[...] = y.reshape(out.shape)

    # ------------------------------------------------------------------ forward
    def forward(self, xp, xs, out=None):
        """The pushed values of every vertex, concatenated: written into `out` (the lazy
        graph's block for the call's node, shape (1, total)) where given, else a new array."""
        self.xp = xp
        plan, dtype = self.plan, self.dtype
        N = plan.N
        pull_all = self._pull_arrays(xp, xs)
        self.kinds = kinds = [_Kind(t, rows) for t, rows in zip(self.traces, plan.kinds)]
        if TRACK:
            for K in kinds:
                K.sbs, K.sv = self._side_by_side(K), self._scatter_views(K)
        self.n_arena = self._layout()
        self.arena = self.fn._arena(xp, dtype, self.n_arena)
        self.state = state = self._views(self.arena, kinds, K_attr="buf")
        for st in state:
            st[N] = 0                       # what a missing child gathers
        launches = 0
        # CuPy: runs of elementwise instructions as one generated kernel each (fuse.py)
        self.fused = None
        if fuse.kernels_for(xp):
            self.fused = {id(t): _fusion_plan(t) for t in self.traces}
        for K in kinds:
            t, n = K.t, K.n
            gids = xp.asarray(K.rows.gids)
            K.rows.gids = gids
            for name in t.bounds:
                K.ids[name] = pull_all[name][gids]
            if any(t.src[s][5] == SEED for s in t.pre + t.front + t.post):
                K.seeds = (gids.astype(xp.int64) * 1000003 + self.seed) & 0x7FFFFFFFFFFF
            for s, name in t.pulls:
                _take_into(xp, pull_all[name].reshape((-1,) + t.shapes[s]), gids, K.buf[s])
            for s in t.pre:
                self._run(K, s, 0, n)
            launches += self._launches(t, t.pre)
            pos = xp.asarray(K.rows.pos)
            for j, s in enumerate(t.scatter):
                if t.phase[s] == "pre" and K.sv.get(s, (None,))[0] != j:
                    state[j][pos] = self._x(K, s, True, 0, n)
        for lvl, k, r0, r1, g0 in plan.steps:
            K = kinds[k]
            t = K.t
            if not t.front and not t.gathers:
                continue
            cp = K.rows.childpos
            for x, j, cs in t.gather_groups:
                if x not in K.sbs:
                    _gather(xp, state[j], _child_rows(cp, r0, r1, cs), _as_rows(K.buf[x][r0:r1], state[j]))
            for c, j, s in t.front_gathers:
                _gather(xp, state[j], cp[r0:r1, c], K.buf[s][r0:r1])
            for s in t.front:
                self._run(K, s, r0, r1)
            launches += self._launches(t, t.front)
            for j, s in enumerate(t.scatter):
                if t.phase[s] != "pre" and K.sv.get(s, (None,))[0] != j:
                    state[j][g0:g0 + r1 - r0] = K.buf[s][r0:r1]
        for K in kinds:
            t = K.t
            for c, j, s in t.gathers:
                if t.phase[s] == "post":
                    _gather(xp, state[j], K.rows.childpos[:, c], K.buf[s])
            for s in t.post:
                self._run(K, s, 0, K.n)
            launches += self._launches(t, t.post)
        # (a block the executor hands over, not a fresh zeroed array that it then copies)
        out = xp.empty((1, self.total), dtype=dtype) if out is None else out
        for name, *_ in self.pushes:
            self.write_push(out, name)
        self.stats = dict(vertices=N, frontiers=len(plan.steps), depth=plan.depth, kinds=len(kinds),
                          forward_launches=launches)
        return out

    def write_push(self, out, name):
        """Write pushed value `name` of every vertex into its segment of the call's output.
        Pushes nobody read are zeros: their scatter into the column-major segment cost as much
        as a tenth of treelstm's forward; VertexOutputs writes one read after the forward here."""
        N, xp = self.plan.N, self.xp
        shape, size, off = next((sh, sz, o) for nm, sh, sz, o in self.pushes if nm == name)
        # the lazy graph's reshape is column-major (DyNet's), so out[name] = reshape(segment,
        # (N, *shape)) reads the segment with the vertex index fastest
        seg = out.reshape(-1)[off:off + N * size].reshape((N,) + shape, order="F")
        pushers = [K for K in self.kinds if name in K.t.push] if name in self.read else []
        if sum(K.n for K in pushers) != N:
            seg[...] = 0                    # (vertices of kinds that do not push it)
        for K in pushers:
            seg[K.rows.gids] = self._x(K, K.t.push[name], True, 0, K.n)

    def _pull_arrays(self, xp, xs):
        """name -> (N, ...) array on the device: ids, float data, or lazy-graph rows."""
        out = {}
        P = len(self.params)
        k = P
        for name, src in self.pulls.items():
            if src.kind == "expr":
                n_in = len(src.exprs)
                parts = [x.reshape(-1, src.size) for x in xs[k:k + n_in]]
                k += n_in
                out[name] = parts[0] if len(parts) == 1 else xp.concatenate(parts)
            elif src.kind == "ids":
                out[name] = xp.asarray(src.ids)
            else:
                out[name] = xp.asarray(src.vals, dtype=self.dtype).reshape(src.vals.shape[0], -1)
        return out

    # ------------------------------------------------------------------ backward
    def _back(self, K, s, r0, r1, pg, defer, whole):
        t = K.t
        if s in t.concat_free:
            return                          # its inputs' gradients already are its gradient
        gy = self._grad(K, s, r0, r1, whole)
        op, args, attr, spec, needs, shared, ent = t.instr[s]
        if op.grad_prologue is not None:
            # an activation fused into a product (ops/fused.py): the product's gradient, once,
            # in s's block, where the deferred parameter gradients read it; an array an op
            # handed over (K.ov) may be another symbol's too, so it is left as it is
            gy = op.grad_prologue(self.xp, K.buf[s][r0:r1], gy, whole or s not in K.ov)
            op = op.base
        xs = self._xs(K, spec, r0, r1)
        if ent is not None and TRACK:
            self._back_into(K, s, ent, xs, gy, r0, r1, pg, defer, whole)
            return
        if defer:
            grads = op.input_grads(self.xp, xs, gy, attr, needs)
            if grads is not None:
                K.deferred.append((s, r0, r1))
                self._take_grads(K, args, shared, grads, r0, r1, pg, whole)
                return
        data = self._data(K, t.src[s], s, r0, r1) if op.has_data else None
        grads = op.backward(self.xp, xs, K.buf[s][r0:r1], gy, attr, data)
        self._take_grads(K, args, shared, grads, r0, r1, pg, whole)

    def _back_into(self, K, s, ent, xs, gy, r0, r1, pg, defer, whole):
        """_back through op.grad_into: each input's gradient written into its block
        where nothing wrote that block yet (else added), no temporaries and no copy."""
        op, args, attr, _, needs, shared, _ = K.t.instr[s]
        xp = self.xp
        writes, pneed = ent
        if pneed:
            if defer:
                K.deferred.append((s, r0, r1))
            else:
                self._take_grads(K, args, shared, op.param_grads(xp, xs, gy, attr, needs), r0, r1, pg, whole)
        y = K.buf[s][r0:r1]
        for j, a in writes:
            # a free block nothing wrote yet keeps a fresh array (_gput): numpy hands back a
            # recently freed, cache-hot one, where the arena's block is cold (treelstm's cmult
            # backward, in the arena: 5.8 -> 9.5 ms per pass)
            fresh = not whole and a in K.free and a not in K.full and a not in K.blk
            slot = None if fresh else self._gslot(K, a, r0, r1, whole)
            if slot is None:
                g = xp.empty((r1 - r0,) + K.t.shapes[a], dtype=self.dtype)
                op.grad_into(xp, xs, y, gy, attr, j, g)
                self._gput(K, a, r0, r1, g, whole)
            else:
                dst, add = slot
                if add:                     # the block holds a value: add a scratch block
                    g = xp.empty_like(dst)
                    op.grad_into(xp, xs, y, gy, attr, j, g)
                    dst += g
                else:
                    op.grad_into(xp, xs, y, gy, attr, j, dst)

    def _gslot(self, K, a, r0, r1, whole):
        """(a's gradient block, whether to add to it) for a writer that writes it in place, the
        block marked written; None where _gput must take a separate array (a kept op array,
        a concat some of whose parts hold values)."""
        if not whole and a in K.ov:
            return None
        add = self._claim(K, a, whole)
        return None if add is None else (K.g[a][r0:r1], add)

    # Gradient writes. The gradient arena is recycled and not zeroed (that memset cost as much
    # as an elementwise op's backward): the first write to a block assigns, later ones add,
    # and a block read before any write (no gradient reached it) is zeroed then. A block is a
    # frontier's rows of a symbol, or all rows for the phases that run over all of them.
    @staticmethod
    def _has(K, p, whole):
        return p in K.gz or p in K.full or (not whole and p in K.blk)

    def _claim(self, K, a, whole):
        """A write to a's block is coming: True where it must add (the block holds a value),
        False where it assigns (the block is marked written now), None where a concat's parts
        are mixed (each part must be written on its own)."""
        parts = K.t.gparts.get(a)
        if parts is None:
            if self._has(K, a, whole):
                return True
            (K.full if whole else K.blk).add(a)
            return False
        have = [self._has(K, p, whole) for p, _, _ in parts]
        if all(have):
            return True
        if any(have):
            return None
        (K.full if whole else K.blk).update(p for p, _, _ in parts)
        return False

    def _gput(self, K, a, r0, r1, gr, whole):
        """K.g[a][r0:r1] += gr, a block nothing wrote yet assigned instead."""
        if not whole and a in K.free and a not in K.full:
            if a not in K.blk:
                if gr.shape == (r1 - r0,) + K.t.shapes[a] and gr.dtype == self.dtype:
                    K.ov[a] = gr            # kept, not copied; never written in place: ops
                    K.blk.add(a)            # may return one array for several inputs
                    return
            elif a in K.ov:
                K.ov[a] = K.ov[a] + gr
                return
        dst = K.g[a][r0:r1]
        add = self._claim(K, a, whole)
        if add:
            dst += gr
        elif add is not None:
            dst[...] = gr
        else:                               # the concat's parts one by one
            g2 = self.xp.broadcast_to(gr, dst.shape).reshape(dst.shape[0], -1)
            for p, c0, c1 in K.t.gparts[a]:
                self._gput(K, p, r0, r1, g2[:, c0:c1].reshape(K.g[p][r0:r1].shape), whole)

    def _grad(self, K, s, r0, r1, whole):
        """The gradient block of s, to read."""
        v = None if whole else K.ov.get(s)
        if v is None:
            self._gready(K, s, r0, r1, whole)
            v = K.g[s][r0:r1]
        return v

    def _gready(self, K, s, r0, r1, whole):
        """K.g[s][r0:r1] is about to be read: zero the parts of it nothing wrote."""
        for p, _, _ in K.t.gparts.get(s, ((s, 0, 0),)):
            if self._claim(K, p, whole) is False:       # (a concat's parts are no concats)
                K.g[p][r0:r1] = 0

    def _take_grads(self, K, args, shared, grads, r0, r1, pg, whole):
        t = K.t
        for j, gr in enumerate(grads):
            if gr is None:
                continue
            a = args[j]
            if not t.need[a]:
                continue
            if isinstance(gr, ProductGrad):   # the vertex engine defers by rows itself (lazygrad)
                gr = gr.dense()
            if t.is_param[a]:
                _, p, u = t.src[a]
                if j not in shared and not hasattr(gr, "rows"):
                    gr = gr.sum(axis=0)
                pg.setdefault(self.pindex[(id(p), u)], []).append(gr)
            else:
                self._gput(K, a, r0, r1, gr, whole)

    def backward(self, xp, xs, gy):
        plan, kinds, dtype = self.plan, self.kinds, self.dtype
        N = plan.N
        pg: dict = {}
        lazy = lazygrad.enabled()
        if getattr(self, "garena", None) is None:
            self.garena = self.fn._arena(xp, dtype, self.n_arena)
        gstate = self._views(self.garena, kinds, K_attr="g")
        dup = plan.shared_children
        assign = TRACK and self._scatter_once(kinds, dup)
        for K in kinds:
            K.deferred = []
            K.full, K.blk, K.ov = set(), set(), {}
            if TRACK:
                K.gz, K.free = K.t.gzero, K.t.gfree
                for p in K.gz:
                    K.g[p][...] = 0
            else:
                K.gz, K.free = _ALL, ()
        if not TRACK:
            self.garena[:self.n_arena] = 0
        else:
            self._zero_state(xp, gstate, kinds, assign)
        gy = gy.reshape(-1)
        for name, shape, size, off in self.pushes:
            if name not in self.read:
                continue                    # nothing consumes it: its gradient is zero
            seg = gy[off:off + N * size].reshape((N,) + shape, order="F")
            for K in kinds:
                s = K.t.push.get(name)
                if s is not None and K.t.need[s]:
                    g = seg[K.rows.gids]
                    if K.t.is_param[s]:
                        _, p, u = K.t.src[s]
                        pg.setdefault(self.pindex[(id(p), u)], []).append(g.sum(axis=0).reshape(p.data.shape))
                    else:
                        self._gput(K, s, 0, K.n, g.reshape(K.g[s].shape), True)
        for K in kinds:
            t = K.t
            for s in reversed(t.post):
                if t.need[s]:
                    self._back(K, s, 0, K.n, pg, False, True)
            for c, j, s in t.gathers:
                if t.phase[s] == "post":
                    self._gready(K, s, 0, K.n, True)
                    self._gather_back(xp, gstate[j], K.rows.childpos[:, c], K.g[s], dup, assign)
        for lvl, k, r0, r1, g0 in reversed(plan.steps):
            K = kinds[k]
            t = K.t
            if not t.front and not t.gathers:
                continue
            K.blk, K.ov = set(), {}
            for j, s in enumerate(t.scatter):
                if t.phase[s] != "pre" and t.need[s]:
                    self._gput(K, s, r0, r1, gstate[j][g0:g0 + r1 - r0], False)
            for s in reversed(t.front):
                if t.need[s]:
                    self._back(K, s, r0, r1, pg, lazy, False)
            cp = K.rows.childpos
            for x, j, cs in t.gather_groups:
                if x not in K.sbs:
                    self._gather_back(xp, gstate[j], _child_rows(cp, r0, r1, cs),
                                      _as_rows(self._grad(K, x, r0, r1, False), gstate[j]), dup, assign)
            for c, j, s in t.front_gathers:
                self._gather_back(xp, gstate[j], cp[r0:r1, c], self._grad(K, s, r0, r1, False), dup, assign)
        for K in kinds:
            t = K.t
            for s in self._merged(K.deferred):
                op, args, attr, spec, needs, shared, _ = t.instr[s]
                grads = op.param_grads(xp, self._xs(K, spec, 0, K.n), K.g[s], attr, needs)
                self._take_grads(K, args, shared, grads, 0, K.n, pg, True)
            sl = _progression(K.rows.pos)   # the kind's state rows as a slice: no gather
            for j, s in enumerate(t.scatter):
                if t.phase[s] == "pre" and t.need[s]:
                    gs = gstate[j][sl] if sl is not None else gstate[j][xp.asarray(K.rows.pos)]
                    if t.is_param[s]:
                        _, p, u = t.src[s]
                        pg.setdefault(self.pindex[(id(p), u)], []).append(gs.sum(axis=0))
                    elif sl is not None and not self._has(K, s, True) and s not in t.alias and s not in t.gparts:
                        K.g[s] = gs         # those state rows are read no more: s's gradient in place
                        K.full.add(s)
                    else:
                        self._gput(K, s, 0, K.n, gs, True)
            for s in reversed(t.pre):
                if t.need[s]:
                    self._back(K, s, 0, K.n, pg, False, True)
        return self._param_grads(xp, pg) + self._pull_grads(xp, xs)

    @staticmethod
    def _merged(deferred):
        """Deferred instructions, once per symbol: every frontier of a kind deferred the
        same symbols, so together they cover all rows of the kind."""
        return list(dict.fromkeys(s for s, _, _ in deferred))

    @staticmethod
    def _scatter_once(kinds, dup):
        """Whether every row of the scatter state gets at most one gradient write: no child
        is shared and no kind gathers the same (child, value) twice. Backward then assigns
        those rows instead of adding to a zeroed state."""
        if dup:
            return False
        for K in kinds:
            cj = [(c, j) for c, j, _ in K.t.gathers]
            if len(set(cj)) != len(cj):
                return False
        return True

    def _zero_state(self, xp, gstate, kinds, assign):
        """Zero the scatter state's gradient, or with assign only the rows no parent writes
        (roots, children a kind does not gather)."""
        N = self.plan.N
        for j, gs in enumerate(gstate):
            if not assign:
                gs[...] = 0
                continue
            hit = np.zeros(N + 1, dtype=bool)
            for K in kinds:
                for c, jj, _ in K.t.gathers:
                    if jj == j:
                        hit[K.rows.childpos[:, c]] = True
            miss = np.flatnonzero(~hit[:N])
            if len(miss):
                gs[xp.asarray(miss)] = 0

    def _gather_back(self, xp, gstate, idx, g, dup, assign):
        sl = _progression(idx)
        if sl is not None:              # distinct rows: the strided view in place
            if assign:
                gstate[sl] = g
            else:
                gstate[sl] += g
            return
        idx = xp.asarray(idx)
        if dup:
            _add_at(xp, gstate, idx, g)
        elif assign:
            gstate[idx] = g            # repeats only hit row N, which backward never reads
        else:
            gstate[idx] += g           # unique children; repeats only hit the zero row N

    def _param_grads(self, xp, pg):
        out = []
        for j, (p, u) in enumerate(self.params):
            gl = pg.get(j)
            if not gl:
                out.append(None)
                continue
            dense = [g for g in gl if not hasattr(g, "rows")]
            rows = [g for g in gl if hasattr(g, "rows")]
            if dense:
                if len(dense) == 1:
                    # the executor adds it into p.grad at once: a copy only where rows are added
                    # into it below (it may be a view of what a later pull gradient reads)
                    d = dense[0].reshape(p.data.shape)
                    d = d.copy() if rows else d
                else:
                    d = sum(g.reshape(p.data.shape) for g in dense)
                for r in rows:
                    _add_at(xp, d, xp.asarray(r.rows), r.vals.reshape((-1,) + p.data.shape[1:]))
                out.append(d)
            else:
                # one lookup (the usual case): no concatenation, which copies its rows; the
                # rows may be views of the recycled gradient arena, so a result that still
                # holds them (no repeated row) gets its own copy
                r = [xp.asarray(r.rows).reshape(-1) for r in rows]
                v = [r.vals.reshape((-1,) + p.data.shape[1:]) for r in rows]
                g = RowGrad(r[0] if len(r) == 1 else xp.concatenate(r),
                            v[0] if len(v) == 1 else xp.concatenate(v)).summed(xp)
                if len(v) == 1 and g.vals is v[0]:
                    g = RowGrad(g.rows, g.vals.copy())
                out.append(g)
        return out

    def _pull_grads(self, xp, xs):
        out = []
        P = len(self.params)
        k = P
        N = self.plan.N
        for name, src in self.pulls.items():
            if src.kind != "expr":
                continue
            n_in = len(src.exprs)
            g = None
            for K in self.kinds:
                for s, nm in K.t.pulls:
                    if nm == name and K.t.need[s]:
                        self._gready(K, s, 0, K.n, True)
                        if g is None:
                            g = xp.zeros((N, src.size), dtype=self.dtype)
                        g[K.rows.gids] += K.g[s].reshape(K.n, src.size)
            if g is None:
                out.extend([None] * n_in)
            else:
                r = 0
                for x in xs[k:k + n_in]:
                    m = x.size // src.size
                    out.append(g[r:r + m].reshape(x.shape))
                    r += m
            k += n_in
        return out
