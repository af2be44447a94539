"""DyNet's minibatch dimension, for programs that batch by hand (``lookup_batch``,
``pickneglogsoftmax_batch``, ``sum_batches``, ``inputTensor(..., batched=True)``).

A batched expression here is the list of its elements' Expressions, one per batch element,
and an op applied to it runs once per element: the same nodes a per-instance program builds,
which the scheduler batches as it batches any instances. So hand-batched programs need no
second op set and no second batching mechanism, only this bookkeeping at the API.

DyNet's rules: operands of one op have equal batch sizes, or size 1 (broadcast); a batch of
one is an ordinary expression; ``npvalue()`` puts the batch last, ``value()`` of vectors is the
flat list of the elements' values in turn; ``backward()`` needs one element (``sum_batches``
first)."""
from __future__ import annotations

import functools
import itertools
import numbers
import sys
import types

import numpy as np

from . import fastpath
from .conversions import whole
from .errors import GraphError, GraphIndexError, _internal, called, user_line
from .graph import Expression
from .params import Parameter


class BatchedExpression(Expression):
    """B >= 2 Expressions of one shape, one per batch element (DyNet dim: (shape, B)). An
    Expression to isinstance, as DyNet's minibatched expressions are (programs test it to
    tell expressions from arrays), but never one to the engine: its inline paths test the
    exact type, and every method that reads a node is overridden here (the inherited ones,
    incremental_forward and copying, call only these)."""

    __slots__ = ("xs",)

    def __init__(self, xs):
        self.xs = xs

    def _check(self):
        for x in self.xs:
            x._check()

    def set(self, *args, **kw):
        raise GraphError(f"set() of a batch of {len(self.xs)} elements: set each element's input "
                         f"before batching them [at {user_line()}]")

    def dim(self):
        """(shape of one element, batch size), as DyNet's."""
        return (self.xs[0].dim()[0], len(self.xs))

    def forward(self, recalculate: bool = False) -> None:
        """Compute every element, in one forward (so they are batched together)."""
        if recalculate:
            self.xs[0].forward(recalculate=True)
        from .api_graph import forward
        forward(self.xs)

    def npvalue(self, recalculate: bool = False):
        """The elements' values stacked on a last axis: shape (*shape, B), as DyNet's."""
        self.forward(recalculate)
        return np.stack([x.npvalue() for x in self.xs], axis=-1)

    def value(self, recalculate: bool = False):
        """As DyNet's: the flat list of all elements' values in turn for vectors and scalars,
        npvalue() for matrices and tensors."""
        v = self.npvalue(recalculate)
        return v if v.ndim > 2 else v.reshape(-1, order="F").tolist()

    def vec_value(self, recalculate: bool = False) -> list:
        """All elements' values in turn as one flat list (each column-major), as DyNet's."""
        return self.npvalue(recalculate).reshape(-1, order="F").tolist()

    def tensor_value(self, recalculate: bool = False):
        from .graph import Tensor
        return self.npvalue(recalculate).view(Tensor)

    def scalar_value(self, recalculate: bool = False) -> float:
        raise GraphError(f"scalar_value() of a batch of {len(self.xs)} elements of shape {self.dim()[0]}; "
                         f"dy.sum_batches(x) or dy.pick_batch_elem(x, k) gives one [at {user_line()}]")

    def backward(self, full: bool = False) -> None:
        raise GraphError(f"backward() needs a scalar loss, not a batch of {len(self.xs)} elements of shape "
                         f"{self.dim()[0]}: call it on dy.sum_batches(loss) [at {user_line()}]")

    def gradient(self):
        """The elements' gradients stacked on a last axis, as npvalue()."""
        return np.stack([x.gradient() for x in self.xs], axis=-1)

    def __repr__(self):
        return f"BatchedExpression(batch={len(self.xs)}, shape={self.dim()[0]})"

    # the arithmetic is set at the end of the module from the API's operator functions


