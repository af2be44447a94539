"""What gets batched: counts from dy.stats() and the executor's batch records, never times."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import autobatch as dy
from autobatch.ops.base import OPS, Op
from autobatch.runtime import Strategy
from autobatch.scheduler import schedule

from programs import build, make_params, programs

HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.fixture
def m():
    dy.reset_random_seed(3)
    model = dy.Model()
    return {"W": model.add_parameters((3, 3)), "U": model.add_parameters((3, 3)),
            "b": model.add_parameters(3), "E": model.add_lookup_parameters((7, 3)),
            "O": model.add_parameters((4, 3))}


def _sequences(m, lengths):
    losses = []
    for n in lengths:
        h = dy.zeros(3)
        for t in range(n):
            h = dy.tanh(m["W"] * h + m["E"][t % 7] + m["b"])
        losses.append(dy.pickneglogsoftmax(m["O"] * h, n % 4))
    return dy.esum(losses)


def _tree(m, depth, k):
    if depth == 0:
        return dy.lookup(m["E"], k % 7)
    left, right = _tree(m, depth - 1, 2 * k), _tree(m, depth - 1, 2 * k + 1)
    return dy.tanh(dy.affine_transform([m["b"], m["W"], left, m["U"], right]))


def _trees(m, depths):
    return dy.esum([dy.sum_elems(_tree(m, d, i)) for i, d in enumerate(depths)])


def _run(strategy, make):
    dy.renew_cg(autobatching=strategy)
    loss = make()
    loss.value()
    loss.backward()
    return dy.stats()


@pytest.mark.parametrize("make", [
    lambda m: _sequences(m, [3, 5, 4, 2, 6, 5]),
    lambda m: _trees(m, [1, 3, 2, 3, 2]),
], ids=["sequences", "trees"])
def test_agenda_and_depth_launch_fewer_batches_than_none(m, make):
    s = {k: _run(k, lambda: make(m)) for k in ("none", "depth", "agenda")}
    n = s["none"]["forward_nodes"]
    assert s["none"]["forward_batches"] == n          # none: one batch per node
    assert s["depth"]["forward_nodes"] == s["agenda"]["forward_nodes"] == n
    assert s["agenda"]["forward_batches"] < n / 2
    assert s["depth"]["forward_batches"] < n / 2
    assert s["agenda"]["backward_batches"] < s["none"]["backward_batches"]


def test_depth_batches_are_one_signature_and_one_depth(m):
    dy.renew_cg(autobatching="depth")
    loss = _trees(m, [3, 1, 2, 3])
    loss.value()
    g = dy.cg()
    assert g.exe.batches
    for b in g.exe.batches:
        assert len({g.depths[i] for i in b.ids}) == 1
        assert len({g.sigs[i] for i in b.ids}) == 1
    # and nodes of equal depth and signature land in the same batch
    seen = {}
    for k, b in enumerate(g.exe.batches):
        for i in b.ids:
            seen[i] = k
    groups = {}
    for i, k in seen.items():
        groups.setdefault((g.depths[i], g.sigs[i]), set()).add(k)
    assert all(len(v) == 1 for v in groups.values()), groups


@pytest.mark.parametrize("strategy", ["depth", "agenda"])
def test_shared_matmul_of_n_instances_is_one_batch_per_step(m, strategy):
    N, L = 7, 5
    _run(strategy, lambda: _sequences(m, [L] * N))
    sizes = dy.stats()["signatures"]
    mm = [v for k, v in sizes.items() if k.startswith("matmul_shared")]
    # W*h: one batch of N per time step; O*h: one batch of N
    assert sorted(map(sorted, mm)) == sorted([[N] * L, [N]]), sizes
    tanh = [v for k, v in sizes.items() if k.startswith("tanh")]
    assert tanh == [[N] * L]


def test_affine_tree_levels_batch_across_trees(m):
    _run("agenda", lambda: _trees(m, [3, 3, 3]))
    aff = [v for k, v in dy.stats()["signatures"].items() if k.startswith("affine")]
    # full binary trees of depth 3: 4, 2, 1 internal nodes per level, times 3 trees
    assert aff == [[12, 6, 3]]


def test_contiguous_inputs_are_not_copied(m):
    dy.renew_cg(autobatching="agenda")
    xs = [dy.lookup(m["E"], i) for i in (0, 3, 3, 5)]
    ys = [dy.tanh(x) for x in xs]          # inputs lie in the lookup block, in order
    dy.esum(ys).value()
    s = dy.stats()
    assert s["copies_done"] == 0, s
    assert s["copies_skipped"] >= 1
    tanh_batch = [b for b in dy.cg().exe.batches if b.op.name == "tanh"][0]
    assert len(tanh_batch.ids) == 4 and tanh_batch.ins[0][0] == "view"


def test_out_of_order_inputs_are_gathered(m):
    dy.renew_cg(autobatching="agenda")
    xs = [dy.lookup(m["E"], i) for i in (0, 3, 3, 5)]
    # the cmult batch reads the lookup block forwards for one input and backwards for
    # the other: whatever order the batch takes, one input needs a gather
    zs = [dy.cmult(xs[k], xs[3 - k]) for k in range(4)]
    dy.esum(zs).value()
    batch = [b for b in dy.cg().exe.batches if b.op.name == "cmult"][0]
    assert len(batch.ids) == 4
    kinds = [info[0] for info in batch.ins]
    assert "gather" in kinds, kinds
    assert dy.stats()["copies_done"] == kinds.count("gather")
    E = m["E"].as_array()[[0, 3, 3, 5]]
    for k, z in enumerate(zs):
        np.testing.assert_allclose(z.npvalue(), E[k] * E[3 - k], rtol=1e-6)


def _interleaved(m, strategy):
    """tanh over the outputs of two batches (W·x then U·x), in node order a0 b0 a1 b1 ...:
    returns (the tanh batch's input kinds, loss, gradients of W, U, E)."""
    dy.renew_cg(autobatching=strategy)
    for p in (m["W"], m["U"], m["E"]):
        p.zero_grad()
    xs = [dy.lookup(m["E"], i) for i in (0, 3, 5)]
    a = [m["W"] * x for x in xs]
    b = [m["U"] * x for x in xs]
    ts = [dy.tanh(v) for pair in zip(a, b) for v in pair]
    loss = dy.sum_elems(dy.esum([dy.cmult(t, t) * (k + 1.0) for k, t in enumerate(ts)]))
    loss.backward()
    batch = [bt for bt in dy.cg().exe.batches if getattr(bt, "op", None) is not None and bt.op.name == "tanh"]
    kinds = [info[0] for bt in batch for info in bt.ins]
    return kinds, loss.value(), [p.grad_as_array().copy() for p in (m["W"], m["U"], m["E"])]


def test_a_block_read_in_another_order_becomes_a_view(m):
    kinds, loss, grads = _interleaved(m, "agenda")
    # the batch takes its nodes in the order their inputs lie: a0 a1 a2 b0 b1 b2
    assert kinds == ["view"], kinds
    _, loss0, grads0 = _interleaved(m, "none")
    np.testing.assert_allclose(loss, loss0, rtol=1e-6)
    for g, g0 in zip(grads, grads0):
        np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-7)


