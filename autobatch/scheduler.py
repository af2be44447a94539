"""Turn the pending nodes of a graph into an ordered list of batches.

Input: the id range [lo, hi) of nodes to compute, their signatures (ints; -1 for
nodes that need no computing, such as parameters), depths and argument tuples.
Output: a list of batches, each a list of node ids with one signature, in an
order that respects dependencies. Knows no op by name."""
from __future__ import annotations

import heapq
import itertools
import struct
from operator import itemgetter

import numpy as np

from .runtime import Strategy


def schedule(strategy: Strategy, lo: int, hi: int, sigs: list, depths: list, args: list,
             heavy_of_sig, uses: list | None = None, family=None) -> list[list[int]]:
    """uses: number of consumers of every node (the graph keeps it; computed if None).
    family: a function returning a key for the kind of graph (the model that built it, as
    ComputationGraph.family_key); with it, the agenda learns which of its two rules batches
    that kind of graph better."""
    if strategy is Strategy.NONE:
        return [[i] for i in range(lo, hi) if sigs[i] >= 0]
    if strategy is Strategy.DEPTH:
        return _by_depth(lo, hi, sigs, depths)
    if strategy is Strategy.DYNET_AGENDA:
        return _dynet_agenda(lo, hi, sigs, depths, args, heavy_of_sig)
    if uses is None:
        uses = np.bincount(np.fromiter(itertools.chain.from_iterable(args), dtype=np.int64),
                           minlength=len(args)).tolist()
    if hi - lo <= _CACHED:
        return _cached_plan(lo, hi, sigs, depths, args, heavy_of_sig, uses, family)
    return _plan(lo, hi, sigs, depths, args, heavy_of_sig, uses, family)


def _plan(lo, hi, sigs, depths, args, heavy_of_sig, uses, family):
    if hi - lo <= _SMALL or family is None:
        return _agenda(lo, hi, sigs, depths, args, heavy_of_sig, uses)
    return _adaptive(lo, hi, sigs, depths, args, heavy_of_sig, uses, family)


# Plans of forwards of up to _CACHED nodes, by everything a plan depends on: a program that
# builds a graph per sentence meets the same few structures again and again (a bag of words
# per length, a BiLSTM per sentence length), and a plan costs about a microsecond a node to
# make (24 us of DyNet's bow.py's 250 us step; DyNet's bilstm-tagger.py spent 250 us a
# sentence planning, 7% of its step, when only plans of up to 256 nodes were kept). The whole
# key costs a fifth of a plan (46 of 250 us for a 450-node tree), too much for programs whose
# graphs rarely repeat (a tree per graph): its cheap first part, the signatures, is looked up
# first, and the rest made only for signatures met before, and no more once _VARIANTS graphs
# of those signatures have all differed with no plan reused yet (leaves first, then trees of
# every shape over them).
# Keys hold the graph's own ints and argument tuples, about a hundred bytes a node; the cache
# is emptied when it holds more than _PLANS_NODES nodes. Plans are shared: the executor never
# changes one. Larger forwards (a minibatch of many instances) rarely repeat, and keying them
# would cost more.
_CACHED = 2048
_VARIANTS = 64
_PLANS: dict = {}       # (ruled, lo, signatures) -> [hits, {the rest of the key -> plan} or None]
_PLANS_NODES = 1 << 18
_plans_nodes = 0


