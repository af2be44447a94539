"""DyNet's hand-batched programs (lookup_batch, pickneglogsoftmax_batch, sum_batches, batched
inputs): the dims and values DyNet 2.1 gives, and the same loss and gradients as the program
written per instance."""
import numpy as np
import pytest

import autobatch as dy

STRATS = ["none", "depth", "agenda"]


def _model(seed=0, V=12, E=5, H=4):
    pc = dy.ParameterCollection()
    L = pc.add_lookup_parameters((V, E))
    R = pc.add_parameters((V, H))
    bias = pc.add_parameters(V)
    lstm = dy.LSTMBuilder(1, E, H, pc)
    rs = np.random.RandomState(seed)
    for p in pc.parameters_list():
        p.set_value(rs.uniform(-0.5, 0.5, p.shape()))
    L.init_from_array(rs.uniform(-0.5, 0.5, (V, E)))
    return pc, L, R, bias, lstm


SENTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9], [7, 9, 3, 2]]


def _lm_batched(m, sents):
    """DyNet's minibatch RNNLM: one lookup_batch and one pickneglogsoftmax_batch per time step,
    padded sentences masked by a batched input (the same text run by DyNet 2.1 gives the same
    loss and gradients; not run here: importing DyNet sets the FPU's flush-to-zero mode, which
    breaks Hypothesis in the same process)."""
    pc, L, R, bias, lstm = m
    s = lstm.initial_state()
    errs = []
    for t in range(max(map(len, sents)) - 1):
        ids = [x[t] if t < len(x) else 0 for x in sents]
        nxt = [x[t + 1] if t + 1 < len(x) else 0 for x in sents]
        mask = dy.inputTensor([1.0 if t + 1 < len(x) else 0.0 for x in sents], batched=True)
        s = s.add_input(dy.lookup_batch(L, ids))
        errs.append(dy.cmult(dy.pickneglogsoftmax_batch(R * s.output() + bias, nxt), mask))
    return dy.sum_batches(dy.esum(errs))


def _lm_per_instance(m, sents):
    pc, L, R, bias, lstm = m
    losses = []
    for x in sents:
        s = lstm.initial_state()
        for w, nxt in zip(x, x[1:]):
            s = s.add_input(L[w])
            losses.append(dy.pickneglogsoftmax(R * s.output() + bias, nxt))
    return dy.esum(losses)


def _grads(pc):
    return [p.grad_as_array().copy() for p in pc.parameters_list()] + \
           [p.grad_as_array().copy() for p in pc.lookup_parameters_list()]