def _check_stats(s, g):
    assert s["nodes"] == g.node_count()
    computed = [i for i in range(g.node_count()) if g.sigs[i] >= 0 and g.exe.offs[i] >= 0]
    assert s["forward_nodes"] == len(computed)
    sizes = s["signatures"]
    # nodes that are views of their inputs' memory run no kernel and join no batch
    assert sum(sum(v) for v in sizes.values()) + s["view_nodes"] == s["forward_nodes"]
    assert sum(len(v) for v in sizes.values()) == s["forward_batches"]
    assert all(b >= 1 for v in sizes.values() for b in v)
    for k in ("forward_batches", "backward_batches", "copies_done", "copies_skipped",
              "forward_calls", "backward_calls", "build_s", "schedule_s", "forward_s", "backward_s"):
        assert s[k] >= 0, k
    assert s["backward_batches"] <= s["forward_batches"]


def test_stats_fields_before_and_after(m):
    dy.renew_cg()
    s = dy.stats()
    assert s["nodes"] == 0 and s["forward_nodes"] == 0 and s["forward_batches"] == 0
    assert s["strategy"] == "agenda"
    loss = _sequences(m, [2, 3])
    loss.backward()
    _check_stats(dy.stats(), dy.cg())
    assert dy.stats()["backward_calls"] == 1 and dy.stats()["forward_calls"] >= 1
    assert "strategy agenda" in dy.stats_summary(dy.stats())


