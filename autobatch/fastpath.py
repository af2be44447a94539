"""Inline fast paths for the API functions of the most common node kinds.

Going through ``api.tanh -> _op1 -> graph.add1`` costs two Python calls and a key tuple per
node, about a fifth of building it. The functions made here append their node themselves when
the graph's last cache entry for the op (``g._f1`` ... ``g._flk``, filled by the graph's add
methods) matches the inputs, whose shapes are interned, so identity tests check them; anything
else (a first node, other shapes, a Parameter or stale input, the debug graph, the vertex
tracer, whose caches stay empty) goes to the plain function.

The append itself is written once, below, and compiled into each function: a shared helper
would cost the very call these paths exist to save.

A cache entry ``r`` starts (out shape, size, signature, op differentiable); what follows
depends on the cache (input shapes, attr, parameter nodes; see ComputationGraph.__init__)."""
from __future__ import annotations

import functools
import sys
import textwrap
from types import MappingProxyType

from . import runtime
from .graph import Expression

# the current graph's columns and caches (ComputationGraph._cols), globals of every fast path
# under these names: bind() rebinds them whenever the current graph changes (a unpacking of
# g._cols in each call took a tenth of its time); _g is the current graph
_COL_NAMES = ("depths", "needs", "uses", "sigs", "args", "shapes", "attrs", "datas",
              "f1", "f2", "f3", "fw", "flk", "fmm")

_APPEND = """\
{depth}
needs.append({need})
{uses}
uses.append(0)
n = len(sigs)
sigs.append(r[2])
args.append(({args},)){attr}{data}
shapes.append(r[0])
e = _E()
e.cg = g
e.i = n
return e"""


def _depth(ins, depth):
    if depth is not None:
        return f"depths.append({depth})"
    if len(ins) == 1:
        return f"depths.append(depths[{ins[0]}] + 1)"
    lines = [f"d = depths[{ins[0]}]"]
    for a in ins[1:]:
        lines += [f"if depths[{a}] > d:", f"    d = depths[{a}]"]
    return "\n".join(lines + ["depths.append(d + 1)"])


def fast(slow, op, params: str, guard: str, ins: tuple, need: str = None, depth: str = None,
         attr: str = None, data: str = None, params_in: tuple = (), **consts):
    """A function with slow's name, doc and signature (``params``: its parameter list as
    source) that appends one node of op itself when ``guard`` holds, else returns slow(...).
    guard: source lines ending in the ``if`` that opens the append (and, in its body, lines
    that come before it); they bind ``r`` (the cache entry) and the input node ids named in
    ``ins``, and must not touch g, or the columns and caches (read through _COL_NAMES), before
    testing that an input is g's (g is None before the first graph). need: the
    node's needs-gradient flag (default: differentiable and some input needs one); depth: its
    depth (default: one more than its deepest input); attr, data: source of the node's attr
    and data, if it has them (never None: the graph stores only the ones nodes have);
    params_in: the names in ins that are always parameter nodes (whose uses the graph does
    not keep); consts: names the guard reads."""
    if need is None:
        need = "r[3] and (" + " or ".join(f"needs[{a}]" for a in ins) + ")"
    uses = "\n".join(f"uses[{a}] += 1" for a in ins if a not in params_in)
    body = _APPEND.format(depth=_depth(ins, depth), need=need, uses=uses,
                          args=", ".join(ins), attr="" if attr is None else f"\nattrs[n] = {attr}",
                          data="" if data is None else f"\ndatas[n] = {data}")
    guard_lines = guard.strip("\n").splitlines()
    last = guard_lines[-1]
    indent = " " * (len(last) - len(last.lstrip()) + (4 if last.endswith(":") else 0))
    call = ", ".join(p.split("=")[0].strip() for p in params.split(","))
    cells = {"_op": op, "_slow": slow, **consts}
    src = "\n".join([f"def _make({', '.join(cells)}):", f"    def f({params}):", "        g = _g"]
                     + ["        " + line for line in guard_lines]
                     + ["        " + indent + line for line in body.splitlines()]
                     + [f"        return _slow({call})", "    return f"])
    # a file name inside the package: errors raised below (in slow) name the user's line,
    # which errors.user_site finds by skipping the package's frames
    exec(compile(src, f"{__file__}<fast path of {slow.__name__}>", "exec"), _NS)
    f = _NS.pop("_make")(**cells)
    f.__code__ = f.__code__.replace(co_name=slow.__name__)   # errors.called() names the user's call
    functools.update_wrapper(f, slow)
    f._slow_cell = f.__closure__[f.__code__.co_freevars.index("_slow")]
    return f


