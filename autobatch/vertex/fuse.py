"""Elementwise fusion for the vertex engine.

NumPy: an instruction whose op defines ``forward_into`` (the elementwise ops, lookups, affine
transforms) writes straight into its block of the symbol's dynamic tensor with ``out=`` calls, so
a chain like ``o * tanh(i * u + f * c)`` runs as a chain of in-place kernels without temporaries
or copies. The formulas are the ops' own: there is no second copy of them here.

CuPy: each run of consecutive elementwise instructions of a phase becomes one generated
``ElementwiseKernel``: one launch per frontier instead of one per instruction. It still writes
every instruction's output to its dynamic tensor (backward reads them), but reads its own
intermediates from registers. The C expressions come from each op (``Op.c_expr``): its NumPy
formula, operation for operation; results differ from NumPy's in the last bits (the device's
tanh/exp, a·x+b contracted to one FMA) and rectify uses fmax, which maps NaN to 0 where NumPy's
maximum keeps it."""
from __future__ import annotations

import numpy as np

from ..ops.unary_math import erf, lgamma


ENABLED = True


def kernels_for(xp) -> bool:
    """Whether runs of elementwise instructions become generated kernels on this array module."""
    return ENABLED and xp is not np


def into(op) -> bool:
    """Whether an instruction writes its dynamic tensor block itself (op.forward_into)."""
    return ENABLED and op.has_into


class Group:
    """Consecutive elementwise instructions of one phase, run as one kernel: ins are the
    symbols it reads from outside (parameters broadcast), members the symbols it writes."""

    __slots__ = ("members", "ins", "body", "kernel")

    def __init__(self, members, ins, body):
        self.members, self.ins, self.body = members, ins, body
        self.kernel = None

    def params(self):
        return (", ".join(f"T x{j}" for j in range(len(self.ins))),
                ", ".join(f"T y{k}" for k in range(len(self.members))))

    def launch(self, xp, xs, outs):
        if self.kernel is None:
            self.kernel = _kernel(*self.params(), self.body)
        self.kernel(*xs, *outs)


_KERNELS: dict = {}


def _kernel(in_params, out_params, body):
    key = (in_params, out_params, body)
    k = _KERNELS.get(key)
    if k is None:
        import cupy
        k = _KERNELS[key] = cupy.ElementwiseKernel(in_params, out_params, body, f"autobatch_fused_{len(_KERNELS)}")
    return k


def _fusable(t, s):
    src = t.src[s]
    op = src[1] if src[0] == "op" else None
    if op is None or op.has_data or s in t.concat_free or op.c_expr(["x"] * len(src[2]), src[3]) is None:
        return False
    # same per-row shape everywhere: the kernel broadcasts parameters against the stacked rows
    return all(t.shapes[a] == t.shapes[s] for a in src[2])


def groups(t, seq) -> dict:
    """{first symbol: Group} for the runs of at least two fusable instructions in seq (a phase
    list of trace t, in execution order); the other members are skipped when run."""
    out, run = {}, []
    for s in list(seq) + [None]:
        if s is not None and _fusable(t, s):
            run.append(s)
            continue
        if len(run) >= 2:
            out[run[0]] = _group(t, run)
        run = []
    return out


def plan(t):
    """Groups of every phase of trace t and the symbols they cover, computed once per trace."""
    first = {}
    for seq in (t.pre, t.front, t.post):
        first.update(groups(t, seq))
    skip = frozenset(s for g in first.values() for s in g.members[1:])
    return first, skip


def _group(t, members):
    local = {s: f"v{k}" for k, s in enumerate(members)}
    ins, lines = [], []
    for k, s in enumerate(members):
        src = t.src[s]
        refs = []
        for a in src[2]:
            if a not in local:
                if a not in ins:
                    ins.append(a)
                refs.append(f"x{ins.index(a)}")
            else:
                refs.append(local[a])
        lines.append(f"T v{k} = {src[1].c_expr(refs, src[3])}; y{k} = v{k};")
    return Group(tuple(members), tuple(ins), "\n".join(lines))


# The C math functions that ops' c_expr use, as NumPy computes them (float64-accurate; erf and
# lgamma, which NumPy lacks, are the ops' own): what emulate() runs a generated body with.
C_FUNCTIONS = {
    "exp": np.exp, "expm1": np.expm1, "log1p": np.log1p, "tanh": np.tanh,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": lambda x: erf(np, np.asarray(x)), "lgamma": lambda x: lgamma(np, np.asarray(x)),
    "fabs": np.abs, "fmin": np.fmin, "fmax": np.fmax, "rint": np.rint, "ceil": np.ceil, "floor": np.floor,
}


def emulate(group, xs, outs):
    """Run a group's generated body with NumPy (tests check the generated code this way where
    there is no GPU): the same statements, with C casts and declarations dropped. Python's
    builtins are hidden, so a C name missing from C_FUNCTIONS fails instead of running as
    Python's own round, pow or abs."""
    env = dict(C_FUNCTIONS, __builtins__={})
    env.update({f"x{j}": x for j, x in enumerate(xs)})
    code = group.body.replace("(T)", "").replace("T v", "v")
    exec(compile(code.replace("; ", "\n"), "<fused>", "exec"), env)
    for k, o in enumerate(outs):
        o[...] = env[f"y{k}"]
