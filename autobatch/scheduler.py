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
    return waits, ptr, succ


def _agenda(lo, hi, sigs, depths, args, heavy_of_sig):
    """DyNet's agenda: repeatedly run every ready node of the signature with the
    lowest average depth (ties: cheap ops first). Vectorised per batch: the Python
    loop runs once per batch, not once per node or edge."""
    sig_all = np.array(sigs[lo:hi], dtype=np.int64)
    pend = np.flatnonzero(sig_all >= 0)
    if len(pend) == 0:
        return []
    sig = sig_all[pend]
    depth = np.array(depths[lo:hi], dtype=np.float64)[pend]
    usig, inv = np.unique(sig, return_inverse=True)
    avg = np.bincount(inv, weights=depth) / np.bincount(inv)
    prio = {int(s): (float(a), heavy_of_sig(int(s)), int(s)) for s, a in zip(usig, avg)}

    waits, ptr, succ = _edges(lo, hi, args, sig_all)
    ready: dict = {}
    heap: list = []

    def add_ready(nodes):
        """Queue newly ready local node ids (ascending), grouped by signature."""
        ss = sig_all[nodes]
        if ss[0] == ss[-1] and (len(ss) < 3 or (ss == ss[0]).all()):
            groups = ((int(ss[0]), nodes),)
        else:
            order = np.argsort(ss, kind="stable")
            nodes, ss = nodes[order], ss[order]
            cut = np.flatnonzero(ss[1:] != ss[:-1]) + 1
            groups = zip(ss[np.concatenate(([0], cut))].tolist(), np.split(nodes, cut))
        for s, part in groups:
            r = ready.get(s)
            if r is None:
                ready[s] = [part]
                heapq.heappush(heap, prio[s])
            else:
                r.append(part)

    add_ready(pend[waits[pend] == 0])
    out = []
    while heap:
        s = heapq.heappop(heap)[2]
        parts = ready.pop(s)
        batch = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
        out.append((batch + lo).tolist())
        a, b = ptr[batch], ptr[batch + 1]
        lens = b - a
        total = int(lens.sum())
        if total == 0:
            continue
        if len(batch) == 1:
            nxt = succ[int(a[0]):int(b[0])]
        else:
            starts = np.repeat(a - np.cumsum(lens) + lens, lens)
            nxt = succ[starts + np.arange(total)]
        np.subtract.at(waits, nxt, 1)
        fresh = nxt[waits[nxt] == 0]
        if len(fresh):
            if len(fresh) > 1:
                fresh = np.unique(fresh)     # a node fed twice by this batch appears twice
            waits[fresh] = -1                # never queue it again
            add_ready(fresh)
    return out
