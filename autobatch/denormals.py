"""Denormal floats flushed to zero (the CPU's FTZ and DAZ modes), as DyNet sets them when it is
imported: ``import dynet`` makes ``np.float32(2e-38) / 10`` give 0 in the whole thread.

Why it matters: an operation on a denormal (a float32 below 1.2e-38) costs about 40 times a
normal one on this project's x86 machines (np.multiply over 25,000 of them: 106 us against
2.4). Training makes them as a matter of course: Adam's first moment of an embedding row that
stops getting gradients shrinks by beta_1 = 0.9 at each dense update and is denormal some 800
updates later, so DyNet's own bag-of-words program spent 144 us per sentence in the update
here, against 57 with the modes on (the whole step: 334 -> 248 us).

NumPy has no switch for them, so this module puts two small functions in a page of memory,
makes it executable (and read-only), and calls them through ctypes: one reads the SSE control
register (MXCSR), one writes it. The mode belongs to the calling thread (threads started later
inherit it). Elsewhere than x86-64 with the System V calling convention (Linux, macOS,
FreeBSD), or where the system refuses executable memory, nothing changes and
set_flush_denormal says so by returning False.
"""
from __future__ import annotations

import ctypes
import mmap
import platform
import sys

_FTZ, _DAZ = 0x8000, 0x0040     # MXCSR bits: flush results to zero, read inputs as zero

# stmxcsr [rsp-4]; mov eax, [rsp-4]; ret  --  and  --  mov [rsp-4], edi; ldmxcsr [rsp-4]; ret
# (the 128 bytes below rsp are the System V red zone: a leaf function may use them)
_READ = bytes.fromhex("0fae5c24fc 8b4424fc c3".replace(" ", ""))
_WRITE = bytes.fromhex("897c24fc 0fae5424fc c3".replace(" ", ""))

_fns = None     # (read, write, the page that holds them), made on first use


def _register():
    """The (read, write) pair of ctypes functions, or None where they cannot be made here."""
    global _fns
    if _fns is None:
        _fns = False
        # System V only: Windows, and Cygwin/MSYS on it, pass the first argument in ecx
        if platform.machine().lower() in ("x86_64", "amd64") and sys.platform.startswith(("linux", "darwin", "freebsd")):
            _fns = _make() or False
    return _fns or None


def _make():
    """The two functions in a page written, then made read+execute (never writable and
    executable at once); None where the system refuses either step."""
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        page.write(_READ.ljust(16, b"\xcc") + _WRITE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(page))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        if libc.mprotect(base, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            return None
    except (OSError, ValueError, AttributeError):
        return None
    read = ctypes.CFUNCTYPE(ctypes.c_uint32)(base)
    write = ctypes.CFUNCTYPE(None, ctypes.c_uint32)(base + 16)
    return read, write, page


def set_flush_denormal(on: bool = True) -> bool:
    """Flush denormal floats to zero in this thread's arithmetic (on=True: DyNet's setting,
    which autobatch takes at import unless AUTOBATCH_FLUSH_DENORMAL=0) or keep them (False).
    Returns whether the mode is now as asked: False where this machine offers no way to set
    it (then nothing changed)."""
    fns = _register()
    if fns is None:
        return False
    read, write, _ = fns
    mode = read()
    write(mode | _FTZ | _DAZ if on else mode & ~(_FTZ | _DAZ))
    return flush_denormal() is bool(on)


def flush_denormal() -> bool | None:
    """Whether this thread flushes denormals to zero; None where that cannot be read here."""
    fns = _register()
    if fns is None:
        return None
    return fns[0]() & (_FTZ | _DAZ) == _FTZ | _DAZ
