"""IdentityInitializer, SaxeInitializer, FromFileInitializer and the PyInitializer base:
values, distributions and errors. Expected file orders are those real DyNet 2.1 produced
for the same files (column-major for parameters, row after row for lookup tables)."""
import math
import re

import numpy as np
import pytest

import autobatch as dy
from autobatch.params import (FromFileInitializer, IdentityInitializer, PyInitializer,
                              SaxeInitializer)
from conftest import to_np


# --- IdentityInitializer -----------------------------------------------------------------
def test_identity_dense_and_lookup(backend):
    m = dy.ParameterCollection()
    p = m.add_parameters((4, 4), init=IdentityInitializer())
    assert p.data.dtype == np.float32
    np.testing.assert_array_equal(to_np(p.data), np.eye(4))
    # DyNet sees the table (n, n) as one square matrix: identity too
    e = m.add_lookup_parameters((3, 3), init=IdentityInitializer())
    np.testing.assert_array_equal(e.as_array(), np.eye(3))
    np.testing.assert_array_equal(e.row_as_array(1), [0, 1, 0])


@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (3,), (2, 2, 2)])
def test_identity_needs_a_square_matrix(shape):
    m = dy.ParameterCollection()
    with pytest.raises(ValueError, match=r"IdentityInitializer.*square.*" + re.escape(str(shape))):
        m.add_parameters(shape, init=IdentityInitializer())
    assert m.parameters_list() == []          # nothing half-added


def test_identity_lookup_non_square_rejected():
    with pytest.raises(ValueError, match="square"):
        dy.ParameterCollection().add_lookup_parameters((3, 5), init=IdentityInitializer())


# --- SaxeInitializer -----------------------------------------------------------------------
@pytest.mark.parametrize("n,scale", [(1, 1.0), (4, 1.0), (6, 2.5), (5, -0.5)])
def test_saxe_is_scaled_orthogonal(n, scale):
    q = dy.ParameterCollection().add_parameters((n, n), init=SaxeInitializer(scale=scale)).as_array()
    q = q.astype(np.float64)
    np.testing.assert_allclose(q @ q.T, scale ** 2 * np.eye(n), atol=1e-5)
    np.testing.assert_allclose(q.T @ q, scale ** 2 * np.eye(n), atol=1e-5)


def test_saxe_lookup_square_table_is_orthogonal():
    q = dy.ParameterCollection().add_lookup_parameters((4, 4), init=SaxeInitializer()).as_array()
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-5)


def test_saxe_follows_the_seed():
    def draw():
        return dy.ParameterCollection().add_parameters((3, 3), init=SaxeInitializer()).as_array()
    dy.reset_random_seed(11)
    a, b = draw(), draw()
    dy.reset_random_seed(11)
    np.testing.assert_array_equal(draw(), a)
    assert not np.allclose(a, b)


def test_saxe_is_uniform_over_orthogonal_matrices():
    """Haar measure: each entry has mean 0 and variance 1/n, and det = +1 or -1 equally
    often. QR of a Gaussian matrix without fixing R's signs fails the first check."""
    dy.reset_random_seed(3)
    init, n, k = SaxeInitializer(), 3, 4000
    qs = np.stack([init.init((n, n)) for _ in range(k)])
    se_mean = math.sqrt(1 / n / k)
    assert np.all(np.abs(qs.mean(axis=0)) < 5 * se_mean)
    np.testing.assert_allclose((qs ** 2).mean(axis=0), 1 / n, atol=0.03)
    pos = np.mean(np.linalg.det(qs) > 0)
    assert abs(pos - 0.5) < 5 * math.sqrt(0.25 / k)


@pytest.mark.parametrize("shape", [(3, 5), (5,), (2, 2, 2)])
def test_saxe_needs_a_square_matrix(shape):
    with pytest.raises(ValueError, match=r"SaxeInitializer.*square"):
        dy.ParameterCollection().add_parameters(shape, init=SaxeInitializer())


# --- FromFileInitializer ---------------------------------------------------------------------
@pytest.fixture
def numfile(tmp_path):
    def make(text, name="p.txt"):
        f = tmp_path / name
        f.write_text(text)
        return str(f)
    return make


@pytest.mark.parametrize("shape,expected", [
    ((2, 3), [[1, 3, 5], [2, 4, 6]]),           # column-major, as DyNet
    ((3, 2), [[1, 4], [2, 5], [3, 6]]),
    ((6,), [1, 2, 3, 4, 5, 6]),
    ((1, 2, 3), [[[1, 3, 5], [2, 4, 6]]]),
])
def test_from_file_dense_order(numfile, shape, expected, backend):
    f = numfile("1 2 3\n4 5 6\n")
    p = dy.ParameterCollection().add_parameters(shape, init=FromFileInitializer(f))
    np.testing.assert_array_equal(to_np(p.data), expected)


