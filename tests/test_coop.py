"""batched_map: per-instance code with mid-way value reads, batched across instances.

The reference is always the plain loop ``[fn(x) for x in items]`` in a fresh graph:
batched_map must give the same reads, results, loss and gradients under every
strategy, raise what the loop raises, never hang, and need far fewer forwards."""
from __future__ import annotations

import threading
import traceback

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch.errors import AutobatchError
from autobatch.ops import OPS

STRATEGIES = ["none", "depth", "agenda"]
H = 3


def make_params(seed=0):
    dy.reset_random_seed(seed)
    m = dy.ParameterCollection()
    P = {"W": [m.add_parameters((H, H), init=dy.UniformInitializer(0.9)) for _ in range(2)],
         "b": m.add_parameters(H, init=dy.UniformInitializer(0.5)),
         "E": m.add_lookup_parameters((4, H), init=dy.UniformInitializer(0.8))}
    P["all"] = m.parameters_list() + m.lookup_parameters_list()
    return P


def bounded(f, timeout=60):
    """Run f() in a helper thread; fail (instead of hanging the suite) if it deadlocks."""
    box = {}

    def target():
        try:
            box["value"] = f()
        except BaseException as e:  # noqa: BLE001
            box["exc"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "batched_map did not return: deadlock"
    if "exc" in box:
        raise box["exc"]
    return box["value"]


# --- random programs: plain data, interpreted per instance ------------------------------
def interpret(P, prog):
    """One instance: a few ops, reads of random earlier nodes, and value-dependent control
    flow. Returns (what it read, its scalar loss)."""
    x0, steps = prog
    hs = [dy.inputVector(x0)]
    reads = []
    for kind, a, b in steps:
        x, y = hs[a % len(hs)], hs[b % len(hs)]
        if kind == "tanh":
            hs.append(dy.tanh(x))
        elif kind == "W":
            hs.append(P["W"][b % 2] * x)
        elif kind == "affine":
            hs.append(dy.affine_transform([P["b"], P["W"][0], x]))
        elif kind == "add":
            hs.append(x + y)
        elif kind == "cmult":
            hs.append(dy.cmult(x, dy.logistic(y)))
        elif kind == "lookup":
            hs.append(dy.lookup(P["E"], b % 4) + x)
        elif kind == "read":
            reads.append(x.npvalue())
        elif kind == "scalar":
            reads.append(dy.sum_elems(x).scalar_value())
        elif kind == "branch":          # the graph depends on a value: needs a read first
            v = x.npvalue()
            reads.append(v)
            hs.append(dy.tanh(P["W"][1] * x) if v.sum() > 0 else dy.logistic(x) - 0.5)
        elif kind == "loop":            # a data-dependent number of steps (greedy decoding)
            for _ in range(b % 4 + 1):
                x = dy.tanh(P["W"][0] * x + P["b"])
                v = x.npvalue()
                reads.append(v)
                if v[a % H] < 0:
                    break
            hs.append(x)
    loss = dy.esum([dy.sum_elems(h) for h in hs[-3:]])
    return reads, loss


KINDS = ["tanh", "W", "affine", "add", "cmult", "lookup", "read", "scalar", "branch", "loop"]
floats = st.floats(-1.5, 1.5, allow_nan=False, width=32, allow_subnormal=False)  # autobatch flushes them (denormals.py)
step = st.tuples(st.sampled_from(KINDS), st.integers(0, 20), st.integers(0, 20))
program = st.tuples(st.lists(floats, min_size=H, max_size=H), st.lists(step, max_size=12))


def run_loop(P, progs, strategy, mapper):
    for p in P["all"]:
        p.zero_grad()
    dy.renew_cg(strategy)
    out = mapper(lambda prog: interpret(P, prog), progs)
    loss = dy.esum([l for _, l in out])
    value = loss.value()
    loss.backward()
    reads = [r for rs, _ in out for r in rs]
    return reads, value, [p.grad_as_array() for p in P["all"]], dy.stats()


def plain(fn, items):
    return [fn(x) for x in items]


def assert_same(a, b, exact_reads):
    ra, va, ga, _ = a
    rb, vb, gb, _ = b
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        if exact_reads:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)
    # gradients are summed in another order (batches interleave the instances): not bitwise
    for x, y in zip([va] + ga, [vb] + gb):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(progs=st.lists(program, min_size=1, max_size=6))
