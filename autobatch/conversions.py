"""Values a DyNet program passes where a number goes, read as DyNet's conversions read them:
NumPy scalars, 0-d arrays and whole floats where an int goes; numbers of any kind, 0-d and
one-element arrays where a real goes; never a string."""
from __future__ import annotations

import numpy as np


def whole(i):
    """A whole float (an id read with np.loadtxt, 2.0) as the int DyNet makes of it; a 0-d
    array as its number; anything else as it is."""
    if type(i) is np.ndarray and i.ndim == 0:
        i = i.item()
    return int(i) if isinstance(i, (float, np.floating)) and float(i).is_integer() else i


def real(v) -> float:
    """v as a float (a bool and a Fraction too, as DyNet's); TypeError or ValueError where
    DyNet's conversion fails, a string included (which float() would read)."""
    if isinstance(v, np.ndarray) and v.size == 1:      # a 0-d or one-element array
        v = v.item()
    if isinstance(v, (str, bytes, np.ndarray)):
        raise TypeError(f"not a number: {v!r}")
    return float(v)


def number(what: str, v) -> float:
    """real(v), or a TypeError naming ``what`` (the call, and the argument where there are
    several) and the user's line, where float() would raise a bare one (a string, None)."""
    from .errors import user_line
    try:
        return real(v)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: expected a number, got {v!r} [at {user_line()}]") from None
