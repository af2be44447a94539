"""Turn the pending nodes of a graph into an ordered list of batches.

Input: the id range [lo, hi) of nodes to compute, their signatures (ints; -1 for
nodes that need no computing, such as parameters), depths and argument tuples.
Output: a list of batches, each a list of node ids with one signature, in an
order that respects dependencies. Knows no op by name."""
from __future__ import annotations

import heapq
import itertools

import numpy as np

from .runtime import Strategy


def schedule(strategy: Strategy, lo: int, hi: int, sigs: list, depths: list, args: list,
             heavy_of_sig) -> list[list[int]]:
    if strategy is Strategy.NONE:
        return [[i] for i in range(lo, hi) if sigs[i] >= 0]
    if strategy is Strategy.DEPTH:
        return _by_depth(lo, hi, sigs, depths)
    return _agenda(lo, hi, sigs, depths, args, heavy_of_sig)


def _pending(lo, hi, sigs):
    sig = np.array(sigs[lo:hi], dtype=np.int64)
    ids = np.flatnonzero(sig >= 0)
    return ids + lo, sig[ids]


def _split(ids, keys):
    """Split ids (already sorted by keys) where the key changes."""
    if len(ids) == 0:
        return []
    cut = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    return [part.tolist() for part in np.split(ids, cut)]


def _by_depth(lo, hi, sigs, depths):
    ids, sig = _pending(lo, hi, sigs)
    depth = np.array(depths[lo:hi], dtype=np.int64)[ids - lo]
    order = np.lexsort((ids, sig, depth))     # depth, then signature, then id
    ids, sig, depth = ids[order], sig[order], depth[order]
    key = depth * (int(sig.max(initial=0)) + 1) + sig
    return _split(ids, key)