def _cached_plan(lo, hi, sigs, depths, args, heavy_of_sig, uses, family):
    global _plans_nodes
    n = hi - lo
    sig = tuple(sigs[lo:hi])
    # ruled: a family picks the rule (else the level rule alone makes the plan)
    first = (family is not None and n > _SMALL, lo, sig)
    entry = _PLANS.get(first)
    rest = None
    if entry is not None:
        if entry[1] is None:            # these signatures' graphs never repeated
            return _plan(lo, hi, sigs, depths, args, heavy_of_sig, uses, family)
        rest = (tuple(depths[lo:hi]), tuple(uses[lo:hi]), tuple(args[lo:hi]),
                tuple([heavy_of_sig(s) for s in range(max(sig) + 1)]) if sig else ())
        plan = entry[1].get(rest)
        if plan is not None:
            entry[0] += 1
            return plan
        if entry[0] == 0 and len(entry[1]) >= _VARIANTS:
            entry[1] = None
            return _plan(lo, hi, sigs, depths, args, heavy_of_sig, uses, family)
    plan = _plan(lo, hi, sigs, depths, args, heavy_of_sig, uses, family)
    if _plans_nodes + n > _PLANS_NODES:
        _PLANS.clear()
        _plans_nodes = 0
        entry = None
    if entry is None:                   # met once: keyed from the next time
        entry = _PLANS[first] = [0, {}]
    if rest is not None:
        entry[1][rest] = plan
    _plans_nodes += n
    return plan


# family -> [its rule, forwards scheduled, reach]; a training loop builds the same kind of graph
# thousands of times, so the rules are compared only now and then. reach: how many steps from
# the end of the graph the level rule must look for nodes to run as late as possible (the
# deepest such node the trials met; -1: none), so that later forwards walk only that far
_FAMILIES: dict = {}
_TRIALS = 2        # the first forwards of a family try every rule
_RECHECK = 50      # and then every 50th, in case the data changed (longer sentences, ...)
_DYNET_GAIN = 0.9  # DyNet's rule costs about twice as much to schedule: it must save 10% of batches


def _levels(lo, hi, sigs, depths, args, heavy_of_sig, uses, reach=None, found=None):
    return _agenda(lo, hi, sigs, depths, args, heavy_of_sig, uses, reach, found)


def _dynet(lo, hi, sigs, depths, args, heavy_of_sig, uses, reach=None):
    return _dynet_agenda(lo, hi, sigs, depths, args, heavy_of_sig)


def _depth(lo, hi, sigs, depths, args, heavy_of_sig, uses, reach=None):
    return _by_depth(lo, hi, sigs, depths)


def _adaptive(lo, hi, sigs, depths, args, heavy_of_sig, uses, family):
    """The level rule, or another where it is as good for this kind of graph and cheaper, or
    clearly better. Levels win on trees of different shapes and on single sequences; DyNet's
    average-depth rule wins where one sequence's inputs end at many different depths (a word
    LSTM over character LSTMs of words of every length: it runs all characters first, then
    the words); plain depth order makes the same number of batches where all instances share
    one shape (complete trees), and costs half the level rule's scheduling time."""
    family = family()     # computed only here: most forwards never need it
    c = _FAMILIES.get(family)
    if c is None:
        if len(_FAMILIES) > 1000:
            _FAMILIES.clear()
        c = _FAMILIES[family] = [_levels, 0, -1]
    c[1] += 1
    a = (lo, hi, sigs, depths, args, heavy_of_sig, uses)
    if c[1] <= _TRIALS or c[1] % _RECHECK == 0:
        found = []
        levels, dynet, depth = _levels(*a, _NEAR_END, found), _dynet(*a), _depth(*a)
        # the deepest late node of any trial: a smaller reach would leave it at its depth
        c[2] = max(c[2], found[0])
        best, c[0] = levels, _levels
        if len(dynet) <= _DYNET_GAIN * len(levels):
            best, c[0] = dynet, _dynet
        elif len(depth) <= len(levels):
            best, c[0] = depth, _depth
        return best
    return c[0](*a, c[2])


def _ints(column, lo, hi):
    """column[lo:hi] (a graph column of ints) as a writable int64 array. struct packs the
    unpacked ints in one C loop, 30% faster than np.fromiter's per-item iterator (and than
    np.array); the whole column (the usual forward) is unpacked in place, without a slice
    copy."""
    n = hi - lo
    buf = bytearray(8 * n)
    struct.pack_into(f"{n}q", buf, 0, *(column if lo == 0 and hi == len(column) else column[lo:hi]))
    return np.frombuffer(buf, dtype=np.int64)


def _pending(lo, hi, sigs):
    sig = _ints(sigs, lo, hi)
    ids = np.flatnonzero(sig >= 0)
    return ids + lo, sig[ids]