@pytest.mark.parametrize("strategy", STRATS)
def test_a_minibatch_lm_equals_the_per_instance_program(strategy):
    m = _model()
    dy.renew_cg(autobatching=strategy)
    loss = _lm_batched(m, SENTS)
    v = loss.value()
    loss.backward()
    g = _grads(m[0])
    m2 = _model()
    dy.renew_cg(autobatching=strategy)
    ref = _lm_per_instance(m2, SENTS)
    np.testing.assert_allclose(v, ref.value(), rtol=1e-5)
    ref.backward()
    for a, b in zip(g, _grads(m2[0])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert sum(np.abs(a).sum() for a in g) > 0


def test_a_minibatch_lm_is_batched_like_instances():
    """Its elements are ordinary nodes: the agenda batches them into as few kernels as the
    per-instance program's (each time step's LSTM step is one batch, not one per sentence)."""
    dy.renew_cg(autobatching="agenda")
    _lm_batched(_model(), SENTS).forward()
    batched = dy.stats()["forward_batches"]
    dy.renew_cg(autobatching="none")
    _lm_batched(_model(), SENTS).forward()
    assert batched * 3 < dy.stats()["forward_batches"]


def test_dims_and_values_follow_dynet():
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((6, 3), init=np.arange(18.0).reshape(6, 3))
    W = pc.add_parameters((2, 3), init=np.array([[1.0, 0, 0], [0, 0, 1]]))
    dy.renew_cg()
    x = dy.lookup_batch(E, [1, 4, 5])
    assert x.dim() == ((3,), 3)
    np.testing.assert_array_equal(x.npvalue(), np.arange(18.0).reshape(6, 3)[[1, 4, 5]].T)   # (d, B)
    assert x.value() == [3.0, 4.0, 5.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]    # elements in turn
    y = W * x + dy.inputVector([10.0, 20.0])          # an unbatched operand serves every element
    assert y.dim() == ((2,), 3)
    np.testing.assert_array_equal(y.npvalue(), [[13, 22, 25], [25, 34, 37]])
    np.testing.assert_array_equal((-y)[1].npvalue(), [[-25, -34, -37]])
    np.testing.assert_array_equal((y / 2 - 1).npvalue(), [[5.5, 10, 11.5], [11.5, 16, 17.5]])
    np.testing.assert_array_equal((y ** 2).npvalue()[0], [169, 484, 625])
    assert dy.pick_batch_elem(y, 2).dim() == ((2,), 1)
    np.testing.assert_array_equal(dy.pick_batch_elem(y, 2).npvalue(), [25, 37])
    assert dy.pick_batch_elems(y, [0, 2]).value() == [13.0, 25.0, 25.0, 37.0]
    np.testing.assert_array_equal(dy.pick_batch(y, [0, 1, 0]).npvalue(), [[13, 34, 25]])
    np.testing.assert_array_equal(dy.pick_batch(dy.inputVector([7.0, 8.0]), [1, 0]).npvalue(), [[8, 7]])
    np.testing.assert_array_equal(dy.sum_batches(y).npvalue(), [60, 96])
    np.testing.assert_allclose(dy.mean_batches(y).npvalue(), [20, 32])
    np.testing.assert_allclose(dy.moment_batches(y, 2).npvalue(), np.mean(y.npvalue() ** 2, axis=1))
    np.testing.assert_allclose(dy.std_batches(y).npvalue(), np.std(y.npvalue(), axis=1), rtol=1e-5)
    s = dy.softmax(y)
    np.testing.assert_allclose(dy.pickneglogsoftmax_batch(y, [0, 1, 1]).npvalue()[0],
                               -np.log([s.npvalue()[0, 0], s.npvalue()[1, 1], s.npvalue()[1, 2]]), atol=1e-4)
    np.testing.assert_allclose(dy.hinge_batch(y, [0, 0, 1], 1.0).npvalue()[0], [13.0, 13.0, 0.0])
    z = dy.concatenate_to_batch([dy.inputVector([1.0, 2.0]), y])
    assert z.dim() == ((2,), 4) and z.npvalue()[:, 0].tolist() == [1.0, 2.0]
    assert dy.sum_elems(y).dim() == ((1,), 3) and dy.esum([y, y]).dim() == ((2,), 3)
    assert dy.concatenate([y, dy.inputVector([0.0])]).dim() == ((3,), 3)
    assert dy.sum_batches(dy.sum_elems(y)).scalar_value() == 156.0
    assert dy.lookup_batch(E, [2]).dim() == ((3,), 1)       # a batch of one is an ordinary expression


def test_batched_inputs_and_reshapes():
    dy.renew_cg()
    a = dy.inputTensor(np.arange(6.0).reshape(2, 3), batched=True)      # the last axis is the batch
    assert a.dim() == ((2,), 3) and a.npvalue().tolist() == [[0, 1, 2], [3, 4, 5]]
    b = dy.inputTensor([np.ones((2, 2)), np.zeros((2, 2))])              # a list of arrays: elements
    assert b.dim() == ((2, 2), 2)
    m = dy.inputTensor([1.0, 0.0, 1.0], batched=True)
    assert m.dim() == ((1,), 3)
    whole = dy.reshape(a, (6,), batch_size=1)              # the elements in turn, as DyNet's memory
    assert whole.dim() == ((6,), 1) and whole.value() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    back = dy.reshape(whole, (2,), batch_size=3)
    np.testing.assert_array_equal(back.npvalue(), a.npvalue())
    assert dy.reshape(b, (4,), batch_size=2).dim() == ((4,), 2)
    # several elements into more (or fewer) of another shape: DyNet's memory order, each
    # element column-major, cut into the new elements (a biaffine parser's (4, 4) x 2 -> (4,) x 8)
    A = np.arange(32.0).reshape(4, 4, 2)
    y = dy.reshape(dy.inputTensor(A, batched=True), (4,), batch_size=8)
    flat = np.concatenate([A[:, :, k].ravel(order="F") for k in range(2)])
    assert y.dim() == ((4,), 8)
    np.testing.assert_array_equal(y.npvalue(), flat.reshape(8, 4).T)
    z = dy.reshape(dy.inputTensor(np.arange(12.0).reshape(2, 2, 3), batched=True), (6,), batch_size=2)
    assert z.dim() == ((6,), 2)
    assert dy.random_normal(3, batch_size=4).dim() == ((3,), 4)
    assert dy.random_bernoulli((2, 2), 0.5, batch_size=2).dim() == ((2, 2), 2)
    assert dy.zeroes(3, batch_size=2).npvalue().tolist() == [[0, 0], [0, 0], [0, 0]]


def test_misuse_is_named_and_leaves_the_graph_usable():
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((6, 3))
    dy.renew_cg()
    x = dy.lookup_batch(E, [1, 2, 3])
    with pytest.raises(dy.GraphError, match=r"operands of batch sizes \[2, 3\]"):
        x + dy.lookup_batch(E, [1, 2])
    with pytest.raises(dy.GraphError, match="2 indices for a batch of 3"):
        dy.pickneglogsoftmax_batch(x, [0, 1])
    with pytest.raises(dy.GraphError, match=r"backward\(\) needs a scalar loss.*sum_batches"):
        dy.sum_elems(x).backward()
    with pytest.raises(dy.GraphError, match="scalar_value"):
        dy.sum_elems(x).scalar_value()
    with pytest.raises(IndexError, match="element 3 of a batch of 3"):
        dy.pick_batch_elem(x, 3)
    with pytest.raises(dy.GraphError, match="lookup_batch: an empty list"):
        dy.lookup_batch(E, [])
    with pytest.raises(dy.GraphError, match="elements of shapes"):
        dy.concatenate_to_batch([x, dy.inputVector([1.0])])
    loss = dy.sum_batches(dy.sum_elems(x))
    loss.backward()
    np.testing.assert_array_equal(E.grad_as_array()[[1, 2, 3]], np.ones((3, 3)))


# --- every op, batched: the gradcheck rows with batched instances -----------------------------
from gradcheck_kit import IDX, Ctx, _data  # noqa: E402
from test_gradcheck import GRAD_ROWS, P  # noqa: E402,F401  (P: the rows' parameters, a fixture)
import gradrows_random  # noqa: E402
from autobatch.ops import OPS  # noqa: E402


class _Shifted(Ctx):
    """Ctx whose inputs are those of instance k + j: batch element j of _Batched."""

    def __init__(self, P, j):
        super().__init__(P)
        self.j = j

    def x(self, k):
        return self._m(("x", k), lambda: dy.inputVector(_data((4,), 1, k + self.j)))

    def e(self, k):
        return self._m(("e", k), lambda: self.P.E[IDX[(k + self.j) % 4]])

    def m(self, k):
        return self._m(("m", k), lambda: dy.cmult(self.P.M, dy.inputTensor(_data((3, 4), 2, k + self.j, lo=0.5,
                                                                                   hi=1.5))))


class _Batched(Ctx):
    """The same inputs as a batch of two elements (those of _Shifted(P, 0) and (P, 1)): every
    expression a row derives from them is batched, op by op."""

    def x(self, k):
        return self._m(("x", k), lambda: dy.inputTensor([_data((4,), 1, k), _data((4,), 1, k + 1)]))

    def e(self, k):
        return self._m(("e", k), lambda: dy.lookup_batch(self.P.E, [IDX[k % 4], IDX[(k + 1) % 4]]))

    def m(self, k):
        return self._m(("m", k), lambda: dy.cmult(self.P.M, dy.inputTensor(
            [_data((3, 4), 2, k, lo=0.5, hi=1.5), _data((3, 4), 2, k + 1, lo=0.5, hi=1.5)])))


def _run(P, loss_of):
    for p in P.all:
        p.zero_grad()
    dy.reset_random_seed(7)
    dy.renew_cg("agenda")
    loss = loss_of()
    v = loss.scalar_value()
    loss.backward()
    return v, [p.grad_as_array().copy() for p in P.all]


def test_every_op_runs_per_element_on_batched_operands(P):
    """Each gradcheck row built from batched inputs equals the sum of the row built from each
    element's inputs: values and every parameter's gradient. Rows of random ops draw other
    numbers in another node order and are left out; a row that reaches an op through a private
    function (no DyNet program does) is counted apart."""
    ran, private, bad = [], [], []
    # (vertex functions take their inputs per vertex: DyNet's minibatch has no meaning there)
    rows = [n for n in sorted(set(GRAD_ROWS) - set(gradrows_random.ROWS) - {"vertex_call"}) if not OPS[n].redraws]
    for name in rows:
        row = GRAD_ROWS[name]
        try:
            got = _run(P, lambda: dy.sum_batches(row(_Batched(P), 1)))
        except dy.minibatch.BatchedOperand:
            private.append(name)
            continue
        want = _run(P, lambda: dy.esum([row(_Shifted(P, j), 1) for j in (0, 1)]))
        try:
            np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-9)
            for a, b in zip(got[1], want[1]):
                np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
        except AssertionError as e:
            bad.append(f"{name}: {str(e)[:300]}")
        ran.append(name)
    assert not bad, "\n".join(bad)
    assert len(rows) > 100
    assert len(ran) >= 0.9 * len(rows), f"only {len(ran)} rows ran; through private functions: {private}"


