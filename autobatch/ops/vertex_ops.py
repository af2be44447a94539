"""vertex_call: one call of a vertex function (autobatch.vertex) as ONE lazy-graph node.

Inputs: the parameters F uses and the lazy-graph Expressions it pulls, all shared (the node
runs alone); output: every pushed value of every vertex, concatenated. The node's data is
the call's engine run (an object with forward(xp, xs) and backward(xp, xs, gy)), so this op
knows nothing of vertices: it hands the batch of one to that object."""
from __future__ import annotations

from .base import Op, register


@register
class VertexCall(Op):
    name = "vertex_call"
    batchable = False
    heavy = True
    has_data = True

    def shared_of(self, n):
        return tuple(range(n))

    def shape(self, shapes, attr):
        return attr

    def sig(self, shapes, attr):
        return None

    def forward(self, xp, xs, attr, data):
        return data[0].forward(xp, xs)

    def forward_into(self, xp, xs, attr, data, out):
        data[0].forward(xp, xs, out)

    def backward(self, xp, xs, y, gy, attr, data):
        return data[0].backward(xp, xs, gy)
