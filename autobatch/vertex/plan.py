"""The schedule of one call: every vertex of every graph, sorted into frontiers.

Vertices are ordered by (level, kind). Each kind's dynamic tensors hold its vertices in that
order, so the vertices of one (level, kind) frontier are one contiguous block of rows in every
buffer of the kind, and one contiguous block of positions in the scatter state. Only gather
(children's rows), pull and push (input order) need index copies."""
from __future__ import annotations

import numpy as np


class KindRows:
    """Where the vertices of one kind live: input-order ids, state positions, child positions,
    and the frontiers as row ranges [r0, r1) with the state position g0 of row r0."""

    __slots__ = ("gids", "pos", "childpos", "fronts", "n")

    def __init__(self, gids, pos, childpos, fronts):
        self.gids, self.pos, self.childpos, self.fronts = gids, pos, childpos, fronts
        self.n = len(gids)


class Plan:
    def __init__(self, graphs, kind_of, n_kinds, max_children=1):
        """graphs: InputGraphs; kind_of: (N,) kind id per vertex in input order."""
        sizes = [g.n for g in graphs]
        N = int(sum(sizes))
        A = max([max_children, 1] + [g.child.shape[1] for g in graphs])   # gather(k) may exceed every arity
        offs = np.zeros(len(graphs) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offs[1:])
        child = np.full((N, A), -1, dtype=np.int64)
        level = np.empty(N, dtype=np.int64)
        for g, o in zip(graphs, offs[:-1]):
            c = g.child
            child[o:o + g.n, :c.shape[1]] = np.where(c >= 0, c + o, -1)
            level[o:o + g.n] = g.level
        order = np.lexsort((kind_of, level))          # by level, then kind
        pos = np.empty(N, dtype=np.int64)
        pos[order] = np.arange(N)
        childpos = np.where(child >= 0, pos[np.maximum(child, 0)], N)   # N: the zero row
        lv, kd = level[order], kind_of[order]
        self.N, self.offsets, self.depth = N, offs, int(level.max()) + 1 if N else 0
        self.shared_children = any(g.shared_children for g in graphs)
        self.kinds = []
        for k in range(n_kinds):
            where = np.flatnonzero(kd == k)            # state positions of kind k, ascending
            gids = order[where]
            lk = lv[where]
            cuts = np.flatnonzero(np.diff(lk)) + 1
            starts = np.concatenate(([0], cuts)).tolist()
            ends = np.concatenate((cuts, [len(lk)])).tolist()
            fronts = [(int(lk[r0]), r0, r1, int(where[r0])) for r0, r1 in zip(starts, ends)] if len(lk) else []
            self.kinds.append(KindRows(gids, where, childpos[gids], fronts))
        # (level, kind, r0, r1, g0) in forward order
        self.steps = sorted((lvl, k, r0, r1, g0) for k, kr in enumerate(self.kinds) for lvl, r0, r1, g0 in kr.fronts)