@settings(max_examples=40, deadline=None, suppress_health_check=HC)
@given(prog=programs)
def test_stats_consistent_on_random_programs(prog):
    P = _P()
    for strategy in ("none", "depth", "agenda"):
        dy.renew_cg(autobatching=strategy)
        loss = build(prog, P)
        loss.backward()
        _check_stats(dy.stats(), dy.cg())


_PCACHE = {}


def _P():
    if "P" not in _PCACHE:
        _PCACHE["P"] = make_params(2)
    return _PCACHE["P"]


@settings(max_examples=60, deadline=None, suppress_health_check=HC)
@given(prog=programs)
def test_schedules_are_valid_partitions(prog):
    """Every strategy's plan covers each pending node once, one signature per batch,
    and runs every node after its arguments."""
    dy.renew_cg()
    build(prog, _P())
    g = dy.cg()
    n = g.node_count()
    want = sorted(i for i in range(n) if g.sigs[i] >= 0)
    for strategy in Strategy:
        plan = schedule(strategy, 0, n, g.sigs, g.depths, g.args, g.heavy_of_sig)
        assert sorted(i for b in plan for i in b) == want
        pos = {}
        for k, b in enumerate(plan):
            assert len({g.sigs[i] for i in b}) == 1
            for i in b:
                pos[i] = k
        for i in want:
            for a in g.args[i]:
                if g.sigs[a] >= 0:
                    assert pos[a] < pos[i], (strategy, a, i)
        if strategy is Strategy.NONE:
            assert len(plan) == len(want)
        else:
            assert len(plan) <= len(want)


class _Alone(Op):
    """A non-batchable op whose inputs are all shared (like vertex_call); not registered."""
    name = "test_alone"
    batchable = False
    has_data = True

    def shared_of(self, n):
        return tuple(range(n))

    def shape(self, shapes, attr):
        return shapes[0]

    def forward(self, xp, xs, attr, data):
        assert len(data) == 1, "a non-batchable op got a batch"
        return (xs[0] * data[0])[None]

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy[0] * data[0]]


@pytest.mark.parametrize("strategy", ["depth", "agenda"])
def test_non_batchable_op_with_shared_inputs_runs_alone(m, strategy):
    """Regression: equal shared inputs must not give a non-batchable op one signature."""
    g = dy.renew_cg(autobatching=strategy)
    x = dy.tanh(dy.inputVector([1.0, 2.0, 3.0]))
    ys = [g.add(_Alone(), (x.i,), None, float(k)) for k in (1, 2, 3)]
    assert len({g.sigs[y.i] for y in ys}) == 3
    for k, y in zip((1, 2, 3), ys):
        np.testing.assert_allclose(y.npvalue(), k * np.tanh([1.0, 2.0, 3.0]), rtol=1e-6)


