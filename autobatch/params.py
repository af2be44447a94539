"""Parameters and their collection (DyNet's ParameterCollection / Model).

A parameter owns its value and an accumulated gradient, both arrays of the active
backend; graphs read the value and add into the gradient, trainers apply it."""
from __future__ import annotations

import math
import numbers
import os

import numpy as np

from . import runtime
from .conversions import number, whole
from .errors import user_line, warn_user
from .textfile import check_name, file_order, read_saved, restore, write_text


def _rng():
    return runtime.state().rng


class PyInitializer:
    """Base class of all initializers (DyNet's name for it; ``Initializer`` is an alias).

    An initializer's ``init(shape, is_lookup) -> np.ndarray`` returns the initial value
    (a float64 host array of exactly ``shape``; it is cast and placed on the backend by the
    parameter). Subclasses of the built-in initializers that call ``super().__init__(...)``
    work as in DyNet. DyNet runs no Python code of a direct subclass of PyInitializer (it
    refuses to create one); here such a subclass may override ``init`` to write its own."""

    def __init__(self):
        if type(self).init is PyInitializer.init:
            raise TypeError("Do not create PyInitializer directly: use a built-in initializer, "
                            f"or subclass PyInitializer and override init(shape, is_lookup) [at {user_line()}]")

    def init(self, shape, is_lookup=False):
        raise NotImplementedError(f"{type(self).__name__} does not override init(shape, is_lookup)")


Initializer = PyInitializer


class GlorotInitializer(PyInitializer):
    """Uniform in ±gain·sqrt(3·k / Σ dims) over the k dims; is_lookup=True leaves a lookup
    table's row count out. As in DyNet 2.1, a table made without an initializer gets the plain
    GlorotInitializer(): sqrt(6 / (V + d)) for V rows of d."""

    def __init__(self, is_lookup=False, gain=1.0):
        self.is_lookup, self.gain = is_lookup, gain

    def init(self, shape, is_lookup=False):
        dims = shape[1:] if self.is_lookup else shape
        s = self.gain * math.sqrt(3 * len(dims)) / math.sqrt(sum(dims))
        return _rng().uniform(-s, s, shape)


class NormalInitializer(PyInitializer):
    def __init__(self, mean=0.0, var=1.0):
        self.mean, self.std = mean, math.sqrt(var)

    def init(self, shape, is_lookup=False):
        return _rng().normal(self.mean, self.std, shape)


class UniformInitializer(PyInitializer):
    def __init__(self, scale):
        self.scale = scale

    def init(self, shape, is_lookup=False):
        return _rng().uniform(-self.scale, self.scale, shape)


class ConstInitializer(PyInitializer):
    def __init__(self, c):
        self.c = c

    def init(self, shape, is_lookup=False):
        return np.full(shape, self.c, dtype=np.float64)


class NumpyInitializer(PyInitializer):
    def __init__(self, array):
        self.array = _host_or_device(array, "NumpyInitializer")

    def init(self, shape, is_lookup=False):
        if self.array.shape != tuple(shape):
            raise ValueError(f"initializer array has shape {self.array.shape}, parameter needs {tuple(shape)} [at "
                             f"{user_line()}]")
        return self.array


def _array_shape(init, shape, what):
    """The shape a parameter takes: an array given as init (not wrapped in an Initializer) sets
    it, as in DyNet, whatever dim says (DyNet's treelstm example asks for len(w2i) rows with a
    GloVe matrix of fewer, w2i holding aliases); a warning names both."""
    if hasattr(init, "shape") and hasattr(init, "dtype"):     # NumPy or CuPy (DyNet refuses lists)
        got = tuple(init.shape)
        if got and got != shape:
            warn_user(f"{what}: the init array has shape {got} where the parameter was asked to have "
                      f"{shape}: the parameter takes the array's shape, as in DyNet")
            return got
    return shape


def _square(shape, what: str) -> int:
    # DyNet sees a lookup table (n, d) as one d x n matrix: it must be square too
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"{what}: needs a square matrix, the parameter has shape {tuple(shape)} [at {user_line()}]")
    return shape[0]


class IdentityInitializer(PyInitializer):
    """The identity matrix. Only for square matrices (a lookup table (n, n) too)."""

    def __init__(self):
        pass

    def init(self, shape, is_lookup=False):
        return np.eye(_square(shape, "IdentityInitializer"))


