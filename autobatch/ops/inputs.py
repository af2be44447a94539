"""Leaves: data fed in per node, constants, and rows of lookup tables."""
from __future__ import annotations

from .base import Op, RowGrad, register


@register
class Input(Op):
    """inputVector / inputTensor / scalarInput: each node carries its own values."""
    name = "input"
    differentiable = False
    has_data = True

    def shape(self, shapes, attr):
        return attr

    def sig(self, shapes, attr):
        return attr

    def forward(self, xp, xs, attr, data):
        return xp.asarray(data).reshape((len(data),) + attr)


@register
class Constant(Op):
    """zeros / ones / constant: attr = (shape, fill value)."""
    name = "constant"
    differentiable = False
    has_data = True  # no values, but the list gives the batch size

    def shape(self, shapes, attr):
        return attr[0]

    def sig(self, shapes, attr):
        return attr

    def forward(self, xp, xs, attr, data):
        return xp.full((len(data),) + attr[0], attr[1])


@register
class Lookup(Op):
    """E[i]: the table is shared, the row index is per-node data; one take per batch."""
    name = "lookup"
    shared = (0,)
    has_data = True

    def shape(self, shapes, attr):
        return shapes[0][1:]

    def sig(self, shapes, attr):
        return None

    def forward(self, xp, xs, attr, data):
        return xs[0][xp.asarray(data)]

    def forward_into(self, xp, xs, attr, data, out):
        if xp.__name__ == "numpy":
            # NumPy buffers take(out=) in its default mode; the ids were range-checked when
            # the nodes were made (lookup(), vertex pulls), so clipping never changes one
            xs[0].take(xp.asarray(data), axis=0, out=out, mode="clip")
        else:
            xp.take(xs[0], xp.asarray(data), axis=0, out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        return [RowGrad(xp.asarray(data), gy)]
