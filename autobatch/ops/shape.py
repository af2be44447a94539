"""Ops that move elements around: concatenation, slicing, picking, reshaping."""
from __future__ import annotations

from .base import Op, ShapeError, flat_order_same, prod, register


@register
class Concatenate(Op):
    """concatenate(xs, d): join along dimension d (attr)."""
    name = "concatenate"

    def shape(self, shapes, attr):
        d = attr
        s0 = shapes[0]
        if not 0 <= d < len(s0):
            raise ShapeError(f"concatenate: dimension {d} out of range for shape {s0}")
        for s in shapes[1:]:
            if len(s) != len(s0) or s[:d] != s0[:d] or s[d + 1:] != s0[d + 1:]:
                raise ShapeError(f"concatenate along {d}: incompatible shapes "
                                 + ", ".join(str(s) for s in shapes))
        return s0[:d] + (sum(s[d] for s in shapes),) + s0[d + 1:]

    def view(self, shapes, attr):
        if prod(shapes[0][:attr]) != 1:
            return None              # pieces interleave in memory
        pieces, k = [], 0
        for j, s in enumerate(shapes):
            pieces.append((j, -k))
            k += prod(s)
        return tuple(pieces)

    def forward(self, xp, xs, attr, data):
        return xp.concatenate(xs, axis=attr + 1)

    def forward_into(self, xp, xs, attr, data, out):
        xp.concatenate(xs, axis=attr + 1, out=out)

    def backward(self, xp, xs, y, gy, attr, data):
        out, k = [], 0
        for x in xs:
            n = x.shape[attr + 1]
            out.append(gy[(slice(None),) * (attr + 1) + (slice(k, k + n),)])
            k += n
        return out


@register
class ConcatenateCols(Op):
    """concatenate_cols(vectors): the vectors become the columns of an (n, k) matrix."""
    name = "concatenate_cols"

    def shape(self, shapes, attr):
        s0 = shapes[0]
        for s in shapes:
            if s != s0 or len(s) != 1:
                raise ShapeError("concatenate_cols: needs vectors of equal length, got "
                                 + ", ".join(str(s) for s in shapes))
        return (s0[0], len(shapes))

    def forward(self, xp, xs, attr, data):
        return xp.stack(xs, axis=2)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy[:, :, k] for k in range(len(xs))]


@register
class Broadcast(Op):
    """x repeated along its dimensions of size 1 to shape attr (DyNet's elementwise
    broadcasting; the API gives x as many dimensions as attr first, see api_dims.py)."""
    name = "broadcast"

    def shape(self, shapes, attr):
        s = shapes[0]
        if len(s) != len(attr) or any(a != b and a != 1 for a, b in zip(s, attr)):
            raise ShapeError(f"broadcast: cannot broadcast {s} to {attr}")
        return attr

    def forward(self, xp, xs, attr, data):
        return xp.broadcast_to(xs[0], (xs[0].shape[0],) + attr)

    def backward(self, xp, xs, y, gy, attr, data):
        axes = tuple(k + 1 for k, (a, b) in enumerate(zip(xs[0].shape[1:], attr)) if a != b)
        return [gy.sum(axis=axes, keepdims=True)]


@register
class Reshape(Op):
    """DyNet keeps the column-major layout: (3, 4) -> (2, 6) reads and writes columns
    first (like inputMatrix and vec_value). Order 'F' on the (B, ...) block keeps the
    batch index fastest in both, so each node is reshaped on its own."""
    name = "reshape"

    def shape(self, shapes, attr):
        n, m = prod(shapes[0]), prod(attr)
        if n != m:
            raise ShapeError(f"reshape: cannot reshape {shapes[0]} ({n} elements) to {attr}")
        return attr

    def view(self, shapes, attr):
        return ((0, 0),) if flat_order_same(shapes[0]) and flat_order_same(attr) else None

    def forward(self, xp, xs, attr, data):
        return xs[0].reshape((xs[0].shape[0],) + attr, order="F")

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy.reshape(xs[0].shape, order="F")]


@register
class SelectRows(Op):
    """select_rows(x, rows): rows of a matrix (or elements of a vector); rows in attr."""
    name = "select_rows"

    def shape(self, shapes, attr):
        s = shapes[0]
        for r in attr:
            if not 0 <= r < s[0]:
                raise ShapeError(f"select_rows: row {r} out of range for shape {s}")
        return (len(attr),) + s[1:]

    def forward(self, xp, xs, attr, data):
        return xs[0][:, list(attr)]

    def backward(self, xp, xs, y, gy, attr, data):
        g = xp.zeros_like(xs[0])
        for k, r in enumerate(attr):   # rows may repeat: accumulate
            g[:, r] += gy[:, k]
        return [g]


@register
class PickRange(Op):
    """pickrange(x, s, e, d): elements s..e-1 along dimension d; attr = (s, e, d)."""
    name = "pickrange"

    def shape(self, shapes, attr):
        s, e, d = attr
        sh = shapes[0]
        if not (0 <= d < len(sh) and 0 <= s < e <= sh[d]):
            raise ShapeError(f"pickrange: range [{s}, {e}) along {d} is out of bounds for shape {sh}")
        return sh[:d] + (e - s,) + sh[d + 1:]

    def view(self, shapes, attr):
        s, e, d = attr
        sh = shapes[0]
        return ((0, s * prod(sh[d + 1:])),) if prod(sh[:d]) == 1 else None

    def forward(self, xp, xs, attr, data):
        s, e, d = attr
        return xs[0][(slice(None),) * (d + 1) + (slice(s, e),)]

    def backward(self, xp, xs, y, gy, attr, data):
        s, e, d = attr
        g = xp.zeros_like(xs[0])
        g[(slice(None),) * (d + 1) + (slice(s, e),)] = gy
        return [g]


@register
class Pick(Op):
    """pick(x, i, d): element/row i along dimension d; i is per-node data, d is attr."""
    name = "pick"
    has_data = True

    def shape(self, shapes, attr):
        s = shapes[0]
        if not 0 <= attr < len(s):
            raise ShapeError(f"pick: dimension {attr} out of range for shape {s}")
        return (s[:attr] + s[attr + 1:]) or (1,)

    def forward(self, xp, xs, attr, data):
        x = xp.moveaxis(xs[0], attr + 1, 1)
        y = x[xp.arange(x.shape[0]), xp.asarray(data)]
        return y.reshape(y.shape[0], 1) if y.ndim == 1 else y

    def backward(self, xp, xs, y, gy, attr, data):
        g = xp.zeros_like(xs[0])
        gv = xp.moveaxis(g, attr + 1, 1)   # a view: writes land in g
        gv[xp.arange(g.shape[0]), xp.asarray(data)] = gy.reshape(gv.shape[:1] + gv.shape[2:])
        return [g]