class BatchedOperand(GraphError):
    """Raised where an op's operand conversion (api._id, api._shape) meets a batch, before the
    op adds a node; the op's wrapper (per_element) catches it and runs the op per element.
    Unbatched calls pay for a try block, not for a scan of their operands. Seen by a user only
    from a function that takes one expression, never a batch."""

    def __init__(self, msg=None):
        super().__init__(msg or f"a batched expression (DyNet's minibatch) was given where one expression is "
                                f"needed; dy.pick_batch_elem(x, k) or dy.sum_batches(x) gives one "
                                f"[at {user_line()}]")


def batch_of(xs):
    """The Expressions xs as a batch (one is an ordinary expression, as DyNet's batch of one)."""
    xs = list(xs)
    if not xs:
        raise GraphError(f"{called() or 'minibatch'}: a minibatch of no elements (an empty list of indices or "
                         f"values) [at {user_line()}]")
    return xs[0] if len(xs) == 1 else BatchedExpression(xs)


def _is_batched(a) -> bool:
    t = type(a)
    return t is BatchedExpression or (t is list or t is tuple) and BatchedExpression in map(type, a)


def _sizes(args):
    for a in args:
        if type(a) is BatchedExpression:
            yield len(a.xs)
        elif type(a) is list or type(a) is tuple:
            yield from (len(e.xs) for e in a if type(e) is BatchedExpression)


def _each(a, B: int):
    """Operand a for each of B batch elements: a batch gives its elements, a list or tuple
    holding batches one list (tuple) per element, anything else itself B times."""
    t = type(a)
    if t is BatchedExpression:
        return a.xs
    if (t is list or t is tuple) and BatchedExpression in map(type, a):
        return list(map(t, zip(*[e.xs if type(e) is BatchedExpression else itertools.repeat(e, B) for e in a])))
    return itertools.repeat(a, B)


def run_per_element(name, f, args, kw=None):
    """f(*args) once per batch element (operands of batch size B give element k, the others
    pass whole); Expression results come back as a batch, tuples as a tuple of batches."""
    return _per_element(f, args, kw or {}, name)


def _per_element(f, args, kw, name=None):
    """f over batch elements: operands of batch size B give element k, the others pass whole."""
    sizes = sorted(set(_sizes(list(args) + list(kw.values()))))
    if len(sizes) > 1:
        raise GraphError(f"{name or f.__name__}: operands of batch sizes {sizes}; DyNet's rule: equal sizes, or an "
                         f"unbatched operand [at {user_line()}]")
    B = sizes[0]
    each = zip(*[_each(a, B) for a in args]) if args else itertools.repeat((), B)
    if kw:
        names = list(kw)
        kws = zip(*[_each(kw[n], B) for n in names])
        outs = [f(*a, **dict(zip(names, k))) for a, k in zip(each, kws)]
    else:
        outs = list(itertools.starmap(f, each))
    if all(type(o) is Expression for o in outs):
        return BatchedExpression(outs)
    if all(type(o) is tuple for o in outs):
        return tuple(batch_of(z) for z in zip(*outs))
    return outs


# iterators an op may take for its list of operands (DyNet takes lists only; we take these too)
_ONE_SHOT = frozenset({types.GeneratorType, map, filter, zip, itertools.chain, reversed, enumerate,
                       type(iter([])), type(iter(()))})


def _raised_inside(e) -> bool:
    """Whether e's innermost Python frame is the package's (a conversion it called)."""
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return _internal(tb.tb_frame.f_code.co_filename)