class SaxeInitializer(PyInitializer):
    """A random orthogonal matrix times scale (Saxe et al., 2014): Q·Qᵀ = scale²·I.
    Only for square matrices (a lookup table (n, n) too), as DyNet. Q is uniform over
    the orthogonal group (QR of a Gaussian matrix, signs fixed by R's diagonal)."""

    def __init__(self, scale: float = 1.0):
        self.scale = float(scale)

    def init(self, shape, is_lookup=False):
        n = _square(shape, "SaxeInitializer")
        q, r = np.linalg.qr(_rng().standard_normal((n, n)))
        # without the sign fix QR's convention would bias the distribution
        return self.scale * (q * np.where(np.diag(r) < 0, -1.0, 1.0))


class FromFileInitializer(PyInitializer):
    """Values read from a text file of whitespace-separated numbers, in DyNet's order:
    column-major (Fortran) for a dense parameter, so a (2, 3) parameter from "1 2 3 4 5 6"
    is [[1, 3, 5], [2, 4, 6]]; for a lookup table row after row, each row column-major.
    The file is read when the parameter is created.

    Unlike DyNet, which silently fills zeros for a missing file, a short file or an
    unreadable number and ignores extra numbers, these raise (FileNotFoundError, ValueError)."""

    def __init__(self, fname):
        if isinstance(fname, bytes):    # DyNet 2.1 under Python 3 wants bytes; accept both
            fname = fname.decode()
        self.fname = os.fspath(fname)

    def init(self, shape, is_lookup=False):
        if not os.path.isfile(self.fname):
            raise FileNotFoundError(f"FromFileInitializer: no file {self.fname!r} [at {user_line()}]")
        with open(self.fname) as f:
            tokens = f.read().split()
        try:
            vals = np.array(tokens, dtype=np.float64)
        except ValueError as e:
            raise ValueError(f"FromFileInitializer: {self.fname} holds something that is not a number ({e}) [at "
                             f"{user_line()}]") from None
        need = math.prod(shape)
        if vals.size != need:
            raise ValueError(f"FromFileInitializer: {self.fname} holds {vals.size} numbers, "
                             f"a parameter of shape {tuple(shape)} needs {need} [at {user_line()}]")
        if not is_lookup:
            return vals.reshape(shape, order="F")
        row = tuple(shape[1:])
        k = len(row)
        return vals.reshape((shape[0],) + row[::-1]).transpose((0,) + tuple(range(k, 0, -1)))


# lambda of root collections created from now on (DynetParams.set_weight_decay)
_DEFAULT_WEIGHT_DECAY = 0.0


def _check_weight_decay(lam, where: str) -> float:
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)):
        raise TypeError(f"{where}: weight decay must be a number, got {type(lam).__name__} [at {user_line()}]")
    lam = float(lam)
    if not 0.0 <= lam < 1.0:
        raise ValueError(f"{where}: weight decay must be in [0, 1) (usually small, like 1e-6), got {lam} [at "
                         f"{user_line()}]")
    return lam


def set_default_weight_decay(lam: float) -> None:
    """Weight decay lambda of root ParameterCollections created from now on (what
    ``DynetParams.set_weight_decay`` and ``--dynet-weight-decay`` set)."""
    global _DEFAULT_WEIGHT_DECAY
    _DEFAULT_WEIGHT_DECAY = _check_weight_decay(lam, "set_default_weight_decay")


def default_weight_decay() -> float:
    return _DEFAULT_WEIGHT_DECAY


def _whole_dim(d):
    """A dimension as an int (NumPy integers, 0-d arrays and whole floats of any kind pass, as
    in DyNet; a bool does not), or None."""
    d = whole(d)
    return int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) else None


def _as_shape(dim, where: str = "add_parameters") -> tuple:
    if isinstance(dim, (int, np.integer, float, np.floating)) or isinstance(dim, np.ndarray) and dim.ndim == 0:
        dim = (dim,)
    try:
        shape = () if isinstance(dim, (str, bytes)) else tuple(_whole_dim(d) for d in dim)
    except TypeError:
        shape = ()
    # a dimension of 0 is allowed, as in DyNet: programs make layers of size 0 that an option
    # turns off and then never use (BIST's parsers with their default --hidden2 0)
    if not shape or None in shape or any(d < 0 for d in shape):
        raise ValueError(f"{where}: a parameter's shape must be non-negative integers, got {dim!r} "
                         f"[at {user_line()}]")
    return shape


