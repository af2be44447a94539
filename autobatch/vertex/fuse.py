"""Elementwise fusion for the vertex engine.

NumPy: an elementwise instruction writes straight into its block of the symbol's dynamic
tensor with ``out=`` ufunc calls, so a chain like ``o * tanh(i * u + f * c)`` runs as a chain of
in-place kernels without temporaries or copies. The formulas are the ops' own (same rounding)."""
from __future__ import annotations

import numpy as np


def _logistic(x, out, attr):
    np.multiply(x[0], 0.5, out=out)        # 0.5·(tanh(x/2)+1), as ops.elementwise.Logistic
    np.tanh(out, out=out)
    out += 1
    out *= 0.5


def _add(x, out, attr):
    if len(x) == 1:
        out[...] = x[0]
        return
    np.add(x[0], x[1], out=out)
    for y in x[2:]:
        out += y


def _scale_shift(x, out, attr):
    a, b = attr
    if a != 1:
        np.multiply(x[0], a, out=out)
    else:
        out[...] = x[0]
    if b:
        out += b


_NUMPY = {
    "tanh": lambda x, out, attr: np.tanh(x[0], out=out),
    "logistic": _logistic,
    "rectify": lambda x, out, attr: np.maximum(x[0], 0, out=out),
    "exp": lambda x, out, attr: np.exp(x[0], out=out),
    "square": lambda x, out, attr: np.multiply(x[0], x[0], out=out),
    "add": _add,
    "sub": lambda x, out, attr: np.subtract(x[0], x[1], out=out),
    "cmult": lambda x, out, attr: np.multiply(x[0], x[1], out=out),
    "scale_shift": _scale_shift,
}

ENABLED = True


def forward_into(xp, op, xs, attr, out) -> bool:
    """Compute op into `out` in place; False when this op has no fused path here."""
    if not ENABLED or xp is not np or not op.elementwise:
        return False
    f = _NUMPY.get(op.name)
    if f is None:
        return False
    f(xs, out, attr)
    return True
