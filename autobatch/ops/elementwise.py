"""Elementwise ops. Their signature is the op kind (plus constants), never the
shape: tanh of a 256-vector and of a 32-vector run in one kernel over a flat block."""
from __future__ import annotations

import numpy as np

from .base import Op, ShapeError, ragged_sums, register, stacked_inputs


class _Into(Op):
    """The ops below that define only forward_into (their one formula, written with out=)
    get forward() from it: a fresh block of the inputs' broadcast shape."""
    elementwise = True

    def forward(self, xp, xs, attr, data):
        shape = xs[0].shape
        for x in xs[1:]:
            if x.shape != shape:          # a shared (d,) operand beside a stacked (B, d) one
                shape = np.broadcast_shapes(shape, x.shape)
        out = xp.empty(shape, dtype=xp.result_type(*xs))
        self.forward_into(xp, xs, attr, data, out)
        return out


class Unary(_Into):
    def shape(self, shapes, attr):
        return shapes[0]


def _same(name, shapes):
    s0 = shapes[0]
    for s in shapes[1:]:
        if s != s0:
            raise ShapeError(f"{name}: all inputs must have the same shape, got "
                             + ", ".join(str(s) for s in shapes))
    return s0


class NAry(_Into):
    def shape(self, shapes, attr):
        return _same(self.name, shapes)


@register
class Tanh(Unary):
    name = "tanh"

    def c_expr(self, a, attr):
        return f"tanh({a[0]})"

    def forward_into(self, xp, xs, attr, data, out):
        xp.tanh(xs[0], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * (1 - y * y)]

    grad_into_inputs = staticmethod(stacked_inputs)

    def grad_into(self, xp, xs, y, gy, attr, j, out):
        xp.multiply(y, y, out=out)
        xp.subtract(1, out, out=out)
        out *= gy

    def dfdx_from_output(self, xp, y, out):
        xp.multiply(y, y, out=out)
        xp.subtract(1, out, out=out)


@register
class Logistic(Unary):
    name = "logistic"

    def c_expr(self, a, attr):
        return f"((T)0.5 * (tanh({a[0]} * (T)0.5) + (T)1))"

    def forward_into(self, xp, xs, attr, data, out):
        # 0.5·(tanh(x/2)+1) is the logistic without exp overflow for large |x|
        xp.multiply(xs[0], 0.5, out=out)
        xp.tanh(out, out=out)
        out += 1
        out *= 0.5

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * y * (1 - y)]

    grad_into_inputs = staticmethod(stacked_inputs)

    def grad_into(self, xp, xs, y, gy, attr, j, out):
        xp.subtract(1, y, out=out)
        out *= y
        out *= gy

    def dfdx_from_output(self, xp, y, out):
        xp.subtract(1, y, out=out)
        out *= y


@register
class Rectify(Unary):
    name = "rectify"

    def c_expr(self, a, attr):
        return f"fmax({a[0]}, (T)0)"

    def forward_into(self, xp, xs, attr, data, out):
        xp.maximum(xs[0], 0, out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * (xs[0] > 0)]

    def dfdx_from_output(self, xp, y, out):
        xp.greater(y, 0, out=out)            # y > 0 exactly where x > 0


@register
class Elu(Unary):
    name = "elu"

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        return xp.where(x > 0, x, attr * xp.expm1(xp.minimum(x, 0)))

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * xp.where(xs[0] > 0, 1, y + attr)]


@register
class Exp(Unary):
    name = "exp"

    def c_expr(self, a, attr):
        return f"exp({a[0]})"

    def forward_into(self, xp, xs, attr, data, out):
        xp.exp(xs[0], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * y]

    def dfdx_from_output(self, xp, y, out):
        out[...] = y


@register
class Log(Unary):
    name = "log"

    def forward_into(self, xp, xs, attr, data, out):
        xp.log(xs[0], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy / xs[0]]


@register
class Sqrt(Unary):
    name = "sqrt"

    def forward_into(self, xp, xs, attr, data, out):
        xp.sqrt(xs[0], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * 0.5 / y]


@register
class Square(Unary):
    name = "square"

    def c_expr(self, a, attr):
        return f"({a[0]} * {a[0]})"

    def forward_into(self, xp, xs, attr, data, out):
        xp.multiply(xs[0], xs[0], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [2 * gy * xs[0]]

    grad_into_inputs = staticmethod(stacked_inputs)

    def grad_into(self, xp, xs, y, gy, attr, j, out):
        xp.multiply(gy, xs[0], out=out)
        out *= 2


@register
class Abs(Unary):
    name = "abs"

    def forward_into(self, xp, xs, attr, data, out):
        xp.abs(xs[0], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * xp.sign(xs[0])]


@register
class ScaleShift(Unary):
    """y = a·x + b with constants (a, b): covers -x, x*2, x+1, 1-x."""
    name = "scale_shift"

    def forward_into(self, xp, xs, attr, data, out):
        a, b = attr
        if a != 1:
            xp.multiply(xs[0], a, out=out)
        else:
            out[...] = xs[0]
        if b:
            out += b

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * attr[0]]

    def c_expr(self, a, attr):
        if not all(np.isfinite(float(v)) for v in attr):   # no C literal for inf/nan
            return None
        return f"({a[0]} * (T){float(attr[0])!r} + (T){float(attr[1])!r})"


