"""The DyNet-named expression functions. Each checks its inputs (so that bad input
fails here, naming the op, the shapes and the user's line, before anything is
added to the graph) and appends one node. Shapes: vectors are (n,), matrices (m, n)."""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np

from . import runtime
from .conversions import real, whole as _whole
from .errors import GraphError, GraphIndexError, StaleExpressionError, called, user_line
from . import api_dims, fastpath, minibatch
from .graph import DROPPED, ComputationGraph, Expression, cg, expression
from .ops import OPS
from .params import LookupParameter, Parameter

_S = runtime.state()

_TANH, _LOGISTIC, _RECTIFY, _ELU = OPS["tanh"], OPS["logistic"], OPS["rectify"], OPS["elu"]
_EXP, _LOG, _SQRT, _SQUARE, _ABS = OPS["exp"], OPS["log"], OPS["sqrt"], OPS["square"], OPS["abs"]
_ADD, _SUB, _CMULT, _CDIV = OPS["add"], OPS["sub"], OPS["cmult"], OPS["cdiv"]
_SCALE, _SDIV = OPS["scale_shift"], OPS["scalar_div"]
_MM_SHARED, _MM, _AFFINE = OPS["matmul_shared"], OPS["matmul"], OPS["affine"]
_LOOKUP, _PNLS, _CONCAT, _PICKRANGE = OPS["lookup"], OPS["pickneglogsoftmax"], OPS["concatenate"], OPS["pickrange"]
_LSTM_CELL, _MATMUL_ADD = OPS["lstm_cell"], OPS["matmul_add"]
_PICK, _SOFTMAX, _LOG_SOFTMAX, _DROPOUT = OPS["pick"], OPS["softmax"], OPS["log_softmax"], OPS["dropout"]
_DOT, _TRANSPOSE = OPS["dot_product"], OPS["transpose"]
_NP_INTS = frozenset(np.sctypeDict[k] for k in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))


def _graph() -> ComputationGraph:
    g = _S.graph
    return g if g is not None else cg()


def _stale(x: Expression, op=None) -> StaleExpressionError:
    """The error for x used outside its graph, named as the user's call (or op)."""
    api = called()
    what = f"{api}: " if api else f"{op.name}: " if op is not None else ""
    return StaleExpressionError(
        f"{what}an Expression from a computation graph that was renewed was used "
        f"(node {x.i}, shape {x.cg.shapes[x.i]}) [at {user_line()}]"
        if not x.cg.alive else
        f"{what}an Expression from another computation graph was used [at {user_line()}]")


def _id(x, g: ComputationGraph, op=None) -> int:
    """Node id of an Expression or Parameter in graph g (op: named in error messages)."""
    if type(x) is Expression:
        if x.cg is not g:
            raise _stale(x, op)
        return x.i
    if isinstance(x, Parameter):
        return parameter(x).i if _table(x) else g.pid(x)
    if type(x) is minibatch.BatchedExpression:
        raise minibatch.BatchedOperand     # DyNet's minibatch: the op runs per element
    api = called()
    what = f"{api}: " if api else f"{op.name}: " if op is not None else ""
    raise TypeError(f"{what}expected an Expression or Parameter, got {type(x).__name__} [at {user_line()}]")


def _op(op, *xs, attr=None, data=None) -> Expression:
    g = _S.graph or cg()
    return g.add(op, tuple([x.i if type(x) is Expression and x.cg is g else _id(x, g, op) for x in xs]), attr, data)


def _op1(op, x) -> Expression:
    """Unary op without attributes: the most common call, kept short."""
    g = _S.graph or cg()
    return g.add1(op, x.i if type(x) is Expression and x.cg is g else _id(x, g, op))


def _op2(op, x, y, attr=None) -> Expression:
    """Binary op (cmult, +, -; attr: lstm_cell's forget bias): the second most common call."""
    g = _S.graph or cg()
    a = x.i if type(x) is Expression and x.cg is g else _id(x, g, op)
    b = y.i if type(y) is Expression and y.cg is g else _id(y, g, op)
    if op.broadcasts and g.shapes[a] != g.shapes[b]:
        a, b = api_dims.broadcast_pair(g, op, a, b)
    return g.add2(op, a, b, attr)


def _opl(op, xs: Sequence, attr=None, data=None) -> Expression:
    if len(xs) == 0:
        raise GraphError(f"{op.name}: needs at least one expression, got an empty list [at {user_line()}]")
    g = _graph()
    return g.add(op, tuple([_id(x, g, op) for x in xs]), attr, data)


def _is_param_node(x, g) -> bool:
    return (isinstance(x, Parameter) and not _table(x)) or (type(x) is Expression and x.i in g.ext)


def _table(p) -> bool:
    """A lookup table used whole: its expression is DyNet's (d, V), a transpose of the table."""
    return p.is_lookup and len(p.data.shape) == 2


# --- inputs -----------------------------------------------------------------------
# Every input node can take new values later with Expression.set (api_random.py).
def inputTensor(arr, batched: bool = False, device: str = "", reusable_expr: bool = False) -> Expression:
    """A constant tensor (any shape) taken from a list or array; a scalar becomes (1,).
    batched (or a list of arrays): DyNet's minibatch, the last axis (or the list) its elements,
    each an input of its own (see minibatch.py). reusable_expr: accepted for DyNet (every
    input here can be ``set``); device: ignored."""
    if batched or (type(arr) is list and arr and all(isinstance(a, np.ndarray) for a in arr)):
        return minibatch.input_batch(arr)       # DyNet's minibatch: an input per element
    a = _numbers("inputTensor", arr)
    if a.ndim == 0:
        a = a.reshape(1)
    return _graph().add(OPS["input"], (), tuple(a.shape), a)


def _seq(name: str, xs) -> list:
    """xs as a list of operands: one Expression or Parameter (iterable by its rows) is refused,
    as DyNet does, rather than taken for its rows."""
    if isinstance(xs, (Expression, Parameter, minibatch.BatchedExpression)) or not hasattr(xs, "__iter__"):
        raise GraphError(f"{name}: expects a list of expressions, got {type(xs).__name__} [at {user_line()}]")
    return list(xs)


