"""Input gradients written straight into the engine's gradient blocks (NumPy and CuPy).

An op's backward returns fresh arrays (its temporaries, then the result), which the engine
then copies or adds into the input's block of the gradient arena: for Tree-FC's gx = gy·W
that copy is a whole (B, 512) block per frontier. For the few ops that dominate vertex
functions, the entries below write the gradient of one input into a given block (``add``:
add to it), so a block nothing wrote yet costs no temporary and no copy.

The formulas are those of the ops' backward (autobatch/ops/elementwise.py, linalg.py), in
place; the table is keyed by op name, in this one place, and its names are checked against the
op registry at import. The Hypothesis test (tests/test_vertex_hypothesis.py) compares the
engine with the lazy graph with and without these entries (engine.TRACK)."""
from __future__ import annotations

from ..ops import OPS


class _Entry:
    """ok(shapes, is_param): whether the entry applies to inputs of these per-vertex shapes; grad(xp, xs, y, gy, attr,
    j, out, add): out (+)= the gradient of input j; covers(j): the inputs it computes; splits:
    the others are parameters whose gradients op.param_grads gives (see lazygrad.py)."""

    __slots__ = ("ok", "grad", "covers", "splits")

    def __init__(self, ok, grad, covers, splits=False):
        self.ok, self.grad, self.covers, self.splits = ok, grad, covers, splits


def _stacked(shapes, is_param):
    return not any(is_param)


def _tanh(xp, xs, y, gy, attr, j, out, add):
    if add:
        out += gy * (1 - y * y)
        return
    xp.multiply(y, y, out=out)
    xp.subtract(1, out, out=out)
    out *= gy


def _logistic(xp, xs, y, gy, attr, j, out, add):
    if add:
        out += gy * y * (1 - y)
        return
    xp.subtract(1, y, out=out)
    out *= y
    out *= gy


def _cmult(xp, xs, y, gy, attr, j, out, add):
    if add:
        out += gy * xs[1 - j]
    else:
        xp.multiply(gy, xs[1 - j], out=out)


def _square(xp, xs, y, gy, attr, j, out, add):
    if add:
        out += 2 * gy * xs[0]
        return
    xp.multiply(gy, xs[0], out=out)
    out *= 2


def _vectors(covers):
    """A product's x's are stacked (B, n) matrices, not parameters: one GEMM per product,
    which op.param_grads (the split backward) also assumes."""
    def ok(shapes, is_param):
        return all(len(shapes[j]) == 1 and not is_param[j] for j in range(len(shapes)) if covers(j))
    return ok


def _products(xp, xs, y, gy, attr, j, out, add):
    """b + W1·x1 + … (affine), c + W1·x1 + … (matmul_add), W·x (matmul_shared): x_j's
    gradient is gy·W_j, c's is gy."""
    if j == 0:                              # matmul_add's c
        if add:
            out += gy
        else:
            out[...] = gy
    elif add:
        out += gy @ xs[j - 1]
    else:
        xp.matmul(gy, xs[j - 1], out=out)


def _ALL(j):
    return True


def _affine_x(j):                           # [b, W1, x1, W2, x2, ...]
    return j >= 2 and j % 2 == 0


def _matmul_add_x(j):                       # [c, W1, x1, ...]
    return j % 2 == 0


def _matmul_x(j):                           # [W, x]
    return j == 1


TABLE = {
    "tanh": _Entry(_stacked, _tanh, _ALL),
    "logistic": _Entry(_stacked, _logistic, _ALL),
    "cmult": _Entry(lambda shapes, p: len(shapes) == 2 and not any(p), _cmult, _ALL),
    "square": _Entry(_stacked, _square, _ALL),
    "affine": _Entry(_vectors(_affine_x), _products, _affine_x, splits=True),
    "matmul_add": _Entry(_vectors(_matmul_add_x), _products, _matmul_add_x, splits=True),
    "matmul_shared": _Entry(_vectors(_matmul_x), _products, _matmul_x, splits=True),
}

for _name in TABLE:
    if _name not in OPS:                    # an op renamed: its entry must follow
        raise ImportError(f"autobatch.vertex.inplace: no op named {_name!r}")


def entry(op, shapes, is_param):
    """The entry of an instruction (op over inputs of these per-vertex shapes), or None where
    the engine runs op.backward."""
    e = TABLE.get(op.name)
    return e if e is not None and e.ok(shapes, is_param) else None
