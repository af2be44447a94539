"""Repeated node patterns (one RNN layer step) appended by generated straight-line code.

An RNN builder makes the same few nodes for every step of every sequence; through the
expression functions each node costs about two microseconds of Python (argument checks,
rule lookups, six list appends), most of a BiLSTM's graph building. The first step of a kind
in a graph is built the normal way and recorded as a template; later steps with the same key
run one generated function that appends all its nodes with one ``extend`` per constant
column. Signatures that depend on a shared operand's node id (W of an affine) are looked up
per step, so a template never assumes which parameter node it reads."""
from __future__ import annotations

from .graph import _RULES, Expression, ThroughAdd, _rule

_NO = object()    # the key's pattern cannot be replayed: always build it the normal way


def step(g, key, ins: tuple, build, *args) -> tuple:
    """The Expressions build(*args) returns (a tuple), its nodes appended from g's template for
    key when there is one. ins: the node ids the nodes read (parameters included); every node
    build makes may read only these and its own earlier nodes. key must determine, together
    with the shapes of ins, which nodes build makes (ops, attributes, wiring)."""
    recipes = getattr(g, "_recipes", None)
    if recipes is None:                 # a vertex function's tracer: it records every node anyway
        return build(*args)
    key = _full_key(g, key, ins)
    t = recipes.get(key)
    if t is None:
        return _record(g, key, ins, build, args)
    if t is _NO:
        return build(*args)
    return t(g, *ins)


def _full_key(g, key, ins):
    return (key, tuple(map(g.shapes.__getitem__, ins)))


def replay_of(g, key, ins: tuple):
    """The function step(g, key, ins, ...) replays (called as fn(g, *ins)), or None when it
    has no template for them yet or builds them the normal way: for a caller that steps many
    times with inputs of the same shapes and wants to look the template up once."""
    t = g._recipes.get(_full_key(g, key, ins))
    return None if t is None or t is _NO else t


def _record(g, key, ins, build, args):
    n0 = len(g.ops)
    outs = build(*args)
    if not isinstance(g, ThroughAdd):     # the debug graph and the tracer must see every add()
        fn = _compile(g, n0, len(g.ops), ins, outs)
        g._recipes[key] = _NO if fn is None else fn
    return outs


def _compile(g, n0, n1, ins, outs):
    """A function (g, *ins) -> outs that appends the nodes [n0, n1) again, or None when they
    cannot be replayed (data per node, nodes that read outside ins, unbatchable ops)."""
    if n1 == n0 or len(set(ins)) != len(ins) or any(e is not None and (type(e) is not Expression or not n0 <= e.i < n1) for e in outs):
        return None
    pos = {a: j for j, a in enumerate(ins)}
    const = {"_E": Expression}
    cols = {"shapes": [], "sigs": []}
    nodes = []       # per node: (dynamic signature lines or None, its refs, depth and need sources)

    def ref(a):
        return f"n + {a - n0}" if a >= n0 else f"i{pos[a]}"

    for n in range(n0, n1):
        op, a_n = g.ops[n], g.args[n]
        if op is None or g.datas[n] is not None or any(a < n0 and a not in pos for a in a_n):
            return None
        r = _RULES.get((op, tuple(map(g.shapes.__getitem__, a_n)), g.attrs[n]))
        if r is None or r[2] is None:
            return None
        k = n - n0
        cols["shapes"].append(g.shapes[n])
        if g.attrs[n] is not None:
            const[f"_A{k}"] = g.attrs[n]
        sig = None
        if r[3]:                       # the signature names shared operands: look it up per step
            # ... unless they are the last step's (a sequence's parameters): _M{k} holds the
            # last operand ids and their signature, per template, so per graph
            const[f"_K{k}"], const[f"_O{k}"], const[f"_M{k}"] = r[2], op, [None] * (len(r[3]) + 1)
            refs = [ref(a_n[j]) for j in r[3]]
            sk = ", ".join(refs)
            same = " and ".join(f"_M{k}[{j}] == {a}" for j, a in enumerate(refs))
            sig = [f"if {same}: s{k} = _M{k}[{len(refs)}]", "else:", f"    s{k} = sigtab.get((_K{k}, {sk}))"]
            base = getattr(op, "base", None)
            if base is not None:
                # a fused node (ops/fused.py): its product's signature first, as building it
                # op by op interns them, so that both ways number signatures alike
                const[f"_BK{k}"], const[f"_BO{k}"] = _rule(base, tuple(map(g.shapes.__getitem__, a_n)), g.attrs[n])[2], base
                sig.append(f"    if s{k} is None and sigtab.get((_BK{k}, {sk})) is None: g._intern((_BK{k}, {sk}), _BO{k})")
            sig += [f"    if s{k} is None: s{k} = g._intern((_K{k}, {sk}), _O{k})", f"    _M{k}[:] = ({sk}, s{k})"]
            sig = (sig, refs)
            cols["sigs"].append(None)
        else:
            cols["sigs"].append(g.sigs[n])
        srcs = [(f"{a - n0}", True) if a >= n0 else (f"{pos[a]}", False) for a in a_n]
        nodes.append((sig, "(" + "".join(ref(a) + ", " for a in a_n) + ")", srcs, op.differentiable))
    m = n1 - n0
    # uses: counted now for nodes of the template; inputs gain theirs per step
    cols["uses"] = [0] * m
    in_uses = {}
    for n in range(n0, n1):
        for a in g.args[n]:
            if a >= n0:
                cols["uses"][a - n0] += 1
            else:
                in_uses[pos[a]] = in_uses.get(pos[a], 0) + 1
    for c, v in cols.items():
        const["_" + c.upper()] = tuple(v)
    attrs = [n - n0 for n in range(n0, n1) if g.attrs[n] is not None]
    fn = _emit(const, _Template(len(ins), nodes, cols["sigs"], attrs, in_uses,
                                [None if e is None else e.i - n0 for e in outs], m))
    fn._runs = {}
    fn.out_shapes = tuple(None if e is None else g.shapes[e.i] for e in outs)
    return fn


