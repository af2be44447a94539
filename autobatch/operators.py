"""Telling a temporary operand inside an operator method (``W * x + b``: W * x held by
nothing but the + operator) from one the caller can still reach.

Called by its operator, a method's operand that only the operator holds has one more
reference than the same temporary passed to a plain call, so a named variable passed to an
explicit ``__add__`` call shows the temporary's count there; the caller's instruction (the
operator's opcode, or a call) tells the two apart."""
from __future__ import annotations

import dis
import sys


def _probes():
    """(the reference count of a temporary operand inside an operator method called by its
    operator; a function telling from the method's caller's frame whether an operator called
    it), or (-1, None) where this interpreter does not tell a temporary that way."""
    def by_operator(f):
        return f.f_code.co_code[f.f_lasti] in BY_OPCODES

    class Probe:
        def __add__(self, o):
            return sys.getrefcount(o), by_operator(sys._getframe(1))

    named = Probe()
    temp, op1 = Probe() + Probe()
    held, op2 = Probe() + named
    _, direct = Probe().__add__(Probe())
    if not (held > temp and op1 and op2 and not direct):
        return -1, None
    return temp, by_operator


# the opcodes of the operators (the + operator's inline path, fastpath.ABSORB, reads the
# caller's instruction itself: a call of BY_OPERATOR costs a third of that path)
BY_OPCODES = frozenset(dis.opmap[n] for n in ("BINARY_OP", "BINARY_ADD", "INPLACE_ADD") if n in dis.opmap)
TEMP_OP, BY_OPERATOR = _probes()