def per_element(f, each=None):
    """f, run once per batch element when an operand (or an item of a list operand) is a
    BatchedExpression, which f's operand conversion reports by raising BatchedOperand. each:
    what runs per element (an inline fast path whose fallback f is: its elements then take
    the fast path), f by default."""
    each = each or f

    @functools.wraps(f)
    def g(*args, **kw):
        if not _ONE_SHOT.isdisjoint(map(type, args)):
            # a generator of operands would be used up by the first try, which may meet a batch
            args = tuple(list(a) if type(a) in _ONE_SHOT else a for a in args)
        try:
            return f(*args, **kw)
        except BatchedOperand:
            if not any(map(_is_batched, args)) and not any(map(_is_batched, kw.values())):
                raise               # a batch inside f's own work: the op that met it is unwrapped
            return _per_element(each, args, kw, f.__name__)
        except (TypeError, ValueError) as e:
            # Python's or NumPy's own conversion of a bad argument (int("a"), float(None),
            # iterating None): named as the user's call, with the user's line, as ours are.
            # Only a plain TypeError or ValueError raised in the package (not in a user's
            # iterator or callback, whose exception stays as it is)
            if type(e) in (TypeError, ValueError) and len(e.args) == 1 and isinstance(e.args[0], str) \
                    and "[at " not in e.args[0] and _raised_inside(e):
                e.args = (f"{called() or f.__name__}: {e.args[0]} [at {user_line()}]",)
            raise
    g._per_element = True
    g.__code__ = g.__code__.replace(co_name=f.__name__)     # errors.called() names the user's call
    return g


# --- DyNet's minibatch functions -------------------------------------------------------------------
def _ints(name, vs) -> list:
    """vs as a list of ints: whole floats pass (as DyNet's ids read as floats), 1.5 or '3' do not."""
    if type(vs) is list and vs and all([type(v) is int for v in vs]):
        return vs[:]            # the usual list of ids, without a check per id
    if isinstance(vs, (numbers.Integral, np.integer)):
        return [int(vs)]
    try:
        out = [whole(v) for v in vs]
    except TypeError:
        out = None
    if out is None or not all(isinstance(v, (numbers.Integral, np.integer)) for v in out):
        raise GraphError(f"{name}: expected a list of ints, got {vs!r} [at {user_line()}]")
    out = [int(v) for v in out]
    if not out:
        raise GraphError(f"{name}: an empty list of indices (a batch needs one element at least) "
                         f"[at {user_line()}]")
    return out


def _elements(x) -> list:
    if type(x) is BatchedExpression:
        return list(x.xs)
    if isinstance(x, Parameter):         # its expression (a table's is DyNet's (d, V))
        from .api import parameter
        return [parameter(x)]
    if not isinstance(x, Expression):
        raise GraphError(f"{called() or 'minibatch'}: expected an expression, got a {type(x).__name__} "
                         f"[at {user_line()}]")
    return [x]


def _per_index(name, f, x, vs, *rest):
    """f(element k of x, vs[k], *rest) for each k; an unbatched x serves every index."""
    vs = _ints(name, vs)
    xs = _elements(x)
    if len(xs) > 1 and len(xs) != len(vs):
        raise GraphError(f"{name}: {len(vs)} indices for a batch of {len(xs)} elements [at {user_line()}]")
    return batch_of(f(xs[k if len(xs) > 1 else 0], v, *rest) for k, v in enumerate(vs))


def lookup_batch(p, indices, update: bool = True):
    """Rows ``indices`` of the lookup table p, one per batch element: dim ((d,), len(indices))."""
    from .api import lookup
    return batch_of(lookup(p, i, update) for i in _ints("lookup_batch", indices))


def pick_batch(e, indices, dim: int = 0):
    """pick(element k, indices[k], dim) for each batch element (an unbatched e: for each index)."""
    from .api import pick
    return _per_index("pick_batch", pick, e, indices, dim)


def pickneglogsoftmax_batch(x, vs):
    """pickneglogsoftmax(element k, vs[k]) for each batch element: dim ((1,), B)."""
    from .api import pickneglogsoftmax
    return _per_index("pickneglogsoftmax_batch", pickneglogsoftmax, x, vs)


def hinge_batch(x, vs, m: float = 1.0):
    """hinge(element k, vs[k], m) for each batch element."""
    from .api import hinge
    return _per_index("hinge_batch", hinge, x, vs, m)


