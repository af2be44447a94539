"""Parameter files in DyNet's text format: ParameterCollection.save / populate /
write_to_textfile / populate_from_textfile / load_param and Parameter.save / populate.
DYNET_TEXT below was written by real DyNet 2.1; the tests at the end run real DyNet in a
subprocess (skipped where it is not installed) to exchange files both ways."""
import re
import textwrap

import numpy as np
import pytest

import autobatch as dy
from check_kit import needs_dynet, run_dynet_files
from conftest import to_np

# DyNet 2.1: W (2,3) "W", E lookup (4,2) "E", sub-collection "enc" with a (2,2,2) and a (2,)
# parameter, after backward of sum(W * [1,2,3]) + sum(E[2]) (see _model)
DYNET_TEXT = """\
#Parameter# /W {2,3} 194 FULL_GRAD
+5.00000000e-01 +1.00000005e-03 -3.33333343e-01 +2.50000000e+02 +2.00000000e+00 -7.25000000e+00 
+1.00000000e+00 +1.00000000e+00 +2.00000000e+00 +2.00000000e+00 +3.00000000e+00 +3.00000000e+00 
#Parameter# /enc/_0 {2,2,2} 129 ZERO_GRAD
+0.00000000e+00 +1.00000000e+00 +5.00000000e-01 +1.50000000e+00 +2.50000000e-01 +1.25000000e+00 +7.50000000e-01 +1.75000000e+00 
#Parameter# /enc/_1 {2} 33 ZERO_GRAD
+1.50000000e+00 -2.00000000e+00 
#LookupParameter# /E {2,4} 258 FULL_GRAD
-3.50000000e+00 -2.50000000e+00 -1.50000000e+00 -5.00000000e-01 +5.00000000e-01 +1.50000000e+00 +2.50000000e+00 +3.50000000e+00 
+0.00000000e+00 +0.00000000e+00 +0.00000000e+00 +0.00000000e+00 +1.00000000e+00 +1.00000000e+00 +0.00000000e+00 +0.00000000e+00 
"""

W_VAL = np.array([[0.5, -1 / 3, 2.0], [1e-3, 250.0, -7.25]])
E_VAL = np.arange(8.0).reshape(4, 2) - 3.5
A_VAL = np.arange(8.0).reshape(2, 2, 2) / 4
B_VAL = np.array([1.5, -2.0])


def _model(values=True):
    m = dy.ParameterCollection()
    init = (lambda v: v) if values else (lambda v: 0.0)
    W = m.add_parameters((2, 3), init=init(W_VAL), name="W")
    E = m.add_lookup_parameters((4, 2), init=init(E_VAL), name="E")
    enc = m.add_subcollection("enc")
    a = enc.add_parameters((2, 2, 2), init=init(A_VAL))
    b = enc.add_parameters(2, init=init(B_VAL))
    return m, W, E, enc, a, b


def _backward(W, E):
    dy.renew_cg()
    (dy.sum_elems(W * dy.inputVector([1, 2, 3])) + dy.sum_elems(E[2])).backward()


W_GRAD = np.array([[1.0, 2, 3], [1, 2, 3]])
E_GRAD = np.array([[0.0, 0], [0, 0], [1, 1], [0, 0]])
f32 = lambda a: np.asarray(a, dtype=np.float32)    # noqa: E731


def _check_byte_counts(text):
    """Each header's count is the byte length of the lines up to the next header."""
    blocks = re.split(r"^(#\w+# \S+ \{[\d,]+\} \d+ \w+)\n", text, flags=re.M)
    assert blocks[0] == ""
    for head, body in zip(blocks[1::2], blocks[2::2]):
        assert int(head.split()[3]) == len(body.encode()), head


def test_save_writes_dynet_text_byte_for_byte(tmp_path):
    m, W, E, *_ = _model()
    _backward(W, E)
    path = tmp_path / "m.txt"
    m.save(str(path))
    assert path.read_text() == DYNET_TEXT
    m.write_to_textfile(str(tmp_path / "w.txt"))
    assert (tmp_path / "w.txt").read_text() == DYNET_TEXT
    _check_byte_counts(DYNET_TEXT)