@register
class ScalarDiv(Unary):
    """y = c / x for a constant c (``2 / x``)."""
    name = "scalar_div"

    def forward(self, xp, xs, attr, data):
        return attr / xs[0]

    def backward(self, xp, xs, y, gy, attr, data):
        return [-gy * y / xs[0]]


@register
class Add(NAry):
    """esum: any number of same-shape inputs (``a + b`` is the 2-input case)."""
    name = "add"
    broadcasts = True

    def c_expr(self, a, attr):
        return "(" + " + ".join(a) + ")"

    def forward_into(self, xp, xs, attr, data, out):
        if len(xs) == 1:
            out[...] = xs[0]
            return
        xp.add(xs[0], xs[1], out=out)
        for x in xs[2:]:
            out += x

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy] * len(xs)

    def forward_stacked(self, xp, x, attr, data, out):
        x.sum(axis=1, out=out)

    def backward_stacked(self, xp, x, y, gy, attr, data):
        return xp.broadcast_to(gy[:, None], x.shape)

    def forward_ragged(self, xp, x, counts, attr, data, out):
        out[...] = ragged_sums(xp, x, counts)

    def backward_ragged(self, xp, x, y, gy, counts, attr, data):
        return xp.repeat(gy, xp.asarray(counts), axis=0)


@register
class Sub(NAry):
    name = "sub"
    broadcasts = True

    def c_expr(self, a, attr):
        return f"({a[0]} - {a[1]})"

    def forward_into(self, xp, xs, attr, data, out):
        xp.subtract(xs[0], xs[1], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy, -gy]


@register
class CMult(NAry):
    name = "cmult"
    broadcasts = True
    fuses_in = True       # cmult(o, tanh(c)) of a temporary tanh is one node (fused.py)

    def c_expr(self, a, attr):
        return f"({a[0]} * {a[1]})"

    def forward_into(self, xp, xs, attr, data, out):
        xp.multiply(xs[0], xs[1], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * xs[1], gy * xs[0]]

    def grad_into_inputs(self, shapes, is_param):
        return stacked_inputs(shapes, is_param) if len(shapes) == 2 else None

    def grad_into(self, xp, xs, y, gy, attr, j, out):
        xp.multiply(gy, xs[1 - j], out=out)


@register
class CDiv(NAry):
    name = "cdiv"
    broadcasts = True

    def forward_into(self, xp, xs, attr, data, out):
        xp.divide(xs[0], xs[1], out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        g0 = gy / xs[1]
        return [g0, -g0 * y]


@register
class Average(NAry):
    name = "average"

    def forward(self, xp, xs, attr, data):
        y = xs[0] + xs[1] if len(xs) > 1 else xs[0].copy()
        for x in xs[2:]:
            y += x
        y *= 1.0 / len(xs)
        return y

    def backward(self, xp, xs, y, gy, attr, data):
        g = gy * (1.0 / len(xs))
        return [g] * len(xs)

    def forward_stacked(self, xp, x, attr, data, out):
        x.sum(axis=1, out=out)
        out *= 1.0 / x.shape[1]

    def backward_stacked(self, xp, x, y, gy, attr, data):
        return xp.broadcast_to((gy * (1.0 / x.shape[1]))[:, None], x.shape)

    def forward_ragged(self, xp, x, counts, attr, data, out):
        xp.multiply(ragged_sums(xp, x, counts), _reciprocals(xp, counts, out), out=out)

    def backward_ragged(self, xp, x, y, gy, counts, attr, data):
        return xp.repeat(gy * _reciprocals(xp, counts, gy), xp.asarray(counts), axis=0)


def _reciprocals(xp, counts, like):
    """1/n per node as a column that broadcasts over like's rows (the 1/n forward uses)."""
    return xp.asarray([1.0 / c for c in counts], dtype=like.dtype).reshape((-1,) + (1,) * (like.ndim - 1))


@register
class EMax(NAry):
    """Elementwise max of several inputs; the gradient goes to the first argmax."""
    name = "emax"

    def forward(self, xp, xs, attr, data):
        y = xs[0]
        for x in xs[1:]:
            y = xp.maximum(y, x)
        return y

    def backward(self, xp, xs, y, gy, attr, data):
        taken = xp.zeros(y.shape, dtype=bool)
        out = []
        for x in xs:
            m = (x == y) & ~taken
            taken |= m
            out.append(gy * m)
        return out
