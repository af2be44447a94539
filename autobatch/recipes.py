"""Repeated node patterns (one RNN layer step) appended by generated straight-line code.

An RNN builder makes the same few nodes for every step of every sequence; through the
expression functions each node costs about two microseconds of Python (argument checks,
rule lookups, six list appends), most of a BiLSTM's graph building. The first step of a kind
in a graph is built the normal way and recorded as a template; later steps with the same key
run one generated function that appends all its nodes with one ``extend`` per constant
column. Signatures that depend on a shared operand's node id (W of an affine) are looked up
per step, so a template never assumes which parameter node it reads. ``run_of`` writes, from
the templates of an RNN's layers, one loop that appends the rest of a sequence: per step, each
layer's nodes in turn, the parameters' part (signatures, depths, uses) done once before it."""
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
        if len(set(ins)) != len(ins):
            # a template tells its inputs apart by node (x is the state's h): this step is built
            # the normal way, and the next one of the key, with distinct inputs, is recorded
            # (replays need no distinct inputs: each reads its own)
            return build(*args)
        return _record(g, key, ins, build, args)
    if t is _NO:
        return build(*args)
    return t(g, *ins)


def _full_key(g, key, ins):
    return (key, tuple(map(g.shapes.__getitem__, ins)))


def replay_of(g, key, ins: tuple):
    """The function step(g, key, ins, ...) replays (called as fn(g, *ins)), False when it builds
    them the normal way, or None when it has no template for them yet: for a caller that steps
    many times with inputs of the same shapes and wants to look the template up once."""
    recipes = getattr(g, "_recipes", None)
    if recipes is None:                 # a vertex function's tracer: it records every node anyway
        return None
    t = recipes.get(_full_key(g, key, ins))
    return False if t is _NO else t


def _record(g, key, ins, build, args):
    n0 = len(g.ops)
    outs = build(*args)
    if not isinstance(g, ThroughAdd):     # the debug graph and the tracer must see every add()
        fn = _compile(g, n0, len(g.ops), ins, outs)
        g._recipes[key] = _NO if fn is None else fn
    return outs


def _compile(g, n0, n1, ins, outs):
    """A function (g, *ins) -> outs that appends the nodes [n0, n1) again, or None when they
    cannot be replayed (data per node, nodes that read outside ins, unbatchable ops). ins are
    distinct (step() builds a step that repeats an input plainly)."""
    if n1 == n0 or any(e is not None and (type(e) is not Expression or not n0 <= e.i < n1) for e in outs):
        return None
    pos = {a: j for j, a in enumerate(ins)}
    const = {}                  # the template's constants, by name without prefix (see _Template)
    shapes, sigs, nodes, attrs = [], [], [], []

    def ref(a):
        return ("own", a - n0) if a >= n0 else ("in", pos[a])

    for n in range(n0, n1):
        op, a_n = g.ops[n], g.args[n]
        if op is None or g.datas[n] is not None or any(a < n0 and a not in pos for a in a_n):
            return None
        in_shapes = tuple(map(g.shapes.__getitem__, a_n))
        r = _RULES.get((op, in_shapes, g.attrs[n]))
        if r is None or r[2] is None:
            return None
        k = n - n0
        shapes.append(g.shapes[n])
        if g.attrs[n] is not None:
            const[f"A{k}"] = g.attrs[n]
            attrs.append(k)
        sig = None
        if r[3]:
            # the signature names shared operands: looked up per step, unless they are the last
            # step's (a sequence's parameters): M{k} holds the last operand ids and their
            # signature, per template, so per graph
            const[f"K{k}"], const[f"O{k}"], const[f"M{k}"] = r[2], op, [None] * (len(r[3]) + 1)
            base = getattr(op, "base", None)
            if base is not None:
                # a fused node (ops/fused.py): its product's signature first, as building it
                # op by op interns them, so that both ways number signatures alike
                const[f"BK{k}"], const[f"BO{k}"] = _rule(base, in_shapes, g.attrs[n])[2], base
            sig = ([ref(a_n[j]) for j in r[3]], base is not None)
            sigs.append(None)
        else:
            sigs.append(g.sigs[n])
        nodes.append((sig, [ref(a) for a in a_n], op.differentiable))
    m = n1 - n0
    # uses: counted now for nodes of the template; inputs gain theirs per step
    uses, in_uses = [0] * m, {}
    for n in range(n0, n1):
        for a in g.args[n]:
            if a >= n0:
                uses[a - n0] += 1
            else:
                in_uses[pos[a]] = in_uses.get(pos[a], 0) + 1
    const["SHAPES"], const["SIGS"], const["USES"] = tuple(shapes), tuple(sigs), tuple(uses)
    t = _Template(len(ins), nodes, attrs, in_uses, [None if e is None else e.i - n0 for e in outs], m, const)
    fn = _replay(t)
    fn.template = t
    fn.out_shapes = tuple(None if e is None else g.shapes[e.i] for e in outs)
    fn.runs = {}
    return fn


