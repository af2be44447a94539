"""The agenda scheduler's two implementations (vectorised for big forwards, plain
Python for small ones) must produce the same plan, and agenda must never launch more
batches than depth batching."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch import scheduler
from autobatch.runtime import Strategy

import numpy as np

from programs import build, chains, dags, make_params, programs, run, trees


def _graph(prog):
    P = make_params(0)
    dy.renew_cg("agenda")
    build(prog, P)
    return dy.cg()


def _plans(g):
    n = g.node_count()
    saved = scheduler._SMALL
    try:
        scheduler._SMALL = -1
        big = scheduler.schedule(Strategy.AGENDA, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig, g.uses)
        scheduler._SMALL = 1 << 30
        small = scheduler.schedule(Strategy.AGENDA, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig, g.uses)
    finally:
        scheduler._SMALL = saved
    depth = scheduler.schedule(Strategy.DEPTH, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig)
    return big, small, depth


def _valid(plan, g):
    """Every pending node exactly once, one signature per batch, inputs first."""
    seen = {}
    for k, batch in enumerate(plan):
        assert len({g.sigs[i] for i in batch}) == 1
        for i in batch:
            assert i not in seen
            seen[i] = k
    for i, k in seen.items():
        for a in g.args[i]:
            assert g.sigs[a] < 0 or seen[a] < k
    assert sorted(seen) == [i for i in range(g.node_count()) if g.sigs[i] >= 0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(chains(), trees(), dags()), min_size=1, max_size=6))
def test_small_and_vectorised_agenda_agree_and_beat_depth(prog):
    g = _graph(prog)
    big, small, depth = _plans(g)
    assert big == small
    assert len(big) <= len(depth)
    _valid(big, g)
    _valid(scheduler.schedule(Strategy.DYNET_AGENDA, 0, g.node_count(), g.sigs, g.depths, g.args,
                              g.heavy_of_sig), g)


def _chain_losses(strategy):
    """In a new graph: a loss at every step of three chains of lengths 3, 5 and 8; their sum."""
    pc = dy.ParameterCollection()
    W, b, V = pc.add_parameters((4, 4)), pc.add_parameters(4), pc.add_parameters((3, 4))
    dy.renew_cg(strategy)
    losses = []
    for length in (3, 5, 8):
        h = dy.inputVector([0.1, 0.2, 0.3, 0.4])
        for t in range(length):
            h = dy.tanh(dy.affine_transform([b, W, h]))
            losses.append(dy.pickneglogsoftmax(V * h, t % 3))
    return dy.esum(losses)


def test_loss_heads_of_different_depths_share_one_batch():
    """Losses at every step of chains of different lengths: depth batching needs one
    loss batch per step; agenda defers them (as-late-as-possible level) into one."""
    for strategy in ("depth", "agenda"):
        _chain_losses(strategy).value()
        sizes = dy.stats()["signatures"]
        loss_batches = [v for k, v in sizes.items() if k.startswith("pickneglogsoftmax")]
        assert len(loss_batches) == 1
        n_batches = len(loss_batches[0])
        if strategy == "depth":
            assert n_batches == 8
        else:
            assert n_batches == 1 and loss_batches[0] == [16]


def test_small_plans_are_kept_by_structure_and_remade_when_it_differs(monkeypatch):
    """A small forward's plan comes from the cache when every column the plan depends on is
    equal; a node consumed after the forward's end (uses) changes the plan, and its key."""
    _chain_losses("agenda")
    g = dy.cg()
    n = g.node_count()
    assert n <= scheduler._SMALL
    scheduler._PLANS.clear()
    made = []
    orig = scheduler._plan
    monkeypatch.setattr(scheduler, "_plan", lambda *a: made.append(1) or orig(*a))

    def plan(uses):
        return scheduler.schedule(Strategy.AGENDA, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig, uses)

    first = plan(g.uses)
    assert first == scheduler._agenda(0, n, g.sigs, g.depths, g.args, g.heavy_of_sig, g.uses)
    assert plan(g.uses) == first and made == [1, 1]      # met again: now kept
    assert plan(list(g.uses)) == first and made == [1, 1]
    used_later = list(g.uses)
    used_later[n - 1] += 1            # the esum feeds a node beyond the forward: no sink, no late levels
    other = plan(used_later)
    assert other == scheduler._agenda(0, n, g.sigs, g.depths, g.args, g.heavy_of_sig, used_later)
    assert other != first
    _valid(first, g)
    _valid(other, g)