def test_random_programs_match_the_plain_loop(strategy, progs, f64):
    P = make_params()
    ref = run_loop(P, progs, strategy, plain)
    got = bounded(lambda: run_loop(P, progs, strategy, dy.batched_map))
    # node by node, every value is computed by the same kernel call in both runs
    assert_same(ref, got, exact_reads=(strategy == "none"))


# --- greedy decoding: rounds ~ L, not N*L -----------------------------------------------
def decode(P, start, max_len=6):
    """Greedy decoding: stop when the argmax is 0 or after max_len steps."""
    h = dy.lookup(P["E"], start)
    out, losses = [], []
    for _ in range(max_len):
        h = dy.tanh(P["W"][0] * h + P["b"])
        s = P["W"][1] * h
        k = int(np.argmax(s.npvalue()))
        out.append(k)
        losses.append(dy.pickneglogsoftmax(s, k))
        if k == 0:
            break
    return out, dy.esum(losses)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_greedy_decoding_takes_about_L_rounds(strategy):
    P = make_params(3)
    starts = [0, 1, 2, 3] * 4
    dy.renew_cg(strategy)
    ref = plain(lambda s: decode(P, s), starts)
    ref_loss = dy.esum([l for _, l in ref]).value()
    seq_rounds = dy.stats()["forward_rounds"]
    dy.renew_cg(strategy)
    got = dy.batched_map(lambda s: decode(P, s), starts)
    loss = dy.esum([l for _, l in got]).value()
    rounds = dy.stats()["forward_rounds"]
    assert [o for o, _ in got] == [o for o, _ in ref]
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    L = max(len(o) for o, _ in ref)
    assert seq_rounds == sum(len(o) for o, _ in ref) + 1
    assert rounds == L + 1          # one per decoding step, plus the final loss
    assert rounds < seq_rounds


def test_results_in_order_and_uneven_finish():
    """Instances finishing at very different times (0 to 9 reads) neither deadlock nor reorder."""
    P = make_params()

    def fn(n):
        h = dy.lookup(P["E"], n % 4)
        for _ in range(n):
            h = dy.tanh(P["W"][0] * h)
            h.value()
        return n, h

    items = [9, 0, 3, 0, 7, 1]
    out = bounded(lambda: dy.batched_map(fn, items))
    assert [n for n, _ in out] == items
    assert dy.stats()["forward_rounds"] == 9
    assert bounded(lambda: dy.batched_map(fn, [])) == []


def test_returns_anything_and_backward_trains_all(f64):
    P = make_params()

    def fn(k):
        h = dy.tanh(P["W"][0] * dy.lookup(P["E"], k))
        return {"k": k, "v": h.npvalue(), "loss": dy.sum_elems(h)} if k % 2 else None

    out = dy.batched_map(fn, range(4))
    assert out[0] is None and out[2] is None and out[1]["k"] == 1
    dy.esum([o["loss"] for o in out if o]).backward()
    g = P["E"].grad_as_array()
    assert np.abs(g[1]).sum() > 0 and np.abs(g[3]).sum() > 0 and np.abs(g[0]).sum() == 0


# --- errors ---------------------------------------------------------------------------------
class Boom(Exception):
    pass


def failing(P, log, fail_at):
    """fn whose instance k raises Boom after fail_at[k] reads (never if absent)."""
    def fn(k):
        h = dy.lookup(P["E"], k % 4)
        for step in range(4):
            if fail_at.get(k) == step:
                raise Boom(f"instance {k}")
            h = dy.tanh(P["W"][0] * h)
            h.npvalue()
        log.append(k)
        return h
    return fn


