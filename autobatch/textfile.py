"""DyNet's text format for parameters: what ParameterCollection.save writes and populate
reads, so model files move both ways between autobatch and DyNet.

One entry per parameter:
  #Parameter# /W {2,3} 97 ZERO_GRAD            (or #LookupParameter#, FULL_GRAD)
  +5.00000000e-01 +3.50000000e+00 ...         (values, column-major)
  ...                                         (FULL_GRAD only: the gradient, same order)
The byte count is that of the lines after the header: DyNet seeks with it to find a key.
A lookup table (n, *row) is written as DyNet holds it, dims {*row, n}: row after row.
"""
from __future__ import annotations

import math
import os

import numpy as np

from .errors import user_line

_TAGS = {"p": "#Parameter#", "l": "#LookupParameter#"}
_KIND_OF_TAG = {t: k for k, t in _TAGS.items()}
_CHUNK = 1 << 16


def file_order(a, lookup: bool) -> np.ndarray:
    """a flattened in DyNet's memory order."""
    if lookup:
        a = np.moveaxis(a, 0, -1)
    return a.reshape(-1, order="F")


def _from_file_order(vals, shape: tuple, lookup: bool) -> np.ndarray:
    if lookup:
        return np.moveaxis(vals.reshape(shape[1:] + shape[:1], order="F"), -1, 0)
    return vals.reshape(shape, order="F")


def check_name(name: str, where: str) -> None:
    # a header is split at whitespace, and DyNet reserves '#' for header tags
    if not name or "#" in name or any(c.isspace() for c in name):
        raise ValueError(f"{where}: {name!r} cannot be written to a DyNet text file "
                         f"(a name must be non-empty, without whitespace or '#') [at {user_line()}]")


def _numbers(flat, fmt: str) -> str:
    # %-formatting a whole chunk at once keeps the per-number cost in C
    return "".join((fmt * len(c)) % tuple(c.tolist())
                   for c in (flat[i:i + _CHUNK] for i in range(0, len(flat), _CHUNK))) + "\n"


def _entry_text(p, name: str) -> str:
    a, g = p.as_array(), p.grad_as_array()
    # DyNet writes 9 significant digits (exact for float32); float64 needs 17
    fmt = "%+.8e " if a.dtype.itemsize <= 4 else "%+.16e "
    full = bool(g.any())
    body = _numbers(file_order(a, p.is_lookup), fmt)
    if full:
        body += _numbers(file_order(g, p.is_lookup), fmt)
    shape = a.shape[1:] + a.shape[:1] if p.is_lookup else a.shape
    dims = "{" + ",".join(str(d) for d in shape) + "}"
    kind = "l" if p.is_lookup else "p"
    return f"{_TAGS[kind]} {name} {dims} {len(body)} {'FULL_GRAD' if full else 'ZERO_GRAD'}\n{body}"


def _shifted(p, a, sign: int) -> np.ndarray:
    """A float64 copy of a with sign * p.npz_offset's value added to its slice."""
    lo, hi, v = p.npz_offset
    a = np.array(a, dtype=np.float64)
    a[lo:hi] += sign * v
    return a


def file_name(where: str, fname) -> str:
    """fname (a str or a path object) as a str, or a TypeError naming ``where``."""
    if not isinstance(fname, (str, os.PathLike)):
        raise TypeError(f"{where}: needs a file name, got {fname!r} [at {user_line()}]")
    return os.fspath(fname)


def write_text(fname, entries, append: bool, where: str = "save") -> None:
    """entries: (parameter, name written); names are checked by the caller."""
    fname = file_name(where, fname)
    try:
        f = open(fname, "a" if append else "w", encoding="utf-8", newline="\n")
    except OSError as e:            # (a missing directory): named as the user's call
        raise type(e)(f"{where}: cannot write {fname}: {e.strerror or e} [at {user_line()}]") from None
    with f:
        for p, name in entries:
            f.write(_entry_text(p, name))


