"""Exceptions, and the user's source line for their messages."""
from __future__ import annotations

import os
import sys

_PKG = os.path.dirname(os.path.abspath(__file__))


class AutobatchError(Exception):
    """Base class of autobatch's own errors."""


class GraphError(AutobatchError, ValueError):
    """Bad input to an op: wrong shapes, index out of range. Nothing was added."""


class StaleExpressionError(AutobatchError, RuntimeError):
    """An Expression of a graph that has been renewed was used."""


class NonFiniteError(AutobatchError, FloatingPointError):
    """backward() on a loss that is NaN or infinite."""


def user_line() -> str:
    """'file:line' of the innermost frame outside the autobatch package."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)).startswith(_PKG):
        f = f.f_back
    if f is None:
        return "<unknown>"
    return f"{f.f_code.co_filename}:{f.f_lineno}"


def where_code(f) -> str:
    """Format a creation site recorded as (filename, lineno)."""
    return "<unknown>" if f is None else f"{f[0]}:{f[1]}"
