"""Model saving: dy.save / dy.load of parameters, lookup parameters, builders and user
objects (params.save / params.load), and ParameterCollection.save / populate(key) /
load_param / load_lookup_param with DyNet's key semantics."""
import collections
import json
import textwrap
import threading

import numpy as np
import pytest

import autobatch as dy
from autobatch.builders_more import BiRNNBuilder, CoupledLSTMBuilder, StandardSoftmaxBuilder
from autobatch import saving
from autobatch.saving import load, save
from check_kit import needs_dynet, run_dynet_files


def _fill(m, seed):
    rng = np.random.default_rng(seed)
    for p in m.parameters_list() + m.lookup_parameters_list():
        p.set_value(rng.normal(size=p.shape()))


def _lists(m):
    return [p.as_array() for p in m.parameters_list()], [p.as_array() for p in m.lookup_parameters_list()]


def _run(builder, xs):
    dy.renew_cg()
    return [o.npvalue() for o in builder.initial_state().transduce([dy.inputVector(x) for x in xs])]


def test_round_trip_parameters_and_builders(tmp_path):
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 3), name="W")
    E = pc.add_lookup_parameters((5, 2))
    lstm = dy.VanillaLSTMBuilder(2, 2, 3, pc)
    gru = dy.GRUBuilder(1, 2, 3, pc)
    cpl = CoupledLSTMBuilder(1, 2, 3, pc)
    bi = BiRNNBuilder(1, 2, 4, pc, dy.SimpleRNNBuilder)
    sm = StandardSoftmaxBuilder(3, 4, pc)
    _fill(pc, 1)
    base = str(tmp_path / "model")
    save(base, [E, lstm, W, gru, cpl, bi, sm])
    assert (tmp_path / "model.data").exists() and (tmp_path / "model.meta").exists()

    pc2 = dy.ParameterCollection()
    E2, lstm2, W2, gru2, cpl2, bi2, sm2 = load(base, pc2)
    assert type(E2) is dy.LookupParameter and type(W2) is dy.Parameter
    np.testing.assert_array_equal(E2.as_array(), E.as_array())
    np.testing.assert_array_equal(W2.as_array(), W.as_array())
    assert W2.name() == "/W"
    for a, b in ((lstm, lstm2), (gru, gru2), (cpl, cpl2)):
        assert type(b) is type(a) and tuple(b.spec) == tuple(a.spec)
        for la, lb in zip(a.get_parameters(), b.get_parameters()):
            for pa, pb in zip(la, lb):
                np.testing.assert_array_equal(pb.as_array(), pa.as_array())
        xs = [np.ones(2), np.arange(2.0)]
        for oa, ob in zip(_run(a, xs), _run(b, xs)):
            np.testing.assert_array_equal(oa, ob)
    assert type(bi2) is BiRNNBuilder and bi2.spec[3] is dy.SimpleRNNBuilder
    dy.renew_cg()
    xs = [dy.inputVector([1.0, 2.0]), dy.inputVector([0.5, -1.0])]
    got = [o.npvalue() for o in bi2.transduce(xs)]
    want = [o.npvalue() for o in bi.transduce(xs)]
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(sm2.W.as_array(), sm.W.as_array())
    np.testing.assert_array_equal(sm2.b.as_array(), sm.b.as_array())
    # everything landed in pc2, nothing extra
    assert len(pc2.parameters_list()) == len(pc.parameters_list())
    assert len(pc2.lookup_parameters_list()) == 1


def test_load_adds_to_a_model_that_has_parameters(tmp_path):
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 3), name="W")
    base = str(tmp_path / "m")
    save(base, [W])
    pc2 = dy.ParameterCollection()
    old = pc2.add_parameters(5, name="W")
    keep = old.as_array()
    (W2,) = load(base, pc2)
    assert W2.name() == "/W_1" and pc2.parameters_list() == [old, W2]
    np.testing.assert_array_equal(old.as_array(), keep)
    np.testing.assert_array_equal(W2.as_array(), W.as_array())


class Tagger:
    """A user type following DyNet's protocol: param_collection(), spec, from_spec."""

    def __init__(self, model, n, d):
        self.pc = model.add_subcollection("tagger")
        self.E = self.pc.add_lookup_parameters((n, d))
        self.O = self.pc.add_parameters((3, d))
        self.spec = (n, d, {"note": "x", "shape": (n, d)})

    def param_collection(self):
        return self.pc

    @staticmethod
    def from_spec(spec, model):
        n, d, extra = spec
        assert extra == {"note": "x", "shape": (n, d)}     # pickled: tuples stay tuples
        return Tagger(model, n, d)