def test_exception_propagates_with_traceback_and_no_hang():
    P = make_params()
    log = []
    base = threading.active_count()
    with pytest.raises(Boom) as ei:
        bounded(lambda: dy.batched_map(failing(P, log, {2: 1}), range(5)))
    assert str(ei.value) == "instance 2"
    names = [f.name for f in traceback.extract_tb(ei.value.__traceback__)]
    assert "fn" in names                      # the instance's own frame is in the traceback
    # like the plain loop: instances before the failing one completed, later ones did not
    assert sorted(log) == [0, 1]
    assert threading.active_count() == base   # every instance thread ended
    # the graph is still usable
    h = dy.tanh(P["W"][0] * dy.lookup(P["E"], 0))
    assert np.isfinite(h.npvalue()).all()


def test_lowest_index_exception_wins_like_the_plain_loop():
    """Instance 3 fails first in time, instance 1 later: the loop would raise instance 1's."""
    P = make_params()
    with pytest.raises(Boom, match="instance 1"):
        plain(failing(P, [], {3: 0, 1: 3}), range(5))
    dy.renew_cg()
    with pytest.raises(Boom, match="instance 1"):
        bounded(lambda: dy.batched_map(failing(P, [], {3: 0, 1: 3}), range(5)))


def test_user_except_exception_does_not_swallow_cancellation():
    P = make_params()
    finished = []

    def fn(k):
        if k == 0:
            raise Boom("first")
        h = dy.lookup(P["E"], k % 4)
        for _ in range(3):
            try:
                h = dy.tanh(h)
                h.value()
            except Exception:   # noqa: BLE001  (user code that catches too much)
                pass
        finished.append(k)

    with pytest.raises(Boom):
        bounded(lambda: dy.batched_map(fn, range(4)))
    assert finished == []


def test_build_time_error_in_one_instance():
    P = make_params()

    def fn(k):
        h = dy.tanh(P["W"][0] * dy.lookup(P["E"], 0))
        h.value()
        return dy.pick(h, k)        # index 3 is out of range for a 3-vector

    with pytest.raises(dy.GraphError, match="pick"):
        bounded(lambda: dy.batched_map(fn, [0, 1, 3, 2]))


def test_failing_batched_forward_blames_the_right_instance(monkeypatch):
    """A kernel error in the shared batched forward is re-raised by the instance whose
    nodes cause it (each instance recomputes alone after the failed round)."""
    P = make_params()
    cls = type(OPS["tanh"])
    orig = cls.forward_into           # what the engine runs: tanh writes into its block

    def picky(self, xp, xs, attr, data, out):
        if (abs(xs[0]) > 100).any():
            raise FloatingPointError("too big for this test")
        return orig(self, xp, xs, attr, data, out)

    monkeypatch.setattr(cls, "forward_into", picky)
    done = []

    def fn(k):
        x = dy.inputVector([1000.0 if k == 2 else 0.5] * H)
        v = dy.tanh(P["W"][0] * dy.lookup(P["E"], 0) + x).npvalue()
        done.append(k)
        return v

    with pytest.raises(FloatingPointError):
        bounded(lambda: dy.batched_map(fn, range(5)))
    assert sorted(done) == [0, 1]


def test_renew_cg_inside_is_an_error():
    def fn(k):
        if k == 1:
            dy.renew_cg()
        return dy.scalarInput(k).value()

    with pytest.raises(AutobatchError, match="renew_cg"):
        bounded(lambda: dy.batched_map(fn, range(3)))


def test_cg_checkpoint_inside_is_an_error_that_says_why():
    """The instances build into one graph: a revert in one would drop the others' nodes (it
    used to fail later with a TypeError from inside the engine)."""
    P = make_params()

    def fn(k):
        h = dy.tanh(dy.lookup(P["E"], k))
        dy.cg_checkpoint()
        v = dy.sum_elems(h * 2.0).value()
        dy.cg_revert()
        return v

    dy.renew_cg()
    with pytest.raises(dy.GraphError, match="cg_checkpoint.. inside batched_map"):
        bounded(lambda: dy.batched_map(fn, range(3)))
    dy.renew_cg()
    assert [round(v, 5) for v in dy.batched_map(lambda k: dy.sum_elems(dy.tanh(dy.lookup(P["E"], k))).value(),
                                                range(3))] == \
        [round(dy.sum_elems(dy.tanh(dy.lookup(P["E"], k))).value(), 5) for k in range(3)]


