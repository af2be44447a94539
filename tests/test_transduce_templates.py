"""RNN transduce's step templates, kept per graph and builder (75bd05b), and a template's
memo of the last step's shared operands and their signature (recipes._M, 06ff77c): several
transduce calls in one graph whose states read other parameter nodes (update=False, another
builder's), dropout switched on and off between calls, checkpoints reverted between them.
A debug graph builds every node through add() (no templates), so both graphs must get the
same columns, and the same values and gradients."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch.graph import ComputationGraph
from check_kit import graph_columns

COLUMNS = ("ops", "args", "attrs", "shapes", "sizes", "sigs", "depths", "needs", "uses", "sig_op")
BUILDERS = ("VanillaLSTMBuilder", "LSTMBuilder", "SimpleRNNBuilder", "GRUBuilder", "GRUBuilder")
LAYERS = (1, 2, 1, 1, 3)

call = st.tuples(st.integers(0, 3),                     # which builder
                 st.sampled_from(["plain", "frozen", "dropout", "nodrop", "revert"]),
                 st.integers(1, 4),                     # sequence length
                 st.integers(0, 4))                     # first word


def _model():
    dy.reset_random_seed(3)
    pc = dy.ParameterCollection()
    bs = [getattr(dy, n)(layers, 3, 4, pc) for n, layers in zip(BUILDERS, LAYERS)]
    return pc, bs, pc.add_lookup_parameters((6, 3))


def _build(debug, calls):
    pc, bs, E = _model()
    dy.set_debug(debug)
    try:
        g = dy.renew_cg()
        assert (type(g) is ComputationGraph) != debug
        outs = []
        for k, what, n, w in calls:
            b = bs[k]
            if what == "dropout":
                b.set_dropout(0.25)
            elif what == "nodrop":
                b.disable_dropout()
            xs = [dy.lookup(E, (w + j) % 6) for j in range(n)]
            if what == "revert":           # templates recorded inside, then dropped
                dy.cg_checkpoint()
                b.initial_state().transduce(xs)
                dy.cg_revert()
            s = b.initial_state(update=what != "frozen")
            outs.append(dy.sum_elems(s.transduce(xs)[-1]))
        cols = graph_columns(g, COLUMNS)
        loss = dy.esum(outs)
        v = loss.value()
        loss.backward()
        grads = [np.array(p.grad_as_array()) for p in list(pc.parameters_list()) + [E]]
        return cols, v, grads
    finally:
        dy.set_debug(False)


def _assert_same(built, want):
    """Two (columns, loss value, gradients) of _build or _sequences: equal columns, values and
    gradients (templates against the debug graph's add() per node)."""
    (ca, va, ga), (cb, vb, gb) = built, want
    for c in COLUMNS:
        assert ca[c] == cb[c], c
    np.testing.assert_allclose(va, vb, rtol=1e-12)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(call, min_size=2, max_size=8))
def test_transduce_templates_build_what_add_builds(f64, calls):
    _assert_same(_build(False, calls), _build(True, calls))


def test_frozen_state_between_two_trained_ones(f64):
    """The memo must not hand a frozen state's steps the signature of the trained nodes (or
    back): three calls in one graph, each a template replay after the first step."""
    calls = [(0, "plain", 3, 0), (0, "frozen", 3, 1), (0, "plain", 3, 2)]
    cols, _, grads = _build(False, calls)
    want, _, _ = _build(True, calls)
    assert cols["sigs"] == want["sigs"] and cols["needs"] == want["needs"]
    frozen = _build(False, [(0, "frozen", 3, 1)])[2]
    assert all(not np.any(g) for g in frozen[:3])      # W_x, W_h, b of the frozen builder
    assert any(np.any(g) for g in grads[:3])


# --- a sequence's later steps appended by one loop (recipes.run_of) --------------------------
inputs = st.lists(st.sampled_from(["word", "const", "again", "earlier"]), min_size=1, max_size=12)