def test_user_objects_round_trip(tmp_path):
    pc = dy.ParameterCollection()
    t = Tagger(pc, 4, 2)
    _fill(pc, 3)
    save(str(tmp_path / "u"), [t])
    (t2,) = load(str(tmp_path / "u"), dy.ParameterCollection())
    assert isinstance(t2, Tagger)
    np.testing.assert_array_equal(t2.E.as_array(), t.E.as_array())
    np.testing.assert_array_equal(t2.O.as_array(), t.O.as_array())


class Dense:
    """A user layer that keeps its activation in its spec (a CNN text classifier's do)."""

    def __init__(self, model, n, act):
        self.pc = model.add_subcollection("dense")
        self.W = self.pc.add_parameters((n, n))
        self.act = act
        self.spec = (n, act)

    def param_collection(self):
        return self.pc

    @staticmethod
    def from_spec(spec, model):
        return Dense(model, *spec)


def test_a_spec_may_hold_dynets_functions(tmp_path):
    """An activation kept in a spec is written as DyNet's function, _dynet.tanh, which
    DyNet's load reads as its own, and read back as autobatch's; other functions stay
    refused both ways."""
    pc = dy.ParameterCollection()
    d = Dense(pc, 3, dy.tanh)
    save(str(tmp_path / "f"), [d])
    assert b"_dynet\ntanh\n" in (tmp_path / "f.meta").read_bytes()
    (d2,) = load(str(tmp_path / "f"), dy.ParameterCollection())
    assert d2.act is dy.tanh
    np.testing.assert_array_equal(d2.W.as_array(), d.W.as_array())
    for bad in (dy.save, lambda x: x):
        with pytest.raises(TypeError, match="spec holds the function"):
            save(str(tmp_path / "g"), [Dense(pc, 3, bad)])
    data = (tmp_path / "f.data").read_text()
    pc2 = dy.ParameterCollection()
    for name in (b"save", b"load"):          # a file may name expression functions only
        with pytest.raises(ValueError, match="has no counterpart"):
            load(_files(tmp_path, "io", b"\x80\x02c_dynet\n" + name + b"\n.", data), pc2)


class Vocab:
    """A user object in a spec, as DyNet programs keep their vocabularies (minimal-span-parser)."""

    def __init__(self, words):
        self.words = list(words)
        self.index = {w: k for k, w in enumerate(words)}


class VocabTagger:
    def __init__(self, model, extra):
        self.pc = model.add_subcollection("vocab-tagger")
        self.E = self.pc.add_lookup_parameters((len(extra["vocab"].words), 2))
        self.spec = extra

    def param_collection(self):
        return self.pc

    @staticmethod
    def from_spec(spec, model):
        return VocabTagger(model, spec)


def test_a_spec_may_hold_plain_python_objects_read_back_when_trusted(tmp_path):
    """DyNet pickles specs whole: save() writes a vocabulary object, sets, ordered dicts and
    NumPy arrays in a spec; load() reads them back when told the file is trusted, and says so
    otherwise, leaving the model as it was."""
    extra = {"vocab": Vocab(["a", "b", "c"]), "tags": {"N", "V"}, "order": collections.OrderedDict(x=1),
             "table": np.arange(4.0).reshape(2, 2)}
    t = VocabTagger(dy.ParameterCollection(), extra)
    save(str(tmp_path / "v"), [t])
    pc = dy.ParameterCollection()
    with pytest.raises(ValueError, match=r"Vocab named in the file is not a class with from_spec.*trusted=True"):
        load(str(tmp_path / "v"), pc)
    assert pc.parameters_list() == [] and pc.subcollections() == []
    (t2,) = load(str(tmp_path / "v"), pc, trusted=True)
    got = t2.spec
    assert type(got["vocab"]) is Vocab and got["vocab"].index == {"a": 0, "b": 1, "c": 2}
    assert got["tags"] == {"N", "V"} and got["order"] == collections.OrderedDict(x=1)
    np.testing.assert_array_equal(got["table"], np.arange(4.0).reshape(2, 2))
    np.testing.assert_array_equal(t2.E.as_array(), t.E.as_array())