def pick_batch_elem(x, v: int):
    """Batch element v of x, an ordinary expression."""
    xs = _elements(x)
    v = whole(v)
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)):
        raise GraphError(f"pick_batch_elem: the element must be an integer, got {v!r} [at {user_line()}]")
    v = int(v)
    if not 0 <= v < len(xs):
        raise GraphIndexError(f"pick_batch_elem: element {v} of a batch of {len(xs)} [at {user_line()}]")
    return xs[v]


def pick_batch_elems(x, vs):
    """The batch of elements vs of x."""
    return batch_of(pick_batch_elem(x, v) for v in _ints("pick_batch_elems", vs))


def concatenate_to_batch(xs):
    """The elements of every expression of xs, in turn, as one batch (equal shapes)."""
    els = [e for x in xs for e in _elements(x)]
    if not els:
        raise GraphError(f"concatenate_to_batch: needs at least one expression [at {user_line()}]")
    shapes = {e.dim()[0] for e in els}
    if len(shapes) > 1:
        raise GraphError(f"concatenate_to_batch: elements of shapes {sorted(shapes)}; a batch has one shape "
                         f"[at {user_line()}]")
    return batch_of(els)


def sum_batches(x):
    """The sum of x's batch elements (x itself if it has one)."""
    from .api import esum
    xs = _elements(x)
    return xs[0] if len(xs) == 1 else esum(xs)


def mean_batches(x):
    """The mean of x's batch elements."""
    from .api import average
    xs = _elements(x)
    return xs[0] if len(xs) == 1 else average(xs)


def moment_batches(x, r: int):
    """The mean over batch elements of x**r (elementwise): DyNet's r-th moment."""
    from .api import average
    return average([e ** r for e in _elements(x)])


def std_batches(x):
    """The standard deviation over batch elements (elementwise; the mean of squares, as DyNet's)."""
    from .api import average, sqrt, square
    xs = _elements(x)
    m = average(xs)
    return sqrt(average([square(e - m) for e in xs]))


def dropout_batch(x, p: float):
    """Each batch element dropped whole with probability p (else scaled by 1/(1-p))."""
    from .api_random import block_dropout
    return batch_of(block_dropout(e, p) for e in _elements(x))


def input_batch(arr):
    """inputTensor(arr, batched=True): the last axis of arr is the batch (a list of arrays:
    one per element); a vector gives a batch of (1,) scalars."""
    from .api import _graph, _numbers, inputTensor
    from .ops import OPS
    if type(arr) is list and arr and all(isinstance(a, np.ndarray) for a in arr):
        if len({a.shape for a in arr}) > 1:
            raise GraphError(f"inputTensor: a minibatch's elements must have one shape, got "
                             f"{sorted({a.shape for a in arr})} [at {user_line()}]")
        return batch_of(inputTensor(a) for a in arr)
    a = _numbers("inputTensor", arr, copy=False)   # checked and converted once (copied below)
    if a.ndim == 0:
        return inputTensor(a)
    if a.shape[-1] == 0:
        raise GraphError(f"inputTensor: a minibatch of no elements (batched=True, the last axis of shape "
                         f"{a.shape} is the batch) [at {user_line()}]")
    # element k's values, each its own input node (a copy: later changes to arr do not leak in)
    els = np.moveaxis(a.reshape(a.shape if a.ndim > 1 else (1, a.shape[0])), -1, 0).copy()
    g, op, shape = _graph(), OPS["input"], els.shape[1:]
    return batch_of(g.add(op, (), shape, e) for e in els)


