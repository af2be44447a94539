"""Arena buffers, recycled across graphs.

A training loop renews its graph every minibatch, and each graph's value and
gradient arenas are tens of MB: allocating them fresh each time costs page
faults and zeroing comparable to the compute. The pool hands a released buffer
to the next graph instead."""
from __future__ import annotations

_FREE: dict = {}   # (xp module name, dtype) -> list of free 1-D buffers
_KEEP = 3          # value arena, gradient arena, one spare


def take(xp, dtype, n: int):
    """A 1-D buffer of at least n elements (contents undefined)."""
    free = _FREE.get((xp.__name__, dtype))
    if free:
        best = None
        for k, b in enumerate(free):
            if b.shape[0] >= n and (best is None or b.shape[0] < free[best].shape[0]):
                best = k
        if best is not None:
            return free.pop(best)
        # none fits: free the largest one before allocating, rather than hold both (a
        # graph a little bigger than the last would otherwise add a whole arena to the peak)
        del free[max(range(len(free)), key=lambda k: free[k].shape[0])]
    # an eighth to spare, so that the next graph, a little bigger, still fits
    return xp.empty(max(n + (n >> 3), 1 << 16), dtype=dtype)


def give(buf) -> None:
    """Return a buffer nobody references any more."""
    if buf is None:
        return
    import sys
    xp = sys.modules[type(buf).__module__.split(".")[0]]
    free = _FREE.setdefault((xp.__name__, buf.dtype), [])
    free.append(buf)
    if len(free) > _KEEP:
        free.sort(key=lambda b: b.shape[0])
        del free[0]          # drop the smallest: the big ones are the expensive ones


def clear() -> None:
    """Drop all pooled buffers (frees memory)."""
    _FREE.clear()