def test_save_errors(tmp_path):
    pc = dy.ParameterCollection()
    with pytest.raises(TypeError, match="not a Parameter"):
        save(str(tmp_path / "x"), [object()])
    bi = BiRNNBuilder(1, 2, 4, pc, dy.LSTMBuilder)
    own = BiRNNBuilder(None, None, None, None, None, builder_layers=bi.builder_layers)
    with pytest.raises(TypeError, match="no spec"):
        save(str(tmp_path / "x"), [own])
    t = Tagger(pc, 2, 2)
    t.spec = (2, 2, threading.Lock())
    with pytest.raises(TypeError, match="cannot be pickled"):
        save(str(tmp_path / "x"), [t])


def _files(tmp_path, name, meta: bytes, data: str):
    (tmp_path / f"{name}.meta").write_bytes(meta)
    (tmp_path / f"{name}.data").write_text(data)
    return str(tmp_path / name)


def test_load_errors_leave_the_model_unchanged(tmp_path):
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 3))
    lstm = dy.VanillaLSTMBuilder(1, 2, 3, pc)
    base = str(tmp_path / "m")
    save(base, [W, lstm])
    data = (tmp_path / "m.data").read_text()
    w_only = data[:data.index("#Parameter# /vanilla")]
    rec_w = saving._dumps(("Parameters", "/_0"))
    pc2 = dy.ParameterCollection()
    keep = pc2.add_parameters(3)

    def fails(path, exc, match):
        with pytest.raises(exc, match=match):
            load(path, pc2)
        assert pc2.parameters_list() == [keep] and pc2.subcollections() == []

    # hidden size 4 in the spec: from_spec makes parameters the saved arrays do not fit
    bad_spec = rec_w + saving._dumps((dy.VanillaLSTMBuilder, (1, 2, 4, False, 1.0), "/vanilla-lstm-builder/"))
    fails(_files(tmp_path, "spec", bad_spec, data), ValueError, r"object 1 \(VanillaLSTMBuilder\).*shape")
    fails(_files(tmp_path, "name", saving._dumps(("Parameters", "/W")), w_only), ValueError, "record 0 names Parameters /W, the .data file holds parameter /_0")
    fails(_files(tmp_path, "extra", rec_w, data), ValueError, "holds 4 parameters.*accounts for 1")
    fails(_files(tmp_path, "short", (tmp_path / "m.meta").read_bytes(), w_only), ValueError,
          "needs 3 parameters named /vanilla-lstm-builder/")
    fails(_files(tmp_path, "junk", b"\x80\x02\xff not a pickle", data), ValueError, "not a model's index")
    # no opcode that calls or builds: an allowed class (it has from_spec) called with the file's arguments
    fails(_files(tmp_path, "call", b"\x80\x02cautobatch.builders\nVanillaLSTMBuilder\n(K\x01K\x02K\x03tR.", data),
          ValueError, "calls or builds an object")
    # the unpickler hands out classes only, none of the standard library's but the plain containers:
    # a file cannot make load() run anything else
    fails(_files(tmp_path, "popen", b"\x80\x02csubprocess\nPopen\n(X\x04\x00\x00\x00trueR.", data),
          ValueError, "subprocess.Popen .*not a class with from_spec")
    fails(_files(tmp_path, "system", b"\x80\x02cos\nsystem\n(X\x04\x00\x00\x00trueR.", data),
          ValueError, "os.system .*not a class")
    # nor by walking from one of autobatch's modules to what it imported
    fails(_files(tmp_path, "walk", b"\x80\x02cautobatch.saving\nimportlib.import_module\n(X\x02\x00\x00\x00osR.", data),
          ValueError, "not a class")
    fails(_files(tmp_path, "walk2", b"\x80\x02cautobatch.runtime\nnp.memmap\n(X\x01\x00\x00\x00xR.", data),
          ValueError, "not a class with from_spec")
    fails(_files(tmp_path, "func", b"\x80\x02ctest_save_load\n_files\n.", data), ValueError, "is not a class")
    fails(_files(tmp_path, "nowhere", b"\x80\x02cautobatch.nowhere\nThing\n.", data), ValueError, "not imported")
    # nothing is imported (a module's code would run), nothing without from_spec is handed out
    import sys
    assert "this_module_is_not_imported" not in sys.modules
    fails(_files(tmp_path, "imp", b"\x80\x02cthis_module_is_not_imported\nThing\n.", data), ValueError, "not imported")
    fails(_files(tmp_path, "venv", b"\x80\x02cvenv.__main__\nmain\n.", data), ValueError, "not imported")
    assert "venv.__main__" not in sys.modules
    fails(_files(tmp_path, "pc", b"\x80\x02cautobatch.params\nParameterCollection\n(X\x01\x00\x00\x00xR.", data),
          ValueError, "not a class with from_spec")
    fails(_files(tmp_path, "modtype", b"\x80\x02c_dynet\n__class__\n.", data), ValueError, "no counterpart")
    fails(_files(tmp_path, "nodynet", b"\x80\x02c_dynet\nNoSuchBuilder\n.", data), ValueError,
          "NoSuchBuilder has no counterpart")
    fails(str(tmp_path / "nope"), FileNotFoundError, "nope")
    with pytest.raises(TypeError, match="ParameterCollection"):
        load(base, [])
    (W2, _) = load(base, pc2)                         # and the model still works for a good load
    assert W2.name() == "/_1"
    np.testing.assert_array_equal(W2.as_array(), W.as_array())


