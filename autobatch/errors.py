"""Exceptions, and the user's source line for their messages."""
from __future__ import annotations

import os
import sys
import warnings

_PKG = os.path.dirname(os.path.abspath(__file__))


class AutobatchError(Exception):
    """Base class of autobatch's own errors."""


class GraphError(AutobatchError, ValueError):
    """Bad input to an op: wrong shapes, index out of range. Nothing was added."""


class GraphIndexError(GraphError, IndexError):
    """An index past the end of an expression (``x[k]``): an IndexError as well, so that
    Python's iteration over an expression stops there, as DyNet's does."""


class GradientError(GraphError, RuntimeError):
    """gradient() of a node the last backward gave none (or before any backward): a
    RuntimeError as well, which is what DyNet raises there (its own tests catch that)."""


class StaleExpressionError(AutobatchError, RuntimeError):
    """An Expression of a graph that has been renewed was used."""


class NonFiniteError(AutobatchError, FloatingPointError):
    """backward() on a loss that is NaN or infinite."""


_INTERNAL: dict = {}   # co_filename -> inside the package? (cached: abspath is slow)


def _internal(fn: str) -> bool:
    r = _INTERNAL.get(fn)
    if r is None:
        d = os.path.dirname(os.path.abspath(fn))
        r = _INTERNAL[fn] = d == _PKG or d.startswith(_PKG + os.sep)   # not .../autobatch_x/
    return r


def user_site():
    """(filename, lineno) of the innermost frame outside the autobatch package."""
    f = sys._getframe(1)
    while f is not None and _internal(f.f_code.co_filename):
        f = f.f_back
    return None if f is None else (f.f_code.co_filename, f.f_lineno)


_OPERATORS = {"_add": "+", "_sub": "-", "_mul": "*", "_div": "/", "_getitem": "[]", "__add__": "+",
              "_param_add": "+", "_expr_mul": "*", "_param_mul": "*", "_radd": "+", "_rsub": "-", "_rmul": "*",
              "__radd__": "+", "__sub__": "-", "__rsub__": "-", "__mul__": "*", "__rmul__": "*",
              "__truediv__": "/", "__rtruediv__": "/", "__getitem__": "[]", "__pow__": "**"}


def called() -> str | None:
    """The public function (or operator) the user's code called: the outermost package frame,
    for errors raised in the op it delegates to (esum builds an add); None for a helper."""
    f, name = sys._getframe(1), None
    while f is not None and _internal(f.f_code.co_filename):
        if not f.f_code.co_name.startswith("<"):     # a lambda (Parameter.__mul__) names nothing
            name = f.f_code.co_name
        f = f.f_back
    if name in _OPERATORS:
        return f"operator {_OPERATORS[name]}"
    return name if name and not name.startswith(("_", "<")) else None


def warn_user(msg: str, category=UserWarning) -> None:
    """warnings.warn attributed to the innermost frame outside the package (the user's line)."""
    f, level = sys._getframe(1), 2      # stacklevel 2: warn_user's caller
    while f is not None and _internal(f.f_code.co_filename):
        f, level = f.f_back, level + 1
    warnings.warn(msg, category, stacklevel=level)


def user_line() -> str:
    """'file:line' of the innermost frame outside the autobatch package."""
    return where_code(user_site())


def where_code(f) -> str:
    """Format a creation site recorded as (filename, lineno)."""
    return "<unknown>" if f is None else f"{f[0]}:{f[1]}"