def test_plans_of_graphs_up_to_the_cache_size_are_kept_by_structure(monkeypatch):
    """A program that builds a graph per sentence meets the same structures again: a forward
    of more than _SMALL and up to _CACHED nodes takes the plan made for an equal graph, the
    rule a family learnt included; one over _CACHED nodes is planned every time."""
    monkeypatch.setattr(scheduler, "_FAMILIES", {})
    scheduler._PLANS.clear()
    made = []
    orig = scheduler._plan
    monkeypatch.setattr(scheduler, "_plan", lambda *a: made.append(a[1] - a[0]) or orig(*a))
    rng = np.random.default_rng(5)
    P = _chains_params()
    sentences = [[list(rng.integers(0, 30, size=rng.integers(1, 9))) for _ in range(rng.integers(3, 7))]
                 for _ in range(12)]
    first = _count("agenda", lambda: _chars_then_words(P, sentences))
    n = dy.cg().node_count()
    assert scheduler._SMALL < n <= scheduler._CACHED and made == [n]
    # met a second time: planned again and kept (a structure met once costs no key)
    for _ in range(3):
        assert _count("agenda", lambda: _chars_then_words(P, sentences)) == first
    assert made == [n, n]
    _count("agenda", lambda: _chars_then_words(P, sentences[1:]))      # another structure
    assert len(made) == 3
    monkeypatch.setattr(scheduler, "_CACHED", n - 1)
    for _ in range(2):
        assert _count("agenda", lambda: _chars_then_words(P, sentences)) == first
    assert made[3:] == [n, n]


def test_graphs_of_one_signature_list_that_never_repeat_stop_being_keyed(monkeypatch):
    """Leaves first, then a tree of another shape each time: every graph has the signatures of
    the last and other arguments. After _VARIANTS such graphs with no plan reused, the rest of
    the key is no longer made (or kept), and the cache stays within its node budget."""
    scheduler._PLANS.clear()
    monkeypatch.setattr(scheduler, "_plans_nodes", 0)
    monkeypatch.setattr(scheduler, "_PLANS_NODES", 5000)
    monkeypatch.setattr(scheduler, "_VARIANTS", 4)
    rng = np.random.default_rng(2)
    pc = dy.ParameterCollection()
    E, W = pc.add_lookup_parameters((20, 4)), pc.add_parameters((4, 8))
    for it in range(12):
        dy.renew_cg("agenda")
        nodes = [dy.lookup(E, int(rng.integers(20))) for _ in range(40)]
        while len(nodes) > 1:
            k = int(rng.integers(len(nodes) - 1))
            nodes[k:k + 2] = [dy.tanh(W * dy.concatenate(nodes[k:k + 2]))]
        nodes[0].npvalue()
        assert scheduler._plans_nodes <= 5000
    (hits, plans), = scheduler._PLANS.values()
    assert hits == 0 and plans is None
    # a budget met by plans of one signature list empties the cache too
    scheduler._PLANS.clear()
    monkeypatch.setattr(scheduler, "_plans_nodes", 0)
    monkeypatch.setattr(scheduler, "_PLANS_NODES", 250)
    monkeypatch.setattr(scheduler, "_VARIANTS", 100)
    for it in range(6):
        dy.renew_cg("agenda")
        nodes = [dy.lookup(E, it % 20) for _ in range(40)]
        while len(nodes) > 1:
            k = int(rng.integers(len(nodes) - 1))
            nodes[k:k + 2] = [dy.tanh(W * dy.concatenate(nodes[k:k + 2]))]
        nodes[0].npvalue()
        assert scheduler._plans_nodes <= 250