# every fast path's globals: the columns, _g, and the names all of them read
_NS = {"_g": None, "_S": runtime.state(), "_E": Expression, "_rc": sys.getrefcount}
_NO_COLS = (None,) * 8 + (MappingProxyType({}),) * 6


def bind(g) -> None:
    """The columns of g (the current graph, or None) become the fast paths' globals."""
    _NS.update(zip(_COL_NAMES, g._cols if g is not None else _NO_COLS))
    _NS["_g"] = g


runtime.on_graph(bind)
bind(runtime.state().graph)


def slow_cell(f):
    """The cell holding the function an inline fast path f falls back to (minibatch.py wraps
    it), or None if f is not one."""
    return getattr(f, "_slow_cell", None) if getattr(f, "__wrapped__", None) is not None else None


def _probe(x):
    return sys.getrefcount(x)


def _temp_refs():
    """What sys.getrefcount reports, inside a function, for an argument that only the call
    holds (an expression's value passed on at once), or -1 where a named variable reads the
    same (an interpreter that does not count every reference): then nothing is ever taken
    for a temporary."""
    named = object()
    temp, held = _probe(object()), _probe(named)
    return temp if held > temp else -1


_TEMP = _temp_refs()
_NS["_TEMP"] = _TEMP

# act(x) with x the graph's newest node, not yet computed, that only this call holds (no
# variable, container or other Expression can reach it again): the activation joins x's node
# (ComputationGraph.fused_sig) instead of adding one. Before the cache test: the first node
# of a graph must fuse too, or it would batch apart from the rest. (A tracer has no columns.)
# A parameter's node (signature -1, no inputs) may follow x: tanh(W * x + b) with b's first
# use in the graph adds b's node after the affine node that absorbed the sum.
_FUSE = """
    n1 = len(sigs or ()) - 1
    if (a == n1 or a == n1 - 1 and sigs[n1] < 0 and not args[n1]) and _rc(x) == _TEMP:
        s = g._fuse.get((sigs[a], _op))
        if s is None:
            s = g.fused_sig(a, _op)
        if s >= 0 and a >= g.exe.done:
            sigs[a] = s
            return x"""


def unary(op, slow, fuse: bool = True):
    """f(x) == slow(x) for an op without attr and data (tanh, logistic, ...); an activation
    that ops/fused.py pairs with its input's op joins that node when it is a temporary (fuse:
    False for the reductions, whose slow paths never fuse)."""
    return fast(slow, op, "x", """
if type(x) is _E and x.cg is g:
    a = x.i""" + (_FUSE if fuse and hasattr(op, "dfdx_from_output") else "") + """
    r = f1.get(_op)
    if r is not None and r[4] is shapes[a]:""", ("a",))


def unary_entry(slow, op, params: str, test: str, attr_test: str = "r[5] is None", **kw):
    """f(params) == slow(params) for a call whose node is op over x with an attr (pick,
    softmax, dropout, ...): where ``test`` (source over params) holds and x is this graph's, the
    node is appended from the entry ComputationGraph.add_unary keeps for op (g._fa) while x has
    the entry's shape and ``attr_test`` holds of the entry (r[5]: its attr). x is the first of
    params (whatever its name). kw: fast()'s attr, data and names the sources read."""
    first = params.split(",")[0].strip()
    return fast(slow, op, params, ("" if first == "x" else f"x = {first}\n") + f"""
if ({test}) and type(x) is _E and x.cg is g:
    a = x.i
    r = g._fa.get(_op)
    if r is not None and r[4] is shapes[a] and {attr_test}:""", ("a",), **kw)


_BINARY = """\
if type(x) is _E and type(y) is _E and x.cg is g and y.cg is g:
    r = f2.get(_op)
    a = x.i
    b = y.i
    if r is not None and r[4] is shapes[a] and r[5] is shapes[b] and r[6] is _attr:"""


# op(x, act(c)) with act(c) a temporary, the newest node (o·tanh(c)): the activation node
# becomes the fused op over (x, c), in place (ComputationGraph.fused_in_sig)
_FUSE_IN = """
    n1 = len(sigs or ()) - 1
    if y.i == n1 and x.i != n1 and _rc(y) == _TEMP:
        t, j, k = y, 1, x.i
    elif x.i == n1 and y.i != n1 and _rc(x) == _TEMP:
        t, j, k = x, 0, y.i
    else:
        t = None
    if t is not None and n1 >= g.exe.done:
        s = g._fuse.get((sigs[n1], _op, j))
        if s is None:
            s = g.fused_in_sig(n1, _op, j)
        if s >= 0 and shapes[k] is shapes[n1]:
            c = args[n1][0]
            args[n1] = (k, c) if j else (c, k)
            sigs[n1] = s
            depths[n1] = (depths[k] if depths[k] > depths[c] else depths[c]) + 1
            needs[n1] = needs[k] or needs[c]
            uses[k] += 1
            return t"""