class _Template:
    """What _compile learned of a step: per node (signature: None, or the refs of its shared
    operands and whether it is fused; its input refs; differentiable), a ref being ("in", j)
    for input j or ("own", k) for the step's node k; the nodes with an attr; each input's uses
    per step; the outputs' node indices; the number of nodes; and the constants the code
    reads. Code for it is written with a prefix p on every name (local ``{p}i0``, constant
    ``_{p}K0``), so that the steps of several templates share one function."""
    __slots__ = ("n_in", "nodes", "attrs", "in_uses", "outs", "m", "const", "key")

    def __init__(self, n_in, nodes, attrs, in_uses, outs, m, const):
        self.n_in, self.nodes, self.attrs, self.in_uses = n_in, nodes, attrs, in_uses
        self.outs, self.m, self.const = outs, m, const
        # what the code depends on (the constants' values are bound per graph): templates of
        # equal keys share their code, written and compiled once (_CODES)
        self.key = (n_in, tuple((None if sig is None else (tuple(sig[0]), sig[1]), tuple(refs), d)
                                for sig, refs, d in nodes),
                    tuple(attrs), tuple(sorted(in_uses.items())), tuple(outs), m, const["SIGS"])

    def constants(self, p: str) -> dict:
        return {f"_{p}{name}": v for name, v in self.const.items()}


def _ref(r, p: str, own: str = "{p}n + {k}", inp: str = "{p}i{k}") -> str:
    """Source naming ref r (a node of the step or an input) under prefix p: its id by default,
    or with other patterns its depth (d/D) or needs flag (e/N)."""
    return (own if r[0] == "own" else inp).format(p=p, k=r[1])


def _max(terms):
    """Source of the largest of terms (names): conditionals for two or three, cheaper than max()."""
    if len(terms) == 1:
        return terms[0]
    if len(terms) == 2:
        return f"({terms[0]} if {terms[0]} > {terms[1]} else {terms[1]})"
    if len(terms) == 3:         # (an LSTM step's: conditionals on names cost less than a call)
        two = _max(terms[:2])
        return f"({two} if {two} > {terms[2]} else {terms[2]})"
    return "max(" + ", ".join(terms) + ")"


def _step_lines(t: _Template, p: str, fixed: frozenset, hoist: bool = True):
    """(before, step, hoist): the lines that append one step's nodes but for the columns'
    extends ({p}n: its first id; {p}i{j}, {p}D{j}, {p}N{j}: input j's id, depth and needs
    flag), and the lines a loop over steps runs once before them: the work that reads only
    inputs in `fixed`, the same at every step. Signature lookups move there only while every
    earlier one did (hoist: whether all did, in and before this template): they intern new
    signatures in node order, as step after step would."""
    before, step = [], []
    for k, (sig, refs, differentiable) in enumerate(t.nodes):
        if sig is not None:
            ops, fused = sig
            ids = [_ref(r, p) for r in ops]
            sk, M, s = ", ".join(ids), f"_{p}M{k}", f"{p}s{k}"
            lines = [f"if {' and '.join(f'{M}[{j}] == {a}' for j, a in enumerate(ids))}: {s} = {M}[{len(ids)}]",
                     "else:", f"    {s} = sigtab.get((_{p}K{k}, {sk}))"]
            if fused:
                lines.append(f"    if {s} is None and sigtab.get((_{p}BK{k}, {sk})) is None: "
                             f"g._intern((_{p}BK{k}, {sk}), _{p}BO{k})")
            lines += [f"    if {s} is None: {s} = g._intern((_{p}K{k}, {sk}), _{p}O{k})", f"    {M}[:] = ({sk}, {s})"]
            hoist = hoist and all(r[0] == "in" and r[1] in fixed for r in ops)
            (before if hoist else step).extend(lines)
        # depth: one more than the deepest input; the fixed inputs' part is taken once
        var = [_ref(r, p, "{p}d{k}", "{p}D{k}") for r in refs if r[0] == "own" or r[1] not in fixed]
        con = [_ref(r, p, "{p}d{k}", "{p}D{k}") for r in refs if r[0] == "in" and r[1] in fixed]
        if con and var:
            before.append(f"{p}C{k} = {_max(con)}")
            var.append(f"{p}C{k}")
        elif con:
            before.append(f"{p}d{k} = {_max(con)} + 1")
        if var:
            step.append(f"{p}d{k} = {_max(var)} + 1")
        step.append(f"{p}e{k} = " + (" or ".join(_ref(r, p, "{p}e{k}", "{p}N{k}") for r in refs)
                                     if differentiable else "False"))
    return before, step, hoist


