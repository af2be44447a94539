"""InputGraph: the structure G of one instance, as data (Cavs' input graph).

A vertex's children are what it gathers from; a vertex is ready once all its children are
done, so its level (frontier index) is 0 for a vertex without children and otherwise
1 + the largest level among its children. Levels are computed (and cycles found) once,
when the graph is built, so that a call only concatenates them."""
from __future__ import annotations

import numbers
from itertools import chain

import numpy as np

from ..errors import GraphError, user_line


def _bad(msg: str) -> GraphError:
    """The error for a bad graph, naming the user's line."""
    return GraphError(f"{msg} [at {user_line()}]")


class InputGraph:
    """``InputGraph([[], [], [0, 1]])``: vertex 2 has children 0 and 1 (gather(0) is vertex 0).

    Children may be shared (a DAG) but the graph must be acyclic."""

    __slots__ = ("n", "child", "arity", "level", "shared_children")

    def __init__(self, children):
        # per-vertex work in Python only where it cannot be helped (the levels): a bench
        # minibatch of trees is one graph of ~2000 vertices per step, and copying each child
        # list, padding it and checking it child by child took most of its ~1.6 ms
        try:
            kids = children if type(children) is list else list(children)
            try:
                arity = list(map(len, kids))
            except TypeError:               # child collections without a length
                kids = [list(c) for c in kids]
                arity = list(map(len, kids))
        except TypeError:
            raise _bad("InputGraph: expected one list of child indices per vertex, "
                             f"got {type(children).__name__}") from None
        n = len(kids)
        if n == 0:
            raise _bad("InputGraph: a graph needs at least one vertex")
        flat = list(chain.from_iterable(kids))
        self.n = n
        self.arity = np.array(arity, dtype=np.int64)
        self.child = level = None
        if set(map(type, flat)) <= {int} and (not flat or (min(flat) >= 0 and max(flat) < n)):
            self.child = self._child_array(flat)
            if (self.child < np.arange(n)[:, None]).all():     # every child listed before its parent
                level = self._ordered_levels(kids, n)
        if level is None:                  # the general path: checks with messages, Kahn
            self._check(kids, n)
            level = _levels_kahn(kids, n)
            if self.child is None:
                self.child = self._child_array(flat)
        self.level = np.array(level, dtype=np.int64)
        self.shared_children = len(set(flat)) != len(flat)

    def _child_array(self, flat):
        """(n, max(1, max arity)) child indices, -1 past a vertex's arity: flat (every child
        list, one after another) written through one mask, row by row."""
        A = max(int(self.arity.max()), 1)
        child = np.full((self.n, A), -1, dtype=np.int64)
        child[np.arange(A) < self.arity[:, None]] = flat
        return child

    @staticmethod
    def _ordered_levels(kids, n):
        """Levels in one pass, for graphs whose children all come before their parents (trees
        listed children first, chains)."""
        level = [0] * n
        get = level.__getitem__
        for v, c in enumerate(kids):
            if c:
                level[v] = 1 + max(map(get, c))
        return level

    @staticmethod
    def _check(kids, n):
        for v, c in enumerate(kids):
            for k, u in enumerate(c):
                if not isinstance(u, (int, np.integer)) or isinstance(u, bool):
                    raise _bad(f"InputGraph: child {k} of vertex {v} is {u!r}, not an integer index")
                if not 0 <= u < n:
                    raise _bad(f"InputGraph: child {k} of vertex {v} is {u}, out of range for "
                                     f"a graph of {n} vertices")
                if u == v:
                    raise _bad(f"InputGraph: vertex {v} is its own child (a cycle)")

    @classmethod
    def from_parents(cls, parents):
        """From a parent array: parents[v] is v's parent, or -1 for a root. A vertex's
        children are ordered by their index (gather(0) is the lowest-numbered child)."""
        ps = list(parents)
        n = len(ps)
        kids = [[] for _ in range(n)]
        for v, p in enumerate(ps):
            if not isinstance(p, (int, np.integer)) or isinstance(p, bool):
                raise _bad(f"InputGraph.from_parents: parent of vertex {v} is {p!r}, not an integer")
            if p == -1:
                continue
            if not 0 <= p < n:
                raise _bad(f"InputGraph.from_parents: parent of vertex {v} is {p}, out of range "
                                 f"for a graph of {n} vertices (use -1 for a root)")
            kids[p].append(v)
        return cls(kids)

    @classmethod
    def chain(cls, n: int):
        """A sequence of n vertices; vertex t's one child is t-1 (an RNN over n steps)."""
        if not isinstance(n, numbers.Integral) or n < 1:
            raise _bad(f"InputGraph.chain: needs n >= 1 vertices, got {n!r}")
        return cls([[]] + [[t - 1] for t in range(1, n)])

    def __len__(self):
        return self.n

    def children(self, v: int) -> list:
        return [int(u) for u in self.child[v] if u >= 0]

    def __repr__(self):
        return f"InputGraph(n={self.n}, depth={int(self.level.max()) + 1})"


def _levels_kahn(kids, n):
    """Levels by peeling ready vertices (Kahn); vertices never ready lie on a cycle."""
    parents = [[] for _ in range(n)]
    missing = [len(c) for c in kids]
    for v, c in enumerate(kids):
        for u in c:
            parents[u].append(v)
    level = [0] * n
    ready = [v for v in range(n) if missing[v] == 0]
    done = 0
    while ready:
        nxt = []
        for u in ready:
            done += 1
            for v in parents[u]:
                if level[u] + 1 > level[v]:
                    level[v] = level[u] + 1
                missing[v] -= 1
                if missing[v] == 0:
                    nxt.append(v)
        ready = nxt
    if done < n:
        cyc = [v for v in range(n) if missing[v] > 0]
        raise _bad(f"InputGraph: the graph has a cycle (vertices {cyc[:10]}"
                         f"{' ...' if len(cyc) > 10 else ''} never become ready)")
    return level
