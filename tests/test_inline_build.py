"""The API's inline fast paths (autobatch/fastpath.py: tanh ..., cmult, +, affine_transform,
lookup, pickneglogsoftmax, esum of 2 and 3, concatenate of 2) must append exactly what the
generic add() appends. A debug graph sends every node through add(), so random programs
built in a normal graph and in a debug graph must give identical columns."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autobatch as dy
from autobatch.errors import StaleExpressionError
from autobatch.graph import ComputationGraph
from check_kit import graph_columns

COLUMNS = ("ops", "args", "attrs", "datas", "shapes", "sizes", "sigs", "depths", "needs", "uses", "sig_op")
UNARY = ("tanh", "logistic", "rectify", "exp", "log", "sqrt", "square", "abs")
BINARY = ("cmult", "cdiv")


class Net:
    def __init__(self):
        self.pc = dy.ParameterCollection()
        # two hidden sizes, so that one op meets inputs of several shapes in turn
        self.E = {h: [self.pc.add_lookup_parameters((5, h)) for _ in range(2)] for h in (3, 4)}
        self.b = {h: [self.pc.add_parameters((h,)) for _ in range(2)] for h in (3, 4)}
        self.W = {(o, i): [self.pc.add_parameters((o, i)) for _ in range(2)]
                  for o in (3, 4) for i in (3, 4, 6, 7, 8)}


NET = None

step = st.tuples(st.sampled_from(["lookup", "input", "unary", "punary", "binary", "concat", "affine",
                                  "haffine", "pnls", "esum", "add", "mul", "param", "checkpoint", "revert",
                                  "pick", "softmax", "dropout", "reduce", "dot", "transpose", "scalar",
                                  "affine2"]),
                 st.integers(0, 11), st.integers(0, 11), st.integers(0, 11))   # small: repeats


def run(program):
    """Interpret program in the current graph; returns nothing (the graph is the result)."""
    net = NET
    pool = [dy.lookup(net.E[3][0], 0), dy.lookup(net.E[4][0], 1)]
    marks = []
    for kind, u, v, w in program:
        by = {}
        for e in pool:
            by.setdefault(e.dim()[0], []).append(e)
        x = pool[-1 - u % len(pool)]      # recent nodes mostly, so patterns repeat
        sx = x.dim()[0]
        if kind == "lookup":
            h = (3, 4)[u % 2]
            pool.append(dy.lookup(net.E[h][v % 2], w % 5))
        elif kind == "input":                # needs no gradient, unlike the parameters
            pool.append(dy.inputVector([0.5] * (3, 4)[u % 2]))
        elif kind == "unary":
            pool.append(getattr(dy, UNARY[v % len(UNARY)])(x))
        elif kind == "punary":               # a Parameter straight into the op
            pool.append(getattr(dy, UNARY[v % len(UNARY)])(net.b[(3, 4)[w % 2]][u % 2]))
        elif kind in ("binary", "add", "esum"):
            same = by[sx]
            y = same[v % len(same)]
            if kind == "binary":
                pool.append(getattr(dy, BINARY[w % 2])(x, y))
            elif kind == "add":             # the operators' inline paths
                pool.append((x + y, x - y, x / y)[w % 3])
            else:
                z = same[w % len(same)]
                pool.append(dy.esum([x, y] if w % 2 else [x, y, z]))
        elif kind == "concat":
            small = [e for e in pool if e.dim()[0][0] <= 4]
            a, b = small[u % len(small)], small[v % len(small)]
            pool.append(dy.concatenate([a, b]))
        elif kind == "affine":
            o = (3, 4)[v % 2]
            k = sx[0]
            if k in (3, 4, 6, 7, 8):
                bias = net.b[o][w % 2]
                pool.append(dy.affine_transform([bias, net.W[(o, k)][(w // 2) % 2], x]))
        elif kind == "haffine":              # DyNet 2.0's form: dy.parameter handles of b and W
            o, k = (3, 4)[v % 2], sx[0]
            if k in (3, 4, 6, 7, 8):
                pool.append(dy.affine_transform([dy.parameter(net.b[o][w % 2]),
                                                 dy.parameter(net.W[(o, k)][(w // 2) % 2]), x]))
        elif kind == "mul":                  # W * x: a Parameter, or its expression
            o, k = (3, 4)[v % 2], sx[0]
            if k in (3, 4, 6, 7, 8):
                W = net.W[(o, k)][w % 2]
                pool.append(W * x if (w // 2) % 2 else dy.parameter(W) * x)
        elif kind == "param":
            pool.append(dy.parameter(net.b[(3, 4)[u % 2]][v % 2]))
        elif kind == "pnls":
            pool.append(dy.pickneglogsoftmax(x, w % sx[0]))
        elif kind == "pick":                 # an index one past the end half the time: refused
            try:
                pool.append(dy.pick(x, w % (sx[0] + 1)))
            except dy.GraphError:
                assert w % (sx[0] + 1) == sx[0]
        elif kind == "softmax":
            pool.append((dy.softmax, dy.log_softmax)[w % 2](x))
        elif kind == "dropout":              # seeded by the node's number: the same in both graphs
            pool.append(dy.dropout(x, (0.25, 0.5)[w % 2]))
        elif kind == "reduce":
            pool.append((dy.sum_elems, dy.mean_elems, dy.squared_norm, dy.l2_norm)[w % 4](x))
        elif kind == "dot":
            same = by[sx]
            pool.append(dy.dot_product(x, same[v % len(same)]))
        elif kind == "transpose" and len(sx) == 1:     # a row (1, n): not a vector, kept off the pool
            dy.transpose(x)
        elif kind == "affine2":              # b + W·x + U·y, Parameters or handles
            y = pool[-1 - v % len(pool)]
            o, k, j = (3, 4)[w % 2], sx[0], y.dim()[0][0]
            if len(sx) == 1 and len(y.dim()[0]) == 1 and k in (3, 4, 6, 7, 8) and j in (3, 4, 6, 7, 8):
                b, W, U = net.b[o][0], net.W[(o, k)][0], net.W[(o, j)][1]
                if u % 2:
                    b, W, U = dy.parameter(b), dy.parameter(W), dy.parameter(U)
                pool.append(dy.affine_transform([b, W, x, U, y]))
        elif kind == "scalar":               # the operators with a number: a·x + b nodes
            c = (0.5, 2, 3.0)[v % 3]
            pool.append((x * c, c * x, x / c, x + c, c + x, x - c, c - x, -x)[w % 8])
        elif kind == "checkpoint":
            dy.cg_checkpoint()
            marks.append(len(pool))
        elif kind == "revert" and marks:
            dy.cg_revert()
            del pool[marks.pop():]


def columns(debug, program):
    dy.set_debug(debug)
    try:
        dy.reset_random_seed(11)            # dropout's seeds: the graph's, then the node's
        g = dy.renew_cg()
        assert isinstance(g, ComputationGraph) and (type(g) is ComputationGraph) != debug
        run(program)
        cols = graph_columns(g, COLUMNS)
        cols["datas"] = [d.tolist() if hasattr(d, "tolist") else d for d in cols["datas"]]
        return cols
    finally:
        dy.set_debug(False)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, min_size=8, max_size=60))
def test_inline_paths_append_what_add_appends(program):
    _same_columns(program)


def _same_columns(program):
    global NET
    if NET is None:
        NET = Net()
    fast, plain = columns(False, program), columns(True, program)
    for c in COLUMNS:
        assert fast[c] == plain[c], c


@pytest.mark.parametrize("program", [
    # parameter nodes made after a checkpoint: the caches that name them must not serve after
    # the revert (the inline paths read them through ComputationGraph._cols)
    [("checkpoint", 0, 0, 0), ("affine", 0, 0, 0), ("revert", 0, 0, 0), ("affine", 0, 0, 0), ("affine", 0, 0, 0)],
    [("checkpoint", 0, 0, 0), ("lookup", 0, 1, 2), ("revert", 0, 0, 0), ("lookup", 0, 1, 3), ("lookup", 0, 1, 4)],
    # W * x and dy.parameter(W) * x: a product entry names W's node (another W's after the revert)
    [("checkpoint", 0, 0, 0), ("mul", 0, 0, 0), ("mul", 0, 0, 2), ("revert", 0, 0, 0), ("mul", 0, 0, 1),
     ("mul", 0, 0, 3), ("mul", 0, 0, 0), ("param", 0, 0, 0)],
    # the handles' affine entry names W's node: another node after the revert
    [("checkpoint", 0, 0, 0), ("haffine", 0, 0, 0), ("haffine", 0, 0, 0), ("revert", 0, 0, 0),
     ("param", 0, 0, 0), ("haffine", 0, 0, 0), ("haffine", 0, 0, 0)],
    # dy.parameter(b) hands out one Expression per graph: not one of a node the revert dropped
    [("checkpoint", 0, 0, 0), ("param", 1, 1, 0), ("revert", 0, 0, 0), ("lookup", 1, 0, 1),
     ("param", 1, 1, 0), ("binary", 0, 0, 0)],
])
def test_inline_paths_after_revert(program):
    _same_columns(program)


def test_inline_paths_are_taken(monkeypatch):
    """Most nodes of a repeated pattern must bypass add()/add1()/add2()/add_affine()."""
    net = Net()
    calls = []
    for name in ("add", "add1", "add2", "add3", "add_affine", "add_lookup"):
        orig = getattr(ComputationGraph, name)
        monkeypatch.setattr(ComputationGraph, name,
                            lambda self, *a, _o=orig, **k: (calls.append(1), _o(self, *a, **k))[1])
    g = dy.renew_cg()
    W, b, E = net.W[(3, 6)][0], net.b[3][0], net.E[3][0]
    for k in range(20):
        x = dy.concatenate([dy.lookup(E, k % 5), dy.tanh(dy.lookup(E, 1))])
        h = dy.cmult(dy.logistic(dy.affine_transform([b, W, x])), dy.lookup(E, 2))
        dy.pickneglogsoftmax(dy.esum([h, h, dy.esum([h, h])]), 1)
        dy.tanh(W * x), dy.tanh(dy.parameter(W) * x)
        dy.logistic(dy.affine_transform([dy.parameter(b), dy.parameter(W), x]))
        dy.pick(dy.log_softmax(dy.dropout(h, 0.5)), 2), dy.pick(dy.softmax(h), 1)
        dy.sum_elems(h), dy.dot_product(h, h), dy.transpose(h)
        -h, h * 0.5, 0.5 * h, 1.0 - h
    assert len(g.ops) > 370 and len(calls) < 45, len(calls)


def test_inline_paths_check_their_inputs():
    net = Net()
    old = dy.lookup(net.E[3][0], 0)
    dy.tanh(old)                          # fills the caches of the old graph
    dy.renew_cg()
    x = dy.lookup(net.E[3][0], 0)
    dy.tanh(x), dy.cmult(x, x), dy.concatenate([x, x])
    dy.affine_transform([net.b[3][0], net.W[(3, 3)][0], x])
    for f in (lambda: dy.tanh(old), lambda: dy.cmult(x, old), lambda: dy.concatenate([old, x]),
              lambda: dy.affine_transform([net.b[3][0], net.W[(3, 3)][0], old])):
        with pytest.raises(StaleExpressionError):
            f()
    dy.pickneglogsoftmax(x, 2)            # fills the caches: the checks below are the fast paths
    for label, row in ((3, 5), (-1, -1)):  # out of range for shape (3,) and a table of 5 rows
        with pytest.raises(dy.GraphError, match="pickneglogsoftmax"):
            dy.pickneglogsoftmax(x, label)
        with pytest.raises(dy.GraphError, match="lookup"):
            dy.lookup(net.E[3][0], row)
    with pytest.raises((TypeError, dy.GraphError), match="affine_transform|Expression"):
        dy.affine_transform([net.b[3][0], [[1.0]], x])     # an unhashable W
    dy.pick(x, 0), dy.softmax(x), dy.log_softmax(x), dy.dropout(x, 0.5)    # their entries
    for f, match in ((lambda: dy.pick(x, 3), "pick"), (lambda: dy.pick(x, -1), "pick"),
                     (lambda: dy.pick(x, 1.5), "pick"), (lambda: dy.softmax(x, 2), "softmax"),
                     (lambda: dy.dropout(x, 1.0), "dropout"), (lambda: dy.dropout(x, -0.5), "dropout")):
        with pytest.raises(dy.GraphError, match=match):
            f()
    dy.sum_elems(x), dy.dot_product(x, x), dy.transpose(x)
    with pytest.raises(dy.GraphError, match="dot_product"):
        dy.dot_product(x, dy.lookup(net.E[4][0], 0))
    for f in (lambda: dy.pick(old, 0), lambda: dy.softmax(old), lambda: dy.log_softmax(old),
              lambda: dy.dropout(old, 0.5), lambda: dy.sum_elems(old), lambda: dy.dot_product(x, old),
              lambda: dy.transpose(old), lambda: -old, lambda: old * 2.0, lambda: 2 * old, lambda: old + 1,
              lambda: 1.0 - old, lambda: old / 2):
        with pytest.raises(StaleExpressionError):
            f()
    x * 2.0, -x                                            # the scale entries
    with np.errstate(invalid="ignore"):                    # x / 0 as DyNet's: IEEE division
        z, v = (x / 0.0).npvalue(), x.npvalue()
        assert np.array_equal(z, np.where(v == 0, np.nan, np.sign(v) * np.inf), equal_nan=True)
    with pytest.raises(TypeError, match="bool"):
        x * True                                           # a bool is no number here, as before
    assert dy.pick(x, 2.0).dim()[0] == (1,)                # a whole float, as DyNet's
    was = len(dy.cg().ops)
    assert dy.dropout(x, 0.0) is x and len(dy.cg().ops) == was  # the identity: no node


def test_parameter_uses_are_neither_counted_nor_read(monkeypatch):
    """The affine and lookup fast paths skip the consumer counts of their parameter inputs
    (the graph keeps uses of computed nodes only): the agenda, which reads uses, must plan
    the same whatever a parameter node's entry holds, in both of its implementations."""
    from autobatch import scheduler
    from autobatch.runtime import Strategy
    net = Net()
    g = dy.renew_cg("agenda")
    W, b, E = net.W[(3, 3)][0], net.b[3][0], net.E[3][0]
    for k in range(60):
        h = dy.lookup(E, k % 5)
        for _ in range(k % 4):
            h = dy.tanh(dy.affine_transform([b, W, h]))
        dy.pickneglogsoftmax(h, 1)
    params = [n for n, s in enumerate(g.sigs) if s < 0]
    assert len(params) == 3 and max(g.uses[n] for n in params) <= 1   # only add()'s first count
    scrambled = list(g.uses)
    for n in params:
        scrambled[n] = 7
    for small in (-1, 1 << 30):            # the vectorised agenda, then the plain Python one
        monkeypatch.setattr(scheduler, "_SMALL", small)
        plans = [scheduler.schedule(Strategy.AGENDA, 0, len(g.sigs), g.sigs, g.depths, g.args,
                                    g.heavy_of_sig, uses) for uses in (g.uses, scrambled)]
        assert plans[0] == plans[1]