def test_nested_batched_map_matches_the_plain_loop(f64):
    P = make_params()

    def inner(j):
        return dy.tanh(P["W"][0] * dy.lookup(P["E"], j)).npvalue()

    def outer(k):
        return dy.batched_map(inner, range(k))

    dy.renew_cg()
    ref = plain(lambda k: plain(inner, range(k)), [3, 1, 2])
    dy.renew_cg()
    got = bounded(lambda: dy.batched_map(outer, [3, 1, 2]))
    for a, b in zip(ref, got):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-12)


def test_stats_report_forward_rounds():
    dy.renew_cg()
    dy.scalarInput(1.0).value()
    dy.scalarInput(2.0).value()
    assert dy.stats()["forward_rounds"] == 2


# --- the arc-hybrid parser (bench/tasks/parser.py, examples/parser.py) ------------------------
def _parser():
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench.tasks import parser
    return parser


def test_dynamic_oracle_costs_are_exact_on_random_walks():
    """Arc-decomposability: after ANY transition sequence, correct arcs = n - sum of costs paid."""
    P = _parser()
    rng = np.random.default_rng(0)
    for words, _, gold in P.synthetic_trees(60, seed=2):
        assert P.is_projective(gold)
        for trial in range(3):
            cfg, paid = P.Config(len(words)), 0
            while not cfg.done():
                valid, c = cfg.valid(), cfg.costs(gold)
                ts = [t for t in range(3) if valid[t]]
                t = min(ts, key=lambda t: c[t]) if trial == 0 else int(rng.choice(ts))
                paid += c[t]
                cfg.apply(t)
            right = sum(cfg.heads[d] == h for d, h in enumerate(gold, 1))
            assert right == len(gold) - paid
            if trial == 0:
                assert paid == 0           # the zero-cost path rebuilds the gold tree


def test_conllu_loader(tmp_path):
    P = _parser()
    f = tmp_path / "x.conllu"
    f.write_text("# sent_id = 1\n1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\tdo\tAUX\t_\t_\t3\taux\t_\t_\n"
                 "2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_\n3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_\n"
                 "3.1\tx\tx\tX\t_\t_\t_\t_\t_\t_\n\n1\ta\ta\tDET\t_\t_\t3\tdet\t_\t_\n"
                 "2\tb\tb\tNOUN\t_\t_\t4\tnsubj\t_\t_\n3\tc\tc\tNOUN\t_\t_\t0\troot\t_\t_\n"
                 "4\td\td\tVERB\t_\t_\t3\tacl\t_\t_\n")
    sents = P.load_conllu(str(f))
    assert sents[0] == (["do", "n't", "go"], ["AUX", "PART", "VERB"], [3, 3, 0])
    assert P.is_projective(sents[0][2]) and not P.is_projective(sents[1][2])
    insts, meta = P.data(3, path=str(f))      # non-projective sentences are dropped
    assert len(insts) == 3 and all(len(i[0]) == 3 for i in insts)


@pytest.mark.parametrize("strategy", ["none", "agenda"])
def test_parser_batched_map_matches_sentence_by_sentence(strategy, f64):
    P = _parser()
    insts, meta = P.data(6, seed=4)

    def run(batched):
        dy.reset_random_seed(7)
        pc = dy.ParameterCollection()
        model = P.Model(dy, pc, meta, 8)
        model.batched = batched
        dy.renew_cg(strategy)
        loss = dy.esum(model.batch_losses(dy, insts))
        v = loss.value()
        rounds = dy.stats()["forward_rounds"]
        loss.backward()
        grads = [p.grad_as_array() for p in pc.parameters_list() + pc.lookup_parameters_list()]
        dy.renew_cg(strategy)
        heads = model.predict(dy, insts)
        return v, grads, heads, rounds

    v0, g0, h0, r0 = run(False)
    v1, g1, h1, r1 = bounded(lambda: run(True))
    assert h0 == h1
    assert v1 == pytest.approx(v0, rel=1e-9)
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
    n = [len(w) for w, _, _ in insts]
    assert r0 == 2 * sum(n) + 1             # one forward per transition, plus the loss
    assert r1 == 2 * max(n) + 1             # one per transition step of the longest sentence
