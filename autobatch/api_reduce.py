"""DyNet's reductions along dimensions, normalisations and further losses.

Dimensions are numbered as in DyNet: 0 the rows, 1 the columns. A reduction removes its
dimensions, and a result with none left has shape (1,). DyNet's ``b`` arguments reduce
over its minibatch dimension as well (see minibatch.py)."""
from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from .api import _conformed, _op, _opl, _seq, _shape, _whole, reshape, sqrt, square
from .errors import GraphError, user_line
from .graph import Expression
from .minibatch import BatchedExpression, mean_batches, std_batches, sum_batches
from .params import Parameter
from .ops import OPS
from .ops.reduce_dim import ARGMAX_MODES

__all__ = ["sum_dim", "mean_dim", "moment_dim", "std_dim", "min_dim", "moment_elems", "std_elems",
           "logsumexp", "logsumexp_dim", "cumsum", "argmax", "layer_norm", "weight_norm",
           "l1_distance", "huber_distance", "hinge_dim", "poisson_loss", "pairwise_rank_loss",
           "sparsemax"]


def _fail(name: str, msg: str, x=None):
    """GraphError naming the function, the input's shape and the user's line."""
    shape = f", input shape {_shape(x)}" if type(x) is Expression or isinstance(x, Parameter) else ""
    raise GraphError(f"{name}: {msg} [op {name}{shape}, at {user_line()}]")


def _int(name: str, what: str, v, x=None, lo: int = 0) -> int:
    """v as an int >= lo (an integral float such as 3.0 is accepted)."""
    ok = isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, bool)
    if not ok and isinstance(v, (float, np.floating)) and float(v).is_integer():
        ok = True
    if not ok or int(v) < lo:
        _fail(name, f"{what} must be an integer >= {lo}, got {v!r}", x)
    return int(v)


def _dims(name: str, d, x) -> tuple:
    """DyNet takes a list of dimensions; a single int is accepted too."""
    ds = [d] if isinstance(d, (numbers.Integral, np.integer)) else list(d)
    ds = [_int(name, "a dimension", k, x) for k in ds]
    if not ds or len(set(ds)) != len(ds):
        _fail(name, f"needs distinct dimensions to reduce, got {d!r}", x)
    return tuple(sorted(ds))


def _some(d) -> bool:
    """d names a dimension (an empty list reduces over the minibatch alone)."""
    return isinstance(d, (numbers.Integral, np.integer)) or len(d) > 0


def _moment_over_batch(x, d, r, n):
    """Σ x^r over the dimensions d and DyNet's minibatch, / n (n > 0) or / the count."""
    per = moment_dim(x, d, r, n=n) if _some(d) else (x if r == 1 else x ** r)
    if n > 0:
        total = sum_batches(per)              # per element already / n when d names dimensions
        return total if _some(d) else total * (1.0 / n)
    return mean_batches(per)


def _batched(b, x) -> bool:
    """b=True over a DyNet minibatch: reduce each element, then across the batch (b=True on an
    expression of batch size 1 is b=False)."""
    return bool(b) and type(x) is BatchedExpression


def _all_dims(x) -> tuple:
    return tuple(range(len(_shape(x))))


# --- reductions along dimensions ------------------------------------------------------------
def sum_dim(x: Expression, d: Sequence[int], b: bool = False, n: int = 0) -> Expression:
    """Σ over the dimensions in d (a list, or one int); they are removed: a (m, n) matrix
    gives (n,) for d=[0], (m,) for d=[1], (1,) for d=[0, 1]. n is accepted and ignored, as
    in DyNet (mean_dim's divisor; a sum has none)."""
    _int("sum_dim", "n", n, x)
    if b and not _some(d) and type(x) is not BatchedExpression:
        return x                        # over no dimension and a batch of one: x, as DyNet's
    if _batched(b, x):
        return sum_batches(sum_dim(x, d) if _some(d) else x)
    return _op(OPS["sum_dim"], x, attr=_dims("sum_dim", d, x))