def test_a_few_structures_of_one_signature_list_met_in_turn_keep_their_plans(monkeypatch):
    """Five trees over the same leaves, met again every epoch: from the third epoch on every
    plan is reused (a structure is keyed from its second meeting)."""
    scheduler._PLANS.clear()
    made = []
    orig = scheduler._plan
    monkeypatch.setattr(scheduler, "_plan", lambda *a: made.append(1) or orig(*a))
    rng = np.random.default_rng(4)
    pc = dy.ParameterCollection()
    E, W = pc.add_lookup_parameters((20, 4)), pc.add_parameters((4, 8))
    shapes = [[int(rng.integers(m - 1)) for m in range(40, 1, -1)] for _ in range(5)]
    for epoch in range(4):
        made.clear()
        for cuts in shapes:
            dy.renew_cg("agenda")
            nodes = [dy.lookup(E, k % 20) for k in range(40)]
            for k in cuts:
                nodes[k:k + 2] = [dy.tanh(W * dy.concatenate(nodes[k:k + 2]))]
            nodes[0].npvalue()
        assert epoch < 2 or made == []


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_dynet_rule_gives_the_same_values_and_gradients(prog):
    P = make_params(0)
    v1, g1, _ = run(prog, P, "agenda")
    v2, g2, _ = run(prog, P, "dynet-agenda")
    assert abs(v1 - v2) <= 1e-4 * max(1.0, abs(v1))
    for a, b in zip(g1, g2):
        assert np.allclose(a, b, rtol=1e-4, atol=1e-5)


def _chars_then_words(P, sentences):
    """A word chain over the final states of character chains of words of every length:
    the word steps' inputs end at many different depths."""
    E, Wc, Ww = P
    losses = []
    for words in sentences:
        s = None
        for w in words:
            h = dy.lookup(E, w[0])
            for c in w[1:]:
                h = dy.tanh(Wc * h + dy.lookup(E, c))
            s = h if s is None else dy.tanh(Ww * s + h)
        losses.append(dy.sum_elems(s))
    return dy.esum(losses)


def _chains_params():
    pc = dy.ParameterCollection()
    return pc.add_lookup_parameters((30, 6)), pc.add_parameters((6, 6)), pc.add_parameters((6, 6))


def _count(strategy, build_loss):
    dy.renew_cg(strategy)
    loss = build_loss()
    v = loss.value()
    loss.backward()
    return v, dy.stats()["forward_batches"]