def _numbers(name: str, v, dtype=None, copy: bool = True):
    """v as an array of dtype (default: the graph's); None, strings and ragged lists are
    refused (NumPy would make None a NaN, silently). copy: never v's own memory (an input
    keeps its values until a forward, lazily: a buffer the program refills before then
    must not change them, as it does not in DyNet, which copies at once)."""
    if not isinstance(v, (list, tuple, str, bytes)) and not hasattr(v, "shape") and hasattr(v, "__iter__"):
        v = list(v)                         # a generator, a dict's values: their items (DyNet takes those)
    try:
        a = np.asarray(v)
    except ValueError:
        raise GraphError(f"{name}: values of ragged shape [at {user_line()}]") from None
    if a.dtype.kind == "O":                 # numbers as objects (pandas) pass; None (NaN to NumPy) does not
        if not all(isinstance(x, numbers.Real) for x in a.flat):
            raise GraphError(f"{name}: expected numbers, got None or objects [at {user_line()}]")
    elif a.dtype.kind not in "biuf":
        got = type(v).__name__ if isinstance(v, (str, bytes)) else a.dtype
        raise GraphError(f"{name}: expected numbers, got {got} [at {user_line()}]")
    return a.astype(dtype or _S.dtype, copy=copy)


def inputVector(v, device: str = "") -> Expression:
    """A constant vector of shape (len(v),)."""
    a = _numbers("inputVector", v)
    if a.ndim != 1:           # DyNet refuses these too (inputTensor takes any shape)
        raise GraphError(f"inputVector: needs a list of numbers, got shape {a.shape} (inputTensor takes any "
                         f"shape) [at {user_line()}]")
    return _graph().add(OPS["input"], (), (a.shape[0],), a)


def vecInput(dim: int, device: str = "") -> Expression:
    """DyNet's vecInput: a vector of ``dim`` zeros, shape (dim,), to be filled with ``set``."""
    if not isinstance(dim, (numbers.Integral, np.integer)) or isinstance(dim, bool) or dim < 0:
        raise GraphError(f"vecInput: dim must be a non-negative integer, got {dim!r} [at {user_line()}]")
    return _graph().add(OPS["input"], (), (int(dim),), np.zeros(int(dim), dtype=_S.dtype))


def inputMatrix(v, d) -> Expression:
    """DyNet's inputMatrix: values in column-major order into shape d."""
    a = _numbers("inputMatrix", v).reshape(-1)
    d = _dim(d)
    if a.size != int(np.prod(d)):
        raise GraphError(f"inputMatrix: {a.size} values for shape {d} [at {user_line()}]")
    return inputTensor(a.reshape(d, order="F"))


def scalarInput(s: float, device: str = "") -> Expression:
    """A constant of shape (1,)."""
    a = _numbers("scalarInput", s)
    if a.size != 1:
        raise GraphError(f"scalarInput: needs one number, got shape {a.shape} [at {user_line()}]")
    return _graph().add(OPS["input"], (), (1,), a.reshape(1))


def unchanged(x):
    """x as an op that does nothing returns it (an identity: dropout switched off)."""
    if type(x) is Expression or type(x) is minibatch.BatchedExpression:
        return x
    if isinstance(x, Parameter):
        return parameter(x)
    _id(x, _graph())                    # the usual error for anything else
    return x


def _dim(d) -> tuple:
    """A shape from an int or a sequence of whole numbers; anything else is refused with the
    name of the API function the user called (a raw int() error named neither)."""
    if isinstance(d, numbers.Integral):
        return (int(d),)
    try:
        ks = None if isinstance(d, (str, bytes)) else list(d)
    except TypeError:
        ks = None
    if ks is None or not all(isinstance(k, numbers.Real) and float(k).is_integer() for k in ks):
        raise GraphError(f"{called() or 'dimensions'}: expected dimensions (an int or a sequence of ints), "
                         f"got {d!r} [at {user_line()}]")
    return tuple(int(k) for k in ks)


def zeros(dim, batch_size: int = 1) -> Expression:
    """A constant of shape ``dim`` filled with 0 (batch_size > 1: DyNet's minibatch of them)."""
    if batch_size != 1:
        return minibatch.repeat("zeros", batch_size, lambda: zeros(dim))
    return _graph().add(OPS["constant"], (), (_dim(dim), 0.0))


def ones(dim, batch_size: int = 1) -> Expression:
    """A constant of shape ``dim`` filled with 1 (batch_size > 1: DyNet's minibatch of them)."""
    if batch_size != 1:
        return minibatch.repeat("ones", batch_size, lambda: ones(dim))
    return _graph().add(OPS["constant"], (), (_dim(dim), 1.0))


def constant(dim, val: float, batch_size: int = 1) -> Expression:
    """A constant of shape ``dim`` filled with ``val`` (batch_size > 1: DyNet's minibatch)."""
    if batch_size != 1:
        return minibatch.repeat("constant", batch_size, lambda: constant(dim, val))
    if not isinstance(val, numbers.Real):
        raise GraphError(f"constant: val must be a number, got {val!r} [at {user_line()}]")
    return _graph().add(OPS["constant"], (), (_dim(dim), float(val)))


def parameter(p: Parameter, *more, update: bool = True) -> "Expression | tuple":
    """The expression of parameter p in the current graph (optional in autobatch). A lookup
    table of shape (V, d) reads as DyNet's whole-table expression: (d, V), a row per column.
    Several parameters give a tuple of their expressions, as DyNet's ``W, b = dy.parameter(pW,
    pb)``; a second argument True or False is DyNet 2.0's ``update``."""
    if more:
        if len(more) == 1 and type(more[0]) is bool:
            update = more[0]
        else:
            return tuple([parameter(q, update=update) for q in (p, *more)])
    g = _S.graph
    if update is True and type(p) is Parameter and type(g) is ComputationGraph:
        # DyNet's benchmark programs call it for every parameter at every tree node: one
        # Expression per parameter and graph serves them all (a handle is never changed)
        e = g._pexpr.get(p)
        if e is None:
            e = g._pexpr[p] = expression(g, g.pid(p))
        return e
    e = _graph().param_expr(p, update)
    return transpose(e) if _table(p) else e


def const_parameter(p: Parameter, *more) -> "Expression | list":
    """Parameter p as an expression that receives no gradient; several parameters give a
    list of them, as DyNet's."""
    if more:
        return [parameter(q, update=False) for q in (p, *more)]
    return parameter(p, update=False)