def test_reductions_over_the_batch_too():
    """b=True reduces over the batch as well, as DyNet's; on an unbatched expression it is b=False."""
    a = np.arange(12.0).reshape(2, 3, 2)          # elements (2, 3), batch 2
    dy.renew_cg()
    x = dy.inputTensor(a, batched=True)
    np.testing.assert_allclose(dy.sum_dim(x, [0], True).npvalue(), a.sum(axis=(0, 2)))
    np.testing.assert_allclose(dy.mean_dim(x, [1], True).npvalue(), a.mean(axis=(1, 2)))
    np.testing.assert_allclose(dy.mean_dim(x, [0], True, 5).npvalue(), a.sum(axis=(0, 2)) / 5)
    np.testing.assert_allclose(dy.moment_dim(x, [0], 2, True).npvalue(), (a ** 2).mean(axis=(0, 2)))
    np.testing.assert_allclose(dy.std_dim(x, [0], True).npvalue(), a.std(axis=(0, 2)), rtol=1e-5)
    assert dy.sum_dim(x, [0]).dim() == ((3,), 2)
    assert dy.sum_dim(dy.inputVector([1.0, 2.0]), [0], True).value() == 3.0


def test_builders_take_columns_and_batched_states():
    """DyNet's attention step feeds an LSTM [context; emb] with the context a column (n, 1);
    an LSTM state that saw a batch answers s() with the batch's cells."""
    pc = dy.ParameterCollection()
    lstm = dy.LSTMBuilder(1, 5, 2, pc)
    gru = dy.GRUBuilder(1, 5, 3, pc)
    dy.renew_cg()
    col = dy.inputTensor(np.ones((5, 1)))
    vec = dy.inputVector(np.ones(5))
    np.testing.assert_allclose(lstm.initial_state().add_input(col).output().npvalue(),
                               lstm.initial_state().add_input(vec).output().npvalue())
    xb = dy.inputTensor(np.arange(15.0).reshape(5, 1, 3) / 15, batched=True)       # ((5, 1), 3)
    s = lstm.initial_state().add_input(xb)
    assert s.output().dim() == ((2,), 3) and [e.dim() for e in s.s()] == [((2,), 3), ((2,), 3)]
    np.testing.assert_allclose(s.s()[0].npvalue()[:, 1],
                               lstm.initial_state().add_input(dy.pick_batch_elem(xb, 1)).s()[0].npvalue())
    h0 = dy.inputTensor(np.ones((3, 1, 2)), batched=True)                            # columns, batch 2
    assert gru.initial_state([h0]).add_input(dy.inputTensor(np.ones((5, 2)), batched=True)).output().dim() == \
        ((3,), 2)


