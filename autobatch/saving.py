"""dy.save / dy.load: parameters, lookup parameters and builders (any object with
``param_collection()``, a ``spec`` and a static ``from_spec(spec, model)``) in DyNet's files.

DyNet 2's layout: basename.meta is a run of pickles, one per saved object --
("Parameters", name), ("LookupParameters", name) or (class, spec, collection name) -- and
basename.data holds the objects' parameters, in that order, in DyNet's text format
(textfile.py). autobatch's builders are written as DyNet's classes (``_dynet.GRUBuilder``) and
DyNet's are read as ours, so the files go both ways. Files of older autobatch versions (JSON
.meta, .npz .data) are still read.

.meta is read with an unpickler that only hands out classes with ``from_spec`` and autobatch's
expression functions (a spec's activation), imports nothing and refuses every opcode that calls
or builds an object: a file cannot make load() run anything. A spec may hold other objects (a parser's vocabulary): DyNet pickles specs
whole, and so does save(); such a file loads with ``load(..., trusted=True)``, which unpickles
it as DyNet's load does -- which runs whatever the file names, so only for files you trust."""
from __future__ import annotations

import io
import json
import os
import pickle
import sys
import types

import numpy as np

from .params import ConstInitializer, Parameter, ParameterCollection
from .errors import user_line
from .textfile import check_name, file_name, read_saved, restore, write_text

_KIND_TAG = {False: "Parameters", True: "LookupParameters"}
_OLD_FORMAT = "autobatch-objects"


# --- specs --------------------------------------------------------------------------------
def _spec_out(v, where: str):
    """The spec as it is pickled: NumPy scalars as Python numbers (DyNet's unpickler needs no
    NumPy); DyNet's functions (an activation, dy.tanh) are written as DyNet's (_dynet.tanh),
    which both libraries read back. Other objects are pickled as they are, as DyNet does (a
    parser's vocabulary; load() reads them back with trusted=True); functions that are not
    DyNet's are refused."""
    if v is None or isinstance(v, (bool, int, float, str)) or isinstance(v, type):
        return v
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, (list, tuple)):
        items = [_spec_out(x, where) for x in v]
        return type(v)(items) if type(v) in (list, tuple) else v
    if isinstance(v, dict):
        items = {k: _spec_out(x, where) for k, x in v.items()}
        return items if type(v) is dict else v
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)) and _dynet_name(v) is None:
        raise TypeError(f"save: {where}: its spec holds the function {getattr(v, '__qualname__', v)!r}, which "
                        f"load() would not call back (only DyNet's expression functions can be saved) "
                        f"[at {user_line()}]")
    return v


def _dynet_name(cls):
    """DyNet's name of one of autobatch's DyNet classes (VanillaLSTMBuilder, ...) or of its
    expression functions (tanh, ...: api*.py, none of which reads or writes files: a file may
    name them), else None."""
    import autobatch
    name = getattr(cls, "__name__", None)
    module = getattr(cls, "__module__", None) or ""
    ok = module.startswith("autobatch.") if isinstance(cls, type) else module.startswith("autobatch.api")
    return name if ok and getattr(autobatch, name, None) is cls else None


class _Pickler(pickle._Pickler):
    """Writes autobatch's DyNet classes as DyNet's (``_dynet.GRUBuilder``), which DyNet's load
    resolves to its own class, and ours back to autobatch's. The pure-Python pickler, because
    its save_global can be overridden; the standard one would insist on importing _dynet."""

    def save_global(self, obj, name=None):
        dn = _dynet_name(obj)
        if dn is None:
            return super().save_global(obj, name)
        self.write(pickle.GLOBAL + b"_dynet\n" + dn.encode("ascii") + b"\n")
        self.memoize(obj)

    # functions go through the table's own save_global, not the override: routed to it here
    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[types.FunctionType] = lambda self, obj: self.save_global(obj)


def _dumps(record) -> bytes:
    f = io.BytesIO()
    _Pickler(f, protocol=2).dump(record)
    return f.getvalue()


class _Untrusted(pickle.UnpicklingError):
    """A spec's object that the strict unpickler does not hand out (load's trusted=True would)."""


def _find_dynet(name: str):
    """What a file's ``_dynet.name`` is here: autobatch's builder or expression function of that name."""
    import autobatch
    obj = getattr(autobatch, name, None) if name.isidentifier() and not name.startswith("_") else None
    if not (_specced(obj) or not isinstance(obj, type) and _dynet_name(obj) == name):
        raise pickle.UnpicklingError(f"DyNet's {name} has no counterpart in autobatch")
    return obj


