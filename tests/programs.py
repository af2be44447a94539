"""Random dynamic programs for the engine tests.

A *program* is plain data (nested tuples and lists) drawn by Hypothesis strategies;
`build(prog, P)` turns it into one graph with the DyNet-named API over the shared
parameters `P` (from `make_params`) and returns the scalar loss. Because the
program is data, the very same program can be built under every strategy and the
results compared, and Hypothesis can shrink a failing program.

Instance kinds (a program is a list of instances, summed into one loss):
- ("chain", xs):      an RNN-like chain h = tanh(W_h h + W_x x + b) of random length
- ("tree", t):        a random binary / n-ary tree; leaves are lookups with repeated ids
- ("dag", steps, k):  a random DAG of random ops whose arguments reuse earlier nodes
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import autobatch as dy

SIZES = (1, 2, 3, 4)   # mixed vector sizes: elementwise batches then take the flat path
MAXN = 8               # concatenations grow vectors up to this size
H = 3                  # hidden size of chains and trees
VOCAB = 5              # small, so lookups repeat indices


def make_params(seed: int = 0):
    """Shared parameters: W[(m, n)] (m x n), b[m], E[n] (VOCAB x n), and the chain/tree cells."""
    dy.reset_random_seed(seed)
    m = dy.ParameterCollection()
    P = {"W": {}, "b": {}, "E": {}}
    for a in SIZES:
        P["b"][a] = m.add_parameters(a, init=dy.UniformInitializer(0.5))
        P["E"][a] = m.add_lookup_parameters((VOCAB, a), init=dy.UniformInitializer(0.8))
        for c in range(1, MAXN + 1):
            P["W"][(a, c)] = m.add_parameters((a, c), init=dy.UniformInitializer(0.7))
    P["Wh"] = m.add_parameters((H, H), init=dy.UniformInitializer(0.5))
    P["Wx"] = m.add_parameters((H, 2), init=dy.UniformInitializer(0.5))
    P["bh"] = m.add_parameters(H, init=dy.UniformInitializer(0.5))
    P["Wl"] = m.add_parameters((H, H), init=dy.UniformInitializer(0.5))
    P["Wr"] = m.add_parameters((H, H), init=dy.UniformInitializer(0.5))
    P["Wout"] = m.add_parameters((4, H), init=dy.UniformInitializer(0.5))
    P["model"] = m
    return P


def all_params(P) -> list:
    m = P["model"]
    return list(m.parameters_list()) + list(m.lookup_parameters_list())


# --- strategies -------------------------------------------------------------------------
floats = st.floats(-1.5, 1.5, allow_nan=False, width=32, allow_subnormal=False)  # autobatch flushes them (denormals.py)


@st.composite
def chains(draw):
    n = draw(st.integers(1, 6))
    xs = [tuple(draw(st.lists(floats, min_size=2, max_size=2))) for _ in range(n)]
    return ("chain", xs, draw(st.integers(0, 3)))


def _tree(max_leaves):
    leaf = st.integers(0, VOCAB - 1).map(lambda i: ("leaf", i))
    return st.recursive(leaf, lambda kids: st.lists(kids, min_size=2, max_size=3).map(
        lambda ks: ("node", tuple(ks))), max_leaves=max_leaves)


@st.composite
def trees(draw):
    return ("tree", draw(_tree(8)), draw(st.integers(0, 3)))


# A DAG step: (op name, argument picks (ints reduced modulo the pool), extra int).
DAG_OPS = ("input", "lookup", "param", "tanh", "logistic", "rectify", "cmult", "add", "sub",
           "esum", "concat", "pickrange", "affine", "affine2", "matmul", "dot", "softmax",
           "pick", "sum_elems", "neg_scale")


@st.composite
def dags(draw):
    n = draw(st.integers(1, 12))
    steps = []
    for _ in range(n):
        op = draw(st.sampled_from(DAG_OPS))
        picks = tuple(draw(st.lists(st.integers(0, 1000), min_size=4, max_size=4)))
        vals = tuple(draw(st.lists(floats, min_size=4, max_size=4)))
        steps.append((op, picks, vals))
    return ("dag", steps, draw(st.integers(0, 3)))


instances = st.one_of(chains(), trees(), dags())
programs = st.lists(instances, min_size=1, max_size=6)


# --- building -----------------------------------------------------------------------------
def _size(x) -> int:
    s = x.dim()[0]
    return int(np.prod(s)) if s else 1


def _chain(inst, P):
    _, xs, _ = inst
    h = dy.inputVector([0.0] * H)
    for x in xs:
        h = dy.tanh(dy.affine_transform([P["bh"], P["Wh"], h, P["Wx"], dy.inputVector(list(x))]))
    return h


def _tree_expr(t, P):
    if t[0] == "leaf":
        return dy.lookup(P["E"][H], t[1])
    kids = [_tree_expr(k, P) for k in t[1]]
    if len(kids) == 2:               # binary: the TreeLSTM-ish composition with two matrices
        return dy.tanh(dy.affine_transform([P["b"][H], P["Wl"], kids[0], P["Wr"], kids[1]]))
    return dy.logistic(P["Wl"] * dy.esum(kids) + P["b"][H])   # n-ary: sum of children


def _dag(inst, P):
    """Interpret DAG steps over a pool of nodes; every step's arguments reuse pool nodes
    (picked modulo the pool length, filtered by size when the op needs equal sizes)."""
    _, steps, _ = inst
    pool = [dy.inputVector([0.3, -0.7]), dy.lookup(P["E"][3], 1)]

    def pick(k, size=None):
        cands = pool if size is None else [x for x in pool if _size(x) == size]
        return cands[k % len(cands)] if cands else None

    for op, k, v in steps:
        x = pick(k[0])
        s = _size(x)
        y = pick(k[1], s)            # same size as x (x itself at worst)
        if op == "input":
            out = dy.inputVector(list(v[:1 + k[1] % 4]))
        elif op == "lookup":
            out = dy.lookup(P["E"][SIZES[k[1] % 4]], k[2] % VOCAB)
        elif op == "param":
            out = dy.parameter(P["b"][SIZES[k[1] % 4]])
        elif op == "tanh":
            out = dy.tanh(x)
        elif op == "logistic":
            out = dy.logistic(x)
        elif op == "rectify":
            out = dy.rectify(x)
        elif op == "cmult":
            out = dy.cmult(x, y)
        elif op == "add":
            out = x + y
        elif op == "sub":
            out = x - y
        elif op == "esum":
            out = dy.esum([x, y, pick(k[2], s)])
        elif op == "concat":
            z = pick(k[1])
            if s + _size(z) > 8:
                z = x if 2 * s <= 8 else None
            out = dy.concatenate([x, z]) if z is not None else dy.tanh(x)
        elif op == "pickrange":
            a = k[1] % s
            out = dy.pickrange(x, a, a + 1 + k[2] % (s - a))
        elif op == "affine":
            m = SIZES[k[2] % 4]
            out = dy.affine_transform([P["b"][m], P["W"][(m, s)], x])
        elif op == "affine2":
            m = SIZES[k[2] % 4]
            z = pick(k[3])
            out = dy.affine_transform([P["b"][m], P["W"][(m, s)], x, P["W"][(m, _size(z))], z])
        elif op == "matmul":
            out = P["W"][(SIZES[k[2] % 4], s)] * x
        elif op == "dot":
            out = dy.dot_product(x, y)
        elif op == "softmax":
            out = dy.softmax(x)
        elif op == "pick":
            out = dy.pick(x, k[1] % s)
        elif op == "sum_elems":
            out = dy.sum_elems(x)
        elif op == "neg_scale":
            out = -x * 0.5 + 0.25
        else:
            raise AssertionError(op)
        pool.append(out)
    return pool


def build(prog, P):
    """The program's loss: the sum over instances of a per-instance scalar."""
    losses = []
    for inst in prog:
        head = inst[2]
        if inst[0] == "dag":
            pool = _dag(inst, P)
            # sum every sink-ish tail node so that most of the DAG gets a gradient
            tail = [dy.sum_elems(x) for x in pool[-3:]]
            losses.append(dy.esum(tail))
            continue
        h = _chain(inst, P) if inst[0] == "chain" else _tree_expr(inst[1], P)
        if head == 0:
            losses.append(dy.pickneglogsoftmax(P["Wout"] * h, 1))
        elif head == 1:
            losses.append(dy.sum_elems(dy.softmax(P["Wout"] * h)) * 0.5 + dy.pick(h, 0))
        elif head == 2:
            losses.append(dy.dot_product(h, h))
        else:
            losses.append(dy.sum_elems(h))
    return dy.esum(losses)


def run(prog, P, strategy):
    """Build and run prog under one strategy: (loss, {param index: grad copy}, stats)."""
    params = all_params(P)
    for p in params:
        p.zero_grad()
    dy.renew_cg(autobatching=strategy)
    loss = build(prog, P)
    v = loss.value()
    loss.backward()
    grads = [np.array(p.grad_as_array(), copy=True) for p in params]
    return v, grads, dy.stats()