def _edges(lo, hi, args, sig_all):
    """Dependency edges among pending nodes as a CSR (successors of each node) and
    the count of pending inputs per node, built with C-level iteration, no per-edge Python."""
    n = hi - lo
    chunk = args[lo:hi]
    lens = np.fromiter(map(len, chunk), dtype=np.int64, count=n)
    src = np.fromiter(itertools.chain.from_iterable(chunk), dtype=np.int64, count=int(lens.sum())) - lo
    dst = np.repeat(np.arange(n, dtype=np.int64), lens)
    keep = src >= 0
    keep[keep] = sig_all[src[keep]] >= 0        # parameters (sig -1) are always ready
    src, dst = src[keep], dst[keep]
    waits = np.bincount(dst, minlength=n)
    order = np.argsort(src, kind="stable")
    succ = dst[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    pptr = np.zeros(n + 1, dtype=np.int64)      # predecessors: edges already lie in dst order
    np.cumsum(waits, out=pptr[1:])
    return waits, ptr, succ, pptr, src


def _ranges(ptr, flat, nodes):
    """Concatenation of flat[ptr[i]:ptr[i+1]] over nodes, in one vectorised gather."""
    a, b = ptr[nodes], ptr[nodes + 1]
    lens = b - a
    total = int(lens.sum())
    if total == 0:
        return flat[:0]
    if len(nodes) == 1:
        return flat[int(a[0]):int(b[0])]
    return flat[np.repeat(a - np.cumsum(lens) + lens, lens) + np.arange(total)]


def _sorted_set(a):
    """np.unique for small int arrays without its per-call overhead."""
    if len(a) < 2:
        return a
    a = np.sort(a)
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _heights(n, ptr, pptr, preds):
    """Longest path from each node to a sink of the pending subgraph: reverse Kahn,
    one vectorised step per level."""
    out = np.diff(ptr)
    height = np.zeros(n, dtype=np.int64)
    frontier = np.flatnonzero(out == 0)
    h = 0
    while len(frontier):
        height[frontier] = h
        p = _ranges(pptr, preds, frontier)
        if len(p) == 0:
            break
        np.subtract.at(out, p, 1)
        frontier = _sorted_set(p[out[p] == 0])
        out[frontier] = -1
        h += 1
    return height


def _levels(sig, asap, alap):
    """Per signature, the leveling (as-soon- or as-late-as-possible) that spreads its
    nodes over fewer distinct levels. Loss heads sit at every ASAP depth of a
    sequence but at one ALAP level, so deferring them lets them batch together."""
    def distinct(level):
        pairs = np.unique(sig * (int(level.max()) + 1) + level)
        return np.bincount(np.searchsorted(usig, pairs // (int(level.max()) + 1)), minlength=len(usig))
    usig, inv = np.unique(sig, return_inverse=True)
    late = (distinct(alap) < distinct(asap))[inv]
    return np.where(late, alap, asap)


def _agenda(lo, hi, sigs, depths, args, heavy_of_sig, average_only=False):
    """The agenda of ready nodes: repeatedly run every ready node of one signature.

    Which signature: DyNet ranks signatures by the average depth of all their nodes;
    on chains and trees that interleaves gates badly (we measured more batches than
    plain depth batching). We give every node a level — its depth (as soon as
    possible) or, for signatures whose nodes line up better that way, its distance
    from the end (as late as possible: loss heads) — and rank a signature by the
    lowest level among its *ready* nodes, then cheap before heavy, then DyNet's
    average depth. With depth levels alone the lowest pending level is always fully
    ready, so every batch completes a level of its signature and deeper ready nodes
    ride along; the late levels then gather the loss heads of all lengths into one
    batch. ``average_only=True`` gives DyNet's rule.

    Vectorised per batch: the Python loop runs once per batch, not per node or edge."""
    if hi - lo <= _SMALL and not average_only:
        return _agenda_small(lo, hi, sigs, depths, args, heavy_of_sig)
    sig_all = np.array(sigs[lo:hi], dtype=np.int64)
    pend = np.flatnonzero(sig_all >= 0)
    if len(pend) == 0:
        return []
    depth_all = np.array(depths[lo:hi], dtype=np.int64)
    sig = sig_all[pend]
    usig, inv = np.unique(sig, return_inverse=True)
    avg = np.bincount(inv, weights=depth_all[pend]) / np.bincount(inv)
    rank = {int(s): (heavy_of_sig(int(s)), float(a), int(s)) for s, a in zip(usig, avg)}

    waits, ptr, succ, pptr, preds = _edges(lo, hi, args, sig_all)
    if not average_only:
        asap = depth_all - int(depth_all[pend].min())
        height = _heights(hi - lo, ptr, pptr, preds)
        alap = int(height[pend].max()) - height
        key = np.zeros(hi - lo, dtype=np.int64)
        key[pend] = _levels(sig, asap[pend], alap[pend])
    ready: dict = {}
    low: dict = {}          # signature -> lowest depth among its ready nodes
    heap: list = []

    def push(s, part):
        d = 0 if average_only else int(key[part].min())
        r = ready.get(s)
        if r is None:
            ready[s] = [part]
        else:
            r.append(part)
            if d >= low[s]:
                return
        low[s] = d
        h, a, s_ = rank[s]
        heapq.heappush(heap, (a, h, s) if average_only else (d, h, a, s))

    def add_ready(nodes):
        """Queue newly ready local node ids (ascending), grouped by signature."""
        ss = sig_all[nodes]
        if ss[0] == ss[-1] and (len(ss) < 3 or (ss == ss[0]).all()):
            push(int(ss[0]), nodes)
            return
        order = np.argsort(ss, kind="stable")
        nodes, ss = nodes[order], ss[order]
        cut = np.flatnonzero(ss[1:] != ss[:-1]) + 1
        for s, part in zip(ss[np.concatenate(([0], cut))].tolist(), np.split(nodes, cut)):
            push(s, part)

    add_ready(pend[waits[pend] == 0])
    out = []
    while heap:
        entry = heapq.heappop(heap)
        s = entry[-1]
        if s not in ready or (not average_only and low[s] != entry[0]):
            continue                      # stale entry: s ran already, or got a lower depth
        parts = ready.pop(s)
        batch = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
        out.append((batch + lo).tolist())
        nxt = _ranges(ptr, succ, batch)
        if len(nxt) == 0:
            continue
        np.subtract.at(waits, nxt, 1)
        fresh = _sorted_set(nxt[waits[nxt] == 0])   # a node fed twice by this batch appears twice
        if len(fresh):
            waits[fresh] = -1                # never queue it again
            add_ready(fresh)
    return out


_SMALL = 256   # below this many nodes NumPy's per-call overhead outweighs vectorising


def _agenda_small(lo, hi, sigs, depths, args, heavy_of_sig):
    """The same agenda and levels as _agenda, in plain Python: small forwards (one
    sentence at a time, batched_map rounds) must not pay milliseconds of NumPy calls."""
    pend = [i for i in range(lo, hi) if sigs[i] >= 0]
    if not pend:
        return []
    succ: dict = {}
    waits: dict = {}
    for i in pend:
        n = 0
        for a in args[i]:
            if a >= lo and sigs[a] >= 0:
                n += 1
                succ.setdefault(a, []).append(i)
        waits[i] = n
    height = {}
    for i in reversed(pend):
        height[i] = max([height[j] + 1 for j in succ.get(i, ())], default=0)
    top = max(height.values())
    base = min(depths[i] for i in pend)
    by_sig: dict = {}
    for i in pend:
        by_sig.setdefault(sigs[i], []).append(i)
    level, rank = {}, {}
    for s, nodes in by_sig.items():
        asap = {depths[i] - base for i in nodes}
        alap = {top - height[i] for i in nodes}
        late = len(alap) < len(asap)
        for i in nodes:
            level[i] = top - height[i] if late else depths[i] - base
        rank[s] = (heavy_of_sig(s), sum(depths[i] for i in nodes) / len(nodes), s)
    ready: dict = {}
    low: dict = {}
    heap: list = []

    def push(i):
        s, d = sigs[i], level[i]
        r = ready.get(s)
        if r is None:
            ready[s] = [i]
        else:
            r.append(i)
            if d >= low[s]:
                return
        low[s] = d
        heapq.heappush(heap, (d,) + rank[s])

    for i in pend:
        if waits[i] == 0:
            push(i)
    out = []
    while heap:
        entry = heapq.heappop(heap)
        s = entry[-1]
        if s not in ready or low[s] != entry[0]:
            continue
        batch = sorted(ready.pop(s))
        out.append(batch)
        for i in batch:
            for j in succ.get(i, ()):
                w = waits[j] - 1
                waits[j] = w
                if w == 0:
                    push(j)
    return out