def test_populate_reads_dynet_text(tmp_path, backend):
    path = tmp_path / "dy.txt"
    path.write_text(DYNET_TEXT)
    m, W, E, enc, a, b = _model(values=False)
    m.populate(str(path))
    for p, v in ((W, W_VAL), (E, E_VAL), (a, A_VAL), (b, B_VAL)):
        np.testing.assert_array_equal(p.as_array(), f32(v))
    # the gradients come back too (DyNet's populate restores them), sparse rows for E
    np.testing.assert_array_equal(W.grad_as_array(), W_GRAD)
    np.testing.assert_array_equal(E.grad_as_array(), E_GRAD)
    assert W.touched and E.touched and not E.all_updated
    np.testing.assert_array_equal(to_np(E.used_rows()), [2])
    assert not a.grad_as_array().any() and not a.touched
    # a ZERO_GRAD entry clears a gradient that was there
    _backward(W, E)
    m2 = dy.ParameterCollection()
    W2 = m2.add_parameters((2, 3))
    _backward(W2, dy.ParameterCollection().add_lookup_parameters((4, 2)))
    assert W2.grad_as_array().any()
    W2.save(str(tmp_path / "z.txt"), "/Z")
    W2.zero_grad()
    W2.set_value(np.ones((2, 3)))
    W2.save(str(tmp_path / "z.txt"), "/Z0", append=True)
    _backward(W2, dy.ParameterCollection().add_lookup_parameters((4, 2)))
    W2.populate(str(tmp_path / "z.txt"), "/Z0")
    assert not W2.grad_as_array().any() and not W2.touched
    np.testing.assert_array_equal(W2.as_array(), np.ones((2, 3)))


def test_populate_from_textfile_and_key(tmp_path):
    path = str(tmp_path / "dy.txt")
    (tmp_path / "dy.txt").write_text(DYNET_TEXT)
    q = dy.ParameterCollection()
    other = q.add_subcollection("other")         # positions count, not names, as DyNet
    x, y = other.add_parameters((2, 2, 2)), other.add_parameters(2)
    q.populate_from_textfile(path, "/enc")
    np.testing.assert_array_equal(x.as_array(), A_VAL)
    np.testing.assert_array_equal(y.as_array(), B_VAL)
    with pytest.raises(ValueError, match="holds 0 parameters under key '/en'"):
        q.populate(path, "/en")


def test_load_param_and_parameter_populate(tmp_path):
    path = str(tmp_path / "dy.txt")
    (tmp_path / "dy.txt").write_text(DYNET_TEXT)
    q = dy.ParameterCollection()
    b = q.load_param(path, "/enc/_1")
    np.testing.assert_array_equal(b.as_array(), B_VAL)
    E = q.load_lookup_param(path, "/E")
    assert type(E) is dy.LookupParameter
    np.testing.assert_array_equal(E.as_array(), E_VAL)
    np.testing.assert_array_equal(E.grad_as_array(), E_GRAD)
    W = q.add_parameters((2, 3))
    W.populate(path, "/W")
    np.testing.assert_array_equal(W.as_array(), f32(W_VAL))
    W.populate_from_textfile(path, "/W")
    for bad, err, msg in [("", ValueError, "full name"), ("W", KeyError, "no parameter named 'W'"),
                          ("/E", KeyError, "no parameter named '/E'")]:   # /E is a lookup table
        with pytest.raises(err, match=msg):
            W.populate(path, bad)
    with pytest.raises(KeyError, match="no lookup parameter named '/W'"):
        E.populate(path, "/W")
    before = b.as_array()
    with pytest.raises(ValueError, match=r"/W has shape \(2, 3\).*is \(2,\)"):
        b.populate(path, "/W")
    np.testing.assert_array_equal(b.as_array(), before)


def test_lookup_rows_of_several_dimensions(tmp_path):
    """DyNet holds a table (n, *row) as dims {*row, n}: row after row, each column-major."""
    vals = np.arange(12.0)
    text = "#LookupParameter# /T {2,2,3} 0 ZERO_GRAD\n" + " ".join(map(str, vals)) + "\n"
    (tmp_path / "t.txt").write_text(text)
    T = dy.ParameterCollection().add_lookup_parameters((3, 2, 2))
    T.populate(str(tmp_path / "t.txt"), "/T")
    for i in range(3):
        np.testing.assert_array_equal(T.as_array()[i], vals[4 * i:4 * i + 4].reshape(2, 2, order="F"))
    T.save(str(tmp_path / "t2.txt"))
    head, values = (tmp_path / "t2.txt").read_text().splitlines()
    assert head.split()[2] == "{2,2,3}"
    np.testing.assert_array_equal(np.array(values.split(), dtype=float), vals)


