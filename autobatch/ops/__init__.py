"""The one op set, shared by the lazy graph and the vertex-function front end."""
from .base import OPS, Op, RowGrad, ShapeError, register
from . import elementwise, inputs, linalg, random, reduce, shape  # noqa: F401  (registration)

__all__ = ["OPS", "Op", "RowGrad", "ShapeError", "register"]