from .operators import BY_OPCODES as _BY_OPCODES, BY_OPERATOR as _BY_OPERATOR, TEMP_OP as _TEMP_OP  # noqa: E402
from .params import Parameter as _Parameter  # noqa: E402
from .ops.fused import SUMS as _SUMS_OPS  # noqa: E402

# x + y by the + operator (Expression.__add__), with x or y a temporary that only this call
# holds: where it is the newest node, not yet computed, and a product W·h, its sum with a
# parameter is that one node (ComputationGraph.absorb_sum: W·h + b is affine_transform([b, W,
# h])). An explicit call of __add__ holds its arguments once less, so a named operand would
# pass the count test there: absorb_sum checks the caller's instruction (_gf(1)).
# A pair (product's signature, parameter node) absorb_sum has taken before in this graph
# (g._sums) is taken here, inline, after the tests its cache does not stand for (position,
# not computed, no checkpoint, the parameter's node and shape, the operator: BY_OPERATOR's
# test, written out). Otherwise absorb_sum runs as before, but only for a temporary whose op
# has a form with a bias: it refuses the others first thing, and sums of two cmult
# temporaries (c = i·u + f·c') are common. b + W * x: 1040 -> 945 ns (380 of it the product);
# cmult(a, b) + cmult(c, d): 1930 -> 1750.
_ABSORB_ONE = """if type({t}) is _E and {t}.cg is g and _rc({t}) == _TEMP_OP:
    if sigs is not None:        # (a tracer keeps no columns, and absorbs nothing here)
        n1 = {t}.i
        s = sigs[n1]
        if s >= 0 and g.sig_op[s] in _SUMS:
            k = ({o}.i if {o}.cg is g else None) if type({o}) is _E else g._pfast.get({o}) if type({o}) is _P else None
            ns = g._sums.get((s, k)) if k is not None and n1 == len(sigs) - 1 else None
            if ns is not None and n1 >= g.exe.done and not g._checkpoints and k in g.ext and \\
                    shapes[k] is shapes[n1] and (fr := _gf(1)).f_code.co_code[fr.f_lasti] in _BYOPS:
                args[n1] = (k,) + args[n1]
                sigs[n1] = ns
                if depths[k] >= depths[n1]:
                    depths[n1] = depths[k] + 1
                needs[n1] = needs[n1] or needs[k]
                uses[k] += 1
                return {t}
            e = g.absorb_sum({t}, {o}, _gf(1))
            if e is not None:
                return e
"""
# y first, as absorb_sum was asked before: b + W * x (the product is y) is DyNet's usual form
_ABSORB = _ABSORB_ONE.format(t="y", o="x") + _ABSORB_ONE.format(t="x", o="y")


# x op c for a number c (an int or a float: not a bool, as the operators' slow path): the node
# scale_shift(x; a, b) = a·x + b, appended by its own inline path (api._scale)
_SCALAR = """if type(y) is not _E and (type(y) is float or type(y) is int) and type(x) is _E and x.cg is g:
    return _scale(x, {})
"""


def binary(op, slow, attr=None, params: str = "x, y", unpack: str = None, absorb: bool = False,
           scalar: str = None, **consts):
    """f(x, y) == slow(x, y) for an op of two inputs, no data and attribute attr. params,
    unpack: slow's parameter list, and guard lines that bind x and y from it when they are
    not its parameters (concatenate's [x, y]); the rest of the guard goes inside them. An op
    that declares fuses_in takes in an activation temporary (ops/fused.py). absorb: f is the
    + operator, which first tries ABSORB. scalar: for an operator, the (a, b) of the node
    a·x + b that x op y is when y is a number (source in y; api._scale appends it)."""
    body = _BINARY
    if getattr(op, "fuses_in", False) and unpack is None:
        head, tail = _BINARY.split("    r = f2.get(_op)\n")
        body = head + _FUSE_IN.strip("\n") + "\n    r = f2.get(_op)\n" + tail
    guard = body if unpack is None else unpack.strip("\n") + "\n" + textwrap.indent(body, "    ")
    if absorb and _BY_OPERATOR is not None:
        guard = _ABSORB + guard
    if scalar is not None:
        guard = _SCALAR.format(scalar) + guard
    return fast(slow, op, params, guard, ("a", "b"), attr=None if attr is None else "_attr", _attr=attr, **consts,
                _TEMP_OP=_TEMP_OP, _gf=sys._getframe, _BYOPS=_BY_OPCODES, _P=_Parameter, _SUMS=_SUMS_OPS)
