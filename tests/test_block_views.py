"""An input that is exactly one earlier batch's nodes, in that batch's order, is read as a
view of the batch's block found by the batch's first node (Executor.blocks), without looking
up the nodes' offsets; the map must forget batches that cg_revert, invalidate or an error
undo, whose node ids and memory are then reused."""
import numpy as np
import pytest

import autobatch as dy
from autobatch.ops.base import OPS


@pytest.fixture
def m():
    dy.reset_random_seed(3)
    model = dy.Model()
    return {"W": model.add_parameters((3, 3)), "U": model.add_parameters((3, 3)),
            "O": model.add_parameters((4, 3)), "E": model.add_lookup_parameters((7, 3))}


def _grads(m):
    return [p.grad_as_array().copy() for p in (m["W"], m["U"], m["O"], m["E"])]


def _zero(m):
    for p in (m["W"], m["U"], m["O"], m["E"]):
        p.zero_grad()


def _same(run, m):
    """run(m, strategy) -> loss under agenda and none: equal values and gradients."""
    _zero(m)
    loss = run(m, "agenda")
    got = _grads(m)
    _zero(m)
    want = run(m, "none")
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    for g, g0 in zip(got, _grads(m)):
        np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-7)


class _Reads(list):
    """The executor's offsets, recording which nodes' offsets are read."""
    def __init__(self, offs):
        super().__init__(offs)
        self.read = set()

    def __getitem__(self, i):
        self.read.add(i)
        return super().__getitem__(i)


def _identity(m, strategy, spy=False):
    dy.renew_cg(autobatching=strategy)
    xs = [dy.lookup(m["E"], i) for i in (1, 4, 6)]
    hs = [m["W"] * x for x in xs]
    dy.esum(hs).value()                 # the W·x batch: one block in node order
    exe = dy.cg().exe
    if spy:
        exe.offs = _Reads(exe.offs)
    loss = dy.sum_elems(dy.esum([dy.logistic(h) for h in hs]))
    loss.backward()
    return loss.value(), exe, [h.i for h in hs]


def test_an_input_that_is_one_earlier_batch_is_a_view_read_without_offsets(m):
    _, exe, hs = _identity(m, "agenda", spy=True)
    batch = [b for b in exe.batches if getattr(b, "op", None) is not None and b.op.name == "logistic"]
    assert len(batch) == 1 and [info[0] for info in batch[0].ins] == ["view"]
    assert dy.stats()["copies_done"] == 0
    assert not exe.offs.read & set(hs), sorted(exe.offs.read)
    _same(lambda m, s: _identity(m, s)[0], m)


def _reverted(m, strategy):
    dy.renew_cg(autobatching=strategy)
    xs = [dy.lookup(m["E"], i) for i in (1, 4, 6)]
    h = dy.tanh(m["W"] * xs[0])
    h.value()
    dy.cg_checkpoint()
    # candidate 1: a tanh, then the U·x batch
    t = dy.tanh(h)
    us = [m["U"] * x for x in xs]
    dy.esum([t] + us).value()
    first = [b.ids for b in dy.cg().exe.batches if getattr(b, "op", None) is not None
             and b.op.name.startswith("matmul") and len(b.ids) == 3]
    dy.cg_revert()
    # candidate 2: U·x0, U·x1, tanh(h), U·x2 in the memory of candidate 1's dropped batches;
    # the dropped nodes' ids are not reused (a dropped batch's entry in the block map could
    # otherwise serve a new node of its id)
    a = [m["U"] * xs[0], m["U"] * xs[1], dy.tanh(h), m["U"] * xs[2]]
    ls = [dy.logistic(v) for v in a[1:]]
    if strategy == "agenda":
        assert len(first) == 1 and min(v.i for v in a) > max(first[0])
    loss = dy.sum_elems(dy.esum(ls))
    loss.backward()
    return loss.value()


def test_block_views_after_cg_revert_equal_strategy_none(m):
    _same(_reverted, m)


def _invalidated(m, strategy):
    dy.renew_cg(autobatching=strategy)
    xs = [dy.lookup(m["E"], i) for i in (1, 4, 6)]
    u0 = m["U"] * xs[0]
    u0.value()
    z = m["O"] * xs[1]                  # 4 elements: the later blocks move when recomputed
    z.value()
    us = [m["U"] * x for x in xs]
    loss = dy.sum_elems(dy.esum([dy.logistic(u) for u in us])) + dy.sum_elems(z)
    loss.value()                        # [u1 u2 u3] is one batch, u0 one of its own
    dy.cg().invalidate()
    loss.backward()                     # one forward: [u0 u1 u2 u3], a block at another place
    if strategy == "agenda":
        assert [u0.i] + [u.i for u in us] in [b.ids for b in dy.cg().exe.batches]
    return loss.value()


def test_block_views_after_invalidate_equal_strategy_none(m):
    _same(_invalidated, m)


def _after_error(m, strategy, monkeypatch):
    dy.renew_cg(autobatching=strategy)
    xs = [dy.lookup(m["E"], i) for i in (1, 4, 6)]
    us = [m["U"] * x for x in xs]
    loss = dy.sum_elems(dy.esum([dy.logistic(dy.tanh(u)) for u in us]))

    def broken(xp, xs, attr, data, out):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(OPS["logistic"], "forward_into", broken)
    with pytest.raises(RuntimeError, match="kernel exploded"):
        loss.value()                    # the U·x and tanh batches ran, then were undone
    assert not dy.cg().exe.blocks
    monkeypatch.undo()
    us[1].value()                       # recomputed in other batches, at other places
    loss.backward()
    return loss.value()


def test_block_views_after_an_error_in_a_forward_equal_strategy_none(m, monkeypatch):
    _same(lambda m, s: _after_error(m, s, monkeypatch), m)