def test_agenda_learns_which_rule_batches_a_kind_of_graph_better(monkeypatch):
    """Levels lose to DyNet's average-depth rule on words over characters; the agenda tries
    both on the first forwards of a kind of graph and keeps the better one."""
    monkeypatch.setattr(scheduler, "_FAMILIES", {})
    rng = np.random.default_rng(0)
    P = _chains_params()
    sentences = [[list(rng.integers(0, 30, size=rng.integers(1, 9))) for _ in range(rng.integers(3, 7))]
                 for _ in range(12)]
    runs = {s: _count(s, lambda: _chars_then_words(P, sentences)) for s in ("depth", "dynet-agenda", "agenda")}
    dy.renew_cg("agenda")
    _chars_then_words(P, sentences)
    g = dy.cg()
    assert g.node_count() > scheduler._SMALL
    # the level rule alone (no family given)
    n_levels = len(scheduler.schedule(Strategy.AGENDA, 0, g.node_count(), g.sigs, g.depths, g.args,
                                      g.heavy_of_sig, g.uses))
    assert runs["dynet-agenda"][1] <= scheduler._DYNET_GAIN * n_levels      # the case this is for
    assert runs["agenda"][1] == runs["dynet-agenda"][1]
    for s in ("depth", "dynet-agenda"):
        np.testing.assert_allclose(runs["agenda"][0], runs[s][0], rtol=1e-5)
    # the last trial, on other sentences: a forward of a structure met before may take its
    # plan from the cache and try nothing
    _count("agenda", lambda: _chars_then_words(P, sentences[::-1]))
    # later forwards of the same kind keep the choice without trying both, also on other
    # sentences (signatures then appear in another order: a one-letter word first, ...)
    calls = []
    orig = scheduler._agenda
    monkeypatch.setattr(scheduler, "_agenda", lambda *a: calls.append(1) or orig(*a))
    for _ in range(3):
        assert _count("agenda", lambda: _chars_then_words(P, sentences))[1] == runs["dynet-agenda"][1]
    for k in range(3):
        other = [[[5]]] + [[[int(c) for c in rng.integers(0, 30, size=1 + (k + j) % 9)]
                            for j in range(rng.integers(3, 7))] for _ in range(11)]
        _count("agenda", lambda: _chars_then_words(P, other))
    assert calls == []


def _forest(P, shapes):
    """Tree-LSTM-like cells (two gates per vertex, a loss at every vertex): DyNet's rule
    interleaves gates of different depths here and launches more batches than levels."""
    E, Wc, Ww = P
    out = []

    def enc(t):
        if isinstance(t, int):
            h = dy.tanh(Wc * dy.lookup(E, t))
        else:
            left, right = enc(t[0]), enc(t[1])
            h = dy.cmult(dy.logistic(Wc * left + Ww * right), dy.tanh(Ww * left + Wc * right))
        out.append(dy.sum_elems(dy.logistic(h)))
        return h
    per_tree = []
    for t in shapes:
        out = []
        enc(t)
        per_tree.append(dy.esum(out))    # an esum of every tree size: signatures vary with the data
    return dy.esum(per_tree)


def _random_tree(rng, n):
    if n == 1:
        return int(rng.integers(0, 30))
    k = int(rng.integers(1, n))
    return (_random_tree(rng, k), _random_tree(rng, n - k))


def test_agenda_keeps_levels_on_trees(monkeypatch):
    monkeypatch.setattr(scheduler, "_FAMILIES", {})
    rng = np.random.default_rng(1)
    P = _chains_params()
    forest = [_random_tree(rng, int(rng.integers(2, 20))) for _ in range(16)]
    dy.renew_cg("agenda")
    _forest(P, forest)
    g = dy.cg()
    n_levels = len(scheduler.schedule(Strategy.AGENDA, 0, g.node_count(), g.sigs, g.depths, g.args,
                                      g.heavy_of_sig, g.uses))
    n_dynet = len(scheduler.schedule(Strategy.DYNET_AGENDA, 0, g.node_count(), g.sigs, g.depths, g.args,
                                     g.heavy_of_sig))
    assert g.node_count() > scheduler._SMALL and n_levels < n_dynet
    assert _count("agenda", lambda: _forest(P, forest))[1] == n_levels
    _count("agenda", lambda: _forest(P, forest[::-1]))      # the last trial (another structure)
    # other forests of the same model (a one-leaf tree first: signatures in another order)
    # keep the choice: no more trials of DyNet's rule
    calls = []
    for name in ("_dynet_agenda", "_by_depth"):
        orig = getattr(scheduler, name)
        monkeypatch.setattr(scheduler, name, lambda *a, orig=orig: calls.append(1) or orig(*a))
    for k in range(3):
        other = [_random_tree(rng, 1)] + [_random_tree(rng, int(rng.integers(2, 20))) for _ in range(15)]
        _count("agenda", lambda: _forest(P, other))
    assert calls == []