def _host_or_device(arr, what: str = "parameter values"):
    """Arrays (NumPy or CuPy) as they are; anything else (lists, numbers) as a NumPy array.
    What is not numbers is refused, naming ``what``: NumPy would take None for a NaN, silently."""
    if not (hasattr(arr, "shape") and hasattr(arr, "dtype")):
        try:
            arr = np.asarray(arr)
        except ValueError:
            raise ValueError(f"{what}: values of ragged shape [at {user_line()}]") from None
    kind = arr.dtype.kind
    if kind == "O" and all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in arr.flat):
        return arr.astype(np.float64)          # numbers as objects pass (pandas, Fractions)
    if kind not in "biuf":
        got = "None or objects" if kind == "O" else arr.dtype
        raise ValueError(f"{what}: expected numbers, got {got} [at {user_line()}]")
    return arr


def _initial(init, shape, is_lookup):
    if 0 in shape and not (hasattr(init, "shape") or isinstance(init, (list, tuple))):
        return np.zeros(shape)           # no values to draw (an initializer may divide by a 0 dim)
    if init is None:
        init = GlorotInitializer()
    elif isinstance(init, (int, float)):
        init = ConstInitializer(init)
    elif not isinstance(init, Initializer):
        init = NumpyInitializer(init)
    return init.init(shape, is_lookup)


_NAMED_INITS = ("identity", "glorot", "he", "uniform", "normal")


def _named(init, shape, scale, mean, std, what):
    """DyNet's initializers by name (add_parameters(dim, init='uniform', scale=a), 'normal' with
    mean= and std=, 'identity', 'glorot', 'he'); scale, mean and std serve those names only:
    any other init comes back as it is (DyNet 2.1 ignores scale there, as we do, but says so)."""
    if scale != 1.0 and not (isinstance(init, str) and init == "uniform"):
        warn_user(f"{what}: scale={scale!r} is used with init='uniform' only (as in DyNet); "
                  f"it does not scale the values of init={init!r}")
    if not isinstance(init, str):
        return init
    if init == "identity":
        return IdentityInitializer()
    if init == "glorot":
        return GlorotInitializer()
    if init == "he":        # DyNet's: variance 1 / (2 · the last dimension)
        return NormalInitializer(0.0, 1.0 / (2 * shape[-1]))
    if init == "uniform":
        return UniformInitializer(float(scale))
    if init == "normal":
        return NormalInitializer(float(mean), float(std) ** 2)
    raise ValueError(f"{what}: init {init!r} is not one of DyNet's initializer names "
                     f"{', '.join(map(repr, _NAMED_INITS))} [at {user_line()}]")