def moment_dim(x: Expression, d: Sequence[int], r: int, b: bool = False, n: int = 0) -> Expression:
    """Σ x^r / n over the dimensions in d (removed), for an integer order r >= 1; n = 0
    divides by the number of elements reduced, n > 0 by n (for masked padding)."""
    if _batched(b, x):
        return _moment_over_batch(x, d, r, n)
    attr = (_dims("moment_dim", d, x), _int("moment_dim", "the order r", r, x, 1), _int("moment_dim", "n", n, x))
    return _op(OPS["moment_dim"], x, attr=attr)


def mean_dim(x: Expression, d: Sequence[int], b: bool = False, n: int = 0) -> Expression:
    """Mean over the dimensions in d (removed); n > 0 divides the sum by n instead of by
    the number of elements."""
    if b and not _some(d) and type(x) is not BatchedExpression and not n:
        return x                        # over no dimension and a batch of one: x, as DyNet's
    if _batched(b, x):
        return _moment_over_batch(x, d, 1, n)
    return _op(OPS["moment_dim"], x, attr=(_dims("mean_dim", d, x), 1, _int("mean_dim", "n", n, x)))


def std_dim(x: Expression, d: Sequence[int], b: bool = False, n: int = 0) -> Expression:
    """Population standard deviation √(mean((x - μ)²)) over the dimensions in d (removed).
    n is accepted and ignored: DyNet's std_dim has no effect of n either."""
    if _batched(b, x):
        if not _some(d):
            return std_batches(x)
        m = _moment_over_batch(x, d, 1, 0)          # the mean, kept dimensions; then broadcast back
        shape = x.dim()[0]
        m = reshape(m, tuple(1 if k in _dims("std_dim", d, x) else s for k, s in enumerate(shape)))
        return sqrt(_moment_over_batch(square(x - m), d, 1, 0))
    _int("std_dim", "n", n, x)
    return _op(OPS["std_dim"], x, attr=_dims("std_dim", d, x))


def moment_elems(x: Expression, r: int) -> Expression:
    """Σ x^r / N over all N elements, for an integer order r >= 1; shape (1,)."""
    return _op(OPS["moment_dim"], x, attr=(_all_dims(x), _int("moment_elems", "the order r", r, x, 1), 0))


def std_elems(x: Expression) -> Expression:
    """Population standard deviation of all elements; shape (1,)."""
    return _op(OPS["std_dim"], x, attr=_all_dims(x))


def min_dim(x: Expression, d: int = 0) -> Expression:
    """Minimum along dimension d (removed; a vector gives (1,)); the gradient goes to the
    first minimum."""
    return _op(OPS["min_dim"], x, attr=_int("min_dim", "d", d, x))


def logsumexp(xs: Sequence[Expression]) -> Expression:
    """Elementwise log Σ_k exp(xs[k]) of a non-empty list of same-shape expressions."""
    return _opl(OPS["logsumexp"], _seq("logsumexp", xs))


def logsumexp_dim(x: Expression, d: int = 0) -> Expression:
    """log Σ exp(x) along dimension d (removed): a (m, n) matrix gives (n,) for d=0."""
    return _op(OPS["logsumexp_dim"], x, attr=_int("logsumexp_dim", "d", d, x))


def cumsum(x: Expression, d: int = 0) -> Expression:
    """Running sum y_i = Σ_{j<=i} x_j along dimension d; same shape. A dimension past x's
    last is one of size 1, as in DyNet: the sum is x."""
    d = _int("cumsum", "d", d, x)
    if d >= len(_shape(x)):
        return x
    return _op(OPS["cumsum"], x, attr=d)


def argmax(x: Expression, gradient_mode: str = "zero_gradient") -> Expression:
    """One-hot vector (n,) of the first maximum of a vector x. gradient_mode
    "zero_gradient" stops the gradient; "straight_through_gradient" passes the output's
    gradient to x unchanged (Bengio et al., 2013). DyNet has no default for the mode."""
    if gradient_mode not in ARGMAX_MODES:
        _fail("argmax", f"unknown gradient mode {gradient_mode!r}; use one of {', '.join(ARGMAX_MODES)}", x)
    name = "argmax" if gradient_mode == "straight_through_gradient" else "argmax_zero"
    return _op(OPS[name], x, attr=gradient_mode)