class _Unpickler(pickle._Unpickler):
    """The strict one (the default): classes with from_spec of modules the program has imported,
    named exactly (module and qualified name: no walking from a module to what it imported),
    and DyNet's builders and expression functions under ``_dynet`` (autobatch's of those
    names); nothing is imported, so no module's code runs; and no opcode that calls or builds
    anything (dy.save and DyNet write specs of plain values, tuples, lists, dicts and classes).
    The pure-Python unpickler, whose opcode table can be changed."""

    def find_class(self, module, name):
        return _find_dynet(name) if module == "_dynet" else _class(module, name)

    def _refuse(self):
        raise _Untrusted("the file calls or builds an object (a spec holding other objects than numbers, "
                         "strings, lists, tuples, dicts and classes): load(path, model, trusted=True) reads "
                         "it, running whatever the file names, as DyNet's load does")

    dispatch = dict(pickle._Unpickler.dispatch)
    for _op in (pickle.REDUCE, pickle.BUILD, pickle.NEWOBJ, pickle.NEWOBJ_EX, pickle.OBJ, pickle.INST,
                pickle.EXT1, pickle.EXT2, pickle.EXT4, pickle.PERSID, pickle.BINPERSID):
        dispatch[_op[0]] = _refuse
    del _op


class _TrustedUnpickler(pickle.Unpickler):
    """pickle's own, for load(..., trusted=True): anything the file names, DyNet's names mapped
    to autobatch's."""

    def find_class(self, module, name):
        return _find_dynet(name) if module == "_dynet" else super().find_class(module, name)


def _specced(obj) -> bool:
    return isinstance(obj, type) and callable(getattr(obj, "from_spec", None))


def _class(module: str, qual: str):
    """The class module.qual for a strict load: one with from_spec, in a module already
    imported, whose own module and qualified name are those (never imported here: importing
    runs a module's code)."""
    obj = sys.modules.get(module)
    for part in qual.split("."):
        obj = getattr(obj, part, None) if obj is not None and part.isidentifier() else None
    if not (_specced(obj) and obj.__module__ == module and obj.__qualname__ == qual):
        why = "in a module the program has not imported" if module not in sys.modules else "not a class with from_spec"
        raise _Untrusted(
            f"{module}.{qual} named in the file is {why}: load() reads a spec's other objects only when "
            f"told the file is trusted (load(path, model, trusted=True), which runs whatever the file "
            f"names, as DyNet's load does)")
    return obj


def _params_of(obj) -> tuple:
    """(collection, its dense parameters, its lookup tables) of a saved object."""
    pc = obj.param_collection()
    if not isinstance(pc, ParameterCollection):
        raise TypeError(f"save: {type(obj).__name__}.param_collection() must return a ParameterCollection [at "
                        f"{user_line()}]")
    return pc, pc.parameters_list(), pc.lookup_parameters_list()


# --- save ------------------------------------------------------------------------------------
def save(basename: str, objects) -> None:
    """Write parameters, lookup parameters and builders to basename.meta and basename.data
    in DyNet 2's format (DyNet's ``dy.load`` reads them; ``load`` re-creates them)."""
    basename = file_name("save", basename)
    if isinstance(objects, Parameter) or not hasattr(objects, "__iter__"):
        raise TypeError(f"save: needs a list of objects to save, got a {type(objects).__name__} "
                        f"[at {user_line()}]")
    objects = list(objects)
    records, entries = [], []
    for j, o in enumerate(objects):
        if isinstance(o, Parameter):
            records.append((_KIND_TAG[o.is_lookup], o.name()))
            entries.append((o, o.name()))
            continue
        where = f"object {j} ({type(o).__name__})"
        cls = type(o)
        if not (hasattr(o, "param_collection") and hasattr(o, "spec") and hasattr(cls, "from_spec")):
            raise TypeError(f"save: {where} is not a Parameter, a LookupParameter or an object with "
                            f"param_collection(), spec and from_spec(spec, model) [at {user_line()}]")
        if o.spec is None:
            raise TypeError(f"save: {where} has no spec (e.g. a BiRNNBuilder made from builder_layers): "
                            f"it cannot be re-created; save its builders instead [at {user_line()}]")
        spec = _spec_out(o.spec, where)
        pc, dense, lookups = _params_of(o)
        records.append((cls, spec, pc.name()))
        entries += [(p, p.name()) for p in dense + lookups]
    for _, name in entries:          # before writing anything
        check_name(name, "save")
    try:
        meta = b"".join(_dumps(r) for r in records)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise TypeError(f"save: a spec holds something that cannot be pickled ({e}) [at {user_line()}]") from None
    write_text(basename + ".data", entries, append=False)
    with open(basename + ".meta", "wb") as f:
        f.write(meta)


