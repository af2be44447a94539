"""DyNet's low-level LSTM functions (vanilla_lstm_gates*, vanilla_lstm_c, vanilla_lstm_h),
written as compositions of the public expression functions, so they need no op of their
own, get their gradients from those functions, and batch across instances like them.

Shapes (H hidden size, I input size): x_t (I,), h_tm1 and c_tm1 (H,), Wx (4H, I),
Wh (4H, H), b (4H,); the gates are one (4H,) vector [i; f; o; g]. As in DyNet 2.x
the forget gate's pre-activation gets a constant +1 (its fixed forget bias)."""
from __future__ import annotations

import numbers
from typing import Optional, Sequence

import numpy as np

from . import api as dy
from .api_math import nobackprop
from .errors import GraphError, user_line
from .graph import Expression
from .minibatch import BatchedExpression, BatchedOperand
from .params import Parameter

__all__ = ["vanilla_lstm_gates", "vanilla_lstm_gates_concat", "vanilla_lstm_gates_dropout",
           "vanilla_lstm_gates_dropout_concat", "vanilla_lstm_c", "vanilla_lstm_h"]


def _shape(name: str, what: str, x) -> tuple:
    if type(x) is Expression:
        return x.cg.shapes[x.i]
    if isinstance(x, Parameter) and not x.is_lookup:
        return x.shape()
    if type(x) is BatchedExpression:
        raise BatchedOperand
    raise GraphError(f"{name}: {what} must be an Expression or Parameter, got {type(x).__name__} "
                     f"[at {user_line()}]")


def _vec(name: str, what: str, x, n: Optional[int] = None) -> int:
    s = _shape(name, what, x)
    if len(s) != 1 or (n is not None and s[0] != n):
        want = "a vector" if n is None else f"shape ({n},)"
        raise GraphError(f"{name}: {what} must have {want}, got {s} [at {user_line()}]")
    return s[0]


def _gates(name: str, x_t, h_tm1, Wx, Wh, b, mx, mh, weightnoise_std) -> Expression:
    if isinstance(weightnoise_std, bool) or not isinstance(weightnoise_std, numbers.Real) or not weightnoise_std >= 0:
        raise GraphError(f"{name}: weightnoise_std must be a number >= 0, got {weightnoise_std!r} [at {user_line()}]")
    I = _vec(name, "x_t", x_t)
    H = _vec(name, "h_tm1", h_tm1)
    for what, w, want in (("Wx", Wx, (4 * H, I)), ("Wh", Wh, (4 * H, H)), ("b", b, (4 * H,))):
        if _shape(name, what, w) != want:
            raise GraphError(f"{name}: {what} must have shape {want} for x_t {(I,)} and h_tm1 {(H,)}, "
                             f"got {_shape(name, what, w)} [at {user_line()}]")
    if mx is not None:
        _vec(name, "dropout_mask_x", mx, I)
        _vec(name, "dropout_mask_h", mh, H)
        # DyNet's gates node passes no gradient to its masks
        x_t, h_tm1 = dy.cmult(x_t, nobackprop(mx)), dy.cmult(h_tm1, nobackprop(mh))
    if weightnoise_std > 0:
        # fresh noise at every call, as DyNet's (its builders only pass it while training)
        Wx, Wh, b = (dy.noise(p, float(weightnoise_std)) for p in (Wx, Wh, b))
    off = np.zeros(4 * H)
    off[H:2 * H] = 1.0
    a = dy.affine_transform([b, Wx, x_t, Wh, h_tm1]) + dy.inputVector(off)
    return dy.concatenate([dy.logistic(dy.pickrange(a, 0, 3 * H)), dy.tanh(dy.pickrange(a, 3 * H, 4 * H))])


def _joined(name: str, x_ts) -> Expression:
    if isinstance(x_ts, (Expression, Parameter)) or not isinstance(x_ts, Sequence) or len(x_ts) == 0:
        raise GraphError(f"{name}: x_t must be a non-empty list of vectors, got "
                         f"{type(x_ts).__name__} [at {user_line()}]")
    for k, x in enumerate(x_ts):
        _vec(name, f"x_t[{k}]", x)
    return x_ts[0] if len(x_ts) == 1 else dy.concatenate(list(x_ts))


