"""DyNet's functions on the whole graph: evaluate several expressions in one forward,
checkpoints, text dumps, and sparse inputs."""
from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

from .api import _graph, _id, inputTensor
from .errors import GraphError, user_line
from .graph import DROPPED, Expression
from .minibatch import BatchedExpression

__all__ = ["forward", "values", "npvalues", "cg_checkpoint", "cg_revert", "cg_version",
           "print_text_graphviz", "print_graphviz", "dump_cg", "sparse_inputTensor"]


def forward(exps: Sequence[Expression], recalculate: bool = False) -> None:
    """Compute all of ``exps`` in one forward, so equal nodes among them are batched
    together (calling value() on each in turn would batch only what each one needs).
    recalculate: recompute the whole graph (fresh random numbers), as Expression.forward's."""
    exps = [e for x in exps for e in (x.xs if type(x) is BatchedExpression else (x,))]
    if not exps:
        return
    g = _graph()
    ids = [_id(e, g) for e in exps]
    for e in exps:
        if type(e) is Expression:
            e._check()          # (one cg_revert dropped is refused here too)
    if recalculate:
        g.invalidate()
    g.forward_to(max(ids))


def values(exps: Sequence[Expression], recalculate: bool = False) -> list:
    """[e.value() for e in exps], computed in one forward."""
    exps = list(exps)
    forward(exps, recalculate)
    return [e.value() for e in exps]


def npvalues(exps: Sequence[Expression], recalculate: bool = False) -> list:
    """[e.npvalue() for e in exps], computed in one forward."""
    exps = list(exps)
    forward(exps, recalculate)
    return [e.npvalue() for e in exps]


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
    dot(_graph(), file)


def _live(g):
    """The ids of g's nodes but those cg_revert dropped."""
    return (i for i, s in enumerate(g.shapes) if s is not DROPPED)


def dot(g, file=None) -> None:
    """print_text_graphviz of graph g."""
    if getattr(g, "is_trace", False):
        g.refuse("print_graphviz()")
    out = file or sys.stdout
    lines = ["digraph G {", "  rankdir=LR;", "  nodesep=.05;"]
    for i in _live(g):
        lines.append(f'  N{i} [label="{_label(g, i)}"];')
        lines += [f"  N{a} -> N{i};" for a in g.args[i]]
    lines.append("}")
    print("\n".join(lines), file=out)


def print_graphviz(compact: bool = False, show_dims: bool = True, expr_names=None, lookup_names=None,
                   cluster=None, file=None) -> None:
    """DyNet's print_graphviz, whose keywords (compact, show_dims, ...) select what its
    visualisation build draws: here they are accepted and the graph is printed as
    print_text_graphviz() prints it (to file, or stdout; a file given first goes there too)."""
    if hasattr(compact, "write"):           # print_graphviz(f): this function's first form
        file = compact
    dot(_graph(), file)


def dump_cg(filename="", show_values: bool = True, show_gradients: bool = True,
            nan_check_only: bool = False, *, file=None) -> None:
    """Print the current graph, one node per line, with the signature it batches under; with
    show_values / show_gradients, each computed node's value and last gradient too (as
    DyNet's dump). filename: a path to write to (DyNet's), or a file object; nothing: stdout.
    nan_check_only: list only the nodes whose value or gradient holds a NaN or an infinity."""
    dump(_graph(), filename, show_values, show_gradients, nan_check_only, file)


def dump(g, filename="", show_values: bool = True, show_gradients: bool = True,
         nan_check_only: bool = False, file=None) -> None:
    """dump_cg of graph g."""
    if getattr(g, "is_trace", False):
        g.refuse("dump_cg()")
    if hasattr(filename, "write"):
        file, filename = filename, ""
    if filename:
        with open(filename, "w") as f:
            return dump(g, "", show_values, show_gradients, nan_check_only, f)
    out = file or sys.stdout
    exe = g.exe
    for i in _live(g):
        sig = g.sigs[i]
        computed = i < exe.done or i in g.ext
        val = exe.value(i) if computed and (show_values or nan_check_only) else None
        grad = exe.gradient(i) if computed and (show_gradients or nan_check_only) and \
            i not in exe.viewed else None
        if nan_check_only and not any(a is not None and not np.isfinite(g.backend.to_host(a)).all()
                                      for a in (val, grad)):
            continue
        line = _label(g, i) + (f"  [{g.sig_name(sig)}]" if sig >= 0 else "")
        if show_values and val is not None:
            line += "  value=" + _numbers(g, val)
        if show_gradients and grad is not None:
            line += "  grad=" + _numbers(g, grad)
        print(line, file=out)


def _numbers(g, a) -> str:
    return np.array2string(g.backend.to_host(a).reshape(-1), threshold=8, max_line_width=1 << 30)


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