# --- load ------------------------------------------------------------------------------------
def _read_records(basename: str, trusted: bool = False) -> tuple:
    """(records, saved parameters, old format?) of a saved model."""
    basename = file_name("load", basename)
    for ext in (".meta", ".data"):
        if not os.path.exists(basename + ext):
            raise FileNotFoundError(f"load: no such file: {basename + ext} [at {user_line()}]")
    with open(basename + ".meta", "rb") as f:
        raw = f.read()
    if raw.lstrip()[:1] == b"{":
        return _read_old(basename, raw)
    records, f = [], io.BytesIO(raw)
    while f.tell() < len(raw):
        try:
            records.append((_TrustedUnpickler if trusted else _Unpickler)(f).load())
        except _Untrusted as e:
            raise ValueError(f"load: {basename}.meta, record {len(records)}: {e} [at {user_line()}]") from None
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, KeyError,
                IndexError) as e:            # (the pure-Python unpickler meets an unknown opcode with a KeyError)
            raise ValueError(f"load: {basename}.meta is not a model's index as dy.save writes it "
                             f"(record {len(records)}: {e}) [at {user_line()}]") from None
    for j, r in enumerate(records):
        ok = isinstance(r, tuple) and (
            (len(r) == 2 and r[0] in _KIND_TAG.values() and isinstance(r[1], str)) or
            (len(r) == 3 and isinstance(r[0], type) and isinstance(r[2], str)))
        if not ok:
            raise ValueError(f"load: record {j} of {basename}.meta is not (kind, name) or (class, spec, name) [at "
                             f"{user_line()}]")
    return records, read_saved(basename + ".data", "load"), False


def _read_old(basename: str, raw: bytes) -> tuple:
    """autobatch's first format: JSON index, arrays in an .npz."""
    try:
        meta = json.loads(raw.decode("utf-8"))
        ok = isinstance(meta, dict) and meta.get("format") == _OLD_FORMAT
    except (UnicodeDecodeError, ValueError):
        ok = False
    if not ok or meta.get("version") != 1:
        raise ValueError(f"load: {basename}.meta is neither DyNet's format nor autobatch's older one [at "
                         f"{user_line()}]")
    try:
        with np.load(basename + ".data", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError) as e:
        raise ValueError(f"load: {basename}.data is not readable ({e}) [at {user_line()}]") from None
    records = []
    for j, e in enumerate(meta["objects"]):
        keys = [e.get("array")] if e.get("kind") in ("param", "lookup") else e.get("params", []) + e.get("lookups", [])
        for k in keys:
            if k not in arrays:
                raise ValueError(f"load: {basename}.data lacks array {k} named in {basename}.meta [at {user_line()}]")
        if e.get("kind") in ("param", "lookup"):
            records.append((_KIND_TAG[e["kind"] == "lookup"], e["name"], arrays[e["array"]]))
        elif e.get("kind") == "object":
            records.append((_old_class(e["class"]), _old_spec(e["spec"]),
                            [arrays[k] for k in e["params"]], [arrays[k] for k in e["lookups"]]))
        else:
            raise ValueError(f"load: entry {j} of {basename}.meta has unknown kind {e.get('kind')!r} [at "
                             f"{user_line()}]")
    return records, None, True


def _old_class(name: str):
    """A class an old-format file names as "module:Qual", under the strict unpickler's rule."""
    module, _, qual = name.partition(":")
    try:
        return _class(module, qual)
    except _Untrusted as e:
        raise ValueError(f"load: {e} [at {user_line()}]") from None


def _old_spec(v):
    if isinstance(v, list):
        return [_old_spec(x) for x in v]
    if isinstance(v, dict):
        return _old_class(v["class"]) if "class" in v else {k: _old_spec(x) for k, x in v["dict"].items()}
    return v