class Parameter:
    """A dense parameter tensor. Usable directly in expressions (``W * x + b``)."""

    is_lookup = False
    # (lo, hi, v): autobatch's first .npz files held value[lo:hi] + v (an LSTM's b then held
    # the forget bias that its step now adds, as DyNet's); None: they held the value itself
    npz_offset = None

    def __init__(self, shape, init=None, name=""):
        rt = runtime.state()
        self.xp = rt.backend.xp
        self.dtype = rt.dtype
        self._name = name
        # a copy, always: an initializer's array (parameters_from_numpy's) stays the user's
        self.data = self.xp.array(_initial(init, shape, self.is_lookup), dtype=self.dtype)
        self.grad = self.xp.zeros_like(self.data)
        self.updated = True     # False: trainers skip it (DyNet's set_updated)
        self.touched = False    # a graph added gradient since the last update

    # --- DyNet API ----------------------------------------------------------
    def name(self) -> str:
        return self._name

    def shape(self) -> tuple:
        return tuple(self.data.shape)

    def dim(self):
        return (self.shape(), 1)

    def as_array(self) -> np.ndarray:
        """A host copy of the value."""
        return runtime.state().backend.to_host(self.data).copy()

    # A parameter's value does not depend on any graph, so recalculate (DyNet: re-run the
    # forward pass) changes nothing here. DyNet's re-run also redraws the random nodes
    # (dropout, noise) of the current graph; reading a parameter here leaves them alone.
    def npvalue(self, recalculate: bool = False) -> np.ndarray:
        """The value as a host array, as DyNet's: a dense parameter as as_array(), a lookup
        table with the rows LAST, (*row_shape, n_rows), where as_array() puts them first."""
        a = self.as_array()
        return np.moveaxis(a, 0, -1) if self.is_lookup else a

    def value(self, recalculate: bool = False):
        """As DyNet's Parameters.value(), which reads the parameter's expression: a float for
        one element, a list for a vector, an array otherwise (a lookup table: npvalue()).
        The array itself, to read or write in place, is ``.data`` (NumPy or CuPy)."""
        a = self.npvalue()
        if a.size == 1 and not self.is_lookup:
            return float(a.reshape(()))
        return a.tolist() if a.ndim == 1 else a

    def forward(self, recalculate: bool = False) -> None:
        """DyNet's forward() on a parameter: nothing to compute, its value is always there."""

    def backward(self, full: bool = False) -> None:
        """backward() from the parameter's expression in the current graph, as DyNet's: it
        must hold one element (it then receives gradient 1)."""
        self.expr(True).backward(full)

    def grad_as_array(self) -> np.ndarray:
        return runtime.state().backend.to_host(self.grad).copy()

    # DyNet 2's parameters answer as their expressions do
    def gradient(self) -> np.ndarray:
        """The accumulated gradient (grad_as_array)."""
        return self.grad_as_array()

    def scalar_value(self, recalculate: bool = False) -> float:
        """The value of a one-element parameter as a float (a lookup table has none, as in DyNet)."""
        from .errors import GraphError, user_line
        if self.is_lookup:
            raise GraphError(f"scalar_value() is not applicable to lookup parameter {self._name or ''} "
                             f"(read a row: E[i].scalar_value()) [at {user_line()}]")
        a = self.as_array()
        if a.size != 1:
            raise GraphError(f"scalar_value() on parameter {self._name or ''} of shape {a.shape}: "
                             f"it needs exactly one element [at {user_line()}]")
        return float(a.reshape(()))

    def vec_value(self, recalculate: bool = False) -> list:
        """The values as a flat list in DyNet's order: column-major for a dense parameter,
        row after row (each row column-major) for a lookup table."""
        return file_order(self.as_array(), self.is_lookup).tolist()

    def tensor_value(self, recalculate: bool = False) -> np.ndarray:
        return self.as_array()

    def set_value(self, arr) -> None:
        """Copy ``arr`` (NumPy, CuPy or a nested list of the parameter's exact shape) into the value."""
        arr = _host_or_device(arr, "set_value")
        if tuple(arr.shape) != tuple(self.data.shape):
            raise ValueError(f"set_value: parameter {self._name or ''} has shape {tuple(self.data.shape)}, "
                             f"got an array of shape {tuple(arr.shape)} [at {user_line()}]")
        self.data[...] = self.xp.asarray(arr, dtype=self.dtype)

    # --- files (DyNet's text format, as ParameterCollection.save) ---------------------
    def save(self, fname: str, key: str = "", append: bool = False) -> None:
        """Write this parameter to fname in DyNet's text format, under its own name or
        under key; append: add to the end of fname."""
        name = key or self._name
        check_name(name, "save")
        write_text(fname, [(self, name)], append)

    def write_to_textfile(self, fname: str, key: str = "", append: bool = False) -> None:
        """Alias of ``save``."""
        self.save(fname, key, append)

    def populate(self, fname: str, key: str) -> None:
        """Set the value (and gradient) from the parameter named key (its full name, e.g.
        "/enc/_0") in fname, a file written by ``save``. A lookup table reads only a saved
        lookup table, a dense parameter only a dense one; the shapes must be equal."""
        if not isinstance(key, str) or not key:
            raise ValueError("populate: key must be a parameter's full name (e.g. '/W'), got "
                             f"{key!r} [at {user_line()}]")
        kind = "l" if self.is_lookup else "p"
        for e in read_saved(fname, "populate"):
            if e.kind == kind and e.name == key:
                break
        else:
            what = "lookup parameter" if self.is_lookup else "parameter"
            raise KeyError(f"populate: no {what} named {key!r} in {fname} [at {user_line()}]")
        if e.shape != self.shape():
            raise ValueError(f"populate: {key} has shape {e.shape} in {fname}, "
                             f"parameter {self._name} is {self.shape()} [at {user_line()}]")
        restore(self, *e.arrays())

    def populate_from_textfile(self, fname: str, key: str = "") -> None:
        """Alias of ``populate`` (key is needed all the same)."""
        self.populate(fname, key)

    def zero(self) -> None:
        """Set the value (not the gradient) to zero, as DyNet's ``zero()``."""
        self.data[...] = 0

    def zero_grad(self) -> None:
        self.grad[...] = 0
        self._grad_zeroed()

    def _clear_grad(self) -> None:
        """What trainers call after an update (lookups override it to clear only used rows)."""
        if self.touched:
            self.zero_grad()

    def _grad_zeroed(self) -> None:
        """Every element of the gradient that could be nonzero was zeroed (by zero_grad, a
        sparse clear or a trainer's update): reset what records where gradient landed."""
        self.touched = False

    def scale(self, s: float) -> None:
        self.data *= number("scale", s)

    def scale_gradient(self, s: float) -> None:
        self.grad *= number("scale_gradient", s)

    def clip_inplace(self, left: float, right: float) -> None:
        self.xp.clip(self.data, left, right, out=self.data)

    def set_updated(self, b: bool) -> None:
        self.updated = bool(b)

    def is_updated(self) -> bool:
        return self.updated

    def expr(self, update: bool = False):
        """The parameter as an expression; as DyNet 2.1's, a constant one (no gradient)
        unless update=True (a lookup table's expr() is always updated, as DyNet's)."""
        from .graph import cg
        return cg().param_expr(self, update)

    # expression arithmetic on a parameter acts on its node in the current graph
    def _e(self):
        from .graph import cg
        return cg().param_expr(self, True)

    def __add__(self, o): return self._e() + o
    def __radd__(self, o): return o + self._e()
    def __sub__(self, o): return self._e() - o
    def __rsub__(self, o): return o - self._e()
    def __mul__(self, o): return self._e() * o
    def __rmul__(self, o): return o * self._e()
    def __truediv__(self, o): return self._e() / o
    def __rtruediv__(self, o): return o / self._e()
    def __neg__(self): return -self._e()

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape()}, name={self._name!r})"