def test_evenly_spaced_sources_are_strided_views_with_the_same_gradients(f64, m):
    """In a complete tree, the left (right) children of a level lie every other row of the
    level below: the executor reads them as a strided view instead of gathering, and
    backward adds into the same view. Values and gradients equal unbatched execution."""
    def run(strategy):
        for p in (m["W"], m["U"], m["b"], m["E"]):
            p.zero_grad()
        dy.renew_cg(strategy)
        loss = dy.esum([dy.pickneglogsoftmax(m["O"] * _tree(m, 3, k), k % 4) for k in range(3)])
        v = loss.value()
        loss.backward()
        return v, [p.grad_as_array().copy() for p in (m["W"], m["U"], m["b"], m["E"])]
    v0, g0 = run("none")
    v1, g1 = run("agenda")
    kinds = [info[0] for b in dy.cg().exe.batches for info in b.ins if info is not None]
    assert "strided" in kinds
    np.testing.assert_allclose(v1, v0, rtol=1e-12)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_batch_of_wide_sums_is_one_gather_with_the_same_gradients(f64, m):
    """Per-instance sums of many terms (same arity: one batch) gather all their inputs in
    one copy; a term used by two sums and twice by one sum still gets all its gradient."""
    def run(strategy):
        for p in (m["W"], m["b"], m["E"]):
            p.zero_grad()
        dy.renew_cg(strategy)
        shared = dy.tanh(m["W"] * m["E"][0] + m["b"])
        sums = []
        for k in range(3):
            terms = [dy.tanh(m["W"] * m["E"][(k + j) % 7]) for j in range(5)] + [shared, shared]
            sums.append(dy.sum_elems(dy.esum(terms)) * (k + 1))
        loss = dy.esum(sums)
        v = loss.value()
        loss.backward()
        return v, [p.grad_as_array().copy() for p in (m["W"], m["b"], m["E"])]
    v0, g0 = run("none")
    v1, g1 = run("agenda")
    wide = [b for b in dy.cg().exe.batches if b.wide]
    assert any(len(b.ids) == 3 for b in wide)
    assert all(len(b.ins) == 1 and b.ins[0][0] == "gather" for b in wide if len(b.ids) == 3)
    np.testing.assert_allclose(v1, v0, rtol=1e-12)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def _as_chain(wide):
    """wide (esum or average) of terms written as a chain of two-input adds."""
    def chain(terms):
        y = terms[0]
        for t in terms[1:]:
            y = y + t
        return y if wide is dy.esum else y * (1.0 / len(terms))
    return chain


def _value_and_grads(m, strategy, build_loss):
    """The loss build_loss() makes in a fresh graph, and the gradients it gives W, b and E."""
    for p in (m["W"], m["b"], m["E"]):
        p.zero_grad()
    dy.renew_cg(strategy)
    loss = build_loss()
    v = loss.value()
    loss.backward()
    return v, [p.grad_as_array().copy() for p in (m["W"], m["b"], m["E"])]


def _same(got, want):
    """(value, gradients) pairs agree."""
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("wide", [dy.esum, dy.average])
def test_batch_of_wide_sums_runs_one_kernel_over_the_stacked_block(f64, m, wide):
    """A batch of wide sums (or averages) hands the op all its inputs as the one (B, n, *shape)
    block it gathered (Op.forward_stacked: one sum over an axis instead of n adds), with the
    values and gradients of the same sums written as chains of two-input adds."""
    def run(fn):
        def loss():
            sums = []
            for k in range(3):
                terms = [dy.tanh(m["W"] * m["E"][(k + j) % 7] + m["b"]) for j in range(6)]
                sums.append(dy.sum_elems(fn(terms)) * (k + 1))
            return dy.esum(sums[:2]) + sums[2]
        return _value_and_grads(m, "agenda", loss)

    v1, g1 = run(wide)
    stacked = [b for b in dy.cg().exe.batches if b.wide]
    assert stacked and all(len(b.xs) == 1 and b.xs[0].shape == (3, 6, 3) for b in stacked)
    v0, g0 = run(_as_chain(wide))
    _same((v1, g1), (v0, g0))


