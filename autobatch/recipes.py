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
    body, cols, attrs = [], {"shapes": [], "sigs": []}, []
    arg_src, dep_src, need_src = [], [], []

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
            attrs.append(f"    g.attrs[n + {k}] = _A{k}")
        if r[3]:                       # the signature names shared operands: look it up per step
            # ... unless they are the last step's (a sequence's parameters): _M{k} holds the
            # last operand ids and their signature, per template, so per graph
            const[f"_K{k}"], const[f"_O{k}"], const[f"_M{k}"] = r[2], op, [None] * (len(r[3]) + 1)
            refs = [ref(a_n[j]) for j in r[3]]
            sk = ", ".join(refs)
            same = " and ".join(f"_M{k}[{j}] == {a}" for j, a in enumerate(refs))
            body.append(f"if {same}: s{k} = _M{k}[{len(refs)}]")
            body.append("else:")
            body.append(f"    s{k} = sigtab.get((_K{k}, {sk}))")
            base = getattr(op, "base", None)
            if base is not None:
                # a fused node (ops/fused.py): its product's signature first, as building it
                # op by op interns them, so that both ways number signatures alike
                const[f"_BK{k}"], const[f"_BO{k}"] = _rule(base, tuple(map(g.shapes.__getitem__, a_n)), g.attrs[n])[2], base
                body.append(f"    if s{k} is None and sigtab.get((_BK{k}, {sk})) is None: g._intern((_BK{k}, {sk}), _BO{k})")
            body.append(f"    if s{k} is None: s{k} = g._intern((_K{k}, {sk}), _O{k})")
            body.append(f"    _M{k}[:] = ({sk}, s{k})")
            cols["sigs"].append(None)
        else:
            cols["sigs"].append(g.sigs[n])
        arg_src.append("(" + "".join(ref(a) + ", " for a in a_n) + ")")
        ds = [f"d{a - n0}" if a >= n0 else f"D{pos[a]}" for a in a_n]
        body.append(f"d{k} = {ds[0] if len(ds) == 1 else 'max(' + ', '.join(ds) + ')'} + 1")
        es = [f"e{a - n0}" if a >= n0 else f"N{pos[a]}" for a in a_n]
        body.append(f"e{k} = {' or '.join(es) if op.differentiable else 'False'}")
        dep_src.append(f"d{k}")
        need_src.append(f"e{k}")
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
    dyn_sigs = any(s is None for s in cols["sigs"])
    names = ", ".join(f"i{j}" for j in range(len(ins)))
    src = [f"def replay(g, {names}):",
           "    depths, needs, uses, sigtab = g.depths, g.needs, g.uses, g._sigtab",
           "    n = len(g.sigs)"]
    src += [f"    D{j} = depths[i{j}]; N{j} = needs[i{j}]" for j in range(len(ins))]
    src += ["    " + line for line in body]
    src += attrs + ["    g.shapes.extend(_SHAPES)"]
    if dyn_sigs:
        sig_src = ", ".join(f"s{k}" if s is None else str(s) for k, s in enumerate(cols["sigs"]))
        src.append(f"    g.sigs.extend(({sig_src},))")
    else:
        src.append("    g.sigs.extend(_SIGS)")
    src.append(f"    g.args.extend(({', '.join(arg_src)},))")
    src.append(f"    depths.extend(({', '.join(dep_src)},))")
    src.append(f"    needs.extend(({', '.join(need_src)},))")
    src += [f"    uses[i{j}] += {c}" for j, c in sorted(in_uses.items())]
    src.append("    uses.extend(_USES)")
    rets = []
    for k, e in enumerate(outs):
        if e is None:            # a cell-less builder's c
            rets.append("None")
            continue
        src += [f"    o{k} = _E()", f"    o{k}.cg = g", f"    o{k}.i = n + {e.i - n0}"]
        rets.append(f"o{k}")
    src.append(f"    return ({', '.join(rets)},)")
    ns = dict(const)
    exec(_code("\n".join(src), m), ns)
    return ns["replay"]


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

