"""DyNet's dimension conventions, where shapes differ.

DyNet leaves trailing dimensions of size 1 implicit: a column (n, 1) and a vector (n,) are
the same thing to a sum, a concatenation or a loss. Its elementwise operators (+, -, cmult,
cdiv) broadcast dimensions of size 1, aligning shapes at their FIRST dimension (NumPy aligns
them at the last): (2, 3) + (2,) adds the vector to every column. Ops here need equal
shapes, so the API puts reshape and broadcast nodes in front of them; nodes whose shapes
already agree (every hot path) never come here."""
from __future__ import annotations

from .errors import GraphError, user_line
from .ops import OPS


def strip(s: tuple) -> tuple:
    """s without its trailing dimensions of size 1 (at least one dimension is kept)."""
    n = len(s)
    while n > 1 and s[n - 1] == 1:
        n -= 1
    return s[:n]


def to_rank(s: tuple, nd: int):
    """s with nd dimensions, trailing 1s added or dropped; None if that drops a larger one."""
    if len(s) <= nd:
        return s + (1,) * (nd - len(s))
    return s[:nd] if all(d == 1 for d in s[nd:]) else None


def broadcast_shape(a: tuple, b: tuple):
    """The shape of DyNet's a ⊙ b, or None where a dimension differs and neither is 1."""
    nd = max(len(a), len(b))
    out = []
    for x, y in zip(to_rank(a, nd), to_rank(b, nd)):
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y))
    return tuple(out)


def reshaped(g, i: int, shape: tuple) -> int:
    """Node i with shape `shape` (same elements): i itself where it has it already."""
    return i if g.shapes[i] == shape else g.add(OPS["reshape"], (i,), shape).i


def fits(s: tuple, out: tuple) -> bool:
    """Whether shape s broadcasts to out without out growing."""
    r = to_rank(s, len(out))
    return r is not None and all(a == b or a == 1 for a, b in zip(r, out))


def broadcast_pair(g, op, a: int, b: int) -> tuple:
    """Nodes a and b brought to the shape of DyNet's op(a, b) (an elementwise operator)."""
    sa, sb = g.shapes[a], g.shapes[b]
    out = broadcast_shape(sa, sb)
    if out is None:
        from .graph import expression
        for i in (a, b):
            expression(g, i)._check()       # a node cg_revert dropped: refused as such
        raise GraphError(f"{op.name}: shapes {sa} and {sb} do not broadcast (each dimension must be equal "
                         f"or 1, the shapes aligned at their first dimension, as in DyNet) [at {user_line()}]")
    return fit(g, a, out), fit(g, b, out)


def fit(g, i: int, out: tuple) -> int:
    """Node i (whose shape fits(out)) as a node of shape out."""
    i = reshaped(g, i, to_rank(g.shapes[i], len(out)))
    return i if g.shapes[i] == out else g.add(OPS["broadcast"], (i,), out).i


def conform(g, ids, shape: tuple) -> list:
    """ids, each that is `shape` up to trailing 1s reshaped to it (DyNet's sum and distances
    take (n, 1) for (n,)); the others are left for the op's own shape error."""
    return [reshaped(g, i, shape) if g.shapes[i] != shape and strip(g.shapes[i]) == strip(shape) else i
            for i in ids]


def to_ranks(g, ids, nd: int) -> list:
    """ids with nd dimensions each where trailing 1s allow it (concatenations)."""
    out = []
    for i in ids:
        s = to_rank(g.shapes[i], nd)
        out.append(i if s is None else reshaped(g, i, s))
    return out