def test_older_autobatch_files_still_load(tmp_path):
    """The first format: a JSON index and an .npz of the arrays."""
    W, E = np.arange(6.0).reshape(2, 3), np.arange(8.0).reshape(4, 2)
    lstm_shapes = [(12, 2), (12, 3), (12,)]
    arrays = {"a0": W, "a1": E, **{f"a{2 + k}": np.full(sh, k + 1.0) for k, sh in enumerate(lstm_shapes)}}
    meta = {"format": "autobatch-objects", "version": 1, "objects": [
        {"kind": "param", "name": "/W", "array": "a0"}, {"kind": "lookup", "name": "/_1", "array": "a1"},
        {"kind": "object", "class": "autobatch.builders:VanillaLSTMBuilder", "spec": [1, 2, 3, False, 1.0],
         "params": ["a2", "a3", "a4"], "lookups": []}]}
    (tmp_path / "old.meta").write_text(json.dumps(meta))
    with open(tmp_path / "old.data", "wb") as f:
        np.savez(f, **arrays)
    W2, E2, lstm = load(str(tmp_path / "old"), dy.ParameterCollection())
    np.testing.assert_array_equal(W2.as_array(), W)
    np.testing.assert_array_equal(E2.as_array(), E)
    assert W2.name() == "/W" and type(lstm) is dy.VanillaLSTMBuilder
    for k, p in enumerate(lstm.get_parameters()[0]):
        want = np.full(lstm_shapes[k], k + 1.0)
        if k == 2:            # b: those files held it with the forget bias (1.0) in its forget slice
            want[3:6] -= 1.0
        np.testing.assert_array_equal(p.as_array(), want)
    meta["objects"][0]["array"] = "a99"
    (tmp_path / "gap.meta").write_text(json.dumps(meta))
    (tmp_path / "gap.data").write_bytes((tmp_path / "old.data").read_bytes())
    with pytest.raises(ValueError, match="lacks array a99"):
        load(str(tmp_path / "gap"), dy.ParameterCollection())
    # classes named in such files pass the strict unpickler's rule too (a spec naming Popen)
    meta["objects"][0]["array"] = "a0"
    meta["objects"][2]["spec"] = [1, 2, 3, {"class": "subprocess:Popen"}, 1.0]
    (tmp_path / "popen.meta").write_text(json.dumps(meta))
    (tmp_path / "popen.data").write_bytes((tmp_path / "old.data").read_bytes())
    with pytest.raises(ValueError, match="subprocess.Popen named in the file is not a class with from_spec"):
        load(str(tmp_path / "popen"), dy.ParameterCollection())


def test_dynet1_model_save_and_load_forms(tmp_path):
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 2))
    rnn = dy.SimpleRNNBuilder(1, 2, 2, pc)
    pc.save(str(tmp_path / "old"), [rnn, W])
    rnn2, W2 = dy.ParameterCollection().load(str(tmp_path / "old"))
    np.testing.assert_array_equal(W2.as_array(), W.as_array())
    assert type(rnn2) is dy.SimpleRNNBuilder


# --- ParameterCollection.save / populate / load_param --------------------------------------
def _enc_dec():
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 3), name="W")
    E = pc.add_lookup_parameters((4, 2))
    enc = pc.add_subcollection("enc")
    a, b = enc.add_parameters(2), enc.add_parameters(3)
    dec = pc.add_subcollection("dec")
    c = dec.add_parameters(2)
    _fill(pc, 5)
    return pc, W, E, a, b, c


