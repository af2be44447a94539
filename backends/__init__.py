"""Array backends: the array module plus the copy kernels the executor needs.

Installed as ``autobatch.backends``. ``get(name)`` returns a backend instance;
CuPy is imported only when asked for."""
from __future__ import annotations

_CACHE: dict = {}


def get(name: str):
    """Return the backend called ``name`` ("numpy" or "cupy"), creating it once."""
    name = name.lower()
    if name not in _CACHE:
        if name == "numpy":
            from .numpy_backend import NumpyBackend
            _CACHE[name] = NumpyBackend()
        elif name == "cupy":
            from .cupy_backend import CupyBackend
            _CACHE[name] = CupyBackend()
        else:
            raise ValueError(f"unknown backend {name!r}: choose 'numpy' or 'cupy'")
    return _CACHE[name]