def _sequences(debug, builder, starts, seqs, hows=("transduce", "transduce")):
    """Two sequences in one graph; the second's inputs may repeat an input ("again") or
    read the first's outputs ("earlier"); "const" inputs need no gradient, so a step's needs
    flags vary along the sequence. starts: per sequence, a zero state or given vectors; hows:
    per sequence, transduce, add_input per step, or add_input for its first half and
    transduce from the state it reached."""
    pc, bs, E = _model()
    b = bs[builder]
    dy.set_debug(debug)
    try:
        g = dy.renew_cg()
        outs, prev = [], []
        for start, kinds, how in zip(starts, seqs, hows):
            xs = []
            for j, kind in enumerate(kinds):
                if kind == "const":
                    xs.append(dy.inputVector([0.1 * j, -0.2, 0.3]))
                elif kind == "again" and xs:
                    xs.append(xs[0])
                elif kind == "earlier" and prev:
                    xs.append(dy.pickrange(prev[j % len(prev)], 0, 3))
                else:
                    xs.append(dy.lookup(E, j % 6))
            vecs = None
            if start == "vecs":
                n = b.layers * (2 if isinstance(b, dy.VanillaLSTMBuilder) else 1)
                vecs = [dy.inputVector([0.1 * k, 0.2, -0.1, 0.05]) for k in range(n)]
            state = b.initial_state(vecs)
            if how == "transduce":
                prev = state.transduce(xs)
            else:
                cut = len(xs) if how == "add_input" else len(xs) // 2
                prev = []
                for x in xs[:cut]:
                    state = state.add_input(x)
                    prev.append(state.output())
                prev += state.transduce(xs[cut:])
                prev += state.s()[:1]               # the state's c (or h) as well
            outs.append(dy.sum_elems(dy.esum(prev)))
        cols = graph_columns(g, COLUMNS)
        loss = dy.esum(outs)
        v = loss.value()
        loss.backward()
        return cols, v, [np.array(p.grad_as_array()) for p in list(pc.parameters_list()) + [E]]
    finally:
        dy.set_debug(False)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 4), st.lists(st.sampled_from(["zero", "vecs"]), min_size=2, max_size=2),
       st.lists(inputs, min_size=2, max_size=2))
def test_sequence_loop_appends_what_steps_append(f64, monkeypatch, builder, starts, seqs):
    from autobatch import recipes
    made = []
    run_of = recipes.run_of
    monkeypatch.setattr(recipes, "run_of", lambda *a: made.append(a) or run_of(*a))
    _assert_same(_sequences(False, builder, starts, seqs), _sequences(True, builder, starts, seqs))
    # the builders (of one, two and three layers) loop once the templates of a step after a
    # sequence's first are known: from the second such step on
    if sum(len(s) - 1 for s in seqs) >= 2:
        assert made


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 4), st.lists(st.sampled_from(["zero", "vecs"]), min_size=2, max_size=2),
       st.lists(inputs, min_size=2, max_size=2),
       st.lists(st.sampled_from(["transduce", "add_input", "mixed"]), min_size=2, max_size=2))
def test_add_input_finds_the_templates_transduce_finds(f64, monkeypatch, builder, starts, seqs, hows):
    """add_input's step takes transduce's path (the step's template, looked up by layer and
    state shapes) and builds what the debug graph builds; with the state it returns, transduce
    goes on from there."""
    from autobatch.builders import _Builder
    plain = []
    steps = _Builder._plain_steps
    monkeypatch.setattr(_Builder, "_plain_steps", lambda *a: plain.append(a[3]) or steps(*a))
    _assert_same(_sequences(False, builder, starts, seqs, hows), _sequences(True, builder, starts, seqs, hows))
    # add_input's steps (loop=False) in the graph without debug
    n_add = sum(len(s) if h == "add_input" else len(s) // 2 if h == "mixed" else 0 for s, h in zip(seqs, hows))
    assert plain.count(False) >= n_add


def test_a_step_reading_its_own_state_leaves_the_template_to_later_steps():
    """A step whose x is the state's h has repeated inputs, which a template cannot tell apart:
    it is built the normal way, and later steps of its key still get (and loop) the template
    instead of being built node by node for the rest of the graph."""
    from autobatch import recipes
    pc = dy.ParameterCollection()
    b = dy.VanillaLSTMBuilder(2, 4, 4, pc)
    E = pc.add_lookup_parameters((6, 4))
    g = dy.renew_cg()
    s = b.initial_state().add_input(dy.lookup(E, 0))
    s.add_input(s.h()[0])                  # x is layer 0's h
    b.initial_state().transduce([dy.lookup(E, j) for j in range(6)])
    assert not any(v is recipes._NO for v in g._recipes.values())
    assert all(g._transduce[b].values())


def test_a_new_graph_of_the_same_model_writes_no_code(monkeypatch):
    """Templates are recorded again in every graph, but their code (and the loops') is written
    and compiled once per structure: a one-sentence graph spent a third of its build on it."""
    from autobatch import recipes
    monkeypatch.setattr(recipes, "_CODES", {})     # (earlier tests may have written the same code)
    written = []
    for name in ("_replay_source", "_run_source"):
        f = getattr(recipes, name)
        monkeypatch.setattr(recipes, name, lambda *a, f=f: written.append(f) or f(*a))
    pc = dy.ParameterCollection()
    bs = [dy.VanillaLSTMBuilder(1, 3, 4, pc), dy.GRUBuilder(2, 3, 4, pc)]
    E = pc.add_lookup_parameters((6, 3))

    def sentence():
        dy.renew_cg()
        xs = [dy.lookup(E, j) for j in range(5)]
        outs = [b.initial_state().transduce(xs)[-1] for b in bs]
        s = bs[0].initial_state()
        for x in xs:
            s = s.add_input(x)
        return dy.esum([dy.sum_elems(h) for h in outs + [s.output()]]).value()

    first = sentence()
    assert written                  # the first graph wrote its templates' and loops' code
    written.clear()
    assert sentence() == first
    assert written == []
