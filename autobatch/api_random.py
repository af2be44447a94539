"""DyNet's settable inputs (vecInput, matInput, Expression.set), random tensors and dropout
variants; its minibatch functions (minibatch.py) are exported from here too."""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import runtime
from .api import _dim, _graph, _id, _numbers, _seed, _shape, parameter, unchanged, zeros
from .errors import GraphError, user_line
from .graph import ComputationGraph, Expression
from .minibatch import (concatenate_to_batch, dropout_batch, hinge_batch, lookup_batch, mean_batches,  # noqa: F401
                        moment_batches, pick_batch, pick_batch_elem, pick_batch_elems, pickneglogsoftmax_batch,
                        repeat, std_batches, sum_batches)
from .ops import OPS
from .ops import random as _rnd
from .params import LookupParameter, Parameter

__all__ = ["Parameters", "LookupParameters", "matInput", "zeroes",
           "random_normal", "random_uniform", "random_bernoulli", "random_gumbel",
           "dropout_dim", "block_dropout",
           "lookup_batch", "pick_batch", "pick_batch_elem", "pick_batch_elems",
           "pickneglogsoftmax_batch", "concatenate_to_batch", "sum_batches", "mean_batches",
           "moment_batches", "std_batches", "hinge_batch", "dropout_batch"]

_S = runtime.state()
_INPUT, _LOOKUP = OPS["input"], OPS["lookup"]

Parameters = Parameter               # DyNet's class names
LookupParameters = LookupParameter


# --- inputs -------------------------------------------------------------------------------
def matInput(d1: int, d2: int) -> Expression:
    """A (d1, d2) matrix of zeros, to be filled with ``set`` (column-major values). DyNet 2.x
    deprecates it (there it raises; use inputTensor); here it works as it used to."""
    for d in (d1, d2):
        if not isinstance(d, (numbers.Integral, np.integer)) or isinstance(d, bool) or d < 0:
            raise GraphError(f"matInput: dimensions must be non-negative integers, got ({d1!r}, {d2!r}) "
                             f"[at {user_line()}]")
    return _graph().add(_INPUT, (), (int(d1), int(d2)), np.zeros((int(d1), int(d2)), dtype=_S.dtype))


def zeroes(dim, batch_size: int = 1) -> Expression:
    """DyNet's other spelling of zeros: a constant of shape ``dim`` filled with 0."""
    return repeat("zeroes", batch_size, lambda: zeros(dim))


def _set(self: Expression, values) -> None:
    """New values for an input expression, as DyNet's ``set``: the next forward, value or
    backward of any expression of the graph uses them (the graph is recomputed, and dropout
    and random_* nodes draw new numbers, as in DyNet).

    - inputVector / vecInput / inputTensor / inputMatrix / matInput: a flat sequence of all
      values in column-major order (DyNet's convention; for a vector simply its values), or
      an array of exactly the input's shape; scalarInput also takes a number.
    - lookup(E, i): a new row index i."""
    g, i = self.cg, self.i
    if not isinstance(g, ComputationGraph):
        raise GraphError(f"set: a symbol of a vertex function has no values to set [at {user_line()}]")
    self._check()
    op = g.ops[i]
    if op is _INPUT:
        data = _input_values(g, i, values)
    elif op is _LOOKUP:
        data = _lookup_index(g, i, values)
    else:
        name = "parameter" if op is None else op.name
        raise GraphError(f"set: only input expressions (inputVector, vecInput, scalarInput, inputTensor, "
                         f"inputMatrix, matInput) and lookups can be set; node {i} is a {name} "
                         f"[at {user_line()}]")
    if i < g.exe.done:
        g.invalidate()
    g.datas[i] = data


Expression.set = _set


def _input_values(g, i, values):
    shape, size = g.shapes[i], g.sizes[i]
    try:
        a = _numbers("set", values, g.dtype, copy=True)   # a copy: later changes to values do not leak in
    except GraphError:
        raise GraphError(f"set: values for an input of shape {shape} must be numbers, got "
                         f"{type(values).__name__} [at {user_line()}]") from None
    if a.shape == shape:
        return a
    if a.ndim <= 1 and a.size == size:
        return a.reshape(shape, order="F")
    raise GraphError(f"set: an input of shape {shape} needs {size} values (flat, column-major) or an "
                     f"array of shape {shape}, got shape {a.shape} [at {user_line()}]")


def _lookup_index(g, i, index):
    n = g.ext[g.args[i][0]].data.shape[0]
    if not isinstance(index, (numbers.Integral, np.integer)):
        raise GraphError(f"set: a lookup's new index must be an integer, got {index!r} [at {user_line()}]")
    if not 0 <= index < n:
        raise GraphError(f"set: index {index!r} out of range for a lookup table of {n} rows [at {user_line()}]")
    return int(index)


