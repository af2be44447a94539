"""Model saving: dy.save / dy.load of parameters, lookup parameters, builders and user
objects (params.save / params.load), and ParameterCollection.save / populate(key) /
load_param / load_lookup_param with DyNet's key semantics."""
import json

import numpy as np
import pytest

import autobatch as dy
from autobatch.builders_more import BiRNNBuilder, CoupledLSTMBuilder, StandardSoftmaxBuilder
from autobatch.params import load, save


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
        assert extra == {"note": "x", "shape": [n, d]}
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


def test_save_errors(tmp_path):
    pc = dy.ParameterCollection()
    with pytest.raises(TypeError, match="not a Parameter"):
        save(str(tmp_path / "x"), [object()])
    bi = BiRNNBuilder(1, 2, 4, pc, dy.LSTMBuilder)
    own = BiRNNBuilder(None, None, None, None, None, builder_layers=bi.builder_layers)
    with pytest.raises(TypeError, match="no spec"):
        save(str(tmp_path / "x"), [own])
    t = Tagger(pc, 2, 2)
    t.spec = (2, 2, object())
    with pytest.raises(TypeError, match="spec holds a object"):
        save(str(tmp_path / "x"), [t])


def test_load_errors_leave_the_model_unchanged(tmp_path):
    pc = dy.ParameterCollection()
    W = pc.add_parameters((2, 3))
    lstm = dy.VanillaLSTMBuilder(1, 2, 3, pc)
    base = str(tmp_path / "m")
    save(base, [W, lstm])
    meta = json.loads((tmp_path / "m.meta").read_text())
    meta["objects"][1]["spec"][2] = 4                  # hidden size no longer matches the arrays
    (tmp_path / "bad.meta").write_text(json.dumps(meta))
    (tmp_path / "bad.data").write_bytes((tmp_path / "m.data").read_bytes())
    pc2 = dy.ParameterCollection()
    keep = pc2.add_parameters(3)
    with pytest.raises(ValueError, match=r"object 1 \(VanillaLSTMBuilder\).*shape"):
        load(str(tmp_path / "bad"), pc2)
    assert pc2.parameters_list() == [keep] and pc2.subcollections() == []
    (W2, _) = load(base, pc2)                         # and the model still works for a good load
    assert W2.name() == "/_1"

    with pytest.raises(FileNotFoundError):
        load(str(tmp_path / "nope"), pc2)
    (tmp_path / "dynet.meta").write_bytes(b"\x80\x04\x95 pickled by DyNet")
    (tmp_path / "dynet.data").write_text("#Parameter# /W {2,3} 97 ZERO_GRAD\n")
    with pytest.raises(ValueError, match="not written by autobatch"):
        load(str(tmp_path / "dynet"), pc2)
    meta = json.loads((tmp_path / "m.meta").read_text())
    meta["objects"][0]["array"] = "a99"
    (tmp_path / "gap.meta").write_text(json.dumps(meta))
    (tmp_path / "gap.data").write_bytes((tmp_path / "m.data").read_bytes())
    with pytest.raises(ValueError, match="lacks array a99"):
        load(str(tmp_path / "gap"), pc2)
    meta["objects"] = [{"kind": "object", "class": "autobatch.nowhere:Thing", "spec": [], "params": [], "lookups": []}]
    (tmp_path / "cls.meta").write_text(json.dumps(meta))
    (tmp_path / "cls.data").write_bytes((tmp_path / "m.data").read_bytes())
    with pytest.raises(ValueError, match="cannot be found"):
        load(str(tmp_path / "cls"), pc2)
    with pytest.raises(TypeError, match="ParameterCollection"):
        load(base, [])


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
