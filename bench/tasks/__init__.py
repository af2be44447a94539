"""Benchmark tasks. Each module defines, for one model written once against a `dy` argument:

    data(n, seed=0, path=None) -> (instances, meta)   seeded synthetic, or real data from `path`
    Model(dy, pc, meta, hidden)                        DyNet-API model: .loss(dy, instance) -> Expression
    torch_model(meta, hidden)                          PyTorch eager per-instance peer: .loss(instance)
    TITLE                                              human-readable name for tables

`dy` is either `autobatch` or `dynet`, so both run the very same model code.
"""
import importlib

NAMES = ["treelstm", "treefc", "bilstm", "bilstm_char", "rnnlm"]  # what `--task all` runs


def get(name):
    """Any module in this package that follows the interface above (NAMES or an added one)."""
    try:
        return importlib.import_module("bench.tasks." + name)
    except ModuleNotFoundError as e:
        if e.name != "bench.tasks." + name:
            raise
        raise ValueError("unknown task %r (known: %s)" % (name, ", ".join(NAMES))) from None
