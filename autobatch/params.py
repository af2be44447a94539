"""Parameters and their collection (DyNet's ParameterCollection / Model).

A parameter owns its value and an accumulated gradient, both arrays of the active
backend; graphs read the value and add into the gradient, trainers apply it."""
from __future__ import annotations

import math
import os

import numpy as np

from . import runtime


def _rng():
    return runtime.state().rng


class Initializer:
    """Base: ``init(shape, is_lookup) -> np.ndarray`` (float64; cast on placement)."""

    def init(self, shape, is_lookup=False):
        raise NotImplementedError


class GlorotInitializer(Initializer):
    def __init__(self, is_lookup=False, gain=1.0):
        self.is_lookup, self.gain = is_lookup, gain

    def init(self, shape, is_lookup=False):
        dims = shape[1:] if (is_lookup or self.is_lookup) else shape
        s = self.gain * math.sqrt(3 * len(dims)) / math.sqrt(sum(dims))
        return _rng().uniform(-s, s, shape)


class NormalInitializer(Initializer):
    def __init__(self, mean=0.0, var=1.0):
        self.mean, self.std = mean, math.sqrt(var)

    def init(self, shape, is_lookup=False):
        return _rng().normal(self.mean, self.std, shape)


class UniformInitializer(Initializer):
    def __init__(self, scale):
        self.scale = scale

    def init(self, shape, is_lookup=False):
        return _rng().uniform(-self.scale, self.scale, shape)


class ConstInitializer(Initializer):
    def __init__(self, c):
        self.c = c

    def init(self, shape, is_lookup=False):
        return np.full(shape, self.c, dtype=np.float64)


class NumpyInitializer(Initializer):
    def __init__(self, array):
        self.array = np.asarray(array)

    def init(self, shape, is_lookup=False):
        if self.array.shape != tuple(shape):
            raise ValueError(f"initializer array has shape {self.array.shape}, parameter needs {tuple(shape)}")
        return self.array


def _as_shape(dim) -> tuple:
    if isinstance(dim, (int, np.integer)):
        dim = (dim,)
    shape = tuple(int(d) for d in dim)
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"parameter shape must be positive integers, got {dim!r}")
    return shape


def _host_or_device(arr):
    """Arrays (NumPy or CuPy) as they are; anything else (lists, numbers) as a NumPy array."""
    return arr if hasattr(arr, "shape") and hasattr(arr, "dtype") else np.asarray(arr)


def _initial(init, shape, is_lookup):
    if init is None:
        init = GlorotInitializer(is_lookup=is_lookup)
    elif isinstance(init, (int, float)):
        init = ConstInitializer(init)
    elif not isinstance(init, Initializer):
        init = NumpyInitializer(init)
    return init.init(shape, is_lookup)