def _split(ids, keys):
    """Split ids (already sorted by keys) where the key changes: one list conversion and
    Python slices, not np.split's array per batch and a tolist each (3x faster)."""
    if len(ids) == 0:
        return []
    bounds = [0] + (np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist() + [len(ids)]
    flat = ids.tolist()
    return [flat[a:b] for a, b in zip(bounds, bounds[1:])]


def _stable_order(key):
    """np.argsort(key, kind="stable"): keys that fit 16 bits (or whose distinct values, ranked,
    do) take NumPy's radix sort, 8x faster than its int64 timsort."""
    if len(key) == 0 or (int(key.max()) < 1 << 16 and int(key.min()) >= 0):
        return np.argsort(key.astype(np.uint16), kind="stable")
    u = _unique(key)
    if len(u) < 1 << 16:
        return np.argsort(np.searchsorted(u, key).astype(np.uint16), kind="stable")
    return np.argsort(key, kind="stable")


def _by_depth(lo, hi, sigs, depths):
    ids, sig = _pending(lo, hi, sigs)
    depth = _ints(depths, lo, hi)[ids - lo]
    key = depth * (int(sig.max(initial=0)) + 1) + sig
    order = _stable_order(key)      # depth, then signature; ids (ascending) stay in order
    return _split(ids[order], key[order])


def _edges(lo, hi, args, ok):
    """Dependency edges among pending nodes (parameters are always ready), built with
    C-level iteration: no per-edge Python. ok: whether each node is pending, with one more
    entry, False, that inputs outside [lo, hi) are pointed at. Returns the edge lists
    src -> dst in local ids, in consumer order."""
    n = hi - lo
    chunk = args[lo:hi]
    lens = np.fromiter(map(len, chunk), dtype=np.int64, count=n)
    src = np.fromiter(itertools.chain.from_iterable(chunk), dtype=np.int64, count=int(lens.sum())) - lo
    if lo:
        src[src < 0] = n
    dst = np.repeat(np.arange(n, dtype=np.int64), lens)
    keep = ok[src]
    return src[keep], dst[keep]


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


def _unique(a):
    """np.unique of an int array without its per-call overhead: by counting when the values
    are non-negative and their range is small next to their number (level x signature keys:
    a few thousand values for tens of thousands of nodes), else by one sort."""
    if len(a) < 2:
        return a
    top = int(a.max())
    if top <= 4 * len(a) + 4096 and int(a.min()) >= 0:
        return np.flatnonzero(np.bincount(a, minlength=top + 1))
    a = np.sort(a)
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _near_end(lo, sigs, args, uses, sinks, cap):
    """Heights (longest path to a sink) of the nodes within `cap` steps of the end of the
    graph, by a reverse Kahn walk from the sinks that stops after `cap` levels: the
    work is proportional to the end region, not to the graph. Consumer counts come
    from the graph, so a node used by nodes outside [lo, hi) is never a sink."""
    height = {}
    left = {}
    frontier = sinks
    for h in range(cap + 1):
        nxt = []
        for i in frontier:
            height[i] = h
            for a in args[i]:
                if a >= lo and sigs[a] >= 0:
                    r = left.get(a, uses[a]) - 1
                    left[a] = r
                    if r == 0:
                        nxt.append(a)
        frontier = nxt
    return height


def _late_levels(lo, sigs, depths, args, near, count, base, top):
    """As-late-as-possible levels (top - height) for the signatures all of whose pending
    nodes are near the end and line up on fewer levels that way (loss heads of
    sequences of every length), then lifted so that each node sits above its inputs.
    Returns {node: level} for the nodes that moved."""
    by_sig: dict = {}
    for i in near:
        by_sig.setdefault(sigs[i], []).append(i)
    level = {}
    for s, nodes in by_sig.items():
        if len(nodes) == count[s] and \
                len({near[i] for i in nodes}) < len({depths[i] for i in nodes}):
            for i in nodes:
                level[i] = top - near[i]
    if not level:
        return level
    for i in sorted(near):          # consumers of near nodes are near: lift within the region
        li = level.get(i, depths[i] - base)
        for a in args[i]:
            if a >= lo and sigs[a] >= 0:
                la = level.get(a, depths[a] - base)
                if li <= la:
                    li = la + 1
        if li != depths[i] - base:
            level[i] = li
    return level


def _inputs(args, nodes, lo, sig_all):
    """(src, dst) local edge arrays from the pending inputs of `nodes` (local ids) to them:
    work proportional to these nodes, not to the graph."""
    rows = itemgetter(*(nodes + lo).tolist())(args) if len(nodes) > 1 else (args[int(nodes[0]) + lo],)
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(nodes))
    src = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lens.sum())) - lo
    dst = np.repeat(nodes, lens)
    keep = src >= 0
    keep[keep] = sig_all[src[keep]] >= 0
    return src[keep], dst[keep]


