"""Turn the pending nodes of a graph into an ordered list of batches.

Input: the id range [lo, hi) of nodes to compute, their signatures (ints; -1 for
nodes that need no computing, such as parameters), depths and argument tuples.
Output: a list of batches, each a list of node ids with one signature, in an
order that respects dependencies. Knows no op by name."""
from __future__ import annotations

import heapq

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


def _agenda(lo, hi, sigs, depths, args, heavy_of_sig):
    ids, sig = _pending(lo, hi, sigs)
    if len(ids) == 0:
        return []
    depth = np.array(depths[lo:hi], dtype=np.float64)[ids - lo]
    # priority of a signature: average depth of its pending nodes (lower runs first);
    # ties go to cheap ops before heavy ones, then to the older signature
    usig, inv = np.unique(sig, return_inverse=True)
    avg = np.bincount(inv, weights=depth) / np.bincount(inv)
    prio = {int(s): (float(a), heavy_of_sig(int(s)), int(s)) for s, a in zip(usig, avg)}

    ids_l = ids.tolist()
    n_wait = {}
    succ = {}
    ready: dict[int, list] = {}
    heap: list = []
    for i in ids_l:
        n = 0
        for a in args[i]:
            if a >= lo and sigs[a] >= 0:
                n += 1
                s = succ.get(a)
                if s is None:
                    succ[a] = [i]
                else:
                    s.append(i)
        if n:
            n_wait[i] = n
        else:
            s = sigs[i]
            r = ready.get(s)
            if r:
                r.append(i)
            else:
                ready[s] = [i]
                heapq.heappush(heap, prio[s])

    out = []
    while heap:
        s = heapq.heappop(heap)[2]
        batch = ready.pop(s)
        out.append(batch)
        for i in batch:
            for j in succ.get(i, ()):
                n = n_wait[j] - 1
                n_wait[j] = n
                if n == 0:
                    t = sigs[j]
                    r = ready.get(t)
                    if r:
                        r.append(j)
                    else:
                        ready[t] = [j]
                        heapq.heappush(heap, prio[t])
    return out
