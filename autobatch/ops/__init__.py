"""The one op set, shared by the lazy graph and the vertex-function front end."""
from .base import OPS, Op, ProductGrad, RowGrad, ShapeError, register
from . import cells, elementwise, inputs, linalg, random, reduce, shape  # noqa: F401  (registration)
from . import reduce_dim, structure, unary_math  # noqa: F401  (registration)
from . import vertex_ops  # noqa: F401,E402  (vertex_call: the vertex-function front end)
from . import fused  # noqa: F401,E402  (last: it pairs the ops registered above)

__all__ = ["OPS", "Op", "ProductGrad", "RowGrad", "ShapeError", "register"]