def _late_levels_np(lo, args, sig_all, pend, sig, uses, level, top, ns, reach):
    """_near_end + _late_levels with NumPy over the end region, for large forwards: updates
    `level` (local ids, depth - base; top: its highest pending value) in place with the same
    result as the Python versions. `uses` (consumer counts, an array of its own) is used up
    by the walk, which goes `reach` steps from the end. Returns the nodes whose level changed
    and the height of the deepest node put on a late level (-1: none).

    A node's inputs lie further from the end than it does, so with a reach that covers every
    late node the levels are those of the full reach: the nodes beyond it keep their depths
    either way."""
    # heights: reverse Kahn walk from the sinks, `reach` levels deep; every node enters
    # one frontier, so the frontiers are the end region, with no graph-sized height array
    left = uses
    frontier = np.flatnonzero(uses == 0)
    frontier = frontier[sig_all[frontier] >= 0]
    fronts = []
    # the frontiers' input edges, kept for the lift below (gathering them is most of this
    # function's time); the last frontier's inputs need none: they lie more than `reach`
    # steps above a sink, so at a depth below every level a node of the region gets
    edges = []
    for h in range(reach + 1):
        if len(frontier) == 0:
            break
        fronts.append(frontier)
        if h == reach:
            break
        preds, dst = _inputs(args, frontier, lo, sig_all)
        edges.append((preds, dst))
        if len(preds) == 0:
            break
        np.subtract.at(left, preds, 1)              # the region's size, not the graph's
        frontier = _unique(preds[left[preds] == 0])   # a node fed twice appears twice
    if not fronts:
        return pend[:0], -1
    near = np.concatenate(fronts)
    height = np.repeat(np.arange(len(fronts)), [len(f) for f in fronts])
    # signatures all of whose nodes are near and that take fewer levels as late as possible
    s_near, d_near = sig_all[near], level[near]
    count = np.bincount(sig, minlength=ns)
    full = np.bincount(s_near, minlength=ns) == count
    m = int(max(height[-1], d_near.max())) + 1
    n_h = np.bincount(_unique(s_near * m + height) // m, minlength=ns)
    n_d = np.bincount(_unique(s_near * m + d_near) // m, minlength=ns)
    late = (full & (n_h < n_d))[s_near]
    if not late.any():
        return pend[:0], -1
    level[near[late]] = top - height[late]
    # lift every near node above its inputs (longest path within the end region): an input
    # of a node of frontier h is far or in a later frontier, so one pass from the last
    # frontier to the sinks meets every input after its own lift
    for preds, dst in reversed(edges):
        np.maximum.at(level, dst, level[preds] + 1)
    return near[level[near] != d_near], int(height[late].max())


def _agenda(lo, hi, sigs, depths, args, heavy_of_sig, uses, reach=None, found=None):
    """The agenda of ready nodes, run level by level.

    DyNet ranks signatures by the average depth of all their nodes; on Tree-LSTMs and
    stacked LSTMs we measured that rule launching *more* batches than plain depth
    batching, because gates of different steps interleave. Instead every node gets a
    level: its depth (as soon as possible) or, for signatures whose nodes sit near the
    end of the graph and line up on fewer levels that way, its distance from the end
    (as late as possible: the loss heads of sequences of every length then share one
    level). Levels are lifted so that every node sits above its inputs, and each
    (level, signature) group is one batch (should the end region come out in more batches
    than plain depth batching, depth levels are used). All nodes of the lowest pending level are
    always ready, so this is the agenda rule "run the ready signature of lowest
    level", computed without simulating the agenda node by node.

    Cost: one vectorised sort of the pending nodes (like depth batching) plus Python
    work over the end region of the graph only, `reach` steps deep (default _NEAR_END; -1:
    no late levels). found: a list that gets the height of the deepest node that ran late
    (-1: none, or a forward small enough for the plain Python version), the reach that gives
    the same batches."""
    if found is not None:
        found.append(-1)          # replaced below where late nodes are found
    if hi - lo <= _SMALL:
        return _agenda_small(lo, hi, sigs, depths, args, heavy_of_sig, uses)
    sig_all = _ints(sigs, lo, hi)
    pend = np.flatnonzero(sig_all >= 0)
    if len(pend) == 0:
        return []
    depth_all = _ints(depths, lo, hi)
    sig = sig_all[pend]
    depth = depth_all[pend]
    base = int(depth.min())
    level = depth_all - base
    ns = int(sig.max()) + 1
    reach = _NEAR_END if reach is None else reach
    moved, deepest = pend[:0], -1
    if reach >= 0:
        moved, deepest = _late_levels_np(lo, args, sig_all, pend, sig, _ints(uses, lo, hi), level,
                                         int(depth.max()) - base, ns, reach)
    if len(moved) and _more_batches(level, depth_all, pend, sig, sig_all, moved, ns):
        level[moved] = depth_all[moved] - base     # never more batches than depth batching
        deepest = -1
    if found is not None:
        found[-1] = deepest
    heavy = np.array([heavy_of_sig(t) for t in range(ns)], dtype=np.int64)
    key = (level[pend] * 2 + heavy[sig]) * ns + sig   # level, then cheap ops first, then signature
    order = _stable_order(key)            # stable: ids stay ascending in a batch
    return _split(pend[order] + lo, key[order])


def _more_batches(level, depth, pend, sig, sig_all, moved, ns):
    """Whether `level` makes more (level, signature) groups of the pending nodes than `depth`,
    from which it differs at the nodes `moved` only: counted over the nodes of their
    signatures, whose groups alone can differ (the loss heads, not every LSTM gate)."""
    hit = np.zeros(ns, dtype=bool)
    hit[sig_all[moved]] = True
    mine = hit[sig]
    nodes, s = pend[mine], sig[mine]
    return len(_unique(level[nodes] * ns + s)) > len(_unique(depth[nodes] * ns + s))


_PAD_WIDTH = 8   # successor tables wider than this use the ragged gather
_SMALL = 256     # below this many nodes NumPy's per-call overhead outweighs vectorising
_NEAR_END = 6    # as-late-as-possible levels are considered this many steps from the end


def _agenda_small(lo, hi, sigs, depths, args, heavy_of_sig, uses, late=True):
    """The same levels and batches as _agenda, in plain Python: small forwards (one
    sentence at a time, batched_map rounds) must not pay milliseconds of NumPy calls."""
    pend = [i for i in range(lo, hi) if sigs[i] >= 0]
    if not pend:
        return []
    base = min(depths[i] for i in pend)
    top = max(depths[i] for i in pend) - base
    count: dict = {}
    for i in pend:
        count[sigs[i]] = count.get(sigs[i], 0) + 1
    if late:
        near = _near_end(lo, sigs, args, uses, [i for i in pend if uses[i] == 0], _NEAR_END)
        late = _late_levels(lo, sigs, depths, args, near, count, base, top)
    else:
        late = {}
    groups: dict = {}
    for i in pend:
        groups.setdefault((late.get(i, depths[i] - base), sigs[i]), []).append(i)
    if late and len(groups) > len({(depths[i], sigs[i]) for i in pend}):
        return _agenda_small(lo, hi, sigs, depths, args, heavy_of_sig, uses, late=False)
    return [groups[k] for k in sorted(groups, key=lambda k: (k[0], heavy_of_sig(k[1]), k[1]))]


def _dynet_agenda(lo, hi, sigs, depths, args, heavy_of_sig):
    """DyNet's agenda, for comparison: repeatedly run every ready node of the signature
    whose nodes have the lowest average depth (ties: cheap ops first). Simulated batch
    by batch, vectorised within each batch; a batch's ids are ascending.

    The loop is bound by NumPy's per-call overhead (hundreds of batches of a few hundred
    nodes), so it keeps the calls per batch few: successors come from a padded (node,
    k) table (one fancy index instead of a ragged gather), ready nodes are grouped by one
    sort of signature x node keys, and the batches become lists in one conversion."""
    n = hi - lo
    sig_all = _ints(sigs, lo, hi)
    ok = np.empty(n + 1, dtype=bool)
    np.greater_equal(sig_all, 0, out=ok[:n])
    ok[n] = False
    pend = np.flatnonzero(ok[:n])
    if len(pend) == 0:
        return []
    sig = sig_all[pend]
    ns = int(sig.max()) + 1
    count = np.bincount(sig, minlength=ns)
    avg = np.bincount(sig, weights=_ints(depths, lo, hi)[pend], minlength=ns)
    prio = {s: (avg[s] / count[s], heavy_of_sig(s), s) for s in np.flatnonzero(count).tolist()}
    src, dst = _edges(lo, hi, args, ok)
    # waits: each node's pending inputs; node n, the successor tables' padding, never gets ready
    waits = np.append(np.bincount(dst, minlength=n), 1 << 62)
    order = np.argsort(src, kind="stable")
    src, succ = src[order], dst[order]
    deg = np.bincount(src, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=ptr[1:])
    width = int(deg.max(initial=0))
    if width <= _PAD_WIDTH:         # successors as rows of a table padded with node n
        table = np.full((n, max(width, 1)), n, dtype=np.int64)
        table[src, np.arange(len(src)) - ptr[src]] = succ

        def successors(batch):
            return table[batch].ravel()
    else:                           # a node feeds many (one embedding for every word)

        def successors(batch):
            return _ranges(ptr, succ, batch)
    key_all = sig_all * n + np.arange(n, dtype=np.int64)
    ready: dict = {}
    heap: list = []

    def add_ready(nodes):
        key = key_all[nodes]
        if len(key) > 1:
            key.sort()              # by signature, ids ascending within one
            same = key[1:] == key[:-1]
            if same.any():          # a node fed twice by the batch (x * x) came twice
                key = key[np.concatenate(([True], ~same))]
        s0, s1 = int(key[0]) // n, int(key[-1]) // n
        if s0 == s1:                # the common case: one signature became ready
            groups = ((s0, key - s0 * n),)
        else:
            ss = key // n
            cut = (np.flatnonzero(ss[1:] != ss[:-1]) + 1).tolist()
            nodes = key - ss * n
            bounds = [0] + cut + [len(key)]
            groups = [(int(ss[a]), nodes[a:b]) for a, b in zip(bounds, bounds[1:])]
        for s, part in groups:
            if s in ready:
                ready[s].append(part)
            else:
                ready[s] = [part]
                heapq.heappush(heap, prio[s])

    add_ready(pend[waits[pend] == 0])
    out = []
    while heap:
        s = heapq.heappop(heap)[2]
        parts = ready.pop(s)
        batch = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
        out.append(batch)
        nxt = successors(batch)
        if len(nxt):
            # a node's count reaches 0 once: its inputs have all run, none of them can come again
            np.subtract.at(waits, nxt, 1)
            fresh = nxt[waits[nxt] == 0]
            if len(fresh):
                add_ready(fresh)
    flat = (np.concatenate(out) + lo).tolist()
    res, k = [], 0
    for b in out:
        res.append(flat[k:k + len(b)])
        k += len(b)
    return res