class _Saved:
    """One parameter of a file: kind "p"/"l", full name (None in autobatch's old .npz files
    without names), shape (ours: a table is (n, *row)), and its arrays, parsed on demand."""

    __slots__ = ("kind", "name", "shape", "_src", "_full", "where")

    def __init__(self, kind, name, shape, src, full, where):
        self.kind, self.name, self.shape = kind, name, shape
        self._src, self._full, self.where = src, full, where

    def arrays(self):
        """(value, gradient); gradient None where the file holds none (old .npz files)."""
        if not isinstance(self._src, str):
            return self._src, None
        try:
            vals = np.array(self._src.split(), dtype=np.float64)
        except ValueError as e:
            raise ValueError(f"{self.where}: {self.name} holds something that is not a number ({e}) [at "
                             f"{user_line()}]") from None
        n = math.prod(self.shape)
        need = 2 * n if self._full else n
        if vals.size != need:
            raise ValueError(f"{self.where}: {self.name} of shape {self.shape} needs {need} numbers "
                             f"({'FULL_GRAD' if self._full else 'ZERO_GRAD'}), the file holds {vals.size} "
                             f"[at {user_line()}]")
        lookup = self.kind == "l"
        value = _from_file_order(vals[:n], self.shape, lookup)
        grad = _from_file_order(vals[n:], self.shape, lookup) if self._full else np.zeros(self.shape)
        return value, grad


def _parse_text(path: str, text: str, where: str) -> list:
    out, lines = [], text.split("\n")
    i = 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if not line.strip():
            continue
        f = line.split()
        head = f"{where}: {path} line {i}"
        if f[0] not in _KIND_OF_TAG or len(f) != 5 or f[4] not in ("ZERO_GRAD", "FULL_GRAD"):
            raise ValueError(f"{head}: expected a header like '#Parameter# /W {{2,3}} 97 ZERO_GRAD', got "
                             f"{line[:80]!r} [at {user_line()}]")
        kind, name, dims = _KIND_OF_TAG[f[0]], f[1], f[2]
        try:
            if not (dims.startswith("{") and dims.endswith("}")):
                raise ValueError
            shape = tuple(int(d) for d in dims[1:-1].split(","))
            if any(d < 0 for d in shape) or (kind == "l" and len(shape) < 2):
                raise ValueError
        except ValueError:
            raise ValueError(f"{head}: bad dimensions {dims!r} for {name} [at {user_line()}]") from None
        if kind == "l":
            shape = shape[-1:] + shape[:-1]
        body = []
        # the values run to the next header (DyNet's byte count is not needed to find it)
        while i < len(lines) and not lines[i].lstrip().startswith("#"):
            body.append(lines[i])
            i += 1
        out.append(_Saved(kind, name, shape, " ".join(body), f[4] == "FULL_GRAD", f"{where}: {path}"))
    return out


def read_saved(path, where: str) -> list:
    """The parameters in path: DyNet's text format, or autobatch's older .npz files."""
    path = file_name(where, path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where}: no such file: {path} [at {user_line()}]")
    with open(path, "rb") as f:
        raw = f.read()
    if not raw.startswith(b"PK"):
        try:
            return _parse_text(path, raw.decode("utf-8"), where)
        except UnicodeDecodeError:
            raise ValueError(f"{where}: {path} is not a parameter file (DyNet's text format) [at "
                             f"{user_line()}]") from None
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError) as e:
        raise ValueError(f"{where}: {path} is not a file written by ParameterCollection.save ({e}) [at "
                         f"{user_line()}]") from None
    keys = []
    for kind in "pl":
        k = 0
        while f"{kind}{k}" in arrays:
            keys.append(f"{kind}{k}")
            k += 1
    names = [str(x) for x in arrays["names"]] if "names" in arrays else None
    if names is not None and len(names) != len(keys):
        raise ValueError(f"{where}: {path}: the file's names do not match its arrays [at {user_line()}]")
    return [_Saved(k[0], None if names is None else names[j], tuple(arrays[k].shape), arrays[k], None, where)
            for j, k in enumerate(keys)]


def restore(p, value, grad) -> None:
    """Set p's value, and its gradient where the file holds one (as DyNet's populate). grad
    None: an .npz of autobatch's first format, which held values as they were in memory
    then (see Parameter.npz_offset); the text format holds them as DyNet does."""
    if grad is None and p.npz_offset is not None:
        value = _shifted(p, value, -1)
    p.set_value(value)
    if grad is None:
        return
    if not grad.any():
        p.zero_grad()
        return
    p.grad[...] = p.xp.asarray(grad, dtype=p.dtype)
    p.touched = True
    if p.is_lookup:
        p.all_updated = False
        rows = np.flatnonzero(grad.reshape(grad.shape[0], -1).any(axis=1))
        p.rows_used = [p.xp.asarray(rows)]