def lookup(p: LookupParameter, index: int = 0, update: bool = True) -> Expression:
    """Row ``index`` of table p, shape p.shape()[1:]."""
    g = _S.graph or cg()
    if type(index) in _NP_INTS:          # ids from a NumPy array
        index = int(index)
    if type(index) is int and type(p) is LookupParameter and update is True and 0 <= index < p.data.shape[0]:
        return g.add_lookup(_LOOKUP, p, index)    # the common case, checked in one line
    if not isinstance(p, LookupParameter):
        raise TypeError(f"lookup: needs a LookupParameter, got {type(p).__name__} [at {user_line()}]")
    if not _vertex_index(index, p.data.shape[0]):     # a per-vertex id is checked per call
        if type(index) is not int:
            index = _whole(index)
            if not isinstance(index, (numbers.Integral, np.integer)):
                raise GraphError(f"lookup: index {index!r} is not an integer [at {user_line()}]")
            index = int(index)
        if not 0 <= index < p.data.shape[0]:
            raise GraphError(f"lookup: index {index!r} out of range for a table of shape "
                             f"{tuple(p.data.shape)} [at {user_line()}]")
    return g.add1(_LOOKUP, g.pid(p, update), index, True)


lookup = fastpath.fast(lookup, _LOOKUP, "p, index=0, update=True", """
if type(index) is int and type(p) is _LP and update is True and g is not None:
    r = flk.get(p)            # (out, size, sig, diff, p's node, rows)
    if r is not None and 0 <= index < r[5]:
        a = r[4]""", ("a",), need="r[3]", depth="1", data="index", params_in=("a",), _LP=LookupParameter)


def const_lookup(p: LookupParameter, index: int) -> Expression:
    """Row ``index`` of p, receiving no gradient."""
    return lookup(p, index, update=False)


# --- products ---------------------------------------------------------------------
def _matmul(a, b) -> Expression:
    g = _graph()
    i = _id(a, g)
    # a parameter matrix is the operand shared by the batch; a vector parameter times a row
    # (an outer product, as DyNet's) is a product of its own
    op = _MM_SHARED if _is_param_node(a, g) and len(g.shapes[i]) == 2 else _MM
    return g.add(op, (i, _id(b, g)))


def affine_transform(exprs: Sequence) -> Expression:
    """b + W1·x1 + W2·x2 + … from [b, W1, x1, W2, x2, …]; one GEMM per pair per batch."""
    xs = exprs if type(exprs) is list else _seq("affine_transform", exprs)
    if len(xs) == 1:
        return xs[0] if type(xs[0]) is Expression else parameter(xs[0])
    g = _S.graph or cg()
    if len(xs) == 3:                 # the common b + W·x: no generic checks
        b, w, x = xs
        # (a matrix x: b is added to every column of W·X, which _bias_like below arranges)
        if type(x) is Expression and x.cg is g and len(g.shapes[x.i]) == 1:
            if isinstance(w, Parameter) and not w.is_lookup:
                if isinstance(b, Parameter) and not b.is_lookup:
                    return g.add_affine(_AFFINE, b, w, x.i)
                wi = g.pid(w)
            else:
                wi = w.i if type(w) is Expression and w.cg is g and w.i in g.ext else -1
            if wi >= 0 and type(b) is Expression and b.cg is g:  # parameter expressions (builders)
                # a computed bias is stacked (matmul_add), a parameter one shared (affine)
                if b.i not in g.ext:
                    return g.add(_MATMUL_ADD, (b.i, wi, x.i))
                if type(w) is Expression:     # dy.parameter handles: the inline path's entry
                    return g.add_affine_nodes(_AFFINE, b.i, wi, x.i)
                return g.add(_AFFINE, (b.i, wi, x.i))
    if len(xs) % 2 == 0:
        raise GraphError(f"affine_transform: needs [b, W1, x1, W2, x2, ...], got {len(xs)} items [at {user_line()}]")
    ids = _pairs_of_parameters(g, xs)
    if ids is not None:
        return g.add(_AFFINE if ids[0] in g.ext else _MATMUL_ADD, ids)
    xs[0] = _bias_like(g, xs)
    if all(_is_param_node(xs[k], g) for k in range(1, len(xs), 2)):
        # b a parameter: affine (b shared); b computed per node: matmul_add (b stacked)
        op = _AFFINE if _is_param_node(xs[0], g) else _MATMUL_ADD
        return g.add(op, tuple([_id(x, g) for x in xs]))
    terms = [xs[0]] + [_matmul(xs[k], xs[k + 1]) for k in range(1, len(xs), 2)]
    return esum(terms)


def _pairs_of_parameters(g, xs):
    """The node ids of [b, W1, x1, W2, x2, ...] (a hand-written RNN cell's b + W·x + U·h)
    where every W is a parameter (or its handle), every x a vector of this graph and b an
    expression or parameter of W1·x1's shape: the node the general path below makes, without
    its conversions (4.2 -> 3.1 us for two pairs); None otherwise."""
    ids = []
    for k in range(1, len(xs), 2):
        w, x = xs[k], xs[k + 1]
        if type(x) is not Expression or x.cg is not g or len(g.shapes[x.i]) != 1 or not _is_param_node(w, g):
            return None
        ids += (_id(w, g), x.i)
    b = xs[0]
    if not (isinstance(b, Parameter) or type(b) is Expression and b.cg is g):
        return None
    bi = _id(b, g)
    if g.shapes[bi] != (g.shapes[ids[0]][0],):
        return None
    return (bi, *ids)


def _bias_like(g, xs):
    """b of affine_transform(xs) in the products' shape where DyNet's rule allows it: (n, 1)
    for (n,), and a vector added to every column of W·X; else b as it is (the op's shape
    error then names both)."""
    b, w, x = xs[0], xs[1], xs[2]
    if not all(type(e) is Expression or isinstance(e, Parameter) for e in (b, w, x)):
        return b
    sw, sx = _shape(w), _shape(x)
    out = (sw[0],) + sx[1:] if len(sw) == 2 and sx[0] == sw[-1] else None
    i = _id(b, g)
    s = g.shapes[i]
    if out is None or s == out or not api_dims.fits(s, out):
        return b
    return expression(g, api_dims.fit(g, i, out))