def test_constants_with_a_batch_size_and_values_of_batched_matrices():
    dy.renew_cg()
    assert dy.zeros(2, batch_size=3).dim() == ((2,), 3) and dy.ones((2,), batch_size=3).npvalue().sum() == 6
    assert dy.constant((2,), 0.5, batch_size=2).npvalue().tolist() == [[0.5, 0.5], [0.5, 0.5]]
    m = dy.inputTensor(np.arange(12.0).reshape(2, 3, 2), batched=True)
    assert isinstance(m.value(), np.ndarray) and m.value().shape == (2, 3, 2)      # as DyNet: npvalue()
    assert len(m.vec_value()) == 12
    np.testing.assert_array_equal(dy.sum_dim(m, [], True).npvalue(), np.arange(12.0).reshape(2, 3, 2).sum(-1))


def test_batch_reductions_of_equal_values_and_over_the_batch_alone():
    c = np.full((2, 3, 2), 0.1)
    a = np.arange(12.0).reshape(2, 3, 2)
    dy.renew_cg()
    z, x = dy.inputTensor(c, batched=True), dy.inputTensor(a, batched=True)
    assert np.isfinite(dy.std_dim(z, [0], True).npvalue()).all()       # E[x²] - E[x]² went below 0: NaN
    np.testing.assert_allclose(dy.std_dim(z, [0], True).npvalue(), 0.0, atol=1e-6)
    np.testing.assert_allclose(dy.mean_dim(x, [], True).npvalue(), a.mean(-1))
    np.testing.assert_allclose(dy.moment_dim(x, [], 2, True).npvalue(), (a ** 2).mean(-1))
    np.testing.assert_allclose(dy.std_dim(x, [], True).npvalue(), a.std(-1), rtol=1e-5)
    np.testing.assert_allclose(dy.mean_dim(x, [], True, 4).npvalue(), a.sum(-1) / 4)
    np.testing.assert_allclose(dy.moment_dim(x, [1], 2, True, 5).npvalue(), (a ** 2).sum(axis=(1, 2)) / 5)