def test_later_forwards_walk_only_as_far_from_the_end_as_the_trials_needed(monkeypatch):
    """The trials of a kind of graph find how far from its end the late nodes lie (the loss
    heads of a forest); later forwards walk only that far, with the batches of the
    full walk."""
    monkeypatch.setattr(scheduler, "_FAMILIES", {})
    rng = np.random.default_rng(3)
    P = _chains_params()
    forests = [[_random_tree(rng, int(rng.integers(2, 20))) for _ in range(16)] for _ in range(4)]
    for forest in forests[:2]:                       # the trials
        _count("agenda", lambda: _forest(P, forest))
    reaches = []
    orig = scheduler._late_levels_np
    monkeypatch.setattr(scheduler, "_late_levels_np",
                        lambda *a: reaches.append(a[-1]) or orig(*a))
    for forest in forests[2:]:
        dy.renew_cg("agenda")
        _forest(P, forest)
        g = dy.cg()
        args = (0, g.node_count(), g.sigs, g.depths, g.args, g.heavy_of_sig, g.uses)
        plan = scheduler.schedule(Strategy.AGENDA, *args, g.family_key)
        reach = reaches[-1]
        assert 0 < reach < scheduler._NEAR_END
        full = scheduler._agenda(*args)
        assert reaches[-1] == scheduler._NEAR_END
        assert plan == full
        # the reach is no further than needed: one step less, the deepest late nodes stay put
        assert len(full) < len(scheduler._agenda(*args, reach - 1)) <= len(scheduler._agenda(*args, -1))


def test_a_forward_of_parameters_only_has_nothing_to_schedule(monkeypatch):
    """A forward over more than _SMALL nodes that are all parameters (nothing to compute) is an
    empty plan for every rule, the trials of its kind of graph included."""
    monkeypatch.setattr(scheduler, "_FAMILIES", {})
    pc = dy.ParameterCollection()
    ps = [pc.add_parameters((2,)) for _ in range(scheduler._SMALL + 20)]
    for _ in range(3):
        dy.renew_cg("agenda")
        es = [dy.parameter(p) for p in ps]
        np.testing.assert_array_equal(es[-1].value(), ps[-1].as_array())
        np.testing.assert_allclose(dy.esum(es[:5]).value(), sum(p.as_array() for p in ps[:5]), rtol=1e-6)


