"""The Cavs vertex-function front end: declare F once with ``@dy.vertex_function``, give each
instance's structure as a ``dy.InputGraph``; F is traced once into the lazy graph's op set and
run by frontiers over all graphs of a call, as one node of the current lazy graph."""
from .function import UnreadInputWarning, VertexFunction, VertexOutputs, vertex_function
from .graphdata import InputGraph

__all__ = ["InputGraph", "UnreadInputWarning", "VertexFunction", "VertexOutputs", "vertex_function"]