def test_hand_written_file_and_lenient_reading(tmp_path):
    """Short numbers, wrong byte counts (DyNet only needs them to seek), values over lines."""
    (tmp_path / "h.txt").write_text("#Parameter# /W {2,3} 5 ZERO_GRAD\n1 2 3\n4 5 6\n\n"
                                    "#LookupParameter# /E {2,4} 7 ZERO_GRAD\n0 1 2 3 4 5 6 7\n")
    m = dy.ParameterCollection()
    W, E = m.add_parameters((2, 3)), m.add_lookup_parameters((4, 2))
    m.populate(str(tmp_path / "h.txt"))
    np.testing.assert_array_equal(W.as_array(), [[1, 3, 5], [2, 4, 6]])
    np.testing.assert_array_equal(E.as_array(), np.arange(8.0).reshape(4, 2))


@pytest.mark.parametrize("text, msg", [
    ("#Parameter# /W {2,3} 97\n1 2 3 4 5 6\n", "expected a header"),
    ("W {2,3} 97 ZERO_GRAD\n1 2 3 4 5 6\n", "expected a header"),
    ("#Parameter# /W {2,x} 97 ZERO_GRAD\n1 2 3 4 5 6\n", "bad dimensions"),
    ("#Parameter# /W {2,3} 97 ZERO_GRAD\n1 2 3 4 5\n", "needs 6 numbers"),
    ("#Parameter# /W {2,3} 97 FULL_GRAD\n1 2 3 4 5 6\n", r"needs 12 numbers \(FULL_GRAD\)"),
    ("#Parameter# /W {2,3} 97 ZERO_GRAD\n1 2 3 4 5 oops\n", "not a number"),
])
def test_bad_files_change_nothing(tmp_path, text, msg):
    m = dy.ParameterCollection()
    W, u = m.add_parameters((2, 3), init=1.0), m.add_parameters(2, init=7.0)
    path = tmp_path / "bad.txt"
    path.write_text(text + "#Parameter# /u {2} 0 ZERO_GRAD\n0 0\n")
    with pytest.raises(ValueError, match=msg):
        m.populate(str(path))
    np.testing.assert_array_equal(u.as_array(), [7, 7])
    np.testing.assert_array_equal(W.as_array(), np.ones((2, 3)))


def test_binary_garbage_is_refused(tmp_path):
    (tmp_path / "g.bin").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="not a parameter file"):
        dy.ParameterCollection().populate(str(tmp_path / "g.bin"))


def test_save_names_keys_and_append(tmp_path):
    m, W, E, enc, a, b = _model()
    path = str(tmp_path / "k.txt")
    heads = lambda: [ln.split()[1] for ln in open(path) if ln.startswith("#")]   # noqa: E731
    for key in ("/top", "/top/"):                  # DyNet adds the missing '/'
        m.save(path, key)
        assert heads() == ["/top/W", "/top/enc/_0", "/top/enc/_1", "/top/E"]
    enc.save(path, "/dec/", append=True)
    assert heads()[4:] == ["/dec/_0", "/dec/_1"]
    for bad in ("top", "/a b", "/a#b"):
        with pytest.raises(ValueError, match="start with '/'"):
            m.save(path, bad)
    W.save(path)
    assert heads() == ["/W"]
    W.write_to_textfile(path, "/V", append=True)
    assert heads() == ["/W", "/V"]
    with pytest.raises(ValueError, match="cannot be written"):
        W.save(path, "/a b")
    q = dy.ParameterCollection()
    q.add_parameters(3, name="x y")                # a name no header can hold: nothing is written
    (tmp_path / "keep.txt").write_text("keep")
    with pytest.raises(ValueError, match="'/x y' cannot be written"):
        q.save(str(tmp_path / "keep.txt"))
    assert (tmp_path / "keep.txt").read_text() == "keep"


def test_float64_round_trip_is_exact(tmp_path, f64):
    rng = np.random.default_rng(3)
    m = dy.ParameterCollection()
    ps = [m.add_parameters((3, 4), init=rng.normal(size=(3, 4))),
          m.add_lookup_parameters((5, 2), init=rng.normal(size=(5, 2)))]
    path = tmp_path / "f.txt"
    m.save(str(path))
    _check_byte_counts(path.read_text())
    q = dy.ParameterCollection()
    qs = [q.add_parameters((3, 4)), q.add_lookup_parameters((5, 2))]
    q.populate(str(path))
    for p, r in zip(ps, qs):
        np.testing.assert_array_equal(r.as_array(), p.as_array())


# --- exchanging files with real DyNet (run in a subprocess: it parses sys.argv at import) --
def _run_dynet(tmp_path, body):
    return run_dynet_files(tmp_path, "import numpy as np\nimport dynet as dy\n" + textwrap.dedent(body))