class LookupParameter(Parameter):
    """A table of rows; ``E[i]`` is the lookup expression of row i. Remembers which
    rows got gradient so that sparse updates touch only those."""

    is_lookup = True

    def __init__(self, shape, init=None, name=""):
        super().__init__(shape, init, name)
        self.rows_used: list = []    # index arrays of rows that got gradient (RowGrad)
        self.all_updated = False     # the whole table got a dense gradient (used as a matrix)

    def __getitem__(self, i):
        from .graph import lookup
        return lookup(self, i)

    def __len__(self):
        return self.data.shape[0]

    def init_from_array(self, arr) -> None:
        """The table's values from arr; an array of fewer rows sets the first rows only, as
        DyNet's (which refuses more rows)."""
        arr = _host_or_device(arr, "init_from_array")
        n = self.data.shape[0]
        if arr.ndim == self.data.ndim and tuple(arr.shape[1:]) == tuple(self.data.shape[1:]) and arr.shape[0] < n:
            self.data[:arr.shape[0]] = self.xp.asarray(arr, dtype=self.dtype)
            return
        self.set_value(arr)

    def _row(self, i, where: str) -> int:
        n = self.data.shape[0]
        if not isinstance(i, (int, np.integer)) or not 0 <= i < n:
            raise IndexError(f"{where}: row {i!r} out of range for a lookup table of shape {tuple(self.data.shape)} [at "
                             f"{user_line()}]")
        return int(i)

    def init_row(self, i: int, row) -> None:
        i = self._row(i, "init_row")
        row = _host_or_device(row, "init_row")
        shape = tuple(self.data.shape[1:])
        if row.ndim == 1 and len(shape) > 1 and row.shape[0] == int(np.prod(shape)):
            row = row.reshape(shape, order="F")     # DyNet's flat row: its memory order, column-major
        if tuple(row.shape) != shape:
            raise ValueError(f"init_row: rows have shape {tuple(self.data.shape[1:])}, got {tuple(row.shape)} [at "
                             f"{user_line()}]")
        self.data[i] = self.xp.asarray(row, dtype=self.dtype)

    def row_as_array(self, row: int) -> np.ndarray:
        return runtime.state().backend.to_host(self.data[self._row(row, "row_as_array")]).copy()

    def rows_as_array(self, rows) -> np.ndarray:
        return np.stack([self.row_as_array(i) for i in rows])

    def row_grad_as_array(self, row: int) -> np.ndarray:
        return runtime.state().backend.to_host(self.grad[self._row(row, "row_grad_as_array")]).copy()

    def rows_grad_as_array(self, rows) -> np.ndarray:
        return np.stack([self.row_grad_as_array(i) for i in rows])

    def batch(self, i):
        """DyNet's minibatch lookup of the rows i: see lookup_batch."""
        from .api_random import lookup_batch
        return lookup_batch(self, i)

    def used_rows(self):
        """Sorted unique rows that got gradient since the last clear (an xp index array),
        or None when the whole table did (it was used densely)."""
        if self.all_updated:
            return None
        if not self.rows_used:
            return self.xp.zeros(0, dtype=np.int64)
        xp = self.xp
        r = xp.sort(xp.concatenate([xp.asarray(r).reshape(-1) for r in self.rows_used]))
        if r.shape[0] < 2:
            return r
        # sorted, then the first of each run: NumPy 2's unique() costs 8x this (70 us for 1300 rows)
        return r[xp.concatenate((xp.ones(1, dtype=bool), r[1:] != r[:-1]))]

    def _grad_zeroed(self) -> None:
        super()._grad_zeroed()
        self.rows_used = []
        self.all_updated = False

    def _clear_grad(self) -> None:
        # only rows in rows_used can hold gradient unless the table was used densely,
        # so a sparse clear costs O(rows used), not O(table)
        if self.all_updated:
            self.zero_grad()
        elif self.rows_used:
            self._clear_rows(self.used_rows())
        elif self.touched:
            self.zero_grad()

    def _clear_rows(self, rows) -> None:
        """Zero the gradient of rows, all that can hold any (used_rows()); a trainer that
        already has them calls this rather than _clear_grad, which would sort them again."""
        self.grad[rows] = 0
        self._grad_zeroed()


