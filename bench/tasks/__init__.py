"""Benchmark tasks. Each module defines, for one model written once against a `dy` argument:

    data(n, seed=0, path=None) -> (instances, meta)   seeded synthetic, or real data from `path`
    Model(dy, pc, meta, hidden)                        DyNet-API model: .loss(dy, instance) -> Expression
    torch_model(meta, hidden)                          PyTorch eager per-instance peer: .loss(instance)
    TITLE                                              human-readable name for tables

`dy` is either `autobatch` or `dynet`, so both run the very same model code.
"""
import importlib

NAMES = ["treelstm", "treefc", "bilstm", "bilstm_char", "rnnlm"]


def get(name):
    if name not in NAMES:
        raise ValueError("unknown task %r (known: %s)" % (name, ", ".join(NAMES)))
    return importlib.import_module("bench.tasks." + name)