def _appends(t: _Template, p: str, sigs: str, varying):
    """The lines that append a step's nodes to the columns and count the uses of its inputs
    in `varying` (sigs: the source of its signatures' tuple)."""
    lines = [f"attrs[{p}n + {k}] = _{p}A{k}" for k in t.attrs]
    lines += [f"shapes_extend(_{p}SHAPES)", f"sigs_extend({sigs})",
              "args_extend((" + "".join("(" + "".join(_ref(r, p) + ", " for r in refs) + "), "
                                        for _, refs, _ in t.nodes) + "))",
              f"depths.extend(({''.join(f'{p}d{k}, ' for k in range(t.m))}))",
              f"needs.extend(({''.join(f'{p}e{k}, ' for k in range(t.m))}))"]
    lines += [f"uses[{p}i{j}] += {c}" for j, c in sorted(t.in_uses.items()) if j in varying]
    return lines + [f"uses.extend(_{p}USES)"]


def _sig_tuple(t: _Template, p: str):
    if all(s is not None for s in t.const["SIGS"]):
        return f"_{p}SIGS"
    return "(" + "".join(f"{p}s{k}, " if s is None else f"{s}, " for k, s in enumerate(t.const["SIGS"])) + ")"


_HEAD = ["    depths, needs, uses, sigtab, attrs = g.depths, g.needs, g.uses, g._sigtab, g.attrs",
         "    shapes_extend, sigs_extend, args_extend = g.shapes.extend, g.sigs.extend, g.args.extend",
         "    n = len(g.sigs)"]


def _replay(t: _Template):
    """The replay function of template t: fn(g, *ins) -> its outputs' Expressions."""
    ns = {"_E": Expression, **t.constants("")}
    exec(_code(("replay", t.key), lambda: _replay_source(t), t.m), ns)
    return ns["replay"]


def _replay_source(t: _Template) -> str:
    names = ", ".join(f"i{j}" for j in range(t.n_in))
    before, step, _ = _step_lines(t, "", frozenset())
    src = [f"def replay(g, {names}):"] + _HEAD
    src += [f"    D{j} = depths[i{j}]; N{j} = needs[i{j}]" for j in range(t.n_in)]
    src += ["    " + line for line in before + step + _appends(t, "", _sig_tuple(t, ""), range(t.n_in))]
    rets = []
    for k, ok in enumerate(t.outs):
        if ok is None:            # a cell-less builder's c
            rets.append("None")
            continue
        src += [f"    o{k} = _E()", f"    o{k}.cg = g", f"    o{k}.i = n + {ok}"]
        rets.append(f"o{k}")
    src.append(f"    return ({', '.join(rets)},)")
    return "\n".join(src)


def run_of(replays: tuple, stream: int, carry: tuple, emit: int):
    """A function (g, ins, xs) -> [Expression] that appends what calling the replays (one per
    layer of an RNN) step after step would: at every step, one step of each, for each x of xs
    (Expressions of g) in turn. ins: the inputs of all the replays, one after the other. Input
    `stream` of the first is x's id, of each later one output `emit` of the one before it
    (their entries in ins are not read); for each (k, j) of carry, output k of a replay's
    step is its input j at the next step (an RNN's h and c). Returns the last replay's output
    `emit` of every step. A sequence then costs one call, and its steps no key, input tuple,
    or Expression but the one returned; the work that reads only the other inputs (the
    parameters: signatures, their part of the depths, their uses) is done once."""
    key = (replays[1:], stream, carry, emit)
    run = replays[0].runs.get(key)
    if run is not None:
        return run
    ts = [r.template for r in replays]
    ns = {"_E": Expression}
    for l, t in enumerate(ts):
        ns.update(t.constants(f"l{l}_"))
    code = _code(("run", tuple(t.key for t in ts), stream, carry, emit),
                 lambda: _run_source(ts, stream, carry, emit), sum(t.m for t in ts))
    exec(code, ns)
    run = replays[0].runs[key] = ns["run"]
    return run