@pytest.mark.parametrize("name", sorted(n for n, op in OPS.items() if op.has_stacked))
def test_forward_stacked_equals_forward_over_the_inputs(name):
    """forward_stacked and backward_stacked over a (B, n, *shape) block give what forward and
    backward give over its n inputs."""
    op = OPS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6, 4))
    xs = [x[:, k] for k in range(6)]
    want = op.forward(np, xs, None, None)
    out = np.empty((3, 4))
    op.forward_stacked(np, x, None, None, out)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    gy = rng.standard_normal((3, 4))
    np.testing.assert_allclose(op.backward_stacked(np, x, out, gy, None, None),
                               np.stack(op.backward(np, xs, want, gy, None, None), axis=1), rtol=1e-12)


@pytest.mark.parametrize("wide", [dy.esum, dy.average])
def test_wide_sums_of_every_arity_are_one_batch(f64, m, wide):
    """Wide sums (or averages) of one input shape batch whatever their number of inputs (the
    per-instance esum of the losses of sentences of every length): one batch, one gather of
    every node's inputs in turn, values and gradients of the same sums as chains of two-input
    adds; a term used by two sums and twice by one, and a parameter term, get all their
    gradient."""
    arities = (5, 9, 6, 7)

    def run(fn, strategy="agenda"):
        def loss():
            shared = dy.tanh(m["W"] * m["E"][0] + m["b"])
            sums = []
            for k, n in enumerate(arities):
                terms = [dy.tanh(m["W"] * m["E"][(k + j) % 7] + m["b"]) for j in range(n - 2)]
                terms += [shared, shared] if k != 2 else [shared, dy.parameter(m["b"])]
                sums.append(dy.sum_elems(fn(terms)) * (k + 1))
            return dy.esum(sums[:3]) + sums[3]
        return _value_and_grads(m, strategy, loss)

    v1, g1 = run(wide)
    batches = [b for b in dy.cg().exe.batches if b.wide]
    assert [b.wide for b in batches] == [list(arities)]
    assert batches[0].xs[0].shape == (sum(arities), 3)
    # one copy of every node's inputs (a parameter among them: stacked from their values)
    assert len(batches[0].ins) == 1 and batches[0].ins[0][0] == "ext"
    v0, g0 = run(_as_chain(wide))
    for strategy in ("depth", "none"):
        _same(run(wide, strategy), (v0, g0))
    _same((v1, g1), (v0, g0))


def test_only_wide_nodes_of_one_input_shape_leave_the_arity_out_of_their_signature():
    """Sums of more than four inputs of one shape share a signature whatever their arity; sums
    of other shapes, narrower sums and averages keep their own."""
    dy.renew_cg("agenda")
    x, y = dy.inputVector([1.0, 2.0]), dy.inputVector([3.0])
    sig = dy.cg().sigs
    s5, s9 = dy.esum([x] * 5), dy.esum([x] * 9)
    assert sig[s5.i] == sig[s9.i]
    assert sig[dy.esum([y] * 5).i] != sig[s5.i]                 # another shape
    assert sig[dy.esum([x] * 4).i] not in (sig[s5.i], sig[dy.esum([x] * 3).i])   # not wide
    assert sig[dy.average([x] * 7).i] != sig[s5.i]


@pytest.mark.parametrize("name", sorted(n for n, op in OPS.items() if op.has_ragged))
def test_forward_ragged_equals_forward_per_node(name):
    """forward_ragged and backward_ragged over an (N, *shape) block of nodes of several
    arities give what forward and backward give node by node; such an op is also stacked."""
    op = OPS[name]
    assert op.has_stacked
    rng = np.random.default_rng(0)
    counts = [5, 1, 8, 6]
    x = rng.standard_normal((sum(counts), 4))
    nodes = np.split(x, np.cumsum(counts)[:-1])
    want = np.stack([op.forward(np, list(xs[:, None]), None, None)[0] for xs in nodes])
    out = np.empty((len(counts), 4))
    op.forward_ragged(np, x, counts, None, None, out)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    gy = rng.standard_normal((len(counts), 4))
    per_node = [np.concatenate(op.backward(np, list(xs[:, None]), want[k:k + 1], gy[k:k + 1], None, None))
                for k, xs in enumerate(nodes)]
    np.testing.assert_allclose(op.backward_ragged(np, x, out, gy, counts, None, None),
                               np.concatenate(per_node), rtol=1e-12)