# --- random tensors --------------------------------------------------------------------------
def _finite(name: str, **kw) -> None:
    for k, v in kw.items():
        if not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise GraphError(f"{name}: {k} must be a finite number, got {v!r} [at {user_line()}]")


def _sample(op, name: str, dim, a: float, b: float) -> Expression:
    try:
        shape = _dim(dim)
    except (TypeError, ValueError):
        shape = None
    if shape is None or any(d < 0 for d in shape):
        raise GraphError(f"{name}: dim must be an integer or a tuple of non-negative integers, got {dim!r} "
                         f"[at {user_line()}]")
    g = _graph()
    return g.add(op, (), (shape, float(a), float(b)), _seed(g))


def random_normal(dim, mean: float = 0.0, stddev: float = 1.0, batch_size: int = 1) -> Expression:
    """Values drawn from N(mean, stddev²), shape ``dim`` (an int gives a vector (dim,))."""
    _finite("random_normal", mean=mean, stddev=stddev)
    if stddev < 0:
        raise GraphError(f"random_normal: stddev must be >= 0, got {stddev} [at {user_line()}]")
    return repeat("random_normal", batch_size,
                  lambda: _sample(OPS["random_normal"], "random_normal", dim, mean, stddev))


def random_uniform(dim, left: float, right: float, batch_size: int = 1) -> Expression:
    """Values drawn uniformly from [left, right), shape ``dim``."""
    _finite("random_uniform", left=left, right=right)
    if left > right:
        raise GraphError(f"random_uniform: needs left <= right, got left={left}, right={right} "
                         f"[at {user_line()}]")
    return repeat("random_uniform", batch_size,
                  lambda: _sample(OPS["random_uniform"], "random_uniform", dim, left, right))


def random_bernoulli(dim, p: float, scale: float = 1.0, batch_size: int = 1) -> Expression:
    """Each value ``scale`` with probability p, else 0; shape ``dim``."""
    _finite("random_bernoulli", p=p, scale=scale)
    if not 0 <= p <= 1:
        raise GraphError(f"random_bernoulli: p must be in [0, 1], got {p} [at {user_line()}]")
    return repeat("random_bernoulli", batch_size,
                  lambda: _sample(OPS["random_bernoulli"], "random_bernoulli", dim, p, scale))


def random_gumbel(dim, mu: float = 0.0, beta: float = 1.0, batch_size: int = 1) -> Expression:
    """Values drawn from Gumbel(mu, beta) (mean mu + 0.5772·beta), shape ``dim``. DyNet
    supports only mu=0, beta=1; any finite mu and beta > 0 work here."""
    _finite("random_gumbel", mu=mu, beta=beta)
    if beta <= 0:
        raise GraphError(f"random_gumbel: beta must be > 0, got {beta} [at {user_line()}]")
    return repeat("random_gumbel", batch_size,
                  lambda: _sample(OPS["random_gumbel"], "random_gumbel", dim, mu, beta))


def dropout_dim(x, d: int, p: float) -> Expression:
    """Inverted dropout with one keep/drop decision per slice along dimension d, which all of
    that slice's values share: d = 0 of a matrix drops whole columns, d = 1 whole rows, d = 0
    of a vector all or nothing. Same shape; the identity when p == 0 or dropout is off."""
    s = _shape(x)
    if isinstance(d, bool) or not isinstance(d, (numbers.Integral, np.integer)) or not 0 <= d < len(s):
        raise GraphError(f"dropout_dim: dimension {d!r} out of range for an input of shape {s} "
                         f"[at {user_line()}]")
    if not 0 <= p < 1:
        raise GraphError(f"dropout_dim: rate must be in [0, 1), got {p} [at {user_line()}]")
    if p == 0 or not _S.dropout:
        return unchanged(x)
    g = _graph()
    return g.add(OPS["dropout_dim"], (_id(x, g),), (float(p), int(d)), _seed(g))


def block_dropout(x, p: float) -> Expression:
    """With probability p all values of x become 0, else all are scaled by 1/(1-p) (p = 1:
    always 0). Same shape; the identity when p == 0 or dropout is off."""
    _shape(x)
    if not 0 <= p <= 1:
        raise GraphError(f"block_dropout: rate must be in [0, 1], got {p} [at {user_line()}]")
    if p == 0 or not _S.dropout:
        return unchanged(x)
    g = _graph()
    return g.add(OPS["block_dropout"], (_id(x, g),), float(p), _seed(g))