class Parameter:
    """A dense parameter tensor. Usable directly in expressions (``W * x + b``)."""

    is_lookup = False

    def __init__(self, shape, init=None, name="", scale=1.0):
        rt = runtime.state()
        self.xp = rt.backend.xp
        self.dtype = rt.dtype
        self._name = name
        self.value = self.xp.asarray(_initial(init, shape, self.is_lookup) * scale, dtype=self.dtype)
        self.grad = self.xp.zeros_like(self.value)
        self.updated = True     # False: trainers skip it (DyNet's set_updated)
        self.touched = False    # a graph added gradient since the last update

    # --- DyNet API ----------------------------------------------------------
    def name(self) -> str:
        return self._name

    def shape(self) -> tuple:
        return tuple(self.value.shape)

    def dim(self):
        return (self.shape(), 1)

    def as_array(self) -> np.ndarray:
        """A host copy of the value."""
        return runtime.state().backend.to_host(self.value).copy()

    def npvalue(self) -> np.ndarray:
        return self.as_array()

    def grad_as_array(self) -> np.ndarray:
        return runtime.state().backend.to_host(self.grad).copy()

    def set_value(self, arr) -> None:
        """Copy ``arr`` (NumPy, CuPy or a nested list of the parameter's exact shape) into the value."""
        arr = _host_or_device(arr)
        if tuple(arr.shape) != tuple(self.value.shape):
            raise ValueError(f"set_value: parameter {self._name or ''} has shape {tuple(self.value.shape)}, "
                             f"got an array of shape {tuple(arr.shape)}")
        self.value[...] = self.xp.asarray(arr, dtype=self.dtype)

    def zero(self) -> None:
        """Set the value (not the gradient) to zero, as DyNet's ``zero()``."""
        self.value[...] = 0

    def zero_grad(self) -> None:
        self.grad[...] = 0
        self.touched = False

    def _clear_grad(self) -> None:
        """What trainers call after an update (lookups override it to clear only used rows)."""
        if self.touched:
            self.zero_grad()

    def scale(self, s: float) -> None:
        self.value *= s

    def scale_gradient(self, s: float) -> None:
        self.grad *= s

    def clip_inplace(self, left: float, right: float) -> None:
        self.xp.clip(self.value, left, right, out=self.value)

    def set_updated(self, b: bool) -> None:
        self.updated = bool(b)

    def is_updated(self) -> bool:
        return self.updated

    def expr(self, update: bool = True):
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

    def __init__(self, shape, init=None, name="", scale=1.0):
        super().__init__(shape, init, name, scale)
        self.rows_used: list = []    # index arrays of rows that got gradient (RowGrad)
        self.all_updated = False     # the whole table got a dense gradient (used as a matrix)

    def __getitem__(self, i):
        from .graph import lookup
        return lookup(self, i)

    def __len__(self):
        return self.value.shape[0]

    def init_from_array(self, arr) -> None:
        self.set_value(arr)

    def _row(self, i) -> int:
        n = self.value.shape[0]
        if not isinstance(i, (int, np.integer)) or not 0 <= i < n:
            raise IndexError(f"row {i!r} out of range for a lookup table of shape {tuple(self.value.shape)}")
        return int(i)

    def init_row(self, i: int, row) -> None:
        i = self._row(i)
        row = _host_or_device(row)
        if tuple(row.shape) != tuple(self.value.shape[1:]):
            raise ValueError(f"init_row: rows have shape {tuple(self.value.shape[1:])}, got {tuple(row.shape)}")
        self.value[i] = self.xp.asarray(row, dtype=self.dtype)

    def row_as_array(self, i: int) -> np.ndarray:
        return runtime.state().backend.to_host(self.value[self._row(i)]).copy()

    def rows_as_array(self, rows) -> np.ndarray:
        return np.stack([self.row_as_array(i) for i in rows])

    def row_grad_as_array(self, i: int) -> np.ndarray:
        return runtime.state().backend.to_host(self.grad[self._row(i)]).copy()

    def zero_grad(self) -> None:
        super().zero_grad()
        self.rows_used = []
        self.all_updated = False

    def used_rows(self):
        """Sorted unique rows that got gradient since the last clear (an xp index array),
        or None when the whole table did (it was used densely)."""
        if self.all_updated:
            return None
        if not self.rows_used:
            return self.xp.zeros(0, dtype=np.int64)
        return self.xp.unique(self.xp.concatenate([self.xp.asarray(r).reshape(-1) for r in self.rows_used]))

    def _clear_grad(self) -> None:
        # only rows in rows_used can hold gradient unless the table was used densely,
        # so a sparse clear costs O(rows used), not O(table)
        if self.all_updated:
            self.zero_grad()
        elif self.rows_used:
            self.grad[self.used_rows()] = 0
            self.rows_used = []
            self.touched = False
        elif self.touched:
            self.zero_grad()


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

    @staticmethod
    def _unique(name, taken):
        base = name or "_"
        k = taken.get(base, 0)
        taken[base] = k + 1
        return f"_{k}" if not name else (name if k == 0 else f"{name}_{k}")

    def name(self) -> str:
        return self._prefix

    def add_parameters(self, dim, init=None, name: str = "", device: str = "", scale: float = 1.0) -> Parameter:
        """A dense parameter of shape ``dim``; init: None (Glorot), a number, an array or an Initializer."""
        shape = _as_shape(dim)
        p = Parameter(shape, init, self._prefix + self._unique(name, self._taken), scale)
        self._items.append(p)
        return p

    def add_lookup_parameters(self, dim, init=None, name: str = "", device: str = "", scale: float = 1.0) -> LookupParameter:
        """A lookup table of shape ``(n_rows, *row_shape)``."""
        shape = _as_shape(dim)
        if len(shape) < 2:
            raise ValueError(f"add_lookup_parameters needs (n_rows, row_dim), got {dim!r}")
        p = LookupParameter(shape, init, self._prefix + self._unique(name, self._taken), scale)
        self._items.append(p)
        return p

    def add_subcollection(self, name: str = "") -> "ParameterCollection":
        sub = ParameterCollection(name, self._prefix + self._unique(name, self._taken_sub) + "/")
        self._items.append(sub)
        return sub

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
        return sum(int(p.value.size) for p in self.all_parameters())

    def all_parameters(self) -> list:
        return self.parameters_list() + self.lookup_parameters_list()

    def _keys(self):
        return ([f"p{k}" for k in range(len(self.parameters_list()))]
                + [f"l{k}" for k in range(len(self.lookup_parameters_list()))])

    def save(self, path: str) -> None:
        """Write all values to an .npz file (in creation order)."""
        arrays = {k: p.as_array() for k, p in zip(self._keys(), self.all_parameters())}
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    def populate(self, path: str) -> None:
        """Load values saved by ``save`` into parameters created in the same order."""
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        with np.load(path) as z:
            keys = self._keys()
            if sorted(z.files) != sorted(keys):
                raise ValueError(f"populate: {path} holds {len(z.files)} arrays, this collection has {len(keys)} parameters")
            loaded = {k: z[k] for k in keys}
        # check all shapes first so a mismatch leaves every parameter unchanged
        for k, p in zip(keys, self.all_parameters()):
            if loaded[k].shape != p.shape():
                raise ValueError(f"populate: {k} has shape {loaded[k].shape} in {path}, parameter is {p.shape()}")
        for k, p in zip(keys, self.all_parameters()):
            p.set_value(loaded[k])


Model = ParameterCollection