def _complete(rng, leaves):
    return int(rng.integers(0, 30)) if leaves == 1 else (_complete(rng, leaves // 2), _complete(rng, leaves // 2))


def _fc_forest(P, shapes):
    """Tree-FC: one layer per vertex, a loss at the root only."""
    E, Wc, Ww = P

    def enc(t):
        if isinstance(t, int):
            return dy.lookup(E, t)
        return dy.tanh(Wc * enc(t[0]) + Ww * enc(t[1]))
    return dy.esum([dy.sum_elems(enc(t)) for t in shapes])


def test_agenda_takes_depth_order_where_it_batches_as_well(monkeypatch):
    """Trees of one shape (Tree-FC's complete trees): depth order launches as few batches as
    the level rule and costs less to compute, so the agenda keeps it for that kind of graph,
    with the same values as the other rules."""
    monkeypatch.setattr(scheduler, "_FAMILIES", {})
    rng = np.random.default_rng(2)
    P = _chains_params()
    forest = [_complete(rng, 16) for _ in range(12)]
    runs = {s: _count(s, lambda: _fc_forest(P, forest)) for s in ("depth", "agenda")}
    assert runs["agenda"][1] == runs["depth"][1]
    _count("agenda", lambda: _fc_forest(P, forest[::-1]))      # the last trial (another structure)
    calls = []
    monkeypatch.setattr(scheduler, "_agenda", lambda *a: calls.append(1))
    monkeypatch.setattr(scheduler, "_dynet_agenda", lambda *a: calls.append(1))
    other = [_complete(rng, 16) for _ in range(12)]
    v, nb = _count("agenda", lambda: _fc_forest(P, other))
    assert calls == [] and nb == _count("depth", lambda: _fc_forest(P, other))[1]
    np.testing.assert_allclose(v, _count("depth", lambda: _fc_forest(P, other))[0], rtol=1e-6)
    np.testing.assert_allclose(runs["agenda"][0], runs["depth"][0], rtol=1e-6)


def test_batch_count_check_reads_only_the_moved_signatures_and_agrees_with_a_full_count():
    """Whether the late levels make more batches than depth levels is counted over the
    signatures of the moved nodes only (not every LSTM gate of the graph); the answer must
    be the full count's, also where a moved node shares its signature with nodes that did
    not move, and with levels that are depths less their minimum."""
    def full(level, depth, pend, sig, ns):
        return len(np.unique(level[pend] * ns + sig)) > len(np.unique(depth[pend] * ns + sig))

    # node 1 moves away from node 0's level: one more batch, seen only by counting node 0 too
    sig_all, depth = np.array([0, 0, 1]), np.array([3, 3, 4])
    level, pend, moved = depth - 3, np.arange(3), np.array([1])
    level[1] = 2
    assert scheduler._more_batches(level, depth, pend, sig_all, sig_all, moved, 2)
    rng = np.random.default_rng(0)
    for _ in range(300):
        sig_all = rng.integers(-1, 5, 40)
        pend = np.flatnonzero(sig_all >= 0)
        sig, ns = sig_all[pend], int(sig_all.max()) + 1
        depth = rng.integers(2, 8, 40)
        level = depth - 2
        moved = rng.choice(pend, size=min(len(pend), int(rng.integers(1, 5))), replace=False)
        level[moved] += rng.integers(1, 4, len(moved))
        assert scheduler._more_batches(level, depth, pend, sig, sig_all, moved, ns) == \
            full(level, depth, pend, sig, ns)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1, 2 ** 40), max_size=300), st.data())
def test_ints_reads_a_column_range_into_a_writable_int64_array(xs, data):
    """Graph columns (signatures with -1, depths, consumer counts) become int64 arrays for the
    whole column and for a later forward's range; the walk to the graph's end counts down
    in the consumer-count array, so it must be writable."""
    lo = data.draw(st.integers(0, len(xs)))
    hi = data.draw(st.integers(lo, len(xs)))
    for a, b in ((0, len(xs)), (lo, hi)):
        got = scheduler._ints(xs, a, b)
        assert got.dtype == np.int64 and got.flags.writeable
        np.testing.assert_array_equal(got, np.array(xs[a:b], dtype=np.int64))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-3, 10 ** 6), max_size=300), st.integers(0, 2))
def test_unique_by_counting_or_sorting_matches_numpy(xs, spread):
    """Level x signature keys are deduplicated by counting when their range is small; any
    other input (wide range, negatives) must give np.unique's answer too."""
    keys = np.array(xs, dtype=np.int64) // (1, 100, 10 ** 4)[spread]
    np.testing.assert_array_equal(scheduler._unique(keys), np.unique(keys))



@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-3, 10 ** 6), max_size=300), st.integers(0, 3))
def test_stable_order_matches_numpy_stable_argsort(xs, spread):
    """Batch keys are sorted by radix sort when they fit 16 bits, by rank when their distinct
    values do, else by NumPy's stable sort: each must keep equal keys in id order."""
    keys = np.array(xs, dtype=np.int64) // (1, 100, 10 ** 4, 10 ** 6)[spread]
    if spread == 0 and len(keys) > 1:
        keys[1:] %= 3             # many ties, so that stability is tested
    np.testing.assert_array_equal(scheduler._stable_order(keys), np.argsort(keys, kind="stable"))
    if len(keys) and keys.min() >= 0 and keys.max() >= 1 << 16:     # rank path vs plain path
        saved = scheduler._unique
        try:
            scheduler._unique = lambda a: np.arange(1 << 16)    # too many distinct values
            np.testing.assert_array_equal(scheduler._stable_order(keys), np.argsort(keys, kind="stable"))
        finally:
            scheduler._unique = saved