class ParameterCollection:
    """DyNet's ParameterCollection (alias Model): creates, lists, saves and loads parameters.

    Lists keep creation order across sub-collections, and names follow DyNet
    ("/_0", "/W", "/W_1", "/vanilla-lstm-builder/_0"), so code that copies or saves
    parameters by position or name works the same on both."""

    def __init__(self, name: str = "", _prefix: str = "/"):
        self._prefix = _prefix
        self._items: list = []      # parameters, lookup parameters and sub-collections, in order
        self._taken: dict = {}      # base name -> times used, for parameters
        self._taken_sub: dict = {}  # the same for sub-collections
        self._weight_decay = _DEFAULT_WEIGHT_DECAY
        self._decay_scale = 1.0     # DyNet's pending weight-decay scale (_apply_weight_decay)

    @staticmethod
    def _unique(name, taken):
        base = name or "_"
        k = taken.get(base, 0)
        taken[base] = k + 1
        return f"_{k}" if not name else (name if k == 0 else f"{name}_{k}")

    def name(self) -> str:
        return self._prefix

    def add_parameters(self, dim, init=None, name: str = "", device: str = "", scale: float = 1.0,
                       mean: float = 0.0, std: float = 1.0) -> Parameter:
        """A dense parameter of shape ``dim``; init: None (Glorot), a number, an array, an
        Initializer, or DyNet's names: 'uniform' (in ±scale), 'normal' (mean, std), 'identity',
        'glorot', 'he'. As in DyNet, scale serves 'uniform' only (elsewhere it is ignored, with a
        warning), mean and std 'normal' only."""
        shape = _array_shape(init, _as_shape(dim), "add_parameters")
        init = _named(init, shape, scale, mean, std, "add_parameters")
        p = Parameter(shape, init, self._prefix + self._unique(name, self._taken))
        self._items.append(p)
        return p

    def add_lookup_parameters(self, dim, init=None, name: str = "", device: str = "", scale: float = 1.0,
                              mean: float = 0.0, std: float = 1.0) -> LookupParameter:
        """A lookup table of shape ``(n_rows, *row_shape)``; init as add_parameters'."""
        shape = _as_shape(dim, "add_lookup_parameters")
        if hasattr(init, "shape") and len(init.shape) == 1:
            init = init.reshape(-1, 1)      # an array of n scalars: the (n, 1) table below
        if len(shape) == 1:             # DyNet: a table of n scalars is (n, 1)
            shape = shape + (1,)
        shape = _array_shape(init, shape, "add_lookup_parameters")
        if len(shape) < 2:
            raise ValueError(f"add_lookup_parameters needs (n_rows, row_dim), got {dim!r} [at {user_line()}]")
        init = _named(init, shape, scale, mean, std, "add_lookup_parameters")
        p = LookupParameter(shape, init, self._prefix + self._unique(name, self._taken))
        self._items.append(p)
        return p

    def add_subcollection(self, name: str = "") -> "ParameterCollection":
        sub = ParameterCollection(name, self._prefix + self._unique(name, self._taken_sub) + "/")
        sub._weight_decay = self._weight_decay    # as DyNet: inherited when created
        self._items.append(sub)
        return sub

    # --- L2 weight decay -----------------------------------------------------------
    def set_weight_decay(self, lam: float) -> None:
        """L2 weight decay: after every trainer update of this collection, each of its
        parameters (sub-collections' included) is multiplied by (1 - lam), as DyNet's
        ``--dynet-weight-decay``. The lambda of the collection the trainer was made with
        counts, not that of the sub-collection holding a parameter (as DyNet).
        lam must be in [0, 1) (DyNet accepts 1 here but not in DynetParams; it zeroes
        every weight).

        DyNet keeps one pending scale per collection, which its expressions read, and folds
        it into the parameters being updated once it falls below 0.25; frozen parameters
        (``set_updated(False)``) decay with the scale until such a fold and then return to
        their stored values. Here the values themselves decay (so ``as_array()`` shows the
        decayed values, where DyNet's shows the stored ones until a fold), and at the
        moments DyNet folds, frozen parameters are brought back as DyNet's are: the values
        its expressions read are the same. The decay costs one pass over every parameter
        per update (whole lookup tables too)."""
        self._weight_decay = _check_weight_decay(lam, "set_weight_decay")

    def set_weight_decay_lambda(self, lam: float) -> None:
        """Alias of ``set_weight_decay``."""
        self.set_weight_decay(lam)

    def get_weight_decay(self) -> float:
        """The weight decay lambda (0: none; new root collections get the value of
        ``DynetParams.set_weight_decay`` / ``--dynet-weight-decay``, sub-collections their
        parent's at creation)."""
        return self._weight_decay

    def _apply_weight_decay(self) -> None:
        """What a trainer calls once after each update of this collection: every parameter
        decays, frozen ones (set_updated(False)) too; where DyNet's pending scale of the
        collection would fold (below 0.25), the parameters frozen then get it back, as
        DyNet's do (see set_weight_decay)."""
        lam = self._weight_decay
        if lam:
            scale = self._decay_scale * (1.0 - lam)
            params = self.all_parameters()
            for p in params:
                p.data *= 1.0 - lam
            if scale < 0.25:
                for p in params:
                    if not p.updated:
                        p.data /= scale
                scale = 1.0
            self._decay_scale = scale

    def subcollections(self) -> list:
        return [x for x in self._items if isinstance(x, ParameterCollection)]

    def _walk(self, lookups: bool) -> list:
        out = []
        for x in self._items:
            if isinstance(x, ParameterCollection):
                out += x._walk(lookups)
            elif x.is_lookup == lookups:
                out.append(x)
        return out

    def parameters_list(self) -> list:
        """Dense parameters in creation order, sub-collections included."""
        return self._walk(False)

    def lookup_parameters_list(self) -> list:
        """Lookup parameters in creation order, sub-collections included."""
        return self._walk(True)

    def parameters_from_numpy(self, array, name: str = "", device: str = "") -> Parameter:
        a = np.asarray(array)
        return self.add_parameters(a.shape, NumpyInitializer(a), name)

    def lookup_parameters_from_numpy(self, array, name: str = "", device: str = "") -> LookupParameter:
        a = np.asarray(array)
        return self.add_lookup_parameters(a.shape, NumpyInitializer(a), name)

    def parameter_count(self) -> int:
        return sum(int(p.data.size) for p in self.all_parameters())

    def all_parameters(self) -> list:
        return self.parameters_list() + self.lookup_parameters_list()

    def save(self, fname: str, name: str = "", append: bool = False) -> None:
        """Write every parameter to fname in DyNet's text format (real DyNet reads the file,
        and ``populate`` reads DyNet's): dense parameters in creation order, then lookup
        tables, each with its gradient where it is not zero. name: written names have this
        collection's prefix replaced by name ("/top" and "/top/" both give "/top/W"); it must
        start with '/' and hold no space or '#', as DyNet. append: add to the end of fname.

        ``save(path, [objects])`` (DyNet 1's form) is ``dy.save(path, [objects])``."""
        if isinstance(name, (list, tuple)):
            from .saving import save
            return save(fname, name)
        if not isinstance(name, str):
            raise TypeError(f"save: name must be a str, got {type(name).__name__} [at {user_line()}]")
        if name and (not name.startswith("/") or " " in name or "#" in name):
            raise ValueError(f"save: name must start with '/' and hold no ' ' or '#', got {name!r} [at {user_line()}]")
        if name and not name.endswith("/"):
            name += "/"
        n = len(self._prefix)
        entries = [(p, (name + p.name()[n:]) if name else p.name()) for p in self.all_parameters()]
        for _, nm in entries:      # before writing anything
            check_name(nm, "save")
        write_text(fname, entries, append)

    def write_to_textfile(self, fname: str, key: str = "", append: bool = False) -> None:
        """Alias of ``save``."""
        self.save(fname, key, append)

    def populate(self, fname: str, key: str = "") -> None:
        """Load values (and gradients) written by ``save`` (or by DyNet) into this collection's
        parameters, by position: the saved dense parameters into ``parameters_list()``, the
        saved tables into ``lookup_parameters_list()``. key: use only the saved parameters
        inside the collection named key, e.g. "/enc/" (fill a sub-model from a bigger file).
        Also reads the .npz files of older autobatch versions (values only).
        Counts, shapes and numbers are checked first: on an error nothing changes."""
        saved = read_saved(fname, "populate")
        if key:
            if any(e.name is None for e in saved):
                raise ValueError(f"populate: {fname} holds no parameter names (an older file); "
                                 f"it can only be loaded whole (key='') [at {user_line()}]")
            # whole path components only, as DyNet: "/enc" and "/enc/" take "/enc/_0", "/en" does not
            sub = key if key.endswith("/") else key + "/"
            saved = [e for e in saved if e.name.startswith(sub)]
        todo = []
        for kind, mine, what in (("p", self.parameters_list(), "parameters"),
                                 ("l", self.lookup_parameters_list(), "lookup parameters")):
            theirs = [e for e in saved if e.kind == kind]
            if len(theirs) != len(mine):
                under = f" under key {key!r}" if key else ""
                raise ValueError(f"populate: {fname} holds {len(theirs)} {what}{under}, "
                                 f"this collection has {len(mine)} [at {user_line()}]")
            for j, (e, p) in enumerate(zip(theirs, mine)):
                if e.shape != p.shape():
                    raise ValueError(f"populate: {e.name or f'saved {what[:-1]} {j}'} has shape {e.shape} "
                                     f"in {fname}, parameter {p.name()} is {p.shape()} [at {user_line()}]")
                todo.append((p, e))
        todo = [(p, *e.arrays()) for p, e in todo]
        for p, value, grad in todo:
            restore(p, value, grad)

    def populate_from_textfile(self, fname: str, key: str = "") -> None:
        """Alias of ``populate``."""
        self.populate(fname, key)

    def _load_one(self, path: str, key: str, lookup: bool):
        where = "load_lookup_param" if lookup else "load_param"
        saved = read_saved(path, where)
        if any(e.name is None for e in saved):
            raise ValueError(f"{where}: {path} holds no parameter names (an older file) [at {user_line()}]")
        kind = "l" if lookup else "p"
        for e in saved:
            if e.kind == kind and e.name == key:
                value, grad = e.arrays()
                base = key.rstrip("/").rsplit("/", 1)[-1]
                name = "" if base.startswith("_") and base[1:].isdigit() else base
                add = self.add_lookup_parameters if lookup else self.add_parameters
                p = add(e.shape, NumpyInitializer(value), name)
                restore(p, value, grad)
                return p
        what = "lookup parameter" if lookup else "parameter"
        raise KeyError(f"{where}: no {what} named {key!r} in {path} [at {user_line()}]")

    def load_param(self, fname: str, key: str) -> Parameter:
        """The saved dense parameter named key (its full name, e.g. "/W" or "/enc/_0") in the
        file fname, added to this collection with its saved value."""
        return self._load_one(fname, key, lookup=False)

    def load_lookup_param(self, fname: str, key: str) -> LookupParameter:
        """As ``load_param`` for a lookup table."""
        return self._load_one(fname, key, lookup=True)

    def load(self, path: str) -> list:
        """DyNet 1's ``model.load(fname)``: ``dy.load(path, self)``."""
        from .saving import load
        return load(path, self)

    # --- undo for load(): a failed load leaves the collection as it was --------------
    def _mark(self):
        return len(self._items), dict(self._taken), dict(self._taken_sub)

    def _undo(self, mark) -> None:
        n, taken, taken_sub = mark
        del self._items[n:]
        self._taken, self._taken_sub = taken, taken_sub


Model = ParameterCollection