def _base_name(name: str) -> str:
    """The name to give a loaded parameter: DyNet's automatic ``_k`` names are not kept."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return "" if base.startswith("_") and base[1:].isdigit() else base


def _take(saved, k, n, kind, prefix, where):
    """The n saved parameters of `kind` from position k on, all named under prefix."""
    got = saved[k:k + n]
    bad = [e for e in got if e.kind != kind or not (e.name or "").startswith(prefix)]
    if len(got) != n or bad:
        what = "lookup parameters" if kind == "l" else "parameters"
        raise ValueError(f"load: {where} needs {n} {what} named {prefix}... at position {k} of the "
                         ".data file" + (f", found {bad[0].name}" if bad else f", the file ends after {len(got)}"))
    return got


def load_generator(basename: str, params: ParameterCollection = None, trusted: bool = False, *, model=None):
    """``load`` as a generator (DyNet's name). All objects are checked and created before
    the first is yielded, so that an error still leaves params as it was."""
    yield from load(basename, params, trusted, model=model)


def load(basename: str, params: ParameterCollection = None, trusted: bool = False, *, model=None) -> list:
    """The objects ``save(basename, objects)`` (ours or DyNet's) wrote, re-created in params (a
    ParameterCollection; also model=, this library's first name for it) with their saved
    values, in the same order. Everything is checked before values are set; on an error
    params is left as it was. trusted: the specs may hold any objects, unpickled as DyNet's
    load does (which runs whatever the file names: only for files you trust)."""
    if model is not None:
        if params is not None:
            raise TypeError(f"load: params and model name the same argument; give one [at {user_line()}]")
        params = model
    model = params
    if not isinstance(model, ParameterCollection):
        raise TypeError(f"load: params must be a ParameterCollection, got {type(model).__name__} [at {user_line()}]")
    records, saved, old = _read_records(basename, trusted)
    mark = model._mark()
    try:
        out, todo, k = [], [], 0
        for j, r in enumerate(records):
            if r[0] in _KIND_TAG.values():
                lookup = r[0] == "LookupParameters"
                if old:
                    value, grad = r[2], None
                else:
                    e = saved[k] if k < len(saved) else None
                    if e is None or e.kind != ("l" if lookup else "p") or e.name != r[1]:
                        held = f"{'lookup parameter' if e.kind == 'l' else 'parameter'} {e.name}" if e else "nothing"
                        raise ValueError(f"load: record {j} names {r[0]} {r[1]}, the .data file holds {held} "
                                         f"at position {k} [at {user_line()}]")
                    k += 1
                    value, grad = e.arrays()
                add = model.add_lookup_parameters if lookup else model.add_parameters
                out.append(add(tuple(value.shape), ConstInitializer(0.0), _base_name(r[1])))
                todo.append((out[-1], value, grad))
                continue
            cls, spec = r[0], r[1]
            where = f"object {j} ({cls.__name__})"
            obj = cls.from_spec(spec, model)
            _, dense, lookups = _params_of(obj)
            if old:
                theirs = [(a, None) for a in r[2]], [(a, None) for a in r[3]]
            else:
                prefix = r[2]
                ps = _take(saved, k, len(dense), "p", prefix, where)
                ls = _take(saved, k + len(dense), len(lookups), "l", prefix, where)
                k += len(dense) + len(lookups)
                theirs = [e.arrays() for e in ps], [e.arrays() for e in ls]
            for what, mine, arrs in (("parameters", dense, theirs[0]), ("lookup parameters", lookups, theirs[1])):
                if len(mine) != len(arrs):
                    raise ValueError(f"load: {where} was saved with {len(arrs)} {what}, from_spec made {len(mine)} "
                                     f"[at {user_line()}]")
                for p, (value, grad) in zip(mine, arrs):
                    if tuple(value.shape) != p.shape():
                        raise ValueError(f"load: {where}: saved {what[:-1]} of shape {tuple(value.shape)}, "
                                         f"from_spec made {p.name()} of shape {p.shape()} [at {user_line()}]")
                    todo.append((p, value, grad))
            out.append(obj)
        if not old and k != len(saved):
            raise ValueError(f"load: {basename}.data holds {len(saved)} parameters, {basename}.meta accounts for {k} "
                             f"[at {user_line()}]")
    except BaseException:
        model._undo(mark)
        raise
    for p, value, grad in todo:
        restore(p, value, grad)
    return out