def _dynet_rule_by_hand(lo, hi, sigs, depths, args, heavy_of_sig):
    """DyNet's agenda node by node, the way its paper states it: run every ready node of the
    ready signature with the lowest average depth (ties: cheap first, then signature)."""
    pend = [i for i in range(lo, hi) if sigs[i] >= 0]
    total: dict = {}
    for i in pend:
        total.setdefault(sigs[i], []).append(depths[i])
    prio = {s: (sum(d) / len(d), heavy_of_sig(s), s) for s, d in total.items()}
    feeds = {i: [] for i in pend}
    waits = {i: 0 for i in pend}
    for i in pend:
        for a in args[i]:
            if a >= lo and sigs[a] >= 0:    # every use counts: x * x waits for x twice
                feeds[a].append(i)
                waits[i] += 1
    ready = {i for i in pend if waits[i] == 0}
    plan = []
    while ready:
        s = min({sigs[i] for i in ready}, key=prio.__getitem__)
        batch = sorted(i for i in ready if sigs[i] == s)
        ready.difference_update(batch)
        plan.append(batch)
        for i in batch:
            for c in feeds[i]:
                waits[c] -= 1
                if waits[c] == 0:
                    ready.add(c)
    return plan


@st.composite
def _raw_graphs(draw):
    """Random DAGs straight in the scheduler's columns: parameters (signature -1), nodes fed
    twice by one input, hubs with more consumers than the successor table is wide, and a
    range [lo, hi) that starts after already computed nodes."""
    n = draw(st.integers(1, 60))
    sigs, depths, args = [], [], []
    for i in range(n):
        if i == 0 or draw(st.integers(0, 9)) == 0:
            sigs.append(-1)
            args.append(())
            depths.append(0)
            continue
        hub = draw(st.booleans())
        k = draw(st.integers(1, 3))
        a = tuple(0 if hub else draw(st.integers(0, i - 1)) for _ in range(k))
        if draw(st.booleans()):
            a = a + a[:1]
        args.append(a)
        sigs.append(draw(st.integers(0, 4)))
        depths.append(1 + max(depths[j] for j in a))
    lo = draw(st.integers(0, n - 1))
    return lo, n, sigs, depths, args


@settings(max_examples=150, deadline=None)
@given(_raw_graphs(), st.sampled_from([0, 1, 8]))
def test_dynet_rule_matches_the_rule_run_node_by_node(graph, pad_width):
    lo, hi, sigs, depths, args = graph
    heavy = lambda s: s % 2                      # noqa: E731
    saved = scheduler._PAD_WIDTH
    try:
        scheduler._PAD_WIDTH = pad_width         # 0: always the ragged gather
        plan = scheduler._dynet_agenda(lo, hi, sigs, depths, args, heavy)
    finally:
        scheduler._PAD_WIDTH = saved
    assert plan == _dynet_rule_by_hand(lo, hi, sigs, depths, args, heavy)


@settings(max_examples=300, deadline=None)
@given(_raw_graphs())
def test_small_and_vectorised_agenda_agree_on_raw_graphs(graph):
    """Random DAGs give end regions that model programs do not (late nodes deep in the region,
    inputs computed before lo or shared by many): the vectorised lift, which reads only the
    edges gathered by the walk from the sinks, must still match the node-by-node one."""
    lo, hi, sigs, depths, args = graph
    plans = []
    saved = scheduler._SMALL
    try:
        for small in (-1, 1 << 30):
            scheduler._SMALL = small
            plans.append(scheduler.schedule(Strategy.AGENDA, lo, hi, sigs, depths, args, lambda s: s % 2 == 0))
    finally:
        scheduler._SMALL = saved
    assert plans[0] == plans[1]