def vanilla_lstm_gates(x_t, h_tm1, Wx, Wh, b, weightnoise_std: float = 0.0) -> Expression:
    """The LSTM gates [i; f; o; g], shape (4H,), for input x_t (I,) and previous output
    h_tm1 (H,)::

        a = Wx·x_t + Wh·h_tm1 + b
        i = σ(a[0:H]);  f = σ(a[H:2H] + 1);  o = σ(a[2H:3H]);  g = tanh(a[3H:4H])

    weightnoise_std > 0 adds Gaussian noise of that deviation to Wx, Wh and b (fresh per call)."""
    return _gates("vanilla_lstm_gates", x_t, h_tm1, Wx, Wh, b, None, None, weightnoise_std)


def vanilla_lstm_gates_concat(x_t: Sequence, h_tm1, Wx, Wh, b, weightnoise_std: float = 0.0) -> Expression:
    """``vanilla_lstm_gates`` of the concatenation of the list x_t (vectors whose sizes sum
    to I); shape (4H,)."""
    x = _joined("vanilla_lstm_gates_concat", x_t)
    return _gates("vanilla_lstm_gates_concat", x, h_tm1, Wx, Wh, b, None, None, weightnoise_std)


def vanilla_lstm_gates_dropout(x_t, h_tm1, Wx, Wh, b, dropout_mask_x, dropout_mask_h,
                               weightnoise_std: float = 0.0) -> Expression:
    """``vanilla_lstm_gates`` of x_t⊙dropout_mask_x (I,) and h_tm1⊙dropout_mask_h (H,): the
    masks multiply the inputs before the products (DyNet's docstring writes them after,
    its code does this) and, as in DyNet, get no gradient; shape (4H,)."""
    return _gates("vanilla_lstm_gates_dropout", x_t, h_tm1, Wx, Wh, b, dropout_mask_x, dropout_mask_h,
                  weightnoise_std)


def vanilla_lstm_gates_dropout_concat(x_t: Sequence, h_tm1, Wx, Wh, b, dropout_mask_x, dropout_mask_h,
                                      weightnoise_std: float = 0.0) -> Expression:
    """``vanilla_lstm_gates_dropout`` of the concatenation of the list x_t; shape (4H,)."""
    x = _joined("vanilla_lstm_gates_dropout_concat", x_t)
    return _gates("vanilla_lstm_gates_dropout_concat", x, h_tm1, Wx, Wh, b, dropout_mask_x, dropout_mask_h,
                  weightnoise_std)


def _split(name: str, gates_t, other, what: str):
    G = _vec(name, "gates_t", gates_t)
    if G % 4:
        raise GraphError(f"{name}: gates_t must have shape (4H,), got ({G},) [at {user_line()}]")
    H = G // 4
    _vec(name, what, other, H)
    return H


def vanilla_lstm_c(c_tm1, gates_t) -> Expression:
    """The new cell c_t = i⊙g + f⊙c_tm1, shape (H,), from c_tm1 (H,) and gates_t (4H,) of
    ``vanilla_lstm_gates``."""
    H = _split("vanilla_lstm_c", gates_t, c_tm1, "c_tm1")
    i, f, g = (dy.pickrange(gates_t, k * H, (k + 1) * H) for k in (0, 1, 3))
    return dy.cmult(i, g) + dy.cmult(f, c_tm1)


def vanilla_lstm_h(c_t, gates_t) -> Expression:
    """The output h_t = o⊙tanh(c_t), shape (H,), from c_t (H,) and gates_t (4H,)."""
    H = _split("vanilla_lstm_h", gates_t, c_t, "c_t")
    return dy.cmult(dy.pickrange(gates_t, 2 * H, 3 * H), dy.tanh(c_t))