def test_builder_masks_and_softmax_builders_per_element():
    dy.set_dropout(True)
    try:
        pc = dy.ParameterCollection()
        lstm = dy.VanillaLSTMBuilder(1, 8, 8, pc)
        lstm.set_dropout(0.5)
        dy.renew_cg()
        s = lstm.initial_state()
        lstm.set_dropout_masks(batch_size=4)                 # DyNet's order: a mask per element
        out = s.add_input(dy.inputTensor(np.ones((8, 4)), batched=True)).output().npvalue()
        assert not all(np.allclose(out[:, 0], out[:, k]) for k in range(1, 4))
    finally:
        dy.set_dropout(False)
    sm = dy.StandardSoftmaxBuilder(3, 4, pc)
    dy.renew_cg()
    xb = dy.inputTensor(np.arange(6.0).reshape(3, 2) / 6, batched=True)
    got = sm.neg_log_softmax_batch(xb, [1, 3]).npvalue()[0]
    want = [sm.neg_log_softmax(dy.pick_batch_elem(xb, k), c).value() for k, c in enumerate([1, 3])]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("kind", ["VanillaLSTMBuilder", "LSTMBuilder", "SimpleRNNBuilder", "CoupledLSTMBuilder"])
@pytest.mark.parametrize("call", ["add_input", "transduce"])
def test_builder_draws_its_masks_per_element_of_the_first_input(kind, call):
    """As DyNet's builders (set_dropout_masks(x's batch size) at a sequence's first input):
    identical sentences of a minibatch are dropped differently, and each keeps its own masks
    along the sequence."""
    dy.set_dropout(True)
    try:
        pc = dy.ParameterCollection()
        b = getattr(dy, kind)(1, 8, 6, pc)
        b.set_dropout(0.5)
        dy.renew_cg()
        xs = [dy.inputTensor(np.ones((8, 4)), batched=True) for _ in range(3)]
        s = b.initial_state()
        if call == "add_input":
            outs = [st.output() for st in s.add_inputs(xs)]
        else:
            outs = s.transduce(xs)
        out = [o.npvalue() for o in outs]                      # (6, 4) each
        assert out[0].shape == (6, 4)
        for o in out:
            assert not any(np.allclose(o[:, 0], o[:, k]) for k in range(1, 4))
        masks = b._last_run().masks_x[0]                     # the first layer's mask on x
        assert type(masks).__name__ == "BatchedExpression" and len(masks.xs) == 4
    finally:
        dy.set_dropout(False)


def test_minibatch_misuse_of_inputs():
    dy.renew_cg()
    with pytest.raises(dy.GraphError, match="one shape"):
        dy.inputTensor([np.ones(2), np.ones(3)])

    @dy.vertex_function(max_children=0)
    def F(v):
        v.push("y", v.pull("x") * 1.0)
    with pytest.raises(dy.GraphError, match="a minibatch of 2 elements for 3 vertices"):
        F([dy.InputGraph([[]] * 3)], x=dy.inputTensor(np.ones((2, 2)), batched=True))
    y = F([dy.InputGraph([[]] * 2)], x=dy.inputTensor(np.arange(4.0).reshape(2, 2), batched=True))["y"]
    assert y.npvalue().tolist() == [[0.0, 2.0], [1.0, 3.0]]                  # element k at vertex k