def reshape_batch(x, d, batch_size: int):
    """reshape with DyNet's batch_size: each element reshaped (equal batch sizes, or the shape of
    one element), else the elements' values in turn, as DyNet's memory holds them, cut into
    batch_size elements (one: the elements joined; from one: it is cut)."""
    from .api import concatenate, pickrange, reshape
    d = (int(d),) if isinstance(d, numbers.Integral) else tuple(int(k) for k in d)
    xs = _elements(x)
    B, n = len(xs), int(np.prod(xs[0].dim()[0]))
    m = int(np.prod(d))
    if batch_size == B or batch_size == 1 and m == n:
        # (the second: an element's size, where DyNet refuses: each element, as per instance)
        return batch_of(reshape(e, d) for e in xs)
    if batch_size >= 1 and B * n == m * batch_size:
        # the elements' values in turn, cut into batch_size pieces of m (a (4, 4) x 2 batch
        # into (4,) x 8: a biaffine parser's scores per head)
        flat = reshape(xs[0], (n,)) if B == 1 else concatenate([reshape(e, (n,)) for e in xs])
        if batch_size == 1:
            return reshape(flat, d)
        return batch_of(reshape(pickrange(flat, k * m, (k + 1) * m), d) for k in range(batch_size))
    raise GraphError(f"reshape: {B} element(s) of shape {xs[0].dim()[0]} cannot become {batch_size} of shape "
                     f"{d} [at {user_line()}]")


def repeat(name: str, batch_size, make):
    """make() once per batch element (random tensors, zeroes: independent draws)."""
    if batch_size == 1:
        return make()
    if not isinstance(batch_size, (numbers.Integral, np.integer)) or batch_size < 1:
        raise GraphError(f"{name}: batch_size must be an int >= 1, got {batch_size!r} [at {user_line()}]")
    return batch_of(make() for _ in range(int(batch_size)))


BATCH_FUNCTIONS = ["lookup_batch", "pick_batch", "pick_batch_elem", "pick_batch_elems",
                   "pickneglogsoftmax_batch", "hinge_batch", "concatenate_to_batch", "sum_batches",
                   "mean_batches", "moment_batches", "std_batches", "dropout_batch"]


def _swap(f, swapped):
    """f's replacement, wrapping fast-path fallbacks on the way (None: keep f)."""
    cell = fastpath.slow_cell(f)
    if cell is not None:
        if not getattr(cell.cell_contents, "_per_element", False):
            cell.cell_contents = per_element(cell.cell_contents, f)
        return None
    return swapped.get(f)


def install(modules, skip, classes) -> None:
    """Make the public op functions of ``modules`` and the operators of ``classes`` run per
    element on batched operands. Inline fast paths get it in their fallback only, so
    unbatched programs pay nothing there; the other functions get the wrapper (a type test
    per operand). Every reference to a replaced function in the package's modules is rebound,
    so internal callers (the builders) see the same functions as users."""
    swapped = {}
    for m in modules:
        for name, f in list(vars(m).items()):
            if name.startswith("_") and name not in ("_add", "_sub", "_mul", "_div", "_getitem"):
                continue
            if not callable(f) or isinstance(f, type) or name in skip or getattr(f, "__module__", None) != m.__name__:
                continue
            if fastpath.slow_cell(f) is None and not getattr(f, "_per_element", False):
                swapped[f] = per_element(f)
    targets = [vars(mod) for k, mod in list(sys.modules.items()) if k == "autobatch" or k.startswith("autobatch.")]
    for ns in targets:
        for k, v in list(ns.items()):
            if callable(v) and not isinstance(v, type) and getattr(v, "__hash__", None) is not None:
                w = _swap(v, swapped)
                if w is not None:
                    ns[k] = w
    for cls in classes:
        for k, v in list(vars(cls).items()):
            if callable(v) and not isinstance(v, type):
                w = _swap(v, swapped)
                if w is not None:
                    setattr(cls, k, w)
    # a batch's operators are the Expression's, which now map over elements
    for k in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__getitem__", "__pow__"):
        setattr(BatchedExpression, k, getattr(Expression, k))
    BatchedExpression.__neg__ = lambda self: BatchedExpression([-x for x in self.xs])