# b and W are update=True parameters (need gradients, depth 0), as Parameters or as their
# dy.parameter handles (DyNet 2.0's programs take handles of every parameter): only x is
# looked at; handles find their entry under W's node (ComputationGraph.add_affine_nodes)
affine_transform = fastpath.fast(affine_transform, _AFFINE, "exprs", """
if type(exprs) is list and len(exprs) == 3:
    b, w, x = exprs
    if type(x) is _E and x.cg is g:
        xi = x.i
        # add_affine's last entry for W, or add_affine_nodes' for W's node (r[4]: b's node)
        r = fw.get(w) if type(w) is _P else \
            fw.get(w.i) if type(w) is _E and type(b) is _E and w.cg is g and b.cg is g else None
        if r is not None and r[5] is shapes[xi] and (r[4] is b or type(b) is _E and r[4] == b.i):
            pb = r[6]
            pw = r[7]""", ("pb", "pw", "xi"), need="r[3]", depth="depths[xi] + 1", params_in=("pb", "pw"),
                                 _P=Parameter)


def dot_product(x, y) -> Expression:
    """x·y for two vectors of shape (n,); shape (1,). As in DyNet, two rows, columns or
    matrices of one shape give the sum of their elementwise product."""
    sx, sy = _shape(x), _shape(y)
    if len(sx) > 1 and sx == sy:
        return sum_elems(cmult(x, y))
    return _op2(_DOT, x, y)


dot_product = fastpath.binary(_DOT, dot_product)


def transpose(x, dims=(1, 0)) -> Expression:
    """(m, n) -> (n, m); a vector (n,) becomes (1, n). dims: DyNet's permutation of the
    dimensions (output dimension k is input dimension dims[k]), e.g. [2, 0, 1]."""
    dims = tuple(int(d) for d in dims)
    if dims == (1, 0):
        return _unary(_TRANSPOSE, x)
    return _op(_TRANSPOSE, x, attr=dims)


transpose = fastpath.unary_entry(transpose, _TRANSPOSE, "x, dims=_T10",
                                 "dims is _T10 or type(dims) is tuple and dims == _T10", _T10=(1, 0))


# --- elementwise --------------------------------------------------------------------
def tanh(x) -> Expression:
    """Elementwise tanh; same shape."""
    return _op1(_TANH, x)


tanh = fastpath.unary(_TANH, tanh)


def logistic(x) -> Expression:
    """Elementwise 1/(1+exp(-x)); same shape."""
    return _op1(_LOGISTIC, x)


logistic = fastpath.unary(_LOGISTIC, logistic)


def rectify(x) -> Expression:
    """Elementwise max(x, 0); same shape."""
    return _op1(_RECTIFY, x)


rectify = fastpath.unary(_RECTIFY, rectify)


def exp(x) -> Expression:
    """Elementwise exp; same shape."""
    return _op1(_EXP, x)


exp = fastpath.unary(_EXP, exp)


def log(x) -> Expression:
    """Elementwise natural log; same shape."""
    return _op1(_LOG, x)


log = fastpath.unary(_LOG, log)


def sqrt(x) -> Expression:
    """Elementwise square root; same shape."""
    return _op1(_SQRT, x)


sqrt = fastpath.unary(_SQRT, sqrt)


def square(x) -> Expression:
    """Elementwise x²; same shape."""
    return _op1(_SQUARE, x)


square = fastpath.unary(_SQUARE, square)


def abs(x) -> Expression:  # noqa: A001  (DyNet's name)
    """Elementwise |x|; same shape."""
    return _op1(_ABS, x)


abs = fastpath.unary(_ABS, abs)  # noqa: A001


def cmult(x, y) -> Expression:
    """Elementwise product of two same-shape expressions."""
    return _op2(_CMULT, x, y)


cmult = fastpath.binary(_CMULT, cmult)


def cdiv(x, y) -> Expression:
    """Elementwise x / y of two same-shape expressions."""
    return _op2(_CDIV, x, y)


cdiv = fastpath.binary(_CDIV, cdiv)


def elu(x, alpha: float = 1.0) -> Expression:
    """Elementwise x if x > 0 else alpha·(exp(x)-1); same shape."""
    return _op(_ELU, x, attr=_real("elu", "alpha", alpha))


def esum(xs: Sequence) -> Expression:
    """Sum of same-shape expressions."""
    if type(xs) is list and len(xs) == 2:
        return _add2(xs[0], xs[1])
    xs = _seq("esum", xs)
    g = _S.graph
    ids = [x.i for x in xs if type(x) is Expression and x.cg is g]
    if len(ids) == len(xs) > 1:                         # the common case: no conversions
        ids = _summable(g, ids)
        if len(ids) == 3:
            return g.add3(_ADD, *ids)                   # fills the cache of the fast path below
        return g.add2(_ADD, ids[0], ids[1]) if len(ids) == 2 else g.add(_ADD, tuple(ids))
    if not xs:
        raise GraphError(f"esum: needs at least one expression, got an empty list [at {user_line()}]")
    return xs[0] if len(xs) == 1 and type(xs[0]) is Expression else _opl(_ADD, xs)


esum = fastpath.fast(esum, _ADD, "xs", """
if type(xs) is list and len(xs) == 3:
    x, y, z = xs
    if type(x) is _E and type(y) is _E and type(z) is _E and x.cg is g and y.cg is g and z.cg is g:
        a = x.i
        b = y.i
        c = z.i
        r = f3.get(_op)
        if r is not None and r[4] is shapes[a] and r[5] is shapes[b] and r[6] is shapes[c]:""",
                     ("a", "b", "c"))


def _add2_slow(x, y):
    g = _S.graph
    if type(x) is Expression and type(y) is Expression and x.cg is g and y.cg is g:
        return g.add2(_ADD, *_summable(g, [x.i, y.i]))
    return _opl(_ADD, [x, y])


def _summable(g, ids):
    """esum's inputs: DyNet's sum takes (n, 1) for (n,); the result has the first's shape."""
    s = g.shapes[ids[0]]
    for i in ids:
        if g.shapes[i] != s:
            return api_dims.conform(g, ids, s)
    return ids


_add2 = fastpath.binary(_ADD, _add2_slow)


def average(xs: Sequence) -> Expression:
    """Mean of same-shape expressions."""
    return _opl(OPS["average"], _seq("average", xs))


def emax(xs: Sequence) -> Expression:
    """Elementwise maximum of same-shape expressions."""
    return _opl(OPS["emax"], _seq("emax", xs))