def test_from_file_lookup_order(numfile):
    m = dy.ParameterCollection()
    f6 = numfile("1 2 3 4 5 6")
    np.testing.assert_array_equal(m.add_lookup_parameters((2, 3), init=FromFileInitializer(f6)).as_array(),
                                  [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(m.add_lookup_parameters((3, 2), init=FromFileInitializer(f6)).as_array(),
                                  [[1, 2], [3, 4], [5, 6]])
    # rows of shape (2, 3): row after row, each column-major
    f12 = numfile(" ".join(str(i) for i in range(1, 13)), "t.txt")
    e = m.add_lookup_parameters((2, 2, 3), init=FromFileInitializer(f12))
    np.testing.assert_array_equal(e.as_array(), [[[1, 3, 5], [2, 4, 6]], [[7, 9, 11], [8, 10, 12]]])


def test_from_file_number_formats_and_names(numfile, tmp_path):
    f = numfile("1e-1\t-2.5 +3\n\n  4. .5 -6e+0 ")
    want = np.array([0.1, -2.5, 3, 4, 0.5, -6]).reshape((2, 3), order="F")
    for name in (f, f.encode(), tmp_path / "p.txt"):      # DyNet 2.1 wants bytes under Python 3
        p = dy.ParameterCollection().add_parameters((2, 3), init=FromFileInitializer(name))
        np.testing.assert_allclose(p.as_array(), want, rtol=1e-6)


def test_from_file_reads_when_the_parameter_is_created(numfile):
    f = numfile("1 2")
    init = FromFileInitializer(f)
    numfile("7 8")
    np.testing.assert_array_equal(dy.ParameterCollection().add_parameters(2, init=init).as_array(), [7, 8])


@pytest.mark.parametrize("text,match", [
    ("1 2 3 4 5", r"holds 5 numbers.*\(2, 3\) needs 6"),
    ("1 2 3 4 5 6 7", r"holds 7 numbers"),
    ("", r"holds 0 numbers"),
    ("1 2 x 4 5 6", r"not a number"),
    ("1,2,3,4,5,6", r"not a number"),
])
def test_from_file_bad_contents(numfile, text, match):
    m = dy.ParameterCollection()
    with pytest.raises(ValueError, match=r"FromFileInitializer.*" + match):
        m.add_parameters((2, 3), init=FromFileInitializer(numfile(text)))
    assert m.parameters_list() == []


def test_from_file_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        dy.ParameterCollection().add_parameters(3, init=FromFileInitializer(str(tmp_path / "nope.txt")))


# --- PyInitializer base ------------------------------------------------------------------------
def test_pyinitializer_is_the_base_of_all():
    for init in (dy.GlorotInitializer(), dy.NormalInitializer(), dy.UniformInitializer(1.0),
                 dy.ConstInitializer(2.0), dy.NumpyInitializer(np.zeros(2)), IdentityInitializer(),
                 SaxeInitializer(), FromFileInitializer("x")):
        assert isinstance(init, PyInitializer)


def test_pyinitializer_cannot_be_created_directly():
    with pytest.raises(TypeError, match="Do not create PyInitializer directly"):
        PyInitializer()

    class Nothing(PyInitializer):      # overrides nothing: as useless as PyInitializer itself
        pass
    with pytest.raises(TypeError, match="Do not create PyInitializer directly"):
        Nothing()


def test_subclass_of_a_builtin_initializer_as_in_dynet():
    class Small(dy.NormalInitializer):          # the pattern that works in DyNet
        def __init__(self):
            super().__init__(mean=1.0, var=0.01)
    dy.reset_random_seed(5)
    v = dy.ParameterCollection().add_parameters((200, 50), init=Small()).as_array()
    assert abs(v.mean() - 1.0) < 0.01 and abs(v.std() - 0.1) < 0.005


def test_user_subclass_overriding_init():
    class Arange(PyInitializer):
        def init(self, shape, is_lookup=False):
            return np.arange(math.prod(shape), dtype=np.float64).reshape(shape) + (100 if is_lookup else 0)

    class WithArgs(PyInitializer):
        def __init__(self, c):
            self.c = c

        def init(self, shape, is_lookup=False):
            return np.full(shape, self.c)
    m = dy.ParameterCollection()
    np.testing.assert_array_equal(m.add_parameters((2, 2), init=Arange()).as_array(), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(m.add_lookup_parameters((2, 1), init=Arange()).as_array(), [[100], [101]])
    # scale serves init='uniform' only, as in DyNet 2.1 (which ignores it silently; we warn)
    with pytest.warns(UserWarning, match="scale=2 is used with init='uniform' only"):
        np.testing.assert_array_equal(m.add_parameters(3, init=WithArgs(4.5), scale=2).as_array(), [4.5] * 3)


def test_exported_as_in_dynet():
    from autobatch import params
    for name in ("PyInitializer", "IdentityInitializer", "SaxeInitializer", "FromFileInitializer"):
        assert getattr(dy, name) is getattr(params, name)


def test_glorot_bounds_of_lookup_tables_as_dynet(f64):
    """DyNet 2.1: a table without an initializer, or with GlorotInitializer(), draws within
    sqrt(6 / (V + d)); GlorotInitializer(is_lookup=True) leaves V out: sqrt(3 / d)."""
    m = dy.ParameterCollection()
    wide, rows = np.sqrt(6 / 10050), np.sqrt(3 / 50)
    for init, bound in ((None, wide), (dy.GlorotInitializer(), wide), (dy.GlorotInitializer(True), rows)):
        a = m.add_lookup_parameters((10000, 50), init=init).as_array()
        assert 0.99 * bound < np.abs(a).max() <= bound
