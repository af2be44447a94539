"""Runs batches: gathers each stacked input into one contiguous block (or takes a
view when the inputs already lie contiguous and in order), calls the op's batched
kernel, and writes the output block into the graph's value arena. Backward walks
the same batches in reverse over a gradient arena of the same layout.

Knows ops only through the protocol in ops/base.py."""
from __future__ import annotations

import contextlib
import gc
import itertools
import math
import time
from operator import gt, itemgetter, sub

import numpy as np

from . import memory
from .errors import GradientError, GraphError, NonFiniteError, user_line
from .ops import ProductGrad, RowGrad
from .ops.base import WIDE_ARITY
from .scheduler import schedule


@contextlib.contextmanager
def _no_gc():
    """The cycle collector paused for one forward or backward. The engine makes no reference
    cycles, but it allocates enough to trigger collections, and each full collection walks
    every node of the graph: 10% of a Tree-FC training pass went there."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _columns(args, ids, a0):
    """Input j of every node of the batch (a0: the first node's inputs), transposed at C speed."""
    return (a0,) if len(ids) == 1 else tuple(zip(*itemgetter(*ids)(args)))


_SHARED: dict = {}     # (op, number of inputs) -> op.shared_of(n): looked up per batch


class Batch:
    # wide: False, True (a batch of wide nodes of one arity, its inputs one (B, n, *shape)
    # block), or the nodes' numbers of inputs (wide nodes of several: one (N, *shape) block)
    __slots__ = ("ids", "op", "attr", "data", "xs", "ins", "out", "n", "y", "need", "wide")


class _Laid(list):
    """A batch's node ids in an order chosen for the batches that read it (_by_reader): its
    inputs are gathered in this order, never reordered to be read as views."""
    __slots__ = ()


def _by_reader(plan, g):
    """plan with each batch of a signature in g.by_reader laid out in the order of the depths
    of the nodes built right after its nodes, their readers: an LSTM's input projections for
    every step of every sequence are one batch, and each step's batch then reads its rows as
    one block (a view; and its gradients add in place) instead of a gather from all over it.
    The batch's own input (the word vectors, a quarter as wide) is gathered instead."""
    by_reader, sigs, depths = g.by_reader, g.sigs, g.depths
    n = len(depths)
    out = None
    for k, ids in enumerate(plan):
        if len(ids) > 1 and sigs[ids[0]] in by_reader:
            # (a node with nothing built after it, a step that failed half-built: read last)
            key = [depths[i + 1] if i + 1 < n else n for i in ids]
            if any(map(gt, key, key[1:])):
                if out is None:
                    out = list(plan)        # plans are shared (the scheduler's cache)
                out[k] = _Laid(itemgetter(*sorted(range(len(ids)), key=key.__getitem__))(ids))
    return plan if out is None else out


class ViewBatch:
    """Nodes whose outputs are their inputs' memory (op.view): nothing ran, nothing to undo
    but their offsets, and no backward (their gradients accumulate in place)."""
    __slots__ = ("ids",)
    need = False
    y = None
    ins = ()        # nothing gathered


class Executor:
    def __init__(self, graph):
        self.g = graph
        self.be = graph.backend
        self.xp = graph.xp
        # taken at the first forward, not here: renew_cg makes the new graph before it
        # releases the old one, whose arenas the new graph should reuse
        self.buf = None
        self.dtype = graph.dtype
        self.top = 0
        self.offs: list = []      # node -> arena offset (-1: not computed or external)
        self.done = 0             # nodes [0, done) are computed
        self.batches: list = []
        self.gbuf = None          # the last backward's gradients, for Expression.gradient()
        self._at = None           # the batch whose backward runs (named in errors)
        self.pgrads: dict = {}    # parameter -> its part of the last backward (Executor._collect)
        self.runs: list = []      # (first node, batch count, arena top) at each forward's start
        # every node made a view of its input's memory (op.view) since the last invalidate;
        # entries of views undone later only cost _disjoint its fast path
        self.viewed: set = set()
        # first node -> live batch whose output is one block of equal rows in the order of its
        # ids: an input that is exactly that batch's nodes (logistic over an affine batch) is
        # then read as a view after one dict lookup and one list compare, without the offsets
        self.blocks: dict = {}
        self._sizes: dict = {}    # signature -> its list of batch sizes in the graph's stats

    def release(self):
        """The graph was renewed: recycle the arena (no view of it survives: values
        handed to users are copies, and stale expressions refuse to evaluate).
        Dropping the graph breaks the graph <-> executor cycle, so the old graph is freed
        by reference counting at once instead of waiting for a full gc collection."""
        self.batches = []
        self.blocks = {}
        self.offs = []
        memory.give(self.buf)
        memory.give(self.gbuf)
        self.buf = self.gbuf = None
        self.pgrads = {}
        # dy.parameter's handles, RNNState.s()'s slices and the builders' sequences with masks,
        # which point back at the graph
        for name in ("_pexpr", "_cells", "_masked"):
            kept = getattr(self.g, name, None)
            if kept:
                kept.clear()
        self.g = None

    def invalidate(self):
        """Forget every computed value (the arena is reused from its start): batches mix
        nodes from all over the graph, so no smaller reset is safe after an input changed."""
        self.batches = []
        self.blocks = {}
        self.viewed = set()
        self.offs = [-1] * len(self.offs)
        self.top = 0
        self.done = 0
        self.runs = []
        memory.give(self.gbuf)
        self.gbuf = None
        self.pgrads = {}

    def truncate(self, n):
        """The graph drops nodes [n, end) (cg_revert): forget the forwards that computed any
        of them. Batches mix nodes from the whole range of their forward, so those forwards
        are undone whole; their nodes below n are recomputed by the next forward."""
        memory.give(self.gbuf)
        self.gbuf = None
        while self.runs and self.done > n:
            lo, nb, top = self.runs.pop()
            self._drop_batches(nb)
            self.top = top
            self.offs[lo:] = [-1] * (len(self.offs) - lo)
            self.done = lo
        self.offs[n:] = [-1] * (len(self.offs) - n)

    def _drop_batches(self, nb):
        """Forget batches [nb:] (their nodes' ids may be reused): every node is in one live
        batch, so a dropped batch's first node keys no other batch in self.blocks."""
        for b in self.batches[nb:]:
            self.blocks.pop(b.ids[0], None)
        del self.batches[nb:]

    def mark_external(self, n):
        self._grow_offs(n + 1)

    def _grow_offs(self, n):
        if len(self.offs) < n:
            self.offs.extend([-1] * (n - len(self.offs)))

    def _reserve(self, n):
        """Make room for n more elements in one step (one copy at most per forward)."""
        top = self.top
        if self.buf is None:
            self.buf = memory.take(self.xp, self.dtype, max(top + n, 1 << 16))
        elif top + n > self.buf.shape[0]:
            new = memory.take(self.xp, self.dtype, max(2 * self.buf.shape[0], top + n))
            new[:top] = self.buf[:top]
            # the old buffer is not given back to the pool: batch records still hold views of it
            self.buf = new

    def _alloc(self, n, align=1):
        """n elements at an offset that is a multiple of `align` (the row size of the
        batch), so that later gathers of its rows can move whole rows."""
        top = self.top
        if align > 1:
            top += -top % align
        if top + n > self.buf.shape[0]:
            self._reserve(top + n - self.top)
        self.top = top + n
        return top

    # --- values -------------------------------------------------------------
    def value(self, i):
        p = self.g.ext.get(i)
        if p is not None:
            return p.data
        o = self.offs[i]
        g = self.g
        s = g.shapes[i]
        return self.buf[o:o + g.sizes.of(s)].reshape(s)

    # --- forward --------------------------------------------------------------
    def forward(self, hi):
        with _no_gc():
            self._forward(hi)

    def _forward(self, hi):
        lo = self.done
        if hi <= lo:
            return
        g, st = self.g, self.g.stats
        t0 = time.perf_counter()
        st._build_s += t0 - g._t_mark
        self._grow_offs(hi)
        plan = schedule(g.strategy, lo, hi, g.sigs, g.depths, g.args, g.heavy_of_sig, g.uses, g.family_key)
        if g.by_reader:
            plan = _by_reader(plan, g)
        # each batch's nodes and one more row (its alignment), from the size of its first node:
        # exact but for elementwise batches of mixed sizes, which _alloc grows the arena for
        shapes, size_of = g.shapes, g.sizes.of
        self._reserve(sum([(len(ids) + 1) * size_of(shapes[ids[0]]) for ids in plan]))
        t1 = time.perf_counter()
        nb0, top0 = len(self.batches), self.top
        self.runs.append((lo, nb0, top0))
        try:
            for ids in plan:
                self._run(ids)
        except Exception as e:
            # undo this forward so that the graph stays usable after the error
            for b in self.batches[nb0:]:
                for i in b.ids:
                    self.offs[i] = -1
                if type(b) is ViewBatch:
                    st.view_nodes -= len(b.ids)
                    continue
                name = g.sig_name(g.sigs[b.ids[0]])
                st.sizes[name].pop()
                if not st.sizes[name]:
                    del st.sizes[name]
                    self._sizes = {}
            self._drop_batches(nb0)
            self.top = top0
            self.runs.pop()
            if hasattr(e, "add_note"):     # Python >= 3.11
                failed = ids[:3]
                e.add_note(f"autobatch: while running a batch of {len(ids)} {g.ops[ids[0]].name} node(s); "
                           + "; ".join(g.describe(i) for i in failed) + f" [at {user_line()}]")
            raise
        finally:
            t2 = time.perf_counter()
            st.schedule_s += t1 - t0
            st.forward_s += t2 - t1
            st.engine_s += t2 - t0
            st.forward_calls += 1
            g._t_mark = t2
        self.done = hi
        st.forward_batches += len(self.batches) - nb0 - sum(type(b) is ViewBatch for b in self.batches[nb0:])
        st.forward_nodes += sum(len(ids) for ids in plan)

    def _gather(self, srcs, shape, sizes_flat, free=False):
        """Stacked input from the nodes srcs: returns (array, scatter info, order). order is
        None, or, when free (the batch's order of nodes may change) and the blocks are one
        contiguous block in another order, the order of srcs that reads it as a view (which
        is then what the array and the info are).

        The order is free: the agenda's (node order) interleaves the outputs of batches that
        ran one after the other (logistic over an LSTM's i and o gates), which this turns into
        views that later batches read in place as well."""
        B = len(srcs)
        st = self.g.stats
        if sizes_flat is None:
            b = self.blocks.get(srcs[0])
            # the row-size test: the same nodes read with another shape are not that block
            if b is not None and b.ids == srcs and b.n == B * self.g.sizes.of(self.g.shapes[srcs[0]]):
                st.copies_skipped += 1
                return self.buf[b.out:b.out + b.n].reshape((B,) + shape), ("view", srcs, b.out), None
        o = list(itemgetter(*srcs)(self.offs)) if B > 1 else [self.offs[srcs[0]]]
        if sizes_flat is not None:           # elementwise batch of mixed sizes
            xp = self.xp
            # one index array built by the backend (on CuPy: one upload, not an arange per node)
            idx = self.be.ragged_index(o, sizes_flat) if -1 not in o else None
            if idx is None:
                x = xp.concatenate([self.value(a).reshape(-1) for a in srcs])
            else:
                x = self.buf[idx]
            st.copies_done += 1
            return x, ("flat", srcs, idx), None
        size = self.g.sizes.of(self.g.shapes[srcs[0]])
        o0 = o[0]
        # evenly spaced offsets from o0 >= 0 are all in the arena: the usual views are
        # recognised before any scan for sources outside it
        if o0 >= 0:
            step = o[1] - o0 if B > 1 else size
            # the first gap rules out most layouts before a whole list is compared
            if step == size and (B == 1 or o == list(range(o0, o0 + B * size, size))):
                st.copies_skipped += 1
                return self.buf[o0:o0 + B * size].reshape((B,) + shape), ("view", srcs, o0), None
            if step > size and o == list(range(o0, o0 + B * step, step)):
                # evenly spaced blocks (the left or right children of a tree level): a strided
                # view, no copy; backward adds into the same view
                st.copies_skipped += 1
                return (self._rows(self.buf, o0, B, size, step).reshape((B,) + shape),
                        ("strided", srcs, (o0, step)), None)
        if -1 in o:                            # some sources live outside the arena
            if srcs.count(srcs[0]) == B:       # one parameter for every node: broadcast, no copy
                st.copies_skipped += 1
                v = self.value(srcs[0])
                if B == 1 and self.xp is np and v.shape == shape:
                    # a read-only view, as broadcast_to's, at a sixth of its cost (a graph per
                    # sentence meets this case every step: score + b)
                    x = v[None]
                    x.flags.writeable = False
                    return x, ("bcast", srcs, None), None
                return self.xp.broadcast_to(v, (B,) + shape), ("bcast", srcs, None), None
            st.copies_done += 1
            # reshape: an elementwise batch may mix shapes of equal size ((3, 4) and (12,))
            return self.xp.stack([self.value(a).reshape(shape) for a in srcs]), ("ext", srcs, None), None
        if free:
            # sorted, the offsets are the rows of one block: a permutation of it
            s = sorted(o)
            lo = s[0]
            if s == list(range(lo, lo + B * size, size)):
                order = sorted(range(B), key=o.__getitem__)
                st.copies_skipped += 1
                return (self.buf[lo:lo + B * size].reshape((B,) + shape),
                        ("view", list(itemgetter(*order)(srcs)), lo), order)
        st.copies_done += 1
        x, index = self.be.gather(self.buf, o, size)     # index: for backward's scatter_add
        return x.reshape((B,) + shape), ("gather", srcs, index), None

    def _run(self, ids):
        g = self.g
        i0 = ids[0]
        op = g.sig_op[g.sigs[i0]]
        a0 = g.args[i0]
        B = len(ids)
        cols = None
        if op.has_view:
            cols = _columns(g.args, ids, a0)
            if self._view(ids, op, a0, cols):
                return
        shared = _SHARED.get((op, len(a0)))
        if shared is None:
            shared = _SHARED[(op, len(a0))] = op.shared_of(len(a0))
        sizes_flat = None
        if op.elementwise and B > 1:
            each = itemgetter(*ids)(g.shapes)       # shapes are interned: count() meets the same object
            if each.count(g.shapes[i0]) != B:
                sizes_flat = list(map(g.sizes.of, each))
        xs, ins = [], []
        # one node with many same-shape inputs (the esum of all losses): one gather
        wide = len(a0) > WIDE_ARITY and not shared and self._wide(ids, a0, xs, ins, op.has_stacked)
        stacked = wide and op.has_stacked     # xs is then the one (B, n, *shape) block
        if not wide:
            rows = itemgetter(*ids)(g.args) if B > 1 and cols is None else None
            # the nodes' order may change (but not one laid out for its readers)
            free = rows is not None and sizes_flat is None and type(ids) is not _Laid
            for j, a in enumerate(a0):
                if j in shared:
                    xs.append(self.value(a))
                    ins.append(None)
                else:
                    # only the stacked columns are pulled out (an affine's b and W are not)
                    srcs = [a] if B == 1 else list(cols[j]) if rows is None else list(map(itemgetter(j), rows))
                    x, info, order = self._gather(srcs, g.shapes[a], sizes_flat, free)
                    if order is not None:
                        # the first stacked input lies in one block, in another order: take
                        # the nodes in its order, and it is a view (and backward an add)
                        pick = itemgetter(*order)
                        ids, rows = list(pick(ids)), pick(rows)
                    free = False
                    xs.append(x)
                    ins.append(info)
        data = (list(itemgetter(*ids)(g.datas)) if B > 1 else [g.datas[i0]]) if op.has_data else None
        attr = g.attrs.get(i0)
        r = None
        if op.has_into or stacked:
            # the result goes straight into its block: elementwise ops keep their inputs'
            # layout (a flat block when sizes differ), the others are (B, *shape)
            if op.elementwise and not stacked:
                shape, n = xs[0].shape, xs[0].size
            else:
                s0 = g.shapes[i0]
                shape, n = (B,) + s0, B * g.sizes.of(s0)
        else:
            r = op.forward(self.xp, xs, attr, data)
            shape, n = r.shape, r.size
        off = self._alloc(n, n // B if sizes_flat is None else 1)
        view = self.buf[off:off + n]
        y = view.reshape(shape)
        if stacked:
            if wide is True:
                op.forward_stacked(self.xp, xs[0], attr, data, y)
            else:
                op.forward_ragged(self.xp, xs[0], wide, attr, data, y)
        elif r is None:
            op.forward_into(self.xp, xs, attr, data, y)
        else:
            y[...] = r                          # one strided copy (and cast), whatever r's layout
        offs = self.offs
        if sizes_flat is None:
            # a plain loop: 2x faster than map(offs.__setitem__, ...), whose every call
            # goes through a method wrapper
            for i, k in zip(ids, range(off, off + n, n // B)):
                offs[i] = k
        else:
            k = off
            for i, s in zip(ids, sizes_flat):
                offs[i] = k
                k += s
        b = Batch()
        b.ids, b.op, b.attr, b.data, b.xs, b.ins, b.wide = ids, op, attr, data, xs, ins, wide
        b.out, b.n, b.y = off, n, y
        needs = g.needs
        b.need = any(map(needs.__getitem__, ids))
        self.batches.append(b)
        if sizes_flat is None:
            self.blocks[ids[0]] = b
        sig = g.sigs[i0]
        sizes = self._sizes.get(sig)
        if sizes is None:
            sizes = self._sizes[sig] = g.stats.sizes[g.sig_name(sig)]
        sizes.append(B)

    def _view(self, ids, op, a0, cols):
        """Point the nodes at their inputs' memory if op.view allows it for every node
        (cols: input j of every node, as _run uses them when it is not a view)."""
        g = self.g
        pieces = op.view([g.shapes[a] for a in a0], g.attrs[ids[0]])
        if pieces is None:
            return False
        offs = self.offs
        B = len(ids)
        starts = None
        for j, delta in pieces:
            o = list(itemgetter(*cols[j])(offs)) if B > 1 else [offs[a0[j]]]
            if -1 in o:                    # an input outside the arena (a parameter)
                return False
            if delta:
                o = list(map(delta.__add__, o))
            if starts is None:
                starts = o
            elif o != starts:
                return False
        list(map(offs.__setitem__, ids, starts))
        self.viewed.update(ids)
        b = ViewBatch()
        b.ids = ids
        self.batches.append(b)
        g.stats.view_nodes += B
        return True

    def _wide(self, ids, a0, xs, ins, stacked):
        """Gather all inputs of all nodes of a batch of wide nodes (the per-instance esum of
        many losses) as one (B, n, *shape) block in one copy; False if the shapes differ.
        Input j of the batch is then the view [:, j], or (stacked: the op takes the block
        whole) the block is the batch's one input; backward scatters them in one go.
        Nodes of different arities (an op with forward_ragged) give one (N, *shape) block
        of every node's inputs in turn, and their arities (Batch.wide) instead of True."""
        shapes = self.g.shapes
        B, n = len(ids), len(a0)
        rows = (a0,) if B == 1 else itemgetter(*ids)(self.g.args)
        srcs = list(itertools.chain.from_iterable(rows))
        sh = shapes[a0[0]]
        if len(set(map(shapes.__getitem__, srcs))) != 1:
            return False
        x, info, _ = self._gather(srcs, sh, None)
        ins.append(info)
        counts = list(map(len, rows))
        if counts.count(n) != B:
            xs.append(x)
            return counts
        x = x.reshape((B, n) + sh)
        xs.extend([x] if stacked else [x[:, k] for k in range(n)])
        return True

    # --- backward -------------------------------------------------------------
    def backward(self, i, full: bool = False):
        with _no_gc():
            self._backward(i, full)

    def gradient(self, i):
        """d(last backward's loss)/d(node i), or None if the last backward did not reach i."""
        p = self.g.ext.get(i)
        if p is not None:
            # this graph's last backward's part, as DyNet's (p.grad holds the sum since the update);
            # a constant node (update=False) gets none here
            if self.gbuf is None or not self.g.needs[i]:
                return None
            dense, rows = self.pgrads.get(p, (None, ()))
            out = self.xp.zeros_like(p.grad)
            for gr in rows:
                self.be.add_rows(out, gr.rows, gr.vals)
            if dense is not None:
                out += dense
            return out
        if self.gbuf is None or i >= len(self.offs):
            return None
        if any(type(b) is ViewBatch and i in b.ids for b in self.batches):
            # its slot is its input's memory: what lies there is d(loss)/d(input), which
            # also holds what the input's other consumers added
            raise GradientError(f"gradient(): {self.g.describe(i)} is a view of its input's memory "
                             "(a concatenation or slice of blocks that lay in place), which keeps no "
                             f"gradient of its own [at {user_line()}]")
        o = self.offs[i]
        if o < 0 or o + self.g.sizes[i] > self.gtop:
            return None
        return self.gbuf[o:o + self.g.sizes[i]].reshape(self.g.shapes[i])

    def _backward(self, i, full):
        g, st, xp = self.g, self.g.stats, self.xp
        t0 = time.perf_counter()
        st._build_s += max(0.0, t0 - g._t_mark)
        if g.sizes[i] != 1:
            raise GraphError(f"backward() needs a scalar loss; {g.describe(i)} [at {user_line()}]")
        loss = self.value(i)
        if not bool(xp.isfinite(loss).all()):
            raise NonFiniteError(self._non_finite_message(i))
        memory.give(self.gbuf)
        self.gbuf = None
        gbuf = memory.take(xp, self.dtype, self.top)
        needs = g.needs
        if full:
            # DyNet's backward(full=True): gradients reach every node (inputs too, for
            # Expression.gradient()); parameters still get only the ones they need
            needs = [True] * len(needs)
            for n in g.ext:
                needs[n] = g.needs[n]
        try:
            nb = self._sweep(gbuf, i, needs, full, None)
            if not self._collect():
                # Rows of nodes the loss does not depend on carry a zero gradient, but a
                # non-finite value there (an unused log-probability of -inf) makes 0·inf = NaN
                # in the batch's parameter gradients. Found only then (a sum per parameter),
                # the backward runs again without those rows, as DyNet's, which visits only
                # the loss's ancestors.
                nb = self._sweep(gbuf, i, needs, full, self._reach(i))
                self._collect()
        except Exception as e:
            # parameters are untouched (their gradients are applied below): say which batch
            b = self._at
            if b is not None and hasattr(e, "add_note"):
                e.add_note(f"autobatch: while running the backward of a batch of {len(b.ids)} {b.op.name} "
                           f"node(s); " + "; ".join(g.describe(k) for k in b.ids[:3]) + f" [at {user_line()}]")
            memory.give(gbuf)
            raise
        for p, (dense, rows) in self._pending.items():
            self._apply(p, dense, rows)
        self.pgrads, self._pending = self._pending, {}     # for gradient() of a parameter's node
        self.gbuf, self.gtop = gbuf, self.top    # kept until the graph changes or is renewed
        t1 = time.perf_counter()
        st.backward_batches += nb
        st.backward_s += t1 - t0
        st.engine_s += t1 - t0
        st.backward_calls += 1
        g._t_mark = t1

    def _sweep(self, gbuf, i, needs, full, reach):
        """The batches' backward in reverse into gbuf; parameters' gradients are left in
        self._pending. reach: None, or which nodes the loss depends on (a mixed batch then
        runs node by node over those alone). Returns the number of batches run."""
        g, xp = self.g, self.xp
        gbuf[:self.top] = 0
        self._products = {}
        self._pending = {}
        self._at = None
        if i not in g.ext:
            gbuf[self.offs[i]] = 1
        elif g.needs[i]:            # backward from a parameter itself (DyNet: its gradient gets 1)
            self._add_shared(gbuf, i, xp.ones(1, dtype=self.dtype))
        nb = 0
        # a batch whose nodes all follow the loss does not reach it; with the loss the last
        # computed node (the usual case) no batch needs that test
        early = i < self.done - 1
        for b in reversed(self.batches):
            if not (b.need or full and b.y is not None and b.op.differentiable) or early and min(b.ids) > i:
                continue
            self._at = b                # named in an error's note (_backward)
            if reach is not None:
                n = sum(map(reach.__getitem__, b.ids))
                if n == 0:
                    continue
                if n < len(b.ids):
                    nb += 1
                    (self._wide_rows_backward if b.wide else self._rows_backward)(gbuf, b, needs, reach)
                    continue
            nb += 1
            gy = gbuf[b.out:b.out + b.n].reshape(b.y.shape)
            if b.wide:
                info = b.ins[0]
                if any(map(needs.__getitem__, info[1])):
                    self._scatter(gbuf, info, self._wide_grad(b, gy))
                continue
            grads = b.op.backward(xp, b.xs, b.y, gy, b.attr, b.data)
            a0 = g.args[b.ids[0]]
            for j, gr in enumerate(grads):
                if gr is None:
                    continue
                info = b.ins[j]
                if info is None:
                    a = a0[j]
                    if needs[a]:
                        self._add_shared(gbuf, a, gr)
                    continue
                srcs = info[1]
                if not any(map(needs.__getitem__, srcs)):
                    continue
                self._scatter(gbuf, info, gr)
        self._at = None
        self._merge_products(gbuf)
        return nb

    def _rows_backward(self, gbuf, b, needs, reach):
        """A batch's backward one node at a time, over the nodes the loss depends on (the
        careful sweep of _backward): the rows of the others never meet a zero gradient. Node k
        is row k of the batch's blocks, or (an elementwise batch of mixed sizes, flat blocks)
        its segment of them."""
        g, xp = self.g, self.xp
        gy_all = gbuf[b.out:b.out + b.n].reshape(b.y.shape)
        shared = b.op.shared_of(len(g.args[b.ids[0]]))
        if b.y.shape[0] == len(b.ids):
            ends = range(len(b.ids) + 1)
        else:
            ends = list(itertools.accumulate(map(g.sizes.__getitem__, b.ids), initial=0))
        for k, node in enumerate(b.ids):
            if not reach[node]:
                continue
            lo, hi = ends[k], ends[k + 1]
            xs = [x if j in shared else x[lo:hi] for j, x in enumerate(b.xs)]
            data = None if b.data is None else [b.data[k]]
            grads = b.op.backward(xp, xs, b.y[lo:hi], gy_all[lo:hi], b.attr, data)
            for j, gr in enumerate(grads):
                if gr is None:
                    continue
                a = g.args[node][j]
                if not needs[a]:
                    continue
                if j in shared:
                    self._add_shared(gbuf, a, gr)
                else:
                    self._scatter(gbuf, ("ext", [a], None), gr)

    def _wide_rows_backward(self, gbuf, b, needs, reach):
        """_rows_backward of a batch of wide nodes (whose inputs were gathered as one block):
        each node the loss depends on runs the op's plain backward over its own inputs."""
        g, xp = self.g, self.xp
        gy_all = gbuf[b.out:b.out + b.n].reshape(b.y.shape)
        for k, node in enumerate(b.ids):
            if not reach[node]:
                continue
            args = g.args[node]
            xs = [self.value(a)[None] for a in args]
            data = None if b.data is None else [b.data[k]]
            grads = b.op.backward(xp, xs, b.y[k:k + 1], gy_all[k:k + 1], b.attr, data)
            for a, gr in zip(args, grads):
                if gr is not None and needs[a]:
                    self._scatter(gbuf, ("ext", [a], None), gr)

    def _reach(self, i) -> bytearray:
        """Which nodes loss i depends on (itself included)."""
        args = self.g.args
        reach = bytearray(len(args))
        reach[i] = 1
        for n in range(i, -1, -1):
            if reach[n]:
                for a in args[n]:
                    reach[a] = 1
        return reach

    def _collect(self) -> bool:
        """Each parameter's gradients of this backward as (one dense sum or None, RowGrads), in
        place of its list; True if all are finite (one sum per parameter: a NaN or inf anywhere
        makes it non-finite, and one device read answers for all on CuPy)."""
        total = 0.0
        # the sums are a test, not results: their overflow is no news for the user
        with np.errstate(over="ignore", invalid="ignore"):
            for p, grs in self._pending.items():
                shape = p.grad.shape
                dense, rows = None, []
                for gr in grs:
                    if isinstance(gr, RowGrad):
                        rows.append(gr)
                        total = total + gr.vals.sum()
                    elif dense is None:
                        dense = gr.reshape(shape)
                    elif dense.base is None and dense is not gr:
                        dense += gr.reshape(shape)           # a sum this method made: add in place
                    else:
                        dense = dense + gr.reshape(shape)
                if dense is not None:
                    total = total + dense.sum()
                self._pending[p] = (dense, rows)
        if math.isfinite(float(total)):          # one device read (CuPy) for all parameters
            return True
        # large finite gradients (1e38 in float32) may sum to inf: only a value can tell
        isfinite = self.xp.isfinite
        return all(bool(isfinite(a).all()) for dense, rows in self._pending.values()
                   for a in [r.vals for r in rows] + ([] if dense is None else [dense]))

    def _wide_grad(self, b, gy):
        """The gradients of a batch of wide nodes in gather order: node-major, (B·n, size)."""
        xp, B = self.xp, len(b.ids)
        if b.wide is not True:
            gx = b.op.backward_ragged(xp, b.xs[0], b.y, gy, b.wide, b.attr, b.data)
            return gx.reshape(gx.shape[0], -1)
        if b.op.has_stacked:
            gx = b.op.backward_stacked(xp, b.xs[0], b.y, gy, b.attr, b.data)
            return gx.reshape(B * gx.shape[1], -1)
        grads = b.op.backward(xp, b.xs, b.y, gy, b.attr, b.data)
        return xp.stack([gr.reshape(B, -1) for gr in grads], axis=1).reshape(B * len(grads), -1)

    _MERGE_BELOW = 256    # products of batches with fewer rows wait to be merged

    def _merge_products(self, gbuf):
        """Parameter gradients deferred as products: one GEMM per parameter over the
        stacked rows of all its small batches (the lhs views into gbuf are final: a batch's
        output gradient is complete once its backward ran)."""
        xp = self.xp
        for a, prods in self._products.items():
            if len(prods) == 1:
                g = prods[0].dense()
            else:
                g = xp.concatenate([q.lhs for q in prods]).T @ xp.concatenate([q.rhs for q in prods])
            self._add_shared(gbuf, a, g)
        self._products = {}

    def _add_shared(self, gbuf, a, gr):
        p = self.g.ext.get(a)
        if isinstance(gr, ProductGrad):
            # only parameters may wait: a computed node needs its full gradient before its
            # own batch's backward runs
            if p is not None and gr.lhs.shape[0] < self._MERGE_BELOW:
                self._products.setdefault(a, []).append(gr)
                return
            gr = gr.dense()
        if p is not None:
            self._pending.setdefault(p, []).append(gr)    # checked, then applied (_apply)
            return
        o = self.offs[a]
        size = self.g.sizes[a]
        if isinstance(gr, RowGrad):
            table = gbuf[o:o + size].reshape(self.g.shapes[a])
            self.be.add_rows(table, gr.rows, gr.vals)
        else:
            gbuf[o:o + size] += gr.reshape(-1)

    def _apply(self, p, dense, rows):
        """Add one backward's gradients of parameter p (see _collect) to p.grad."""
        for gr in rows:
            self.be.add_rows(p.grad, gr.rows, gr.vals)
            if hasattr(p, "rows_used"):
                p.rows_used.append(gr.rows)
        if dense is not None:
            p.grad += dense
            if p.is_lookup:
                p.all_updated = True        # dense gradient: sparse updates must touch every row
        p.touched = True

    def _rows(self, buf, o0, B, size, step):
        """(B, size) view of B blocks of `size` elements, `step` elements apart from o0."""
        end = o0 + B * step
        if end <= buf.shape[0]:      # plain slicing: as_strided costs several microseconds
            return buf[o0:end].reshape(B, step)[:, :size]
        isz = buf.itemsize
        return self.xp.lib.stride_tricks.as_strided(buf[o0:], (B, size), (step * isz, isz))

    def _scatter(self, gbuf, info, gr):
        kind, srcs, where = info
        if kind == "view":
            gbuf[where:where + gr.size] += gr.reshape(-1)
        elif kind == "strided":
            B = len(srcs)
            self._rows(gbuf, where[0], B, gr.size // B, where[1])[...] += gr.reshape(B, -1)
        elif kind == "gather":
            size = gr.size // len(srcs)
            self.be.scatter_add(gbuf, where, size, gr, self._disjoint(srcs, size))
        elif kind == "bcast":
            a = srcs[0]
            self._add_shared(gbuf, a, gr.sum(axis=0))
        elif kind == "flat" and where is not None:
            if self.g.stats.view_nodes:          # blocks of sizes that differ: check on the host
                unique = self._disjoint(srcs, list(map(self.g.sizes.__getitem__, srcs)))
            else:
                unique = len(set(srcs)) == len(srcs)
            self.be.scatter_add(gbuf, where, 1, gr, unique)
        else:                                   # sources outside the arena: node by node
            g = self.g
            flat = gr.reshape(-1)
            k = 0
            for a in srcs:
                s = g.sizes[a]
                piece = flat[k:k + s]
                k += s
                p = g.ext.get(a)
                if p is not None:
                    if g.needs[a]:
                        self._pending.setdefault(p, []).append(piece)
                else:
                    o = self.offs[a]
                    gbuf[o:o + s] += piece

    def _disjoint(self, srcs, size):
        """No two of the nodes srcs' blocks (of `size` elements, or of sizes[k]) share an
        element: a buffered add is then exact. Blocks of distinct nodes never overlap in the
        arena, but views (op.view) may alias each other: two slices of one block, or a
        concatenation and one of its pieces. With an int size, offsets are looked up and
        sorted only when one of the nodes is a view."""
        if type(size) is int:
            if len(srcs) < 2:
                return True
            nodes = set(srcs)
            if len(nodes) < len(srcs):         # a node twice: its block twice
                return False
            if not self.viewed or self.viewed.isdisjoint(nodes):    # the smaller set is walked
                return True
            o = sorted(map(self.offs.__getitem__, srcs))
            return min(map(sub, o[1:], o)) >= size      # the gaps at C speed
        blocks = sorted(zip(map(self.offs.__getitem__, srcs), size))
        return all(a + n <= b for (a, n), (b, _) in zip(blocks, blocks[1:]))

    def _non_finite_message(self, i):
        g, xp = self.g, self.xp
        culprit = None
        for b in self.batches:
            if b.y is not None and not bool(xp.isfinite(b.y).all()):
                flat = b.y.reshape(-1)
                bad = int(xp.argmax(~xp.isfinite(flat)))
                for n in b.ids:
                    o = self.offs[n]
                    if o - b.out <= bad < o - b.out + g.sizes[n]:
                        culprit = n
                        break
                break
        msg = f"backward() on a non-finite loss ({g.describe(i)}) [at {user_line()}]"
        if culprit is not None:
            msg += f"; the first non-finite value appears at {g.describe(culprit)}"
            # a node that runs a program of its own (a vertex function's call) says where in it
            inside = getattr(g.datas[culprit], "describe_non_finite", None)
            where = inside() if inside is not None else None
            if where:
                msg += f", {where}"
            if culprit not in g.where:
                msg += " (dy.set_debug(True) or AUTOBATCH_DEBUG=1 records the line that built each node)"
        return msg