# --- normalisations --------------------------------------------------------------------------
def layer_norm(x: Expression, g: Expression, b: Expression) -> Expression:
    """g ⊙ (x - μ) / (σ + 1e-8) + b with the mean μ and the population standard deviation
    σ of all elements of x (Ba et al., 2016). g and b have x's shape, or fit it as in
    DyNet's broadcasting (a (m,) gain for a (m, n) x scales rows); same shape as x."""
    return _op(OPS["layer_norm"], x, g, b)


def weight_norm(w: Expression, g: Expression) -> Expression:
    """g · w / ‖w‖ (Frobenius norm) for a gain g with one element; shape of w
    (Salimans and Kingma, 2016)."""
    return _op(OPS["weight_norm"], w, g)


# --- losses -------------------------------------------------------------------------------------
def l1_distance(x: Expression, y: Expression) -> Expression:
    """Σ |x - y| of two same-shape expressions (a column and a vector too); shape (1,)."""
    return _conformed(OPS["l1_distance"], x, y)


def huber_distance(x: Expression, y: Expression, c: float = 1.345) -> Expression:
    """Σ L_c(x - y) of two same-shape expressions, L_c(d) = d²/2 for |d| <= c and
    c·|d| - c²/2 beyond; shape (1,)."""
    c = float(c)
    if not c > 0:
        _fail("huber_distance", f"c must be positive, got {c}", x)
    return _conformed(OPS["huber_distance"], x, y, attr=c)


def hinge_dim(x: Expression, v: Sequence[int], d: int = 0, m: float = 1.0) -> Expression:
    """Hinge losses of a (r, c) matrix of scores, one per slice along dimension d: with
    d=0, column j's loss is Σ_{i≠v[j]} max(0, m - x[v[j], j] + x[i, j]), len(v) = c and the
    result has shape (c,); with d=1 the same per row (len(v) = r, shape (r,))."""
    s = _shape(x)
    d = _int("hinge_dim", "d", d, x)
    if len(s) != 2 or d > 1:
        _fail("hinge_dim", f"needs a matrix and d in (0, 1), got d={d}", x)
    v = [_whole(i) for i in v]          # whole floats and 0-d arrays, as DyNet takes them
    if len(v) != s[1 - d]:
        _fail("hinge_dim", f"needs {s[1 - d]} gold indices (one per slice along dimension {d}), "
              f"got {len(v)}", x)
    for i in v:
        if not isinstance(i, (numbers.Integral, np.integer)) or not 0 <= i < s[d]:
            _fail("hinge_dim", f"index {i!r} out of range for dimension {d}", x)
    return _op(OPS["hinge_dim"], x, attr=(d, float(m)), data=tuple(int(i) for i in v))


def poisson_loss(log_lambda: Expression, x: int) -> Expression:
    """-log P(x) of a count x >= 0 under a Poisson distribution of rate exp(log_lambda):
    exp(log_lambda) - x·log_lambda + log x!. log_lambda has one element; same shape."""
    return _op(OPS["poisson_loss"], log_lambda, data=_int("poisson_loss", "the count x", x, log_lambda))


def pairwise_rank_loss(x: Expression, y: Expression, m: float = 1.0) -> Expression:
    """max(0, m - x + y) for x, y of shape (1,) (or (1, n), elementwise), as in DyNet,
    which takes these (per-instance scalars) only; same shape."""
    return _op(OPS["pairwise_rank_loss"], x, y, attr=float(m))


def sparsemax(x: Expression) -> Expression:
    """Sparsemax of a vector (n,) or column (n, 1) (Martins and Astudillo, 2016): the
    closest point of the probability simplex, max(x - τ, 0) with τ making it sum to 1;
    same shape."""
    return _op(OPS["sparsemax"], x)