def bmax(x, y) -> Expression:
    """Elementwise maximum of two same-shape expressions; where they are equal the gradient
    goes to y, as DyNet's."""
    return emax([y, x])


# --- reductions and losses -----------------------------------------------------------
def sum_elems(x) -> Expression:
    """Sum of all elements; shape (1,)."""
    return _op1(OPS["sum_elems"], x)


sum_elems = fastpath.unary(OPS["sum_elems"], sum_elems, fuse=False)


def mean_elems(x) -> Expression:
    """Mean of all elements; shape (1,)."""
    return _op1(OPS["mean_elems"], x)


mean_elems = fastpath.unary(OPS["mean_elems"], mean_elems, fuse=False)


def squared_norm(x) -> Expression:
    """Σ x²; shape (1,)."""
    return _op1(OPS["squared_norm"], x)


squared_norm = fastpath.unary(OPS["squared_norm"], squared_norm, fuse=False)


def l2_norm(x) -> Expression:
    """√Σ x²; shape (1,)."""
    return _op1(OPS["l2_norm"], x)


l2_norm = fastpath.unary(OPS["l2_norm"], l2_norm, fuse=False)


def _conformed(op, x, y, attr=None) -> Expression:
    """op over x and y of one shape up to trailing 1s (a column (n, 1) and a vector (n,) are
    the same shape, as in DyNet), y brought to x's."""
    g = _graph()
    a, b = _id(x, g, op), _id(y, g, op)
    return g.add(op, tuple(api_dims.conform(g, [a, b], g.shapes[a])), attr)


def squared_distance(x, y) -> Expression:
    """Σ (x - y)² of two same-shape expressions (a column (n, 1) and a vector (n,) are
    the same shape, as in DyNet); shape (1,)."""
    return _conformed(OPS["squared_distance"], x, y)


def binary_log_loss(x, y) -> Expression:
    """-Σ [y·log x + (1-y)·log(1-x)] for probabilities x, targets y; shape (1,)."""
    return _op(OPS["binary_log_loss"], x, y)


def max_dim(x, d: int = 0) -> Expression:
    """Maximum along dimension d (the dimension is removed; a vector gives (1,))."""
    return _op(OPS["max_dim"], x, attr=int(d))


def softmax(x, d: int = 0) -> Expression:
    """Softmax over dimension d: 0 (each column of a matrix) or, for a matrix, 1 (each row); same shape."""
    if d == 1 and len(_shape(x)) == 2:
        return transpose(_op(OPS["softmax"], transpose(x)))
    if d != 0:
        raise GraphError(f"softmax: d must be 0, or 1 for a matrix; got d={d} for shape "
                         f"{_shape(x)} [at {user_line()}]")
    return _unary(_SOFTMAX, x)


softmax = fastpath.unary_entry(softmax, _SOFTMAX, "x, d=0", "d == 0 and type(d) is int")


def constrained_softmax(x, y) -> Expression:
    """Softmax of the scores x with upper bounds y on the probabilities (Martins and
    Kreutzer, 2017): min(y, c·exp(x)), c making them sum to 1; x, y vectors (n,) (columns
    (n, 1) too, as in DyNet: the result is then a column)."""
    sx = _shape(x)
    if len(sx) == 2 and sx[1] == 1 and api_dims.strip(_shape(y)) == sx[:1]:
        return reshape(constrained_softmax(reshape(x, sx[:1]), reshape(y, sx[:1])), sx)
    return _op(OPS["constrained_softmax"], x, y)


def log_softmax(x, restrict=None) -> Expression:
    """log(softmax(x)) over dimension 0; same shape. restrict (a vector x only): the
    log-softmax over those elements alone, -inf at the others (DyNet's)."""
    if restrict is None:
        return _unary(_LOG_SOFTMAX, x)
    s = _shape(x)
    rows = list(dict.fromkeys(int(r) for r in restrict))
    if len(s) != 1 or not rows or not all(0 <= r < s[0] for r in rows):
        raise GraphError(f"log_softmax: restrict needs a vector and indices within it, got shape {s} "
                         f"and {list(restrict)} [at {user_line()}]")
    # the restricted values put back in place by a constant 0/1 matrix; -inf added elsewhere
    place = np.zeros((s[0], len(rows)))
    place[rows, range(len(rows))] = 1.0
    rest = np.full(s[0], -np.inf)
    rest[rows] = 0.0
    return inputTensor(place) * _op(OPS["log_softmax"], select_rows(x, rows)) + inputTensor(rest)


log_softmax = fastpath.unary_entry(log_softmax, _LOG_SOFTMAX, "x, restrict=None", "restrict is None")


def _index_in(name, x, i, n) -> int:
    """i as an index below n: an int, or a whole float (DyNet takes labels read as floats)."""
    i = _whole(i)
    if type(i) is Expression:
        raise GraphError(f"{name}: the index is an Expression of shape {i.cg.shapes[i.i]}, not an int (inside a "
                         f"vertex function, pull integer ids for it: a float input is pulled as values) "
                         f"[at {user_line()}]")
    if not isinstance(i, (numbers.Integral, np.integer)) or not 0 <= i < n:
        shape = _shape(x)
        what = "is not a whole number" if isinstance(i, (float, np.floating)) else \
            "is a sequence, not an int (the _batch forms take one index per batch element)" \
            if isinstance(i, (list, tuple, np.ndarray)) else "out of range"
        raise GraphError(f"{name}: index {i!r} {what} for an input of shape {shape} [at {user_line()}]")
    return int(i)


def _real(name: str, what: str, v) -> float:
    """v as a float (conversions.real) for a constant of op name (its parameter what); else
    an error naming both, where float() would raise a bare one or read a string."""
    try:
        return real(v)
    except (TypeError, ValueError):
        raise GraphError(f"{name}: {what} must be a number, got {v!r} [at {user_line()}]") from None


def _shape(x):
    if type(x) is Expression:
        s = x.cg.shapes[x.i]
        if s is DROPPED:
            x._check()              # (refuses it, naming the user's call)
        return s
    if isinstance(x, Parameter):
        return x.shape()[::-1] if _table(x) else x.shape()      # a table as an operand: (d, V)
    if type(x) is minibatch.BatchedExpression:
        raise minibatch.BatchedOperand
    api = called()
    raise TypeError(f"{api + ': ' if api else ''}expected an Expression, got {type(x).__name__} [at {user_line()}]")


