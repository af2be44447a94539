"""act(base(...)) as one node: an activation fused into the product that feeds it.

``dy.logistic(dy.affine_transform([b, W, x]))`` is two nodes, two batches and two arena
blocks, yet the activation only ever sees its product: the API (fastpath.unary) turns such a
pair into one node of the fused op when nothing else can reach the product (see
``ComputationGraph.fused_sig``; vertex traces: ``Trace._fuse_activations``). The fused kernel runs the product into the batch's block and the
activation in place over it while it is still in cache; backward turns the output's gradient
into the product's (the activation's derivative needs only its output) and hands it to the
product's own backward.

Which pairs fuse is declared by the ops, not named here: a base declares ``fuses_out``
(its backward never reads its output, which the activation overwrites), an activation
declares ``dfdx_from_output`` (its derivative is a function of its output alone)."""
from __future__ import annotations

from .base import OPS, Op


def _into(op, xp, xs, attr, data, out):
    """op's result written into out: the fused ops declare forward_into whatever their parts do."""
    if op.has_into:
        op.forward_into(xp, xs, attr, data, out)
    else:
        out[...] = op.forward(xp, xs, attr, data)


class Fused(Op):
    """One registered instance per (base, activation) pair; everything but the last step of
    forward and the first of backward is the base's."""

    def __init__(self, base: Op, act: Op):
        self.base, self.act = base, act
        self.name = f"{base.name}>{act.name}"
        self.shared, self.heavy, self.elementwise = base.shared, base.heavy, base.elementwise
        self.has_data = base.has_data

    def shared_of(self, n):
        return self.base.shared_of(n)

    def shape(self, shapes, attr):
        return self.base.shape(shapes, attr)

    def sig(self, shapes, attr):
        return self.base.sig(shapes, attr)

    def forward(self, xp, xs, attr, data):
        y = self.base.forward(xp, xs, attr, data)
        self.act.forward_into(xp, [y], None, None, y)
        return y

    def forward_into(self, xp, xs, attr, data, out):
        _into(self.base, xp, xs, attr, data, out)
        self.act.forward_into(xp, [out], None, None, out)

    def grad_prologue(self, xp, y, gy, inplace=False):
        """The product's gradient from the output's gy: into gy itself where inplace (the
        vertex engine's own block), else a new array. On NumPy the derivative goes through
        a scratch block of about 256 KB, row block by row block: a whole-size temporary
        would be fresh memory (page faults) and out of cache when multiplied."""
        out = gy if inplace else xp.empty_like(gy)
        n = gy.shape[0]
        step = max(1, (1 << 16) // max(1, gy[:1].size)) if xp.__name__ == "numpy" else n
        f = xp.empty_like(gy[:step])
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            fb = f[:r1 - r0]
            self.act.dfdx_from_output(xp, y[r0:r1], fb)
            xp.multiply(gy[r0:r1], fb, out=out[r0:r1])
        return out

    def backward(self, xp, xs, y, gy, attr, data):
        return self.base.backward(xp, xs, None, self.grad_prologue(xp, y, gy), attr, data)

    # the vertex engine's split backward: gy is the product's gradient (grad_prologue ran)
    def input_grads(self, xp, xs, gy, attr, needs):
        return self.base.input_grads(xp, xs, gy, attr, needs)

    def param_grads(self, xp, xs, gy, attr, needs):
        return self.base.param_grads(xp, xs, gy, attr, needs)

    def grad_into_inputs(self, shapes, is_param):
        return self.base.grad_into_inputs(shapes, is_param)

    def grad_into(self, xp, xs, y, gy, attr, j, out):
        self.base.grad_into(xp, xs, None, gy, attr, j, out)


class FusedIn(Op):
    """op with its input j an activation of the node's input: o·tanh(c) (an LSTM's output) as
    one node over (o, c). Forward and backward compute the activation into a temporary (backward
    again, rather than keep a block per node: it costs one elementwise pass)."""

    def __init__(self, op: Op, act: Op, j: int):
        self.base, self.act, self.j = op, act, j
        self.name = f"{op.name}<{act.name}@{j}"
        self.heavy, self.elementwise = op.heavy, op.elementwise

    def shape(self, shapes, attr):
        return self.base.shape(shapes, attr)

    def sig(self, shapes, attr):
        return self.base.sig(shapes, attr)

    def _acted(self, xp, xs):
        t = xp.empty_like(xs[self.j])
        self.act.forward_into(xp, [xs[self.j]], None, None, t)
        ys = list(xs)
        ys[self.j] = t
        return ys, t

    def forward(self, xp, xs, attr, data):
        return self.base.forward(xp, self._acted(xp, xs)[0], attr, data)

    def forward_into(self, xp, xs, attr, data, out):
        _into(self.base, xp, self._acted(xp, xs)[0], attr, data, out)

    def backward(self, xp, xs, y, gy, attr, data):
        ys, t = self._acted(xp, xs)
        grads = self.base.backward(xp, ys, y, gy, attr, data)
        gt = grads[self.j]
        if gt is not None:
            # a fresh array: the base may hand one array to several inputs (add's gy)
            g = grads[self.j] = xp.empty_like(t)
            self.act.dfdx_from_output(xp, t, g)
            g *= gt
        return grads


FUSED: dict = {}     # (base op, activation op) -> fused op
FUSED_IN: dict = {}  # (op, activation op, input j) -> op over the activation's input
# product op -> the op of b + product over (b, *its inputs) for a parameter b: W·x + b is
# affine_transform([b, W, x]) (ComputationGraph.absorb_sum)
SUMS: dict = {}


def _register_pairs():
    bases = [op for op in OPS.values() if getattr(op, "fuses_out", False)]
    acts = [op for op in OPS.values() if hasattr(op, "dfdx_from_output")]
    for base in bases:
        for act in acts:
            op = FUSED[(base, act)] = Fused(base, act)
            OPS[op.name] = op
    for op in [op for op in OPS.values() if hasattr(op, "with_bias")]:
        SUMS[op] = OPS[op.with_bias]
    for op in [op for op in OPS.values() if getattr(op, "fuses_in", False)]:
        for act in acts:
            for j in (0, 1):
                f = FUSED_IN[(op, act, j)] = FusedIn(op, act, j)
                OPS[f.name] = f


_register_pairs()