class _Template:
    """What _compile learned of a step, from which _emit writes a replay and run_of a loop."""
    __slots__ = ("n_in", "nodes", "sigs", "attrs", "in_uses", "outs", "m")

    def __init__(self, n_in, nodes, sigs, attrs, in_uses, outs, m):
        self.n_in, self.nodes, self.sigs, self.attrs = n_in, nodes, sigs, attrs
        self.in_uses, self.outs, self.m = in_uses, outs, m


def _step_lines(t: _Template, fixed: frozenset):
    """(before, step, hoisted): the lines that append one step's nodes (n: its first id;
    i{j}, D{j}, N{j}: input j's id, depth and needs-gradient flag), the lines a loop over
    steps runs once before them (the work that reads only inputs in `fixed`, the same at
    every step), and whether every signature is among those."""
    before, step = [], []
    hoist = True        # signatures are interned in node order, as step after step would
    for k, (sig, args, srcs, differentiable) in enumerate(t.nodes):
        if sig is not None:
            lines, refs = sig
            hoist = hoist and all(r[0] == "i" and int(r[1:]) in fixed for r in refs)
            (before if hoist else step).extend(lines)
        # depth: one more than the deepest input; the fixed inputs' part is taken once
        var = [f"d{j}" if own else f"D{j}" for j, own in srcs if own or int(j) not in fixed]
        con = [f"D{j}" for j, own in srcs if not own and int(j) in fixed]
        if con and var:
            before.append(f"C{k} = {_max(con)}")
            var.append(f"C{k}")
        elif con:
            before.append(f"d{k} = {_max(con)} + 1")
        if var:
            step.append(f"d{k} = {_max(var)} + 1")
        if not differentiable:
            step.append(f"e{k} = False")
            continue
        es = [f"e{j}" if own else f"N{j}" for j, own in srcs]
        step.append(f"e{k} = {' or '.join(es)}")
    return before, step, hoist


def _max(terms):
    """Source of the largest of terms (names): a conditional for two, cheaper than max()."""
    if len(terms) == 1:
        return terms[0]
    if len(terms) == 2:
        return f"({terms[0]} if {terms[0]} > {terms[1]} else {terms[1]})"
    return "max(" + ", ".join(terms) + ")"


def _appends(t: _Template, sigs: str):
    """The lines that append a step's nodes to the columns (sigs: the source of its
    signatures' tuple, or None when they are all constants)."""
    lines = [f"attrs[n + {k}] = _A{k}" for k in t.attrs]
    lines.append("shapes_extend(_SHAPES)")
    lines.append(f"sigs_extend({sigs or '_SIGS'})")
    lines.append(f"args_extend(({', '.join(node[1] for node in t.nodes)},))")
    lines.append(f"depths.extend(({', '.join(f'd{k}' for k in range(t.m))},))")
    lines.append(f"needs.extend(({', '.join(f'e{k}' for k in range(t.m))},))")
    return lines


