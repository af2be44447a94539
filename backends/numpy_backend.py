"""NumPy backend: gathers are one fancy-index take, scatters one indexed add."""
from __future__ import annotations

import numpy as np


class NumpyBackend:
    name = "numpy"
    xp = np

    def __init__(self):
        self._ar = {}

    def arange(self, n: int):
        a = self._ar.get(n)
        if a is None:
            a = self._ar[n] = np.arange(n, dtype=np.intp)
        return a

    def index(self, offsets, size: int):
        """(B, size) flat indices of B blocks of `size` elements starting at offsets."""
        return np.asarray(offsets, dtype=np.intp)[:, None] + self.arange(size)

    def ragged_index(self, offsets, sizes):
        """Flat indices of blocks of different sizes (a mixed-shape elementwise batch),
        built in one vectorised step rather than one arange per node."""
        o = np.asarray(offsets, dtype=np.intp)
        s = np.asarray(sizes, dtype=np.intp)
        return np.repeat(o - (np.cumsum(s) - s), s) + np.arange(int(s.sum()), dtype=np.intp)

    def gather(self, buf, offsets, size: int):
        """Copy B scattered blocks into one contiguous (B, size) array (sparse→dense)."""
        return buf.take(self.index(offsets, size))

    def scatter_add(self, buf, offsets, size: int, vals, unique: bool):
        """buf[block k] += vals[k] for B blocks (dense→sparse); `unique` says no
        block repeats, which allows the buffered (fast) indexed add."""
        idx = self.index(offsets, size)
        vals = vals.reshape(idx.shape)
        if unique:
            buf[idx] += vals
        else:
            np.add.at(buf, idx, vals)

    def add_rows(self, table, rows, vals):
        """table[rows[k]] += vals[k], rows may repeat."""
        np.add.at(table, rows, vals.reshape((len(rows),) + table.shape[1:]))

    def to_host(self, a):
        return np.asarray(a)

    def synchronize(self):
        pass
