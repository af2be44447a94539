"""Gradcheck rows (see test_gradcheck.py) for the ops of autobatch/ops/ (reduce)."""
import autobatch as dy  # noqa: F401
from gradcheck_kit import Ctx, _data, red, unary, unary_pos  # noqa: F401

ROWS = {
}