def _vertex_index(i, n) -> bool:
    """True for a per-vertex id pulled inside a vertex function (autobatch.vertex): it
    becomes the node's data as is, and its values are checked against n at each call."""
    if getattr(i, "is_vertex_index", False):
        i.require_below(n)
        return True
    return False


def pickneglogsoftmax(x, v: int) -> Expression:
    """-log softmax(x)[v], shape (1,)."""
    g = _S.graph
    if type(v) is int and type(x) is Expression and x.cg is g:
        a = x.i
        if 0 <= v < g.shapes[a][0] and len(g.shapes[a]) == 1:
            return g.add1(_PNLS, a, v)                  # the common case, checked in one line
    s = _shape(x)
    if len(s) > 1 and len(api_dims.strip(s)) == 1:    # a column (n, 1): DyNet's vector
        s = s[:1]
        x = reshape(x, s)
    if _vertex_index(v, s[0]):
        return _op(OPS["pickneglogsoftmax"], x, data=v)
    return _op(OPS["pickneglogsoftmax"], x, data=_index_in("pickneglogsoftmax", x, v, s[0]))


pickneglogsoftmax = fastpath.fast(pickneglogsoftmax, _PNLS, "x, v", """
if type(v) is int and type(x) is _E and x.cg is g:
    a = x.i
    r = f1.get(_op)
    if r is not None and r[4] is shapes[a] and 0 <= v < r[4][0]:""", ("a",), data="v")


def hinge(x, v: int, m: float = 1.0) -> Expression:
    """Σ_{j≠v} max(0, m - x[v] + x[j]) for a vector x (or a column, as in DyNet); shape (1,)."""
    s = _shape(x)
    if len(s) == 2 and s[1] == 1:
        x, s = reshape(x, s[:1]), s[:1]
    m = _real("hinge", "m", m)
    return _op(OPS["hinge"], x, attr=m, data=v if _vertex_index(v, s[0]) else _index_in("hinge", x, v, s[0]))


def pick(e, index: int = 0, dim: int = 0) -> Expression:
    """Element (vector) or slice (matrix) ``index`` along dimension ``dim``."""
    x = e
    s = _shape(x)
    if not 0 <= dim < len(s):
        raise GraphError(f"pick: dimension {dim} out of range for shape {s} [at {user_line()}]")
    if _vertex_index(index, s[dim]):
        return _op(OPS["pick"], x, attr=int(dim), data=index)
    return _unary(_PICK, x, int(dim), _index_in("pick", x, index, s[dim]))


def _unary(op, x, attr=None, data=None) -> Expression:
    """A node of op over x whose inline path (below) takes the next ones of its shape and attr."""
    g = _graph()
    return g.add_unary(op, _id(x, g, op), attr, data)


# the inline paths of the unary ops with an attr and of the ones whose calls take more than x:
# the entry (ComputationGraph.add_unary) holds x's shape and the attr the checks passed with
pick = fastpath.unary_entry(pick, _PICK, "e, index=0, dim=0", "type(index) is int and dim == 0 and type(dim) is int",
                            "r[5] == 0 and 0 <= index < r[4][0]", attr="0", data="index")


def pickrange(x, s: int, e: int, d: int = 0) -> Expression:
    """Elements s..e-1 along dimension d: (n,) -> (e-s,)."""
    g = _S.graph
    if type(x) is Expression and x.cg is g and type(s) is int and type(e) is int and d == 0:
        return g.add(_PICKRANGE, (x.i,), (s, e, 0))      # the common case: no conversions
    return _op(OPS["pickrange"], x, attr=(int(s), int(e), int(d)))


def select_rows(x, rs) -> Expression:
    """The given rows of a matrix (elements of a vector), in order, repeats allowed."""
    return _op(OPS["select_rows"], x, attr=tuple(int(r) for r in rs))


def concatenate(xs: Sequence, d: int = 0) -> Expression:
    """Join same-rank expressions along dimension d."""
    if type(xs) is list and len(xs) == 2 and d == 0 and type(d) is int:   # [h_left, h_right]
        return _concat2(xs[0], xs[1])
    g = _S.graph
    xs = _seq("concatenate", xs)
    ids = [x.i for x in xs if type(x) is Expression and x.cg is g]
    if len(ids) == len(xs) > 0 and type(d) is int:       # the common case: no conversions
        ids = _joinable(g, ids, d)
        return g.add2(_CONCAT, ids[0], ids[1], d) if len(ids) == 2 else g.add(_CONCAT, tuple(ids), d)
    return _opl(_CONCAT, xs, attr=int(d))


def _joinable(g, ids, d):
    """concatenate's inputs with the first's number of dimensions (at least d + 1), as
    DyNet's, where trailing 1s allow it: [(2, 1), (2,)] -> (4, 1), [(2,), (2,)] along 1 -> (2, 2)."""
    nd = max(len(g.shapes[ids[0]]), d + 1)
    for i in ids:
        if len(g.shapes[i]) != nd:
            return api_dims.to_ranks(g, ids, nd)
    return ids


def _concat2_slow(x, y):
    g = _S.graph
    if type(x) is Expression and type(y) is Expression and x.cg is g and y.cg is g:
        return g.add2(_CONCAT, *_joinable(g, [x.i, y.i], 0), 0)
    return _opl(_CONCAT, [x, y], attr=0)


_concat2 = fastpath.binary(_CONCAT, _concat2_slow, 0)

# [h_left, h_right] inline as well: going through _concat2 cost one more Python call
concatenate = fastpath.binary(_CONCAT, concatenate, 0, params="xs, d=0", unpack="""
if type(xs) is list and len(xs) == 2 and d == 0 and type(d) is int:
    x, y = xs""")


def concatenate_cols(xs: Sequence) -> Expression:
    """k vectors of shape (n,) become the columns of an (n, k) matrix; as in DyNet, columns
    (n, 1) and matrices (n, m) join too (their columns in order)."""
    xs = _seq("concatenate_cols", xs)
    if not xs:
        raise GraphError(f"concatenate_cols: needs at least one expression, got an empty list [at {user_line()}]")
    g = _graph()
    ids = [_id(x, g, OPS["concatenate_cols"]) for x in xs]
    if all(len(g.shapes[i]) == 1 for i in ids):
        return g.add(OPS["concatenate_cols"], tuple(ids))
    return g.add(_CONCAT, tuple(api_dims.to_ranks(g, ids, 2)), 1)