@needs_dynet
def test_dynet_writes_autobatch_reads(tmp_path):
    out = _run_dynet(tmp_path, """
        m = dy.ParameterCollection()
        m.add_parameters((3, 4), name="W")
        m.add_lookup_parameters((6, 3), name="E")
        enc = m.add_subcollection("enc")
        enc.add_parameters((2, 3, 2))
        enc.add_parameters(5)
        m.add_parameters((4,))
        W, V = m.parameters_list()[0], m.parameters_list()[2]
        E = m.lookup_parameters_list()[0]
        dy.renew_cg()
        x = dy.inputVector([1.0, -2.0, 0.5, 3.0])
        (dy.sum_elems(dy.tanh(W * x)) + dy.dot_product(E[4], E[1])).backward()
        m.save("dy.txt")
        ps = m.parameters_list() + m.lookup_parameters_list()
        np.savez("out.npz", **{f"v{i}": p.as_array() for i, p in enumerate(ps)},
                 **{f"g{i}": p.grad_as_array() for i, p in enumerate(ps)},
                 names=np.array([p.name() for p in ps]))
    """)
    m = dy.ParameterCollection()
    m.add_parameters((3, 4), init=0.0)
    m.add_lookup_parameters((6, 3), init=0.0)
    enc = m.add_subcollection("x")
    enc.add_parameters((2, 3, 2), init=0.0)
    enc.add_parameters(5, init=0.0)
    m.add_parameters((4,), init=0.0)
    path = str(tmp_path / "dy.txt")
    m.populate(path)
    ps = m.parameters_list() + m.lookup_parameters_list()
    assert ps[1].is_lookup is False and ps[-1].is_lookup        # the order DyNet lists them in
    for i, p in enumerate(ps):
        np.testing.assert_array_equal(p.as_array(), out[f"v{i}"])
        np.testing.assert_array_equal(p.grad_as_array(), out[f"g{i}"])
    assert out["g0"].any() and out["g4"].any() and not out["g1"].any()
    q = dy.ParameterCollection()
    for i, name in enumerate(out["names"]):
        load = q.load_lookup_param if i == len(ps) - 1 else q.load_param
        np.testing.assert_array_equal(load(path, str(name)).as_array(), out[f"v{i}"])


@needs_dynet
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_autobatch_writes_dynet_reads(tmp_path, dtype):
    dy.set_dtype(dtype)
    rng = np.random.default_rng(5)
    m = dy.ParameterCollection()
    W = m.add_parameters((3, 4), init=rng.normal(size=(3, 4)))
    E = m.add_lookup_parameters((6, 3), init=rng.normal(size=(6, 3)))
    sub = m.add_subcollection("enc")
    A = sub.add_parameters((2, 3, 2), init=rng.normal(size=(2, 3, 2)))
    b = sub.add_parameters(5, init=rng.normal(size=5) * 1e-30)
    dy.renew_cg()
    (dy.sum_elems(dy.tanh(W * dy.inputVector([1.0, -2.0, 0.5, 3.0]))) + dy.dot_product(E[4], E[1])).backward()
    m.save(str(tmp_path / "ab.txt"), "/top")
    b.save(str(tmp_path / "ab.txt"), "/extra", append=True)
    out = _run_dynet(tmp_path, """
        m = dy.ParameterCollection()
        W = m.add_parameters((3, 4))
        E = m.add_lookup_parameters((6, 3))
        sub = m.add_subcollection("s")
        A = sub.add_parameters((2, 3, 2))
        b = sub.add_parameters(5)
        sub.populate("ab.txt", "/top/enc/")
        W.populate("ab.txt", "/top/_0")          # DyNet seeks past entries with the byte counts
        E.populate("ab.txt", "/top/_1")
        q = dy.ParameterCollection()
        x = q.load_param("ab.txt", "/extra")
        e2 = q.load_lookup_param("ab.txt", "/top/_1")
        np.savez("out.npz", W=W.as_array(), Wg=W.grad_as_array(), E=E.as_array(), Eg=E.grad_as_array(),
                 A=A.as_array(), b=b.as_array(), x=x.as_array(), e2=e2.as_array())
    """)
    for k, p in (("W", W), ("E", E), ("A", A), ("b", b), ("x", b), ("e2", E)):
        np.testing.assert_array_equal(out[k], f32(p.as_array()))
    np.testing.assert_array_equal(out["Wg"], f32(W.grad_as_array()))
    np.testing.assert_array_equal(out["Eg"], f32(E.grad_as_array()))
    assert out["Wg"].any() and out["Eg"][[1, 4]].all() and not out["Eg"][0].any()