def test_populate_with_key_fills_a_sub_model(tmp_path):
    pc, W, E, a, b, c = _enc_dec()
    path = str(tmp_path / "m.npz")
    pc.save(path)
    q = dy.ParameterCollection()
    sub = q.add_subcollection("other")          # names need not match: positions do, as DyNet
    y1, y2 = sub.add_parameters(2), sub.add_parameters(3)
    q.populate(path, "/enc/")
    np.testing.assert_array_equal(y1.as_array(), a.as_array())
    np.testing.assert_array_equal(y2.as_array(), b.as_array())
    z = dy.ParameterCollection()
    z1 = z.add_parameters(2)
    z.populate(path, "/dec")                    # with or without the trailing slash
    np.testing.assert_array_equal(z1.as_array(), c.as_array())
    z.populate(path, "/dec/")
    for bad in ("/de", "/dec/_0"):              # whole collection names only, as DyNet
        with pytest.raises(ValueError, match="holds 0 parameters"):
            z.populate(path, bad)
    full = dy.ParameterCollection()
    full.add_parameters((2, 3))
    full.add_lookup_parameters((4, 2))
    with pytest.raises(ValueError, match="holds 4 parameters.*has 1"):
        full.populate(path)


def test_populate_shape_mismatch_changes_nothing(tmp_path):
    pc, *_ = _enc_dec()
    path = str(tmp_path / "m.npz")
    pc.save(path)
    q = dy.ParameterCollection()
    y1 = q.add_parameters(2)
    q.add_parameters(4)
    before = y1.as_array()
    with pytest.raises(ValueError, match=r"/enc/_1 has shape \(3,\)"):
        q.populate(path, "/enc/")
    np.testing.assert_array_equal(y1.as_array(), before)


def test_save_with_key_renames(tmp_path):
    pc, W, E, a, b, c = _enc_dec()
    path = str(tmp_path / "k.npz")
    pc.save(path, "/top/")
    q = dy.ParameterCollection()
    w = q.load_param(path, "/top/W")
    np.testing.assert_array_equal(w.as_array(), W.as_array())
    with pytest.raises(KeyError):
        q.load_param(path, "/W")


def test_load_param_and_lookup_param(tmp_path):
    pc, W, E, a, b, c = _enc_dec()
    path = str(tmp_path / "m.npz")
    pc.save(path)
    q = dy.ParameterCollection()
    w = q.load_param(path, "/W")
    assert w.name() == "/W" and w.shape() == (2, 3)
    np.testing.assert_array_equal(w.as_array(), W.as_array())
    v = q.load_param(path, "/enc/_1")
    np.testing.assert_array_equal(v.as_array(), b.as_array())
    e = q.load_lookup_param(path, "/_0")
    assert type(e) is dy.LookupParameter
    np.testing.assert_array_equal(e.as_array(), E.as_array())
    with pytest.raises(KeyError, match="no parameter named '/nope'"):
        q.load_param(path, "/nope")
    with pytest.raises(KeyError, match="no parameter named '/_0'"):   # a lookup table, not a parameter
        q.load_param(path, "/_0")


def test_files_without_names_still_populate(tmp_path):
    """Files written before names were stored: whole-collection populate still works."""
    pc, W, E, a, b, c = _enc_dec()
    path = str(tmp_path / "old.npz")
    arrays = {f"p{k}": p.as_array() for k, p in enumerate(pc.parameters_list())}
    arrays["l0"] = E.as_array()
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    q, *_ = _enc_dec()
    _fill(q, 9)
    q.populate(path)
    for x, y in zip(_lists(q), _lists(pc)):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    with pytest.raises(ValueError, match="no parameter names"):
        q.populate(path, "/enc/")
    with pytest.raises(ValueError, match="no parameter names"):
        q.load_param(path, "/W")


# --- files exchanged with real DyNet (run in a subprocess: it parses sys.argv at import) -------
_XS = [[1.0, -0.5], [0.25, 2.0], [-1.0, 0.0]]
# (DyNet cannot save its FastLSTMBuilder nor its softmax builders: they have no spec)
_BUILDERS = ("VanillaLSTMBuilder", "GRUBuilder", "SimpleRNNBuilder", "CompactVanillaLSTMBuilder", "CoupledLSTMBuilder",
             "BiRNNBuilder")
# the same builders and outputs on either side: `dy` is DyNet in the subprocess, autobatch here
_HELPERS = f"""
XS, BUILDERS = {_XS!r}, {_BUILDERS!r}

def make(m):
    return [dy.BiRNNBuilder(1, 2, 4, m, dy.VanillaLSTMBuilder) if n == "BiRNNBuilder" else getattr(dy, n)(1, 2, 3, m)
            for n in BUILDERS]

def outputs(b):
    dy.renew_cg()
    xs = [dy.inputVector(x) for x in XS]
    seq = b.transduce(xs) if type(b).__name__ == "BiRNNBuilder" else b.initial_state().transduce(xs)
    return np.stack([o.npvalue() for o in seq])
"""
_here: dict = {"dy": dy, "np": np}
exec(_HELPERS, _here)
_make, _outputs = _here["make"], _here["outputs"]