def reshape(x, d, batch_size: int = 1) -> Expression:
    """The same elements in shape ``d`` (column-major, as in DyNet). batch_size: DyNet's
    minibatch size of the result (see minibatch.reshape_batch)."""
    if batch_size != 1 or type(x) is minibatch.BatchedExpression:
        return minibatch.reshape_batch(x, d, batch_size)
    return _op(OPS["reshape"], x, attr=_dim(d))


# --- fused cells -------------------------------------------------------------------------
def lstm_cell(gates, c_prev=None, forget_bias: float = 0.0) -> Expression:
    """One LSTM step after the affine: gates = [i; f; o; g] pre-activations (4H,), c_prev
    the previous cell (H,) or the previous lstm_cell output (2H,); returns [h; c] (2H,) with
    c = σ(f + forget_bias)⊙c_prev + σ(i)⊙tanh(g), h = σ(o)⊙tanh(c). One node instead of
    about twelve."""
    fb = (forget_bias if type(forget_bias) is float else float(forget_bias)) or None
    if c_prev is not None:
        return _op2(_LSTM_CELL, gates, c_prev, fb)
    return _op1(_LSTM_CELL, gates) if fb is None else _op(_LSTM_CELL, gates, attr=fb)


# --- randomness ------------------------------------------------------------------------
def _seed(g) -> int:
    return (g.seed << 24) ^ len(g.ops)


def dropout(x, p: float) -> Expression:
    """Inverted dropout; the identity when p == 0 or dropout is switched off."""
    if not isinstance(p, numbers.Real) or not 0 <= p < 1:
        raise GraphError(f"dropout: rate must be in [0, 1), got {p!r} [at {user_line()}]")
    if p == 0 or not _S.dropout:
        return unchanged(x)
    g = _graph()
    return g.add_unary(_DROPOUT, _id(x, g), float(p), _seed(g))


# (the seed is _seed's, of the node's own number)
dropout = fastpath.unary_entry(dropout, _DROPOUT, "x, p", "type(p) is float and 0.0 < p < 1.0 and _S.dropout",
                               "r[5] == p", attr="p", data="(g.seed << 24) ^ n")


def noise(x, stddev: float) -> Expression:
    """x plus Gaussian noise of standard deviation ``stddev`` (seeded per node)."""
    g = _graph()
    return g.add(OPS["noise"], (_id(x, g),), _real("noise", "stddev", stddev), _seed(g))


# --- operators on Expression ------------------------------------------------------------
def _num(c):
    t = type(c)
    if t is Expression or t is float or t is int:   # the usual cases, without ABC checks
        return t is not Expression
    if t is np.ndarray:         # a 0-d array of numbers, as NumPy's own operators return them
        return c.ndim == 0 and c.dtype.kind in "iuf"
    return isinstance(c, numbers.Real) and t is not bool


def _add(a, b):
    if _num(b):
        return _op(_SCALE, a, attr=(1.0, float(b)))
    if _num(a):
        return _op(_SCALE, b, attr=(1.0, float(a)))
    return _op2(_ADD, a, b)


def _sub(a, b):
    if _num(b):
        return _op(_SCALE, a, attr=(1.0, -float(b)))
    if _num(a):
        return _op(_SCALE, b, attr=(-1.0, float(a)))
    return _op2(_SUB, a, b)


def _mul(a, b):
    if _num(b):
        return _op(_SCALE, a, attr=(float(b), 0.0))
    if _num(a):
        return _op(_SCALE, b, attr=(float(a), 0.0))
    return _matmul(a, b)


def _recip(c: float) -> float:
    """1 / c, as IEEE division gives it (x / 0 is ±inf, or nan for x = 0, as cdiv's)."""
    return 1.0 / c if c else math.copysign(math.inf, c)


def _div(a, b):
    if _num(b):
        return _op(_SCALE, a, attr=(_recip(float(b)), 0.0))
    if _num(a):
        return _op(_SDIV, b, attr=float(a))
    return _op2(_CDIV, a, b)


def _getitem(x, k):
    if type(k) is tuple and k and all(type(c) is slice for c in k):
        if type(x) is minibatch.BatchedExpression:
            return _batch_slices(x, k)
        return _slices(x, k)
    if isinstance(k, slice):
        shape = _shape(x)
        n = shape[0]
        _within(k, n, shape)
        s, e, step = k.indices(n)
        if step != 1:                           # x[::2], x[::-1]: those rows, in that order
            rows = list(range(s, e, step))
            if not rows:
                raise GraphError(f"slice {k} selects nothing from an input of shape {shape} [at {user_line()}]")
            return select_rows(x, rows)
        return pickrange(x, s, e)
    k = _whole(k)
    if not isinstance(k, (numbers.Integral, np.integer, np.bool_)):    # (a bool picks 0 or 1, as DyNet's)
        raise GraphError(f"x[k]: an index must be an integer, a slice or a tuple of slices, got {k!r} "
                         f"(shape {_shape(x)}) [at {user_line()}]")
    k = int(k)
    n = _shape(x)[0]
    if not -n <= k < n:
        raise GraphIndexError(f"pick: index {k} out of range for an input of shape {_shape(x)} [at {user_line()}]")
    return pick(x, k + n if k < 0 else k)   # x[-1] is the last element, as in DyNet


def _within(k, n, s):
    """A slice's ends lie within a dimension of n (negative ones counted from its end): DyNet
    refuses x[1:10] of a 3-vector where Python would clip it to x[1:3]."""
    for v in (k.start, k.stop):
        if v is not None and not -n <= v <= n:
            raise GraphIndexError(f"slice {k.start}:{k.stop} goes past the end of a dimension of {n} "
                                  f"(input shape {s}) [at {user_line()}]")


def _slices(x, k):
    """x[a:b, c:d:e, ...]: one slice per leading dimension, as DyNet's (no ints there, steps
    of 1 and up; every dimension stays). One more slice addresses the batch (a plain
    expression is a batch of one: that slice must keep it)."""
    s = _shape(x)
    if len(k) > len(s):
        _batch_range(k, len(s), 1, s)
        k = k[:len(s)]
    for c, n in zip(k, s):
        _within(c, n, s)
    rng = [c.indices(n) for c, n in zip(k, s)]
    if any(step < 1 for _, _, step in rng):
        raise GraphIndexError(f"slice: steps must be positive, got {[c.step for c in k]} for an input of "
                              f"shape {s} [at {user_line()}]")
    from .api_shape import strided_select      # (api_shape builds on this module)
    return strided_select(x, [r[2] for r in rng], [r[0] for r in rng], [r[1] for r in rng])