def _run_source(ts, stream, carry, emit) -> str:
    varying = {stream} | {j for _, j in carry}
    pre, loop, post = [], [], []
    hoist, off, start = True, 0, 0
    for l, t in enumerate(ts):
        p = f"l{l}_"
        fixed = frozenset(range(t.n_in)) - varying
        before, step, hoist = _step_lines(t, p, fixed, hoist)
        sig = _sig_tuple(t, p)
        if sig.startswith("(") and hoist:
            before.append(f"{p}SG = {sig}")        # every signature is the same at every step
            sig = f"{p}SG"
        pre += [f"{p}i{j} = ins[{start + j}]" for j in range(t.n_in) if j != stream]
        pre += [f"{p}D{j} = depths[{p}i{j}]; {p}N{j} = needs[{p}i{j}]" for j in range(t.n_in) if j != stream]
        pre += before
        loop.append(f"{p}n = n + {off}")
        if l == 0:
            loop += [f"{p}i{stream} = x.i", f"{p}D{stream} = depths[{p}i{stream}]; {p}N{stream} = needs[{p}i{stream}]"]
        else:
            q, ok = f"l{l - 1}_", ts[l - 1].outs[emit]
            loop.append(f"{p}i{stream} = {q}n + {ok}; {p}D{stream} = {q}d{ok}; {p}N{stream} = {q}e{ok}")
        loop += step + _appends(t, p, sig, varying)
        post += [f"uses[{p}i{j}] += {c} * len(xs)" for j, c in sorted(t.in_uses.items()) if j not in varying]
        off, start = off + t.m, start + t.n_in
    p, t = f"l{len(ts) - 1}_", ts[-1]
    loop += ["o = _E()", "o.cg = g", f"o.i = {p}n + {t.outs[emit]}", "em.append(o)"]
    for l, t in enumerate(ts):
        p = f"l{l}_"
        loop += [f"{p}i{j} = {p}n + {t.outs[k]}; {p}D{j} = {p}d{t.outs[k]}; {p}N{j} = {p}e{t.outs[k]}" for k, j in carry]
    loop.append(f"n += {off}")
    return "\n".join(["def run(g, ins, xs):"] + _HEAD + ["    em = []"] + ["    " + line for line in pre]
                     + ["    for x in xs:"] + ["        " + line for line in loop]
                     + ["    " + line for line in post] + ["    return em"])


def many_of(replay, fixed: int):
    """A function (g, ins, rows) -> [outputs of each step] that appends what calling replay
    once per row would: a step of each of a minibatch's elements (DyNet's hand batching), the
    first ``fixed`` inputs (the parameters, ins) the same for all, the others each row's. The
    work that reads only the fixed inputs (signatures, their part of the depths, their uses)
    is done once, and a step costs no call, key or input tuple of its own."""
    key = ("many", fixed)
    many = replay.runs.get(key)
    if many is not None:
        return many
    t = replay.template
    ns = {"_E": Expression, **t.constants("")}
    exec(_code(("many", t.key, fixed), lambda: _many_source(t, fixed), t.m), ns)
    many = replay.runs[key] = ns["many"]
    return many


def _many_source(t: _Template, fixed: int) -> str:
    fix = frozenset(range(fixed))
    varying = range(fixed, t.n_in)
    before, step, hoist = _step_lines(t, "", fix)
    sig = _sig_tuple(t, "")
    if sig.startswith("(") and hoist:
        before.append(f"SG = {sig}")            # every signature is the same at every step
        sig = "SG"
    pre = [f"i{j} = ins[{j}]; D{j} = depths[i{j}]; N{j} = needs[i{j}]" for j in range(fixed)]
    loop = ["".join(f"i{j}, " for j in varying) + "= row"]
    loop += [f"D{j} = depths[i{j}]; N{j} = needs[i{j}]" for j in varying]
    loop += step + _appends(t, "", sig, varying)
    outs = []
    for k, ok in enumerate(t.outs):
        if ok is None:
            outs.append("None")
        else:
            loop += [f"o{k} = _E()", f"o{k}.cg = g", f"o{k}.i = n + {ok}"]
            outs.append(f"o{k}")
    loop += [f"out.append(({', '.join(outs)},))", f"n += {t.m}"]
    post = [f"uses[i{j}] += {c} * len(rows)" for j, c in sorted(t.in_uses.items()) if j < fixed]
    return "\n".join(["def many(g, ins, rows):"] + _HEAD + ["    out = []"] + ["    " + line for line in pre + before]
                     + ["    for row in rows:"] + ["        " + line for line in loop]
                     + ["    " + line for line in post] + ["    return out"])


_CODES: dict = {}     # a template's key (or a loop's keys) -> its compiled code


def _code(key, source, m: int):
    """The code of a replay or a loop, written (source()) and compiled once per key: each new
    graph records its templates again, and writing and compiling their code took a tenth of a
    BiLSTM minibatch's build time at H=128, and a third of a one-sentence BiLSTM graph's."""
    c = _CODES.get(key)
    if c is None:
        if len(_CODES) > 256:
            _CODES.clear()
        c = _CODES[key] = compile(source(), f"<autobatch recipe of {m} nodes>", "exec")
    return c