def test_ragged_sums_take_one_scatter_where_the_array_module_is_not_numpy(monkeypatch):
    """CuPy's path of ragged_sums (cupyx.scatter_add, as older CuPy has no reduceat), with
    NumPy standing in for cupy and cupyx, gives reduceat's sums."""
    import sys
    import types
    from autobatch.ops.base import ragged_sums
    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(scatter_add=np.add.at))
    xp = types.SimpleNamespace(__name__="cupy", repeat=np.repeat, arange=np.arange, asarray=np.asarray,
                               zeros=np.zeros)
    counts = [5, 1, 8, 6]
    x = np.random.default_rng(1).standard_normal((sum(counts), 3))
    want, got = ragged_sums(np, x, counts), ragged_sums(xp, x, counts)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(want, [p.sum(axis=0) for p in np.split(x, np.cumsum(counts)[:-1])], rtol=1e-12)


@pytest.mark.parametrize("strategy", ["none", "agenda"])
def test_wide_sum_of_one_parameter_repeated(strategy):
    """A wide sum whose inputs are all the same parameter (a broadcast, not a gather): its
    gradient is the sum over every use, for one such node and for a batch of them."""
    m = dy.ParameterCollection()
    p = m.add_parameters(3)
    dy.renew_cg(strategy)
    loss = dy.esum([dy.sum_elems(dy.esum([p] * 5)) * (k + 1) for k in range(2)])
    loss.backward()
    np.testing.assert_allclose(p.grad_as_array(), np.full(3, 15.0))


def test_a_node_read_by_every_node_of_a_batch_gets_their_gradients_summed(f64, m):
    """Attention's query dotted with every key: one dot_product batch reads the query's
    block once per key, so backward adds the keys' gradients into one block many times
    over (a scatter with repeated rows)."""
    def build_loss():
        losses = []
        for n in (3, 5, 4):
            keys = [dy.tanh(m["W"] * m["E"][(t + n) % 7] + m["b"]) for t in range(n)]
            q = dy.tanh(m["W"] * keys[-1])
            scores = dy.concatenate([dy.dot_product(q, k) for k in keys])
            losses.append(dy.pickneglogsoftmax(scores, 0))
        return dy.esum(losses)

    want = _value_and_grads(m, "none", build_loss)
    _same(_value_and_grads(m, "agenda", build_loss), want)
    # the batch of all 12 dot products gathered its queries: three blocks, each repeated
    dots = [b for b in dy.cg().exe.batches if getattr(b, "op", None) is OPS["dot_product"]]
    assert [len(b.ids) for b in dots] == [12]
    kind, srcs, _ = dots[0].ins[0]
    assert kind == "gather" and len(set(srcs)) == 3


def test_a_parameter_read_by_one_node_is_a_read_only_view_of_it():
    """score + b in a graph of one sentence: b's value goes to the kernel as a view (no copy),
    read-only as the broadcast of a parameter read by many nodes is, so no kernel can write
    into a parameter."""
    pc = dy.ParameterCollection()
    p = pc.add_parameters(5, init=dy.ConstInitializer(1.5))
    for n in (1, 3):
        dy.renew_cg()
        x = dy.parameter(p)
        ys = [dy.inputVector([float(k)] * 5) + x for k in range(n)]
        dy.forward(ys)                                      # one forward: the adds are one batch
        assert [y.value() for y in ys] == [[1.5 + k] * 5 for k in range(n)]
        adds = [b for b in dy.cg().exe.batches if getattr(b, "op", None) is OPS["add"]]
        assert [len(b.ids) for b in adds] == [n]
        (view,) = [x for x, info in zip(adds[0].xs, adds[0].ins) if info[0] == "bcast"]
        assert view.shape == (n, 5) and not view.flags.writeable and np.shares_memory(view, p.data)