def _batch_range(k, rank, n, s):
    """range(n)[k[rank]]: the batch elements the slice after an element's rank dimensions
    keeps, as DyNet's batch dimension (the last); more slices, a step below 1 or nothing
    kept is refused."""
    a, b, step = k[rank].indices(n)
    if len(k) > rank + 1 or step < 1 or not a < b:
        raise GraphIndexError(f"slice: {list(k)} for a batch of {n} of shape {s}: one slice per dimension and one "
                              f"for the batch, steps of 1 and up, something kept [at {user_line()}]")
    return range(a, b, step)


def _batch_slices(x, k):
    """x[..., a:b] of DyNet's minibatch: the slice after the elements' dimensions picks elements."""
    s = _shape(x.xs[0])
    els = x.xs
    if len(k) > len(s):
        els = [els[j] for j in _batch_range(k, len(s), len(els), s)]
        k = k[:len(s)]
    return minibatch.batch_of([_slices(e, k) for e in els])


def _scale_slow(x, a, b):
    g = _graph()
    return g.add_unary(_SCALE, _id(x, g, _SCALE), (a, b), None, (a, b))


# a·x + b: what the operators with a number make (x * c, c * x, x / c, x ± c, c ± x, -x);
# the entries are kept under (a, b) (the tuple: no op is a key of equal value)
_scale = fastpath.fast(_scale_slow, _SCALE, "x, a, b", """
if type(x) is _E and x.cg is g:
    i = x.i
    k = (a, b)
    r = g._fa.get(k)
    if r is not None and r[4] is shapes[i]:""", ("i",), attr="k")


def _radd(x, c):
    if (type(c) is float or type(c) is int) and type(x) is Expression:
        return _scale(x, 1.0, float(c))
    return _add(c, x)


def _rsub(x, c):
    if (type(c) is float or type(c) is int) and type(x) is Expression:
        return _scale(x, -1.0, float(c))
    return _sub(c, x)


def _rmul(x, c):
    if (type(c) is float or type(c) is int) and type(x) is Expression:
        return _scale(x, float(c), 0.0)
    return _mul(c, x)


# Expression op Expression: the inline path of fastpath.binary, then the general one
Expression.__add__ = fastpath.binary(_ADD, _add, absorb=True, scalar="1.0, float(y)", _scale=_scale)
Expression.__radd__ = _radd
Expression.__sub__ = fastpath.binary(_SUB, _sub, scalar="1.0, -float(y)", _scale=_scale)
Expression.__rsub__ = _rsub


def _expr_mul(a, b):
    """a * b for an Expression a: W * x with W a parameter's node fills the graph's entry for
    that W, which the inline path below reads (DyNet programs write every product so)."""
    g = _S.graph
    # a is a BatchedExpression where the minibatch emulation lends it this operator
    if type(a) is Expression and type(b) is Expression and a.cg is g and b.cg is g and a.i in g.ext \
            and len(g.shapes[a.i]) == 2:          # (a vector parameter times a row: an outer product)
        return g.add_shared_matmul(_MM_SHARED, a.i, a.i, b.i)
    return _mul(a, b)


def _param_mul(p, o):
    """p * o for a Parameter p: W * x as _expr_mul's, the entry keyed by the Parameter."""
    g = _S.graph
    if type(o) is Expression and o.cg is g and type(p) is Parameter and p.data.ndim == 2:
        return g.add_shared_matmul(_MM_SHARED, p, g.pid(p), o.i)
    return _mul(p, o)


# W * x from the entry add_shared_matmul keeps for W: (out shape, size, signature, op
# differentiable, x's shape, W's node)
Expression.__mul__ = fastpath.fast(_expr_mul, _MM_SHARED, "x, y", """
if type(y) is not _E and (type(y) is float or type(y) is int) and type(x) is _E and x.cg is g:
    return _scale(x, float(y), 0.0)
if type(y) is _E and type(x) is _E and x.cg is g and y.cg is g:
    a = x.i
    b = y.i
    r = fmm.get(a)
    if r is not None and r[4] is shapes[b]:""", ("a", "b"), depth="depths[b] + 1", _scale=_scale)
Expression.__rmul__ = _rmul
Expression.__truediv__ = fastpath.binary(_CDIV, _div, scalar="_recip(float(y)), 0.0", _scale=_scale, _recip=_recip)
Expression.__rtruediv__ = lambda self, o: _div(o, self)
Expression.__neg__ = lambda self: _scale(self, -1.0, 0.0)
Expression.__getitem__ = _getitem


# Parameters in expressions and E[i] go straight to the functions above (binding them
# here, not in params.py, keeps params free of graph imports on the hot path).
LookupParameter.__getitem__ = lambda p, i: lookup(p, i)
LookupParameter.expr = lambda p, update=True: parameter(p, update)     # DyNet's takes no argument
Parameter.__getitem__ = lambda p, k: _getitem(parameter(p), k)
Parameter.__array_ufunc__ = Expression.__array_ufunc__     # array + W refused, np.add(W, 1.0) not


# p + o for a Parameter p: with o a temporary product (b + W * x), fastpath.ABSORB's rule
Parameter.__add__ = fastpath.binary(_ADD, _add, absorb=True)
Parameter.__radd__ = lambda p, o: _add(o, p)
Parameter.__sub__ = lambda p, o: _sub(p, o)
Parameter.__rsub__ = lambda p, o: _sub(o, p)
Parameter.__mul__ = fastpath.fast(_param_mul, _MM_SHARED, "x, y", """
if type(y) is _E and y.cg is g:
    r = fmm.get(x)
    b = y.i
    if r is not None and r[4] is shapes[b]:
        a = r[5]""", ("a", "b"), depth="depths[b] + 1")
Parameter.__rmul__ = lambda p, o: _mul(o, p)
Parameter.__truediv__ = lambda p, o: _div(p, o)
Parameter.__neg__ = lambda p: _op(_SCALE, p, attr=(-1.0, 0.0))