def _dynet(tmp_path, body):
    return run_dynet_files(tmp_path, "import numpy as np\nimport dynet as dy\n" + _HELPERS + textwrap.dedent(body))


@needs_dynet
def test_dynet_saves_autobatch_loads(tmp_path):
    want = _dynet(tmp_path, """
        m = dy.ParameterCollection()
        W = m.add_parameters((2, 3)); E = m.add_lookup_parameters((4, 2))
        bs = make(m)
        dy.save("dy", [W, E] + bs)
        m.save("dy.txt")
        np.savez("out.npz", W=W.as_array(), E=E.as_array(), **{f"o{k}": outputs(b) for k, b in enumerate(bs)})
    """)
    pc = dy.ParameterCollection()
    pc.add_parameters(7)                    # a model that already holds something
    W, E, *bs = load(str(tmp_path / "dy"), pc)
    np.testing.assert_allclose(W.as_array(), want["W"])
    np.testing.assert_allclose(E.as_array(), want["E"])
    for k, (b, name) in enumerate(zip(bs, _BUILDERS)):
        assert type(b) is getattr(dy, name)
        np.testing.assert_allclose(_outputs(b), want[f"o{k}"], rtol=1e-5, atol=1e-6)
    # the whole collection in DyNet's text file, into a model built the same way
    m2 = dy.ParameterCollection()
    m2.add_parameters((2, 3))
    m2.add_lookup_parameters((4, 2))
    bs2 = _make(m2)
    m2.populate(str(tmp_path / "dy.txt"))
    for k, b in enumerate(bs2):
        np.testing.assert_allclose(_outputs(b), want[f"o{k}"], rtol=1e-5, atol=1e-6)


def test_files_hold_an_lstm_bias_as_dynet_does(tmp_path):
    """b holds what DyNet's b holds (the step adds the forget bias), so files hold b as it is
    and loading restores it exactly."""
    pc = dy.ParameterCollection()
    lstm = dy.VanillaLSTMBuilder(1, 2, 3, pc, forget_bias=0.75)
    b = lstm.get_parameters()[0][2]
    b.set_value(np.linspace(-1, 1, 12))
    pc.save(str(tmp_path / "m.txt"))
    text = (tmp_path / "m.txt").read_text().split("\n")
    row = [float(v) for v in text[text.index(next(t for t in text if "/_2 " in t)) + 1].split()]
    np.testing.assert_allclose(row, np.linspace(-1, 1, 12), atol=1e-7)
    pc2 = dy.ParameterCollection()
    lstm2 = dy.VanillaLSTMBuilder(1, 2, 3, pc2, forget_bias=0.75)
    pc2.populate(str(tmp_path / "m.txt"))
    np.testing.assert_array_equal(lstm2.get_parameters()[0][2].as_array(), b.as_array())
    save(str(tmp_path / "d"), [lstm])
    (lstm3,) = load(str(tmp_path / "d"), dy.ParameterCollection())
    assert lstm3.forget_bias == 0.75
    np.testing.assert_array_equal(lstm3.get_parameters()[0][2].as_array(), b.as_array())


@needs_dynet
def test_autobatch_saves_dynet_loads(tmp_path):
    pc = dy.ParameterCollection()
    W, E = pc.add_parameters((2, 3)), pc.add_lookup_parameters((4, 2))
    bs = _make(pc)
    _fill(pc, 5)
    save(str(tmp_path / "ab"), [W, E] + bs)
    got = _dynet(tmp_path, f"""
        m = dy.ParameterCollection()
        W, E, *bs = dy.load("ab", m)
        assert [type(b).__name__ for b in bs] == {list(_BUILDERS)!r}, bs
        np.savez("out.npz", W=W.as_array(), E=E.as_array(), **{{f"o{{k}}": outputs(b) for k, b in enumerate(bs)}})
    """)
    np.testing.assert_allclose(got["W"], W.as_array())
    np.testing.assert_allclose(got["E"], E.as_array())
    for k, b in enumerate(bs):
        np.testing.assert_allclose(got[f"o{k}"], _outputs(b), rtol=1e-5, atol=1e-6)
