"""Check that a task's ONE model definition computes the same function on DyNet and autobatch.

Both frameworks build the model, DyNet's parameter values are copied into autobatch's (matched
by model attribute, builders through get_parameters(), so no reliance on list order), and the
summed loss of a few instances and every parameter gradient are compared. Run it in its own
process (it imports DyNet): `python -m bench.equivalence [task ...]`.
"""
import sys

import numpy as np

from bench import tasks


def _pairs(a, b):
    """(dynet_param, autobatch_param) pairs found by walking the two model objects in step."""
    if hasattr(a, "get_parameters"):  # an RNN builder: [[W_x, W_h, b] per layer]
        return [p for la, lb in zip(a.get_parameters(), b.get_parameters()) for p in zip(la, lb)]
    if isinstance(a, (list, tuple)):
        return [p for x, y in zip(a, b) for p in _pairs(x, y)]
    if hasattr(a, "as_array") and hasattr(a, "shape"):
        return [(a, b)]
    return []


_FWS = {}


def compare(task, hidden=8, n=4, seed=3):
    """Max relative difference of the loss and of all gradients (DyNet vs autobatch)."""
    from bench.frameworks import DyFramework
    mod = tasks.get(task)
    data, meta = mod.data(n, seed=seed)
    if not _FWS:  # DyNet can be configured once per process
        _FWS.update({k: DyFramework(k, "agenda", mem=512) for k in ("dynet", "autobatch")})
    fws = _FWS
    pcs = {k: fw.dy.ParameterCollection() for k, fw in fws.items()}
    models = {k: mod.Model(fws[k].dy, pcs[k], meta, hidden) for k in fws}
    pairs = [p for name in vars(models["dynet"]) for p in _pairs(getattr(models["dynet"], name),
                                                                   getattr(models["autobatch"], name))]
    n_params = len(pcs["dynet"].parameters_list()) + len(pcs["dynet"].lookup_parameters_list())
    assert len(pairs) == n_params, "matched %d of %d parameters" % (len(pairs), n_params)
    for p, q in pairs:
        q.set_value(p.as_array())          # the same values are the same function (LSTM biases too)
    loss = {}
    for k, fw in fws.items():
        fw.renew()
        e = fw.dy.esum([models[k].loss(fw.dy, x) for x in data])
        loss[k] = e.value()
        e.backward()
    rel = lambda x, y: float(np.max(np.abs(x - y)) / (np.max(np.abs(x)) + 1e-6))
    grad = max(rel(p.grad_as_array(), q.grad_as_array()) for p, q in pairs)
    return {"task": task, "loss_dynet": loss["dynet"], "loss_autobatch": loss["autobatch"],
            "loss_rel": abs(loss["dynet"] - loss["autobatch"]) / abs(loss["dynet"]), "grad_rel": grad}


if __name__ == "__main__":
    worst = 0.0
    for t in sys.argv[1:] or tasks.NAMES:
        r = compare(t)
        worst = max(worst, r["loss_rel"], r["grad_rel"])
        print("%-12s loss dynet %.6f autobatch %.6f  rel %.1e  max grad rel diff %.1e"
              % (t, r["loss_dynet"], r["loss_autobatch"], r["loss_rel"], r["grad_rel"]))
    sys.exit(0 if worst < 1e-3 else 1)