def _sig_tuple(t: _Template):
    if all(s is not None for s in t.sigs):
        return None
    return "(" + "".join(f"s{k}, " if s is None else f"{s}, " for k, s in enumerate(t.sigs)) + ")"


_HEAD = ["    depths, needs, uses, sigtab, attrs = g.depths, g.needs, g.uses, g._sigtab, g.attrs",
         "    shapes_extend, sigs_extend, args_extend = g.shapes.extend, g.sigs.extend, g.args.extend",
         "    n = len(g.sigs)"]


def _emit(const, t: _Template):
    """The replay function of template t."""
    names = ", ".join(f"i{j}" for j in range(t.n_in))
    before, step, _ = _step_lines(t, frozenset())
    src = [f"def replay(g, {names}):"] + _HEAD
    src += [f"    D{j} = depths[i{j}]; N{j} = needs[i{j}]" for j in range(t.n_in)]
    src += ["    " + line for line in before + step + _appends(t, _sig_tuple(t))]
    src += [f"    uses[i{j}] += {c}" for j, c in sorted(t.in_uses.items())]
    src.append("    uses.extend(_USES)")
    rets = []
    for k, ok in enumerate(t.outs):
        if ok is None:            # a cell-less builder's c
            rets.append("None")
            continue
        src += [f"    o{k} = _E()", f"    o{k}.cg = g", f"    o{k}.i = n + {ok}"]
        rets.append(f"o{k}")
    src.append(f"    return ({', '.join(rets)},)")
    ns = dict(const)
    exec(_code("\n".join(src), t.m), ns)
    fn = ns["replay"]
    fn._parts = (const, t)
    return fn


def run_of(replay, stream: int, carry: tuple, emit: int):
    """A function (g, *ins, xs) -> [Expression] that appends what calling replay step after
    step would: one step per x of xs (Expressions of g), x's id as input `stream`, and for
    each (k, j) of carry, output k of a step as input j of the next (an RNN's h and c);
    returns output `emit` of every step. A sequence then costs one call, and its steps no
    key, input tuple, or Expression but the one returned; the work that reads only the other
    inputs (the parameters: signatures, their part of the depths, their uses) is done once."""
    key = (stream, carry, emit)
    run = replay._runs.get(key)
    if run is not None:
        return run
    const, t = replay._parts
    varying = {stream} | {j for _, j in carry}
    fixed = frozenset(range(t.n_in)) - varying
    before, step, hoisted = _step_lines(t, fixed)
    sig = _sig_tuple(t)
    if sig is not None and hoisted:
        before.append(f"SG = {sig}")      # every signature is the same at every step
        sig = "SG"
    names = ", ".join(f"i{j}" for j in range(t.n_in))
    src = [f"def run(g, {names}, xs):"] + _HEAD + ["    em = []"]
    src += [f"    D{j} = depths[i{j}]; N{j} = needs[i{j}]" for j in range(t.n_in) if j != stream]
    src += ["    " + line for line in before]
    src += ["    for x in xs:", f"        i{stream} = x.i", f"        D{stream} = depths[i{stream}]; N{stream} = needs[i{stream}]"]
    src += ["        " + line for line in step + _appends(t, sig)]
    src += [f"        uses[i{j}] += {c}" for j, c in sorted(t.in_uses.items()) if j in varying]
    src += ["        uses.extend(_USES)",
            "        o = _E()", "        o.cg = g", f"        o.i = n + {t.outs[emit]}", "        em.append(o)"]
    for k, j in carry:
        src.append(f"        i{j} = n + {t.outs[k]}; D{j} = d{t.outs[k]}; N{j} = e{t.outs[k]}")
    src.append(f"        n += {t.m}")
    src += [f"    uses[i{j}] += {c} * len(xs)" for j, c in sorted(t.in_uses.items()) if j not in varying]
    src.append("    return em")
    ns = dict(const)
    exec(_code("\n".join(src), t.m), ns)
    run = replay._runs[key] = ns["run"]
    return run


_CODES: dict = {}     # source -> code object: each new graph records its templates again


def _code(src: str, m: int):
    """compile() of a template's source, cached: the same model writes the same source
    (signature ids are per graph, but they repeat from graph to graph), and compiling took
    a tenth of a BiLSTM minibatch's build time at H=128."""
    c = _CODES.get(src)
    if c is None:
        if len(_CODES) > 256:
            _CODES.clear()
        c = _CODES[src] = compile(src, f"<autobatch recipe of {m} nodes>", "exec")
    return c

