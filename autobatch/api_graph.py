"""DyNet's functions on the whole graph: evaluate several expressions in one forward,
checkpoints, text dumps, and sparse inputs."""
from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

from .api import _graph, _id, inputTensor
from .errors import GraphError, user_line
from .graph import Expression
from .minibatch import BatchedExpression

__all__ = ["forward", "values", "npvalues", "cg_checkpoint", "cg_revert", "cg_version",
           "print_text_graphviz", "print_graphviz", "dump_cg", "sparse_inputTensor"]


def forward(exprs: Sequence[Expression]) -> None:
    """Compute all of ``exprs`` in one forward, so equal nodes among them are batched
    together (calling value() on each in turn would batch only what each one needs)."""
    exprs = [e for x in exprs for e in (x.xs if type(x) is BatchedExpression else (x,))]
    if not exprs:
        return
    g = _graph()
    ids = [_id(e, g) for e in exprs]
    g.forward_to(max(ids))


def values(exprs: Sequence[Expression]) -> list:
    """[e.value() for e in exprs], computed in one forward."""
    forward(exprs)
    return [e.value() for e in exprs]


def npvalues(exprs: Sequence[Expression]) -> list:
    """[e.npvalue() for e in exprs], computed in one forward."""
    forward(exprs)
    return [e.npvalue() for e in exprs]


def cg_checkpoint() -> None:
    """Remember the current end of the graph (see cg_revert)."""
    _graph().checkpoint()


def cg_revert() -> None:
    """Drop the nodes built since the last cg_checkpoint(): the graph can then try another
    candidate (beam search) without renew_cg. Values computed before the checkpoint stay."""
    _graph().revert()


def cg_version() -> int:
    """A number that changes at every renew_cg()."""
    return _graph().version()


def _label(g, i: int) -> str:
    op = g.ops[i]
    if op is None:
        return f"v{i} = parameter({g.shapes[i]})"
    ins = ", ".join(f"v{a}" for a in g.args[i])
    return f"v{i} = {op.name}({ins}) {g.shapes[i]}"


def print_text_graphviz(file=None) -> None:
    """Print the current graph in Graphviz's dot language (one line per node and edge)."""
    g = _graph()
    out = file or sys.stdout
    lines = ["digraph G {", "  rankdir=LR;", "  nodesep=.05;"]
    for i in range(g.node_count()):
        lines.append(f'  N{i} [label="{_label(g, i)}"];')
        lines += [f"  N{a} -> N{i};" for a in g.args[i]]
    lines.append("}")
    print("\n".join(lines), file=out)


print_graphviz = print_text_graphviz


def dump_cg(file=None) -> None:
    """Print the current graph, one node per line, with the signature it batches under."""
    g = _graph()
    out = file or sys.stdout
    for i in range(g.node_count()):
        sig = g.sigs[i]
        print(_label(g, i) + (f"  [{g.sig_name(sig)}]" if sig >= 0 else ""), file=out)


def sparse_inputTensor(idxs, values, shape, batched: bool = False, defval: float = 0.0,
                       device: str = "") -> Expression:
    """A constant tensor of ``shape`` equal to ``defval`` except at the coordinates
    ``idxs`` (one integer sequence per dimension), which take ``values`` in order. batched:
    the last dimension is DyNet's minibatch (as in inputTensor)."""
    shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if len(idxs) != len(shape):
        raise GraphError(f"sparse_inputTensor: needs one index sequence per dimension of shape "
                         f"{shape}, got {len(idxs)} [at {user_line()}]")
    coords = [np.asarray(c, dtype=np.int64).reshape(-1) for c in idxs]
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    for d, (c, n) in enumerate(zip(coords, shape)):
        if c.shape != vals.shape:
            raise GraphError(f"sparse_inputTensor: dimension {d} has {c.size} indices for "
                             f"{vals.size} values [at {user_line()}]")
        if c.size and (c.min() < 0 or c.max() >= n):
            raise GraphError(f"sparse_inputTensor: an index of dimension {d} is out of range "
                             f"for shape {shape} [at {user_line()}]")
    dense = np.full(shape, float(defval))
    dense[tuple(coords)] = vals
    return inputTensor(dense, batched=batched)