def test_batch_ids_must_be_whole_numbers():
    """lookup_batch(E, [1.5]) read row 1: int() truncated it."""
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((4, 2), init=np.arange(8.0).reshape(4, 2))
    dy.renew_cg()
    assert dy.lookup_batch(E, [1.0, 3]).npvalue().tolist() == [[2.0, 6.0], [3.0, 7.0]]   # whole floats pass
    for bad in ([1.5, 2], ["3", 1], [None]):
        with pytest.raises(dy.GraphError, match="lookup_batch: expected a list of ints"):
            dy.lookup_batch(E, bad)
    with pytest.raises(dy.GraphError, match="pickneglogsoftmax_batch: expected a list of ints"):
        dy.pickneglogsoftmax_batch(dy.lookup_batch(E, [0, 1]), [0.5, 1])


def test_list_ops_take_generators_of_batches():
    """esum(x for x in batches) met the batch after the generator was used up by the first
    try, and raised BatchedOperand (DyNet takes lists only; autobatch takes any iterable)."""
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((5, 3), init=np.arange(15.0).reshape(5, 3))
    dy.renew_cg()
    xs = [dy.lookup_batch(E, [1, 2]), dy.lookup_batch(E, [3, 4]), E[0]]
    for name in ("esum", "average", "concatenate", "emax", "logsumexp", "concatenate_cols"):
        f = getattr(dy, name)
        want = f(xs)
        for it in ((x for x in xs), map(lambda x: x, xs), iter(xs), iter(tuple(xs))):
            got = f(it)
            assert got.dim() == want.dim(), name
            np.testing.assert_allclose(got.npvalue(), want.npvalue(), err_msg=name)
    assert dy.esum(e for e in [E[1], E[2]]).npvalue().tolist() == [9.0, 11.0, 13.0]    # no batch


def test_a_batch_on_the_left_of_a_product():
    """batch * expression (a scalar, or a batch of matrices times a vector) went through the
    product's inline path, which read the batch as an Expression (AttributeError, no line)."""
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((5, 3), init=np.arange(15.0).reshape(5, 3))
    dy.renew_cg()
    xb = dy.lookup_batch(E, [1, 3])
    y = xb * dy.scalarInput(2.0)
    assert y.dim() == ((3,), 2) and y.npvalue().tolist() == [[6.0, 18.0], [8.0, 20.0], [10.0, 22.0]]
    Mb = dy.reshape(dy.lookup_batch(E, [0, 1]), (3, 1))
    assert (Mb * dy.inputVector([2.0])).npvalue().tolist() == [[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]


def test_a_batched_step_checks_every_element_and_runs_in_a_vertex_function():
    """A batched add_input replays the first element's step for the others only where their
    inputs have its shapes: a longer vector in element 1 is refused as before; and inside a
    vertex function (whose tracer keeps no templates) it runs."""
    pc = dy.ParameterCollection()
    lstm = dy.VanillaLSTMBuilder(1, 3, 4, pc)
    dy.renew_cg()
    bad = dy.BatchedExpression([dy.inputVector([1.0, 2, 3]), dy.inputVector([1.0, 2, 3, 4])])
    with pytest.raises(dy.GraphError, match=r"cannot multiply \(16, 3\) by \(4,\)"):
        lstm.initial_state().add_input(bad)
    rnn = dy.SimpleRNNBuilder(1, 3, 3, pc)

    @dy.vertex_function(max_children=0)
    def f(v):
        x = dy.inputTensor(np.ones((3, 2)), batched=True)
        v.push("y", dy.sum_batches(dy.sum_elems(rnn.initial_state().add_input(x).output())))

    dy.renew_cg()
    got = dy.sum_elems(f([dy.InputGraph([[]])])["y"]).value()
    dy.renew_cg()
    want = dy.sum_batches(dy.sum_elems(rnn.initial_state().add_input(
        dy.inputTensor(np.ones((3, 2)), batched=True)).output())).value()
    assert got == pytest.approx(want, rel=1e-6)
